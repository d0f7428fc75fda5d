"""The pool behind mpi4py.futures: a manager thread on the root, a serving loop on each worker."""
import atexit
import collections
import itertools
import threading
import time
import traceback
import weakref
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor  # noqa: F401

from commlib._errors import CommError
from commlib.MPI import ANY_SOURCE, ANY_TAG, COMM_WORLD, UNDEFINED, Status

TAG_TASK, TAG_RESULT, TAG_WAKE = 1, 2, 3
_STOP = ("stop",)


class RemoteTraceback(Exception):
    """The traceback of a task's exception on its worker (the cause of the exception re-raised)."""

    def __init__(self, tb):
        super().__init__(tb)
        self.tb = tb

    def __str__(self):
        return self.tb


class _Manager:
    """On the root: hands tasks to idle workers of `comm` (ranks `workers`) and takes their results."""

    def __init__(self, comm, workers, initializer=None, initargs=()):
        self.comm, self.workers = comm, list(workers)
        self.me = comm.Get_rank()
        self.queue = collections.deque()
        self.lock = threading.Lock()
        self.busy = {}  # worker rank -> its future
        self.idle = collections.deque(self.workers)
        self.closing = False
        self.broken = None
        if initializer is not None:
            for w in self.workers:
                comm.send(("init", initializer, tuple(initargs)), w, TAG_TASK)
        self.thread = threading.Thread(target=self._run, name="commlib-futures-manager", daemon=True)
        self.thread.start()

    def submit(self, future, fn, args, kwargs):
        with self.lock:
            if self.closing:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self.broken is not None:
                raise RuntimeError(f"the pool is broken: {self.broken}")
            self.queue.append((future, fn, args, kwargs))
        self.comm.send(None, self.me, TAG_WAKE)  # wake the manager, which may be waiting for a result

    def cancel_queued(self):
        with self.lock:
            while self.queue:
                self.queue.popleft()[0].cancel()

    def close(self, wait=True):
        with self.lock:
            self.closing = True
        self.comm.send(None, self.me, TAG_WAKE)
        if wait:
            self.thread.join()

    def _dispatch(self):
        while True:
            with self.lock:
                if not self.idle or not self.queue:
                    return
                future, fn, args, kwargs = self.queue.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                w = self.idle.popleft()
                self.busy[w] = future
            try:
                self.comm.send(("task", fn, args, kwargs), w, TAG_TASK)
            except Exception as e:  # an unpicklable task: its future fails, the worker stays idle
                with self.lock:
                    self.busy.pop(w)
                    self.idle.appendleft(w)
                future.set_exception(e)

    def _run(self):
        st = Status()
        try:
            while True:
                self._dispatch()
                with self.lock:
                    if self.closing and not self.queue and not self.busy:
                        break
                msg = self.comm.recv(None, ANY_SOURCE, ANY_TAG, st)
                if st.Get_tag() != TAG_RESULT:
                    continue  # a wake-up
                w = st.Get_source()
                with self.lock:
                    future = self.busy.pop(w)
                    self.idle.append(w)
                if msg[0] == "ok":
                    future.set_result(msg[1])
                else:
                    exc, tb = msg[1], msg[2]
                    exc.__cause__ = RemoteTraceback(tb)
                    future.set_exception(exc)
        except BaseException as e:  # the job is failing (a worker lost): every waiting future learns why
            with self.lock:
                self.broken = e
                pending = list(self.busy.values()) + [t[0] for t in self.queue]
                self.busy.clear()
                self.queue.clear()
            for f in pending:
                if not f.done():
                    f.set_exception(e)
        # drain wake-ups sent before the close, so the duplicate communicator is left empty
        while self.comm.iprobe(self.me, TAG_WAKE):
            self.comm.recv(None, self.me, TAG_WAKE)

    def stop_workers(self):
        for w in self.workers:
            self.comm.send(_STOP, w, TAG_TASK)


_worker_comm = None


def serve(comm, root, workers_comm=None):
    """On a worker: run the tasks `root` sends until it says stop."""
    global _worker_comm
    _worker_comm = workers_comm
    while True:
        try:
            msg = comm.recv(None, root, TAG_TASK)
        except CommError:
            raise
        except Exception as e:  # a task that does not unpickle here (a function this worker cannot import)
            comm.send(("err", e, traceback.format_exc()), root, TAG_RESULT)
            continue
        if msg[0] == "stop":
            return
        if msg[0] == "init":
            msg[1](*msg[2])
            continue
        _, fn, args, kwargs = msg
        try:
            reply = ("ok", fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - the task's error goes back to its caller
            reply = ("err", e, traceback.format_exc())
        try:
            comm.send(reply, root, TAG_RESULT)
        except Exception as e:  # an unpicklable result or exception: say so instead
            comm.send(("err", RuntimeError(f"the task's result could not be sent back: {e!r}"),
                       traceback.format_exc()), root, TAG_RESULT)


def get_comm_workers():
    """In a task: the communicator of the workers serving the pool (COMM_WORLD's workers under
    `-m mpi4py.futures`, the other ranks of an MPICommExecutor)."""
    if _worker_comm is None:
        raise RuntimeError("get_comm_workers() is for tasks running on an mpi4py.futures worker")
    return _worker_comm


class _Base(Executor):
    """What MPIPoolExecutor and MPICommExecutor's executor share: submit, map, starmap, shutdown."""

    def __init__(self, manager):
        self._manager = manager
        self._futures = set()
        self._shutdown = False

    @property
    def num_workers(self):
        return len(self._manager.workers)

    def submit(self, fn, /, *args, **kwargs):
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        manager = self._manager  # first: a pool that cannot start leaves no future behind to wait for
        f = Future()
        manager.submit(f, fn, args, kwargs)
        self._futures.add(f)
        f.add_done_callback(self._futures.discard)
        return f

    def map(self, fn, *iterables, timeout=None, chunksize=1, unordered=False):
        """fn over the iterables, `chunksize` calls a task; results in order, or as they complete."""
        return self.starmap(fn, zip(*iterables), timeout=timeout, chunksize=chunksize, unordered=unordered)

    def starmap(self, fn, iterable, timeout=None, chunksize=1, unordered=False):
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        end = None if timeout is None else time.monotonic() + timeout
        it = iter(iterable)
        chunks = iter(lambda: list(itertools.islice(it, chunksize)), [])
        futures = [self.submit(_run_chunk, fn, chunk) for chunk in chunks]

        def results():
            try:
                pending = _completed(futures, end) if unordered else futures
                for f in pending:
                    yield from f.result(None if end is None else max(0.0, end - time.monotonic()))
            finally:
                for f in futures:
                    f.cancel()
        return results()

    def shutdown(self, wait=True, *, cancel_futures=False):
        self._shutdown = True
        if cancel_futures:
            for f in list(self._futures):
                f.cancel()
        if wait:
            for f in list(self._futures):
                try:
                    f.exception()
                except BaseException:  # noqa: BLE001 - cancelled: nothing to wait for
                    pass


def _run_chunk(fn, chunk):
    return [fn(*args) for args in chunk]


def _completed(futures, end):
    from concurrent.futures import as_completed
    return as_completed(futures, None if end is None else max(0.0, end - time.monotonic()))


# ---------------------------------------------------------------- the -m mpi4py.futures pool

_world = {"manager": None, "lock": threading.Lock(), "served": False}


def _world_manager(initializer, initargs):
    """The one manager over COMM_WORLD's ranks 1 ... N-1, when run under -m mpi4py.futures."""
    with _world["lock"]:
        if _world["manager"] is None:
            comm = _world["comm"]
            if comm.Get_size() < 2:
                raise RuntimeError("MPIPoolExecutor: -m mpi4py.futures needs at least 2 ranks (1 would have no "
                                   "worker)")
            _world["manager"] = _Manager(comm, range(1, comm.Get_size()), initializer, initargs)
        return _world["manager"]


class MPIPoolExecutor(_Base):
    """A pool of MPI workers: COMM_WORLD's ranks 1 ... N-1 under `-m mpi4py.futures`; otherwise
    max_workers processes it spawns on first use (`MPI.COMM_SELF.Spawn`), which serve only it.

    Spawning takes mpi4py's arguments: max_workers (default: MPI4PY_FUTURES_MAX_WORKERS, else 1),
    python_exe, python_args, mpi_info (Spawn's info: `host` places the workers on other hosts),
    path (directories put first on the workers' sys.path), wdir, env (variables set in the workers)
    and main (True: the workers import this program's `__main__` script first, so functions defined
    in it are found). initializer(*initargs) runs once on each
    worker.
    """

    def __init__(self, max_workers=None, initializer=None, initargs=(), **kwargs):
        if max_workers is not None and max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        self._init = (initializer, initargs)
        self._workers_wanted, self._spawn_args = max_workers, kwargs
        self._started = None
        self._spawned = None  # (intercommunicator, merged communicator) of the workers this pool spawned
        self._start_lock = threading.Lock()
        self._shutdown = False
        self._futures = set()

    @property
    def _manager(self):
        with self._start_lock:
            if self._started is None:
                if self._shutdown:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                self._started = _world_manager(*self._init) if _world["served"] else self._spawn()
            return self._started

    def _spawn(self):
        import os
        import sys

        from commlib import MPI
        kw = self._spawn_args
        n = self._workers_wanted or int(os.environ.get("MPI4PY_FUTURES_MAX_WORKERS", "0") or 0) or 1
        python = kw.get("python_exe") or sys.executable
        args = list(kw.get("python_args") or ()) + ["-m", "commlib.MPI.futures._spawned"]
        info = dict(kw.get("mpi_info") or {})  # mpi4py's: a mapping or (key, value) pairs, e.g. host
        inter = MPI.COMM_SELF.Spawn(python, args, maxprocs=n, info=info)
        comm = inter.Merge(high=False)  # this process is rank 0, the workers 1 ... n
        main = sys.modules.get("__main__")
        main_path = getattr(main, "__file__", None) if kw.get("main", True) else None
        setup = {"path": [str(p) for p in kw.get("path") or ()], "wdir": kw.get("wdir"),
                 "env": {str(k): str(v) for k, v in (kw.get("env") or {}).items()}, "main": main_path}
        for w in range(1, n + 1):
            comm.send(setup, w, TAG_TASK)
        self._spawned = (inter, comm)
        _live_pools.add(self)
        _at_exit()
        return _Manager(comm, range(1, n + 1), *self._init)

    def shutdown(self, wait=True, *, cancel_futures=False):
        super().shutdown(wait, cancel_futures=cancel_futures)
        with self._start_lock:
            spawned, self._spawned = self._spawned, None
        if spawned is None:
            return
        _live_pools.discard(self)

        def stop():
            manager = self._started
            manager.close(wait=True)
            if manager.broken is None:
                manager.stop_workers()
            for c in reversed(spawned):
                c.Free()
        if wait:
            stop()
        else:
            threading.Thread(target=stop, name="commlib-futures-shutdown", daemon=True).start()

    def bootup(self, wait=True):
        """Make sure the workers are there (they are, under -m mpi4py.futures); returns self."""
        if self._shutdown:
            raise RuntimeError("cannot bootup after shutdown")
        self._manager  # noqa: B018 - starts the pool
        return self


_live_pools = weakref.WeakSet()  # pools with spawned workers: shut down at exit
_exit_registered = []


def _at_exit():
    """Shut down spawned pools at exit, before commlib.MPI waits for the spawned processes to end
    (atexit runs the last registered first)."""
    if not _exit_registered:
        _exit_registered.append(True)
        atexit.register(lambda: [p.shutdown(wait=True, cancel_futures=True) for p in list(_live_pools)])


def _main_served(run_script, import_script=None):
    """-m mpi4py.futures: rank 0 runs the script with the pool; every other rank serves it, having
    imported the script as `__worker__` (its `if __name__ == "__main__":` part does not run) and made
    it `__main__`, so that the functions it defines, pickled as `__main__.f`, are found."""
    comm = COMM_WORLD.Dup()
    _world["comm"], _world["served"] = comm, True
    rank = comm.Get_rank()
    workers = comm.Split(UNDEFINED if rank == 0 else 1, rank)
    if rank == 0:
        try:
            run_script()
        finally:
            m = _world["manager"]
            if m is not None:
                m.close(wait=True)
                m.stop_workers()
            else:
                for w in range(1, comm.Get_size()):
                    comm.send(_STOP, w, TAG_TASK)
    else:
        if import_script is not None:
            import_script()
        serve(comm, 0, workers)
        workers.Free()
    comm.Free()


# ---------------------------------------------------------------- MPICommExecutor

class MPICommExecutor:
    """`with MPICommExecutor(comm, root) as executor:`: the root gets an executor whose workers are
    the other ranks of comm, which serve it inside `__enter__` and then get None."""

    def __init__(self, comm=None, root=0, **kwargs):
        self._comm = COMM_WORLD if comm is None else comm
        if not 0 <= root < self._comm.Get_size():
            raise ValueError(f"MPICommExecutor: root {root} outside a communicator of {self._comm.Get_size()}")
        self._root, self._executor, self._dup = root, None, None

    def __enter__(self):
        dup = self._dup = self._comm.Dup()
        rank, size = dup.Get_rank(), dup.Get_size()
        workers = dup.Split(UNDEFINED if rank == self._root else 1, rank)  # collective: every rank, now
        if rank == self._root:
            if size == 1:  # no other rank: the root runs tasks itself, as mpi4py does
                self._executor = ThreadPoolExecutor(max_workers=1)
            else:
                self._executor = _Base(_Manager(dup, [r for r in range(size) if r != self._root]))
            return self._executor
        try:
            serve(dup, self._root, workers)
        finally:
            workers.Free()
        return None

    def __exit__(self, *exc):
        dup, self._dup = self._dup, None
        ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
            if isinstance(ex, _Base):
                ex._manager.close(wait=True)
                ex._manager.stop_workers()
        dup.Free()
        return False
