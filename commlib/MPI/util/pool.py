"""`multiprocessing.Pool`'s interface over an executor: `mpi4py.util.pool` for commlib.

`Pool` runs tasks on MPI workers through `commlib.MPI.futures.MPIPoolExecutor` (so under
`commrun -n N -m mpi4py.futures`, or with workers it starts); `ThreadPool` on threads of this process.
A subclass may set `Executor` to any `concurrent.futures.Executor` class taking `max_workers`,
`initializer` and `initargs`: the pool only ever calls its `submit` and `shutdown`. Tasks travel in
chunks (one future per chunk), so `terminate()` can cancel what has not started; a result whose
task was cancelled reports `TimeoutError` from `get()`, as a pool that was terminated does.
"""
import concurrent.futures as cf
import itertools
import os
import threading
import warnings

from ..futures import MPIPoolExecutor

__all__ = ["Pool", "ThreadPool", "AsyncResult", "ApplyResult", "MapResult"]


def _chunk(fn, star, items):
    """Run one chunk of tasks (in a worker): fn over items, each item an argument tuple when star."""
    return [fn(*item) for item in items] if star else [fn(item) for item in items]


class Pool:
    """A pool of workers with `multiprocessing.Pool`'s methods."""

    Executor = MPIPoolExecutor

    def __init__(self, processes=None, initializer=None, initargs=(), **kwargs):
        if processes is not None and processes < 1:
            raise ValueError("Pool: the number of processes must be at least 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("Pool: initializer must be a callable")
        for name in ("maxtasksperchild", "context"):
            if kwargs.pop(name, None) is not None:
                warnings.warn(f"Pool: the {name} argument is not supported (ignored)", UserWarning, stacklevel=2)
        self._workers = processes
        self._executor = self.Executor(processes, initializer=initializer, initargs=initargs, **kwargs)

    def _size(self):
        n = self._workers or getattr(self._executor, "_max_workers", None) or os.cpu_count() or 1
        return max(1, int(n))

    def _submit(self, fn, star, iterable, chunksize):
        items = list(iterable)
        if chunksize is None:  # as multiprocessing.Pool: about four chunks per worker
            chunksize, extra = divmod(len(items), self._size() * 4)
            chunksize += bool(extra)
        chunksize = max(1, int(chunksize))
        return [self._executor.submit(_chunk, fn, star, items[i:i + chunksize])
                for i in range(0, len(items), chunksize)]

    # ---------------------------------------------------------------- one task
    def apply(self, func, args=(), kwds=None):
        return self.apply_async(func, args, kwds).get()

    def apply_async(self, func, args=(), kwds=None, callback=None, error_callback=None):
        future = self._executor.submit(func, *args, **(kwds or {}))
        return ApplyResult([future], callback, error_callback, single=True)

    # ---------------------------------------------------------------- many tasks
    def map(self, func, iterable, chunksize=None):
        return self.map_async(func, iterable, chunksize).get()

    def map_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        return MapResult(self._submit(func, False, iterable, chunksize), callback, error_callback)

    def starmap(self, func, iterable, chunksize=None):
        return self.starmap_async(func, iterable, chunksize).get()

    def starmap_async(self, func, iterable, chunksize=None, callback=None, error_callback=None):
        return MapResult(self._submit(func, True, iterable, chunksize), callback, error_callback)

    def imap(self, func, iterable, chunksize=1):
        return _in_order(self._submit(func, False, iterable, chunksize))

    def imap_unordered(self, func, iterable, chunksize=1):
        return _as_done(self._submit(func, False, iterable, chunksize))

    def istarmap(self, func, iterable, chunksize=1):
        return _in_order(self._submit(func, True, iterable, chunksize))

    def istarmap_unordered(self, func, iterable, chunksize=1):
        return _as_done(self._submit(func, True, iterable, chunksize))

    # ---------------------------------------------------------------- life cycle
    def close(self):
        """No more tasks; those submitted still run."""
        self._executor.shutdown(wait=False)

    def terminate(self):
        """No more tasks, and those not started are cancelled."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def join(self):
        """Wait for the workers to finish (after close() or terminate())."""
        self._executor.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.terminate()


class ThreadPool(Pool):
    """A Pool whose workers are threads of this process."""

    Executor = cf.ThreadPoolExecutor


def _in_order(futures):
    for f in futures:
        yield from f.result()


def _as_done(futures):
    for f in cf.as_completed(futures):
        yield from f.result()


class AsyncResult:
    """The result of tasks submitted without waiting (`apply_async`, `map_async`...)."""

    def __init__(self, futures, callback=None, error_callback=None, single=False):
        self._futures, self._single = futures, single
        self._callback, self._error_callback = callback, error_callback
        self._left = len(futures)
        self._lock = threading.Lock()
        self._done = threading.Event()
        if not futures:
            self._finished()
        for f in futures:
            f.add_done_callback(self._one_done)

    def _one_done(self, _future):
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._finished()

    def _finished(self):
        try:
            error = self._error()
            if error is None and self._callback is not None:
                self._callback(self._value())
            elif error is not None and not isinstance(error, cf.CancelledError) and self._error_callback is not None:
                self._error_callback(error)
        finally:
            self._done.set()

    def _error(self):
        for f in self._futures:
            if f.cancelled():
                return cf.CancelledError()
            if f.exception() is not None:
                return f.exception()
        return None

    def _value(self):
        if self._single:
            return self._futures[0].result()
        return list(itertools.chain.from_iterable(f.result() for f in self._futures))

    def get(self, timeout=None):
        """The result, or the task's exception raised here; TimeoutError when it is not ready in time
        (or never will be: a task cancelled by terminate())."""
        self.wait(timeout)
        if not self.ready():
            raise TimeoutError("the result is not ready")
        error = self._error()
        if isinstance(error, cf.CancelledError):
            raise TimeoutError("the task was cancelled (the pool was terminated)")
        if error is not None:
            raise error
        return self._value()

    def wait(self, timeout=None):
        self._done.wait(timeout)

    def ready(self):
        return self._done.is_set()

    def successful(self):
        if not self.ready():
            raise ValueError("the result is not ready")
        return self._error() is None


ApplyResult = MapResult = AsyncResult
