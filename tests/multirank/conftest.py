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


@pytest.fixture(autouse=True, params=["shm", "socket"])
def transport(request, monkeypatch):
    """Every test here runs over both same-host transports: shared memory (the default; "shm" makes
    a connection without it an error instead of a quiet fallback) and Unix sockets."""
    monkeypatch.setenv("COMMLIB_TRANSPORT", request.param)
    return request.param
