"""The point-to-point poller's wake-up: one byte in its pipe interrupts a wait, and while that byte is
unread a wake-up writes nothing (each write releases the GIL: a rank posting receives in a loop, each
waking the progress thread, kept that thread from the GIL for up to 0.6 s; benchmarks/tested_receive.py)."""
import os
import threading
import time
import types

import pytest

from commlib._transport import p2p


@pytest.fixture
def poller():
    arrival_r, arrival_w = os.pipe()
    fail_r, fail_w = os.pipe()
    pl = p2p.Poller(types.SimpleNamespace(arrival_r=arrival_r, wake_r=fail_r))
    yield pl
    pl.close()
    for fd in (arrival_r, arrival_w, fail_r, fail_w):
        os.close(fd)


def _writes(monkeypatch):
    count = []
    real = os.write
    monkeypatch.setattr(p2p.os, "write", lambda fd, data: count.append(fd) or real(fd, data))
    return count


def test_wakes_until_the_byte_is_read_write_once(poller, monkeypatch):
    writes = _writes(monkeypatch)
    for _ in range(100):
        poller.wake()
    assert len(writes) == 1
    assert poller.wait(poller.watch([], []), 1000) == {p2p.READY}  # the byte ends the wait at once
    poller.clear_wake()
    assert poller.wait(poller.watch([], []), 0) == set()  # read: the pipe is empty again
    poller.wake()
    assert len(writes) == 2  # the next wake-up writes again
    assert poller.wait(poller.watch([], []), 1000) == {p2p.READY}


def test_a_wake_before_the_wait_ends_the_next_wait(poller):
    poller.wake()
    poller.wake()
    assert poller.wait(poller.watch([], []), 1000) == {p2p.READY}
    assert poller.wait(poller.watch([], []), 1000) == {p2p.READY}  # unread until clear_wake()
    poller.clear_wake()
    assert poller.wait(poller.watch([], []), 10) == set()


def test_a_wake_from_another_thread_interrupts_a_wait_in_progress(poller):
    for _ in range(3):
        timer = threading.Timer(0.05, poller.wake)
        timer.start()
        t = time.monotonic()
        assert poller.wait(poller.watch([], []), 5000) == {p2p.READY}
        assert time.monotonic() - t < 4.0  # woken, not timed out
        poller.clear_wake()
        timer.join()
