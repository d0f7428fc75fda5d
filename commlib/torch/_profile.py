"""torch.profiler and torch.autograd.profiler see commlib's operations as they see gloo's.

gloo's Work records one event per operation, named `gloo:<op>` (`gloo:all_reduce`, `gloo:send`),
with the input tensors' shapes, started when the call is made and ended when the operation
completes, on gloo's own thread, so the profiler marks it asynchronous. Here each process-group
method is wrapped (`profiled`): while a profiler is on, the call opens a `commlib:<op>` record
function with its inputs, and the Work it returns ends that record function once the operation
has completed, from the `commlib-profiler` thread, before `wait()` returns. With no profiler on, the wrapper costs one
check (about 40 ns). The same wrapper gives commlib's timeouts the wording torch users match
(`as_torch`).
"""
import functools
import queue
import threading

import torch
import torch.distributed as dist
from torch._C._profiler import _RecordFunctionFast

from .._errors import CommTimeout
from ._work import as_torch

_on = torch._C._autograd._profiler_enabled
_ends = queue.SimpleQueue()  # (record function, event): ended on the commlib-profiler thread
_lock = threading.Lock()
_thread = None


def _finisher():
    while True:
        rf, ended = _ends.get()
        try:
            rf.__exit__(None, None, None)
        finally:
            ended.set()


def _end_elsewhere(rf, ended):
    """End rf from the commlib-profiler thread (started on first use), then set `ended`. The record
    function keeps what it needs from its start, so no profiler state has to travel with it (torch
    futures' state propagation, tried first, crashed the interpreter now and then)."""
    global _thread
    if _thread is None:
        with _lock:
            if _thread is None:
                _thread = threading.Thread(target=_finisher, name="commlib-profiler", daemon=True)
                _thread.start()
    _ends.put((rf, ended))


class Profiled(dist.Work):
    """The Work of a profiled call: the operation's own Work, plus the end of its record function."""

    def __init__(self, work, rf):
        super().__init__()
        self._work, self._ended = work, threading.Event()
        req = getattr(work, "_req", None)
        if req is None:  # already complete (a blocking call)
            _end_elsewhere(rf, self._ended)
        else:
            req.add_done_callback(lambda _r: _end_elsewhere(rf, self._ended))

    def wait(self, timeout=None):
        try:
            return self._work.wait(timeout)
        finally:
            if self._work.is_completed():
                self._ended.wait()

    def is_completed(self):
        return self._work.is_completed() and self._ended.is_set()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def result(self):
        self.wait()
        return self._work.result()

    def source_rank(self):
        self.wait()
        return self._work.source_rank()

    _source_rank = source_rank

    def synchronize(self):
        return None

    def get_future(self):
        ended = self._ended

        def after(f):
            ended.wait()
            return f.value()
        return self._work.get_future().then(after)


def profiled(title, inputs, collective=True):
    """Wrap a ProcessGroup method: while a profiler is on, its call is the event `commlib:<title>`
    with the shapes of `inputs(*args)` (the call's input tensors). A collective's call also counts
    in the group's `_collectives` (torch's sequence number)."""
    name = f"commlib:{title}"

    def wrap(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            if collective:
                self._collectives += 1
            if not _on():
                try:
                    return method(self, *args, **kwargs)
                except CommTimeout as exc:
                    raise as_torch(exc)
            rf = _RecordFunctionFast(name, list(inputs(*args)))
            rf.__enter__()
            try:
                work = method(self, *args, **kwargs)
            except BaseException as exc:
                rf.__exit__(None, None, None)
                raise as_torch(exc)
            return Profiled(work, rf)
        return call
    return wrap


def first(*args):
    """The tensors of the call's first argument (allreduce(tensors, ...), send(tensors, dst))."""
    return args[0]


def second(*args):
    """The tensors of its second argument (allgather(outputs, inputs, ...))."""
    return args[1]


def second_one(*args):
    """Its second argument, one tensor (all_to_all_single(output, input, ...))."""
    return [args[1]]


def nothing(*args):
    return []
