"""Shared test set-up: tests import the source tree (commlib from the repo, commrun from launcher/)."""
import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# launcher/ is installed as the package `commrun`; give the source tree that name too.
if "commrun" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "commrun", REPO / "launcher" / "__init__.py", submodule_search_locations=[str(REPO / "launcher")]
    )
    sys.modules["commrun"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["commrun"])


import os  # noqa: E402

import pytest  # noqa: E402

_SHM = pathlib.Path("/dev/shm")


def _commlib_segments():
    try:
        return {p.name for p in _SHM.iterdir() if "commlib" in p.name}
    except OSError:  # no /dev/shm here
        return set()


@pytest.fixture(autouse=True)
def no_segment_left_behind():
    """Shared memory lives in memfds passed between ranks, never named in /dev/shm: a test that
    leaves a commlib segment there (a rank killed mid-transfer included) fails."""
    before = _commlib_segments()
    yield
    left = _commlib_segments() - before
    assert not left, f"left in /dev/shm by this test: {sorted(left)} (pid {os.getpid()})"
