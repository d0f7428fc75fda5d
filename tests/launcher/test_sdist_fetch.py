"""_sdist.fetch: the yardsticks' sdist from a simple index (here a file:// one made by the test)."""
import hashlib

import pytest

import _sdist


def _index(root, files, sha=None):
    """A PEP 503 index at root/simple listing `files` (name -> bytes) of package demo."""
    pkg = root / "simple" / "demo"
    pkg.mkdir(parents=True)
    (root / "files").mkdir()
    links = []
    for name, data in files.items():
        (root / "files" / name).write_bytes(data)
        links.append(f'<a href="../../files/{name}#sha256={sha or hashlib.sha256(data).hexdigest()}">{name}</a>')
    (pkg / "index.html").write_text("<html><body>" + "\n".join(links) + "</body></html>")
    return (root / "simple").as_uri()


def test_fetches_the_archive_and_checks_its_hash(tmp_path):
    url = _index(tmp_path, {"demo-1.0.tar.gz": b"archive", "demo-1.0-py3-none-any.whl": b"wheel"})
    got = _sdist.fetch("demo", "1.0", tmp_path / "cache", indexes=[url])
    assert got.read_bytes() == b"archive"
    assert _sdist.fetch("demo", "1.0", tmp_path / "cache", indexes=["file:///nonexistent"]) == got  # cached


def test_an_index_without_it_is_named_and_the_next_one_tried(tmp_path):
    empty = _index(tmp_path / "a", {"demo-1.0-py3-none-any.whl": b"wheel"})
    full = _index(tmp_path / "b", {"demo-1.0.tar.gz": b"archive"})
    assert _sdist.fetch("demo", "1.0", tmp_path / "cache", indexes=[empty, full]).read_bytes() == b"archive"
    with pytest.raises(_sdist.Unavailable, match="lists no demo-1.0.tar.gz"):
        _sdist.fetch("demo", "1.0", tmp_path / "other", indexes=[empty])


def test_a_wrong_hash_is_refused(tmp_path):
    url = _index(tmp_path, {"demo-1.0.tar.gz": b"archive"}, sha="0" * 64)
    with pytest.raises(_sdist.Unavailable, match="sha256 differs"):
        _sdist.fetch("demo", "1.0", tmp_path / "cache", indexes=[url])
    assert not (tmp_path / "cache" / "demo-1.0.tar.gz").exists()


def test_the_configured_indexes_come_first(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///x/simple")
    urls = _sdist.index_urls()
    assert urls[0] == "https://mirror.example/simple" and "file:///x/simple" in urls
