"""Requests: the handle of every non-blocking operation, and waiting on many at once.

A Request completes exactly once, with a result or an error, from whichever
thread made the progress (the caller's, the point-to-point progress thread,
or a group's collective stream). `wait()` is bounded: by the group's timeout
for point-to-point (the engine raises CommTimeout), by the collective's own
deadline for collectives.
"""
import threading
import time

from .._errors import CommError, CommTimeout

_completion = threading.Condition()  # notified whenever any request completes, while wait_any sleeps on it
_sleepers = 0  # (under _completion) threads in wait_any's sleep: a completion notifies only where one is


class Request:
    """Handle of a non-blocking operation: `.wait()` returns its result, `.test()` polls."""

    __slots__ = ("_finished", "_event", "_result", "_error", "what", "cancelled", "_cancel", "_waiter", "timeout",
                 "_callbacks", "_posted", "__weakref__")

    def __init__(self, what, *, timeout=None, waiter=None, cancel=None):
        self._finished = False
        self._event = None  # made by the first thread that sleeps on it (_done): most never need one
        self._result = self._error = None
        self.what = what
        self.cancelled = False
        self.timeout = timeout  # seconds a wait() may take, or None: the operation bounds itself
        self._waiter = waiter  # callable(req, deadline, any_of=None): makes progress until done or deadline
        self._cancel = cancel  # callable(req) -> bool, for a receive not yet matched
        self._callbacks = ()  # called with the request once it completes; None once it has
        self._posted = None  # a receive's (group context, Posted) that a wait may take in one call (fastpath.py)

    @property
    def _done(self):
        """The Event set at completion, for a thread that sleeps until then: made on first use (a
        request its own caller drives, or only tests, never needs one)."""
        event = self._event
        if event is None:
            with _completion:  # (_finish decides under it whether an Event exists to set)
                event = self._event
                if event is None:
                    event = threading.Event()
                    if self._finished:
                        event.set()
                    self._event = event
        return event

    # -- completion (any thread)
    def _finish(self, result=None, error=None):
        if self._finished:
            return
        self._result, self._error = result, error
        self._cancel = self._posted = None  # they referred to what the operation held (a posted receive, its buffer)
        del result, error  # this thread holds none of it once the waiter wakes
        with _completion:
            self._finished = True
            event = self._event
            callbacks, self._callbacks = self._callbacks, None
            if _sleepers:
                _completion.notify_all()
        if event is not None:
            event.set()
        for fn in callbacks or ():
            fn(self)

    def add_done_callback(self, fn):
        """Call fn(request) once the request completes (at once if it has), in the completing thread."""
        with _completion:
            if self._callbacks is not None:
                self._callbacks += (fn,)
                return
        fn(self)

    # -- the user's side
    def test(self):
        """True once the operation has finished (successfully, with an error, or cancelled)."""
        return self._finished

    def wait(self, timeout=None):
        """Block until done; return the result or raise the operation's error.

        timeout: seconds, to wait less than the operation's own bound (CommTimeout when it passes).
        """
        if not self._finished:
            limit = self.timeout if timeout is None else timeout if self.timeout is None else min(self.timeout, timeout)
            deadline = None if limit is None else time.monotonic() + limit
            if self._waiter is not None:
                self._waiter(self, deadline)
            else:
                self._done.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if not self._finished:
                raise CommTimeout(f"{self.what} did not complete within {limit:g} s", op=self.what)
        if self._error is not None:
            raise self._error
        return self._result

    def cancel(self):
        """Cancel a receive that has not been matched: True if cancelled (wait() then returns None)."""
        cancel = self._cancel  # None once done (another thread may finish it meanwhile)
        if self._finished or cancel is None:
            return False
        if not cancel(self):
            return False
        self.cancelled = True
        self._finish(None)
        return True

    def __repr__(self):
        state = "cancelled" if self.cancelled else "done" if self.test() else "pending"
        return f"<commlib.Request {self.what} {state}>"


def completed(what):
    """A Request complete from its birth, for an operation its own call finished (an isend the
    connection took whole): no waiter, and nothing to notify, since no thread can wait on it yet."""
    req = Request(what)
    req._finished = True
    req._callbacks = None
    return req


def _check(reqs):
    reqs = list(reqs)
    for r in reqs:
        if not isinstance(r, Request):
            raise TypeError(f"expected commlib Requests, got {type(r).__name__}")
    return reqs


def wait_all(reqs):
    """Wait for every request; their results in order. The first error is raised once all are done."""
    reqs = _check(reqs)
    results, first = [], None
    for r in reqs:
        try:
            results.append(r.wait())
        except CommError as exc:
            if isinstance(exc, CommTimeout) or first is not None:
                raise
            first = exc
            results.append(None)
    if first is not None:
        raise first
    return results


def test_all(reqs):
    """True when every request has completed."""
    return all(r.test() for r in _check(reqs))


def test_any(reqs):
    """(index, result) of a completed request (the lowest index), or None when none has completed."""
    for i, r in enumerate(_check(reqs)):
        if r.test():
            return i, r.wait()
    return None


def wait_any(reqs):
    """(index, result) of a completed request, waiting for one; the lowest index if several are done."""
    reqs = _check(reqs)
    if not reqs:
        raise ValueError("wait_any needs at least one request")
    timeouts = [r.timeout for r in reqs if r.timeout is not None]
    deadline = time.monotonic() + max(timeouts) if timeouts else None
    drivers = [r for r in reqs if r._waiter is not None]
    while True:
        got = test_any(reqs)
        if got is not None:
            return got
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise CommTimeout(f"wait_any: none of {len(reqs)} requests completed within {max(timeouts):g} s",
                              op="wait_any")
        if drivers:  # let the engine check for failures and make progress for a moment
            drivers[0]._waiter(drivers[0], min(now + 0.05, deadline) if deadline else now + 0.05, any_of=reqs)
        else:
            _sleep_on_completion(reqs)


def _sleep_on_completion(reqs):
    """Sleep until a request completes (any request: the caller looks again), 50 ms at most."""
    global _sleepers
    with _completion:
        if any(r.test() for r in reqs):
            return
        _sleepers += 1
        try:
            _completion.wait(0.05)
        finally:
            _sleepers -= 1
