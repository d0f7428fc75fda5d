"""COMMLIB_DEBUG's lines: levels, the prefix, files per rank, the first-time-only INFO lines."""
import importlib
import re

import pytest

from commlib import _debug


@pytest.fixture
def debug(monkeypatch):
    def load(level, file=None, rank="3"):
        monkeypatch.setenv("COMMLIB_DEBUG", level)
        monkeypatch.setenv("COMMLIB_RANK", rank)
        if file is None:
            monkeypatch.delenv("COMMLIB_DEBUG_FILE", raising=False)
        else:
            monkeypatch.setenv("COMMLIB_DEBUG_FILE", file)
        return importlib.reload(_debug)
    yield load
    monkeypatch.delenv("COMMLIB_DEBUG", raising=False)
    monkeypatch.delenv("COMMLIB_DEBUG_FILE", raising=False)
    importlib.reload(_debug)


def test_off_writes_nothing_and_formats_nothing(debug, capsys):
    d = debug("")
    assert d.LEVEL == 0
    d.log(d.INFO, lambda: pytest.fail("formatted while off"))
    assert capsys.readouterr().err == ""


def test_info_lines_carry_rank_and_time(debug, capsys):
    d = debug("info")
    d.log(d.INFO, "connected to rank 1")
    d.log(d.TRACE, "not at INFO")
    d.set_rank(5)
    d.log(d.INFO, lambda: "made lazily")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert re.fullmatch(r"\[commlib rank 3 \+\d+\.\d{6}s\] connected to rank 1", err[0])
    assert err[1].startswith("[commlib rank 5 ") and err[1].endswith("made lazily")


def test_once_is_info_the_first_time_then_trace(debug, capsys):
    d = debug("INFO")
    for _ in range(3):
        d.once(("all_reduce", "ring"), "all_reduce: ring")
    assert capsys.readouterr().err.count("all_reduce: ring") == 1
    d = debug("TRACE")
    for _ in range(3):
        d.once(("all_reduce", "ring"), "all_reduce: ring")
    assert capsys.readouterr().err.count("all_reduce: ring") == 3


def test_file_per_rank(debug, tmp_path, capsys):
    d = debug("INFO", str(tmp_path / "log-%r-%h.txt"), rank="7")
    d.log(d.INFO, "hello")
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("log-7-")
    assert files[0].read_text().endswith("] hello\n")
    assert capsys.readouterr().err == ""


def test_a_bad_level_says_so_and_stays_off(debug, capsys):
    d = debug("verbose")
    assert d.LEVEL == 0
    assert "COMMLIB_DEBUG='verbose' is not one of INFO, TRACE" in capsys.readouterr().err
