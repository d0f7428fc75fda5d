"""The engine's lock (commlib._lock.RLock) behaves as threading.RLock does.

Reentrant for its owner, refused to others until every level is let go, released only by its
owner, bounded waits, a threading.Condition built on it (as the engine's is) waits by releasing
every level and takes them all back, and a signal handler's exception ends a wait.
"""
import os
import signal
import threading
import time

import pytest

from commlib._lock import RLock

pytestmark = pytest.mark.timeout(30)


def _in_thread(fn):
    """fn() in another thread: its result, or its exception raised here."""
    out = []

    def run():
        try:
            out.append((True, fn()))
        except Exception as e:  # noqa: BLE001  (handed to the caller)
            out.append((False, e))

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    assert not t.is_alive() and out
    ok, value = out[0]
    if not ok:
        raise value
    return value


def test_reentrant_for_its_owner_and_refused_to_others_until_fully_released():
    lock = RLock()
    assert lock.acquire() and lock.acquire(blocking=False) and lock.acquire(timeout=0.01)
    assert lock._is_owned()
    assert _in_thread(lambda: lock.acquire(blocking=False)) is False
    assert _in_thread(lambda: lock._is_owned()) is False
    lock.release()
    lock.release()
    assert _in_thread(lambda: lock.acquire(timeout=0.05)) is False  # one level still held
    lock.release()
    assert not lock._is_owned()
    assert _in_thread(lambda: (lock.acquire(blocking=False), lock.release())[0]) is True


def test_only_the_owner_releases():
    lock = RLock()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    with lock:
        with pytest.raises(RuntimeError, match="un-acquired"):
            _in_thread(lambda: lock.release())
    with pytest.raises(RuntimeError):
        lock.release()


def test_arguments_are_checked_as_threading_checks_them():
    lock = RLock()
    with pytest.raises(ValueError):
        lock.acquire(False, 1)
    with pytest.raises(ValueError):
        lock.acquire(True, -2)


def test_a_bounded_wait_ends_at_its_bound_and_a_waiter_gets_the_lock_when_it_is_let_go():
    lock = RLock()
    lock.acquire()
    t = time.monotonic()
    assert _in_thread(lambda: lock.acquire(timeout=0.1)) is False
    assert 0.09 <= time.monotonic() - t < 5
    got = []
    waiter = threading.Thread(target=lambda: (got.append(lock.acquire()), lock.release()))
    waiter.start()
    time.sleep(0.05)
    assert not got
    lock.release()
    waiter.join(10)
    assert got == [True]


def test_a_condition_on_it_releases_every_level_while_waiting():
    lock = RLock()
    cond = threading.Condition(lock)
    ready, taken = threading.Event(), []

    def notifier():
        ready.wait(10)
        taken.append(lock.acquire(timeout=5))  # possible only if wait() let go of both levels
        cond.notify()
        lock.release()

    t = threading.Thread(target=notifier)
    t.start()
    with lock, lock:
        ready.set()
        assert cond.wait(timeout=10)
        assert lock._is_owned()
        lock.release()  # both levels came back: one release leaves it ours still
        assert lock._is_owned()
        lock.acquire()
    t.join(10)
    assert taken == [True] and not lock._is_owned()
    with pytest.raises(RuntimeError):
        cond.wait(0.01)  # (not held)


def test_a_signal_handlers_exception_ends_a_wait():
    lock = RLock()
    holder_has_it, done = threading.Event(), threading.Event()

    def holder():
        with lock:
            holder_has_it.set()
            done.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    holder_has_it.wait(10)

    def boom(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, boom)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        done.set()
        t.join(10)
    assert not lock._is_owned()
    assert os.getpid()  # (the process goes on)
