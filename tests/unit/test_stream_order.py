"""A group's collective stream (commlib/_engine/streams.py), in-process: the order of its collectives
whichever thread runs them, a waiting caller running what the worker has not taken, nested starts.

`_thread = _NO_WORKER` keeps a stream from starting its worker, so that what a waiting caller runs is
certain; the other tests use the real worker."""
import threading
import time

import pytest

from commlib._engine.streams import Stream
from commlib._errors import CommTimeout

pytestmark = pytest.mark.timeout(30)

_NO_WORKER = object()  # a stream whose worker "exists" but never runs: only waiting callers run its queue


def _recorder():
    ran = []

    def step(name):
        ran.append((name, threading.get_ident()))
        return name
    return ran, step


def test_a_waiting_caller_runs_the_queue_up_to_its_request_in_order():
    s = Stream("t")
    s._thread = _NO_WORKER
    ran, step = _recorder()
    a, b, c, d = (s.submit(x, step, x) for x in "abcd")
    assert c.wait() == "c"
    me = threading.get_ident()
    assert ran == [("a", me), ("b", me), ("c", me)]  # d, after it, is left queued
    assert a.test() and b.test() and not d.test()
    assert a.wait() == "a" and d.wait() == "d"
    assert [name for name, _ in ran] == list("abcd")


def test_an_error_reaches_its_waiter_and_the_queue_goes_on():
    s = Stream("t")
    s._thread = _NO_WORKER
    ran, step = _recorder()

    def bad():
        raise ValueError("rank 0: bad collective")
    first, second = s.submit("bad", bad), s.submit("b", step, "b")
    assert second.wait() == "b"
    with pytest.raises(ValueError, match="bad collective"):
        first.wait()


def test_a_collective_started_by_a_running_one_runs_at_once():
    """From the thread running the group's collectives (a completion callback, a collective built
    from others) a new one, blocking or not, runs at once: it cannot wait behind the one running it."""
    s = Stream("t")
    s._thread = _NO_WORKER
    ran, step = _recorder()

    def outer():
        inner = s.submit("inner", step, "inner").wait()
        nested = s.run(step, "nested")
        return inner, nested
    req = s.submit("outer", outer)
    req.add_done_callback(lambda r: s.submit("then", step, "then").wait())  # a torch future's .then
    assert req.wait() == ("inner", "nested")
    assert [name for name, _ in ran] == ["inner", "nested", "then"]


def test_a_bounded_wait_does_not_run_the_collective():
    """wait(timeout) only sleeps: a collective run in the caller could outlast the caller's bound."""
    s = Stream("t")
    s._thread = _NO_WORKER
    ran, step = _recorder()
    req = s.submit("a", step, "a")
    t0 = time.monotonic()
    with pytest.raises(CommTimeout):
        req.wait(timeout=0.2)
    assert time.monotonic() - t0 < 5 and ran == []
    assert req.wait() == "a"


def test_the_worker_runs_what_nobody_waits_for():
    s = Stream("t")
    gate, ran = threading.Event(), []
    s.submit("a", gate.wait, 10)
    req = s.submit("b", ran.append, "b")
    gate.set()
    deadline = time.monotonic() + 10
    while not req.test() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert req.test() and ran == ["b"]


def test_a_blocking_call_waits_behind_queued_ones_and_keeps_order():
    s = Stream("t")
    gate, ran = threading.Event(), []
    first = s.submit("a", lambda: (gate.wait(10), ran.append("a")))
    second = s.submit("b", ran.append, "b")
    threading.Timer(0.1, gate.set).start()
    s.run(ran.append, "c")  # behind a and b, which the worker (or this caller) runs first
    assert ran == ["a", "b", "c"] and first.test() and second.test()


def test_the_caller_usually_runs_a_collective_it_waits_on_at_once():
    """iall_reduce(x).wait(): the caller reaches the wait before the worker wakes, and runs it (no
    hand-off to the worker and back). The worker may win a race now and then; never all 20."""
    s = Stream("t")
    me = threading.get_ident()
    callers = 0
    for i in range(20):
        callers += s.submit("x", threading.get_ident).wait() == me
    assert callers > 0
