"""torch.distributed Work objects over commlib Requests.

Never set_exception() on a future handed to torch: DDP's reducer crashes on
one (torch 2.x). A failed operation completes its raw future with a _Failed
marker instead, and the future torch sees is `raw.then(_unwrap)`, whose
callback raises a RuntimeError carrying commlib's message: torch reports
that cleanly everywhere (fut.wait(), DDP's backward, wait_all).
"""
import datetime
import threading

import torch
import torch.distributed as dist

from .._errors import CommTimeout


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error):
        self.error = error


def as_torch(exc):
    """commlib's error as torch's users read a backend's: a timeout's message begins "Timed out"
    as gloo's do (torch's own tests and tools match on it). The exception keeps its class."""
    if isinstance(exc, CommTimeout) and exc.args and not str(exc.args[0]).startswith("[commlib] Timed out"):
        exc.args = (f"[commlib] Timed out ({type(exc).__name__}) {exc.args[0]}",) + exc.args[1:]
    return exc


def _unwrap(fut):
    value = fut.value()
    if type(value) is _Failed:
        err = as_torch(value.error)
        raise RuntimeError(f"commlib: {type(err).__name__}: {err}")
    return value


def _torch_error(exc, what):
    """The error of operation `what` as its torch caller gets it: a RuntimeError (CommError is one), a
    TypeError or a ValueError as it is (as_torch), anything else a RuntimeError caused by it."""
    if isinstance(exc, (RuntimeError, TypeError, ValueError)):
        return as_torch(exc)
    err = RuntimeError(f"commlib: {what}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _seconds(timeout):
    """Work.wait's timeout (timedelta; zero means none) in seconds, or None."""
    if timeout is None:
        return None
    secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return secs if secs > 0 else None


class Done(dist.Work):
    """A Work already complete: what a blocking call returns (torch then calls wait()).

    Made by done(): no Python __init__, which halves its cost on the 8-byte fast path.
    """

    _result = None
    _source = -1

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._result

    def source_rank(self):
        return self._source

    _source_rank = source_rank

    def synchronize(self):
        """CPU work has nothing to synchronize with."""
        return None

    def get_future(self):
        return _resolved(self._result)


def _resolved(value):
    """A torch future already holding value."""
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


def done(result):
    work = Done()
    work._result = result
    return work


class Pending(dist.Work):
    """A Work completed by commlib's engine (the group's stream, or the point-to-point engine)."""

    def __init__(self, request, result, what):
        super().__init__()
        self._req = request
        self._result = result  # the tensors the operation writes; the future's value
        self._what = what
        self._fut = None
        self._source_box = None  # [source rank], filled in by a receive from any source

    def wait(self, timeout=None):
        """Block until done (at most `timeout`); raise the operation's error, a RuntimeError."""
        try:
            self._req.wait(_seconds(timeout))
        except Exception as exc:
            raise _torch_error(exc, self._what)
        return True

    def is_completed(self):
        return self._req.test()

    def is_success(self):
        if not self._req.test():
            raise RuntimeError(f"commlib: {self._what} has not completed yet")
        return self._req._error is None

    def exception(self):
        return self._req._error if self._req.test() else None

    def result(self):
        self.wait()
        return self._result

    def source_rank(self):
        self.wait()
        return self._source_box[0] if self._source_box else -1

    _source_rank = source_rank

    def synchronize(self):
        """CPU work has nothing to synchronize with."""
        return None

    def get_future(self):
        if self._fut is None:
            raw = torch.futures.Future()
            self._fut = raw.then(_unwrap)
            result = self._result

            def complete(req):
                raw.set_result(result if req._error is None else _Failed(req._error))

            self._req.add_done_callback(complete)
        return self._fut


class Deferred(dist.Work):
    """A receive from a named rank that its group has not posted yet: its wait() receives in one blocking
    call (the engine's one-call path, straight into the tensor, with no request, no posted receive and
    no progress thread), which is all dist.recv does with it. Whatever could tell it from a posted
    receive posts it first, and it is a Pending from then on: another receive of its group (the
    process group calls post() for it, so receives match in the order they were made), is_completed,
    get_future and the other queries, a wait with a timeout.

    receive(): the blocking receive; post(): the posted receive's Request."""

    def __init__(self, receive, post, result, what, source):
        super().__init__()
        self._receive, self._post = receive, post
        self._result, self._what, self._source = result, what, source
        self._lock = threading.Lock()
        self._busy = threading.Lock()  # held by the wait that receives it
        self._pending = None  # the Pending of the posted receive, once posted
        self._state = "new"  # "taking" (a wait receives it), "done", or "failed"
        self._error = None

    def post(self):
        """Post the receive unless a wait is receiving it (or has); its Pending, or None."""
        with self._lock:
            if self._state == "new" and self._pending is None:
                self._pending = Pending(self._post(), self._result, self._what)
            return self._pending

    def wait(self, timeout=None):
        if _seconds(timeout) is None:
            with self._lock:
                take = self._state == "new" and self._pending is None
                if take:
                    self._state = "taking"
                    self._busy.acquire()
            if take:
                try:
                    self._receive()
                except BaseException as exc:
                    self._error = exc
                    raise _torch_error(exc, self._what) if isinstance(exc, Exception) else exc
                finally:
                    self._state = "done" if self._error is None else "failed"
                    self._busy.release()
                return True
        pending = self.post()
        if pending is not None:
            return pending.wait(timeout)
        self._settle()
        if self._error is not None:
            raise _torch_error(self._error, self._what)
        return True

    def _settle(self):
        """Wait for the outcome of another thread's wait that is receiving it (rare: two threads waiting
        on one receive); at once where there is one."""
        with self._busy:
            pass

    def is_completed(self):
        pending = self.post()
        return self._state in ("done", "failed") if pending is None else pending.is_completed()

    def is_success(self):
        pending = self.post()
        if pending is not None:
            return pending.is_success()
        if self._state == "taking":
            raise RuntimeError(f"commlib: {self._what} has not completed yet")
        return self._error is None

    def exception(self):
        pending = self.post()
        return self._error if pending is None else pending.exception()

    def get_future(self):
        pending = self.post()
        if pending is not None:
            return pending.get_future()
        self._settle()
        return _resolved(self._result) if self._error is None else _resolved(_Failed(self._error)).then(_unwrap)

    def result(self):
        self.wait()
        return self._result

    source_rank = _source_rank = Done.source_rank
    synchronize = Done.synchronize
