"""The suite's scheduler (tests/_slots.py): computing tests share the cores' slots, tests that wait run
beside them, and the longest files go first."""
import os
import pathlib
import threading
import time

import pytest

import _slots


class _Item:
    def __init__(self, path, mark=None):
        self.fspath, self._mark = path, mark

    def get_closest_marker(self, name):
        return self._mark if name == "waits" else None


@pytest.fixture
def slots(tmp_path, monkeypatch):
    (tmp_path / "slot0").touch()
    monkeypatch.setenv(_slots.SLOTS_VAR, str(tmp_path))
    return tmp_path


def test_a_computing_test_waits_for_the_slot_a_test_that_waits_does_not(slots):
    first = _slots.acquire(_Item("a"))
    assert first is not None
    assert _slots.acquire(_Item("b", pytest.mark.waits.mark)) is None  # beside it, no slot
    got = []
    t = threading.Thread(target=lambda: got.append(_slots.acquire(_Item("c"))), daemon=True)
    t.start()
    time.sleep(0.2)  # (long enough for the second to have taken a free slot, were there one)
    assert not got
    _slots.release(first)
    t.join(5)
    assert got and got[0] is not None
    _slots.release(got[0])
    held = _slots.acquire(_Item("d", pytest.mark.waits(False).mark))  # waits(False): takes a slot
    assert held is not None
    _slots.release(held)


def test_without_slots_every_test_just_runs(monkeypatch):
    monkeypatch.delenv(_slots.SLOTS_VAR, raising=False)
    assert _slots.acquire(_Item("a")) is None


def test_the_longest_files_first_the_unit_tests_last():
    repo = pathlib.Path("/r")
    paths = ["tests/unit/test_x.py", "tests/faults/test_y.py", _slots.LONG_FILES[1], _slots.LONG_FILES[0],
             "tests/unit/test_x.py", _slots.LONG_FILES[1]]
    items = [_Item(repo / p) for p in paths]
    _slots.order(items, repo)
    got = [os.path.relpath(str(i.fspath), "/r") for i in items]
    assert got == [_slots.LONG_FILES[0], _slots.LONG_FILES[1], _slots.LONG_FILES[1], "tests/faults/test_y.py",
                   "tests/unit/test_x.py", "tests/unit/test_x.py"]


def test_every_long_file_exists():
    repo = pathlib.Path(__file__).resolve().parents[2]
    assert [p for p in _slots.LONG_FILES if not (repo / p).is_file()] == []
