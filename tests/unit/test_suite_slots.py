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
        return self._mark if self._mark is not None and self._mark.name == name else None


def _in_thread(item):
    got = []
    t = threading.Thread(target=lambda: got.append(_slots.acquire(item)), daemon=True)
    t.start()
    return t, got


@pytest.fixture
def slots(tmp_path, monkeypatch):
    (tmp_path / "slot0").touch()
    monkeypatch.setenv(_slots.SLOTS_VAR, str(tmp_path))
    return tmp_path


def test_a_computing_test_waits_for_the_slot_a_test_that_waits_does_not(slots):
    first = _slots.acquire(_Item("a"))
    assert len(first) == 1
    assert _slots.acquire(_Item("b", pytest.mark.waits.mark)) == []  # beside it, no slot
    t, got = _in_thread(_Item("c"))
    time.sleep(0.2)  # (long enough for the second to have taken a free slot, were there one)
    assert not got
    _slots.release(first)
    t.join(5)
    assert got and len(got[0]) == 1
    _slots.release(got[0])
    held = _slots.acquire(_Item("d", pytest.mark.waits(False).mark))  # waits(False): takes a slot
    assert len(held) == 1
    _slots.release(held)


def test_a_test_of_two_cores_gathers_both_and_keeps_single_ones_out_meanwhile(slots):
    (slots / "slot1").touch()
    one = _slots.acquire(_Item("a"))
    t, got = _in_thread(_Item("b", pytest.mark.cores(2).mark))
    time.sleep(0.2)
    assert not got  # it holds the free slot and waits for the other
    t2, got2 = _in_thread(_Item("c"))
    time.sleep(0.2)
    assert not got2  # ... which a single-slot test cannot take from it
    _slots.release(one)
    t.join(5)
    assert got and len(got[0]) == 2
    time.sleep(0.1)
    assert not got2
    _slots.release(got[0])
    t2.join(5)
    assert got2 and len(got2[0]) == 1
    _slots.release(got2[0])
    assert len(_slots.acquire(_Item("d", pytest.mark.cores(8).mark))) == 2  # at most every slot there is


def test_without_slots_every_test_just_runs(monkeypatch):
    monkeypatch.delenv(_slots.SLOTS_VAR, raising=False)
    assert _slots.acquire(_Item("a")) == []


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
