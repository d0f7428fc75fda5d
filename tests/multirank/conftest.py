"""Fixtures of the multi-rank suite; the helpers themselves live in _harness.py.

    run(n, script, *args, env=None, timeout=120) -> (returncode, stdout, stderr)
        `python -m commrun -n N cases/SCRIPT SEED ARGS...`, COMMLIB_TIMEOUT=60 by default,
        its process group killed (and the test failed) when it outlives `timeout`.
    run_plain(script, *args, ...)   the case as a plain python process, no launcher
    assert_ranks_ok(result, n, what)  exit code 0 and every rank's `checks ok` line
    rank_lines(stdout, marker)        {rank: rest of line} for `MARKER rank R ...` lines
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402


@pytest.fixture
def run():
    return _harness.run


@pytest.fixture
def run_plain():
    return _harness.run_plain


@pytest.fixture
def assert_ranks_ok():
    return _harness.assert_ranks_ok


@pytest.fixture
def rank_lines():
    return _harness.rank_lines


def pytest_generate_tests(metafunc):
    """Every test here runs over both same-host transports: shared memory (the default; "shm" makes
    a connection without it an error instead of a quiet fallback) and Unix sockets; a module of a
    front-end built on the API (torch, the mesh, Ray, Dask, MLX: nothing of theirs knows the
    transport) sets TRANSPORTS = ("shm",) and runs over the default one only."""
    named = {name.strip() for m in metafunc.definition.iter_markers("parametrize")
             for name in (m.args[0].split(",") if isinstance(m.args[0], str) else m.args[0])}
    if "transport" in metafunc.fixturenames and "transport" not in named:  # (a test may choose its own)
        metafunc.parametrize("transport", getattr(metafunc.module, "TRANSPORTS", ("shm", "socket")), indirect=True)


@pytest.fixture(autouse=True)
def transport(request, monkeypatch):
    monkeypatch.setenv("COMMLIB_TRANSPORT", request.param)
    return request.param


def pytest_configure(config):
    config.addinivalue_line("markers", "batch(case, env): an item per check of a batched case file (_harness.batched)")


def pytest_collection_finish(session):
    """The checks each batched job runs: those of its (case, n, transport) that this session selected."""
    for item in session.items:
        if item.get_closest_marker("batch") is not None and hasattr(item, "callspec"):
            _harness.SELECTED.setdefault(_harness.batch_key(item), []).append(item.callspec.params["check"])
