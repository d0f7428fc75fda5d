"""Synchronisation among MPI processes: mpi4py.util.sync for commlib.MPI.

`Sequential` runs a block one rank after another (each rank waits for a message from the previous
one). `Counter` is a shared integer on a root rank, advanced with an atomic fetch-and-add. `Mutex`
is the MCS queue lock: a rank swaps itself into the tail of a queue kept on rank 0, tells its
predecessor (an RMA write into the predecessor's `next` slot) and waits for the predecessor's
hand-off message; releasing hands over to `next`, or clears the tail when nobody is queued.
`Condition` keeps its waiting ranks in a FIFO on rank 0, changed only while its mutex is held,
and wakes them with messages; `Semaphore` is a `Counter` guarded by a `Condition`.

Every window here stays in one passive-target epoch (Lock_all) from creation to `free()`; each
operation completes with a Flush. Notifications travel on a duplicate of the communicator, so
they never meet the program's messages.
"""
import time

import numpy as np

from .. import ANY_SOURCE, BYTE, COMM_SELF, INFO_NULL, NO_OP, REPLACE, SUM, Datatype, Win

__all__ = ["Sequential", "Counter", "Mutex", "Condition", "Semaphore"]

_NONE = -1  # no rank
_SPIN_S = 1e-4  # a releasing rank polls for a successor that has swapped in but not yet linked itself


def _signal(comm, dest, tag=0):
    comm.Send([None, 0, BYTE], dest, tag)


def _await_signal(comm, source, tag=0):
    comm.Recv([None, 0, BYTE], source, tag)


class Sequential:
    """Context manager: the ranks of comm run the block one at a time, in rank order."""

    def __init__(self, comm, tag=0):
        self.comm, self.tag = comm, tag

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()

    def begin(self):
        """Wait for the previous rank to finish its turn."""
        comm = self.comm
        if comm.Get_rank() > 0:
            _await_signal(comm, comm.Get_rank() - 1, self.tag)

    def end(self):
        """Let the next rank have its turn."""
        comm = self.comm
        if comm.Get_rank() < comm.Get_size() - 1:
            _signal(comm, comm.Get_rank() + 1, self.tag)


class _Shared:
    """A window of `count` items of `typecode` on each rank in `ranks` (None: every rank), in a
    passive-target epoch until free()."""

    def __init__(self, comm, count, typecode, info, initial, ranks=None):
        self.dtype = np.dtype(typecode)
        self.datatype = Datatype.fromcode(typecode)
        mine = ranks is None or comm.Get_rank() in ranks
        self.win = Win.Allocate(count * self.dtype.itemsize if mine else 0, self.dtype.itemsize, info, comm)
        if mine:
            np.frombuffer(self.win.tomemory(), self.dtype)[:] = initial
        comm.Barrier()  # initialised everywhere before anyone reads
        self.win.Lock_all()

    def fetch_op(self, value, rank, index, op):
        """The item's value before `item = item op value`, atomically."""
        out = np.empty(1, self.dtype)
        self.win.Fetch_and_op([np.array([value], self.dtype), self.datatype], [out, self.datatype], rank, index, op)
        self.win.Flush(rank)
        return out[0].item()

    def cas(self, value, compare, rank, index):
        out = np.empty(1, self.dtype)
        self.win.Compare_and_swap([np.array([value], self.dtype), self.datatype],
                                  [np.array([compare], self.dtype), self.datatype], [out, self.datatype], rank, index)
        self.win.Flush(rank)
        return out[0].item()

    def get(self, rank, count):
        out = np.empty(count, self.dtype)
        self.win.Get([out, self.datatype], rank)
        self.win.Flush(rank)
        return out

    def put(self, values, rank):
        self.win.Put([np.asarray(values, self.dtype), self.datatype], rank)
        self.win.Flush(rank)

    def free(self):
        self.win.Unlock_all()
        self.win.Free()


class _Held:
    """`with x:` acquires x and releases it at the end of the block."""

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


class Counter:
    """A global counter: each next() returns its value and adds `step` (an atomic fetch-and-add on root)."""

    def __init__(self, start=0, step=1, *, typecode="i", comm=COMM_SELF, info=INFO_NULL, root=0):
        self._step, self._root = step, root
        self._shared = _Shared(comm, 1, typecode, info, start, ranks=(root,))

    def __iter__(self):
        return self

    def __next__(self):
        return self.next()

    def next(self, incr=None):
        """The counter's value, then advance it by incr (default: the step)."""
        if self._shared is None:
            raise RuntimeError("counter already freed")
        return self._shared.fetch_op(self._step if incr is None else incr, self._root, 0, SUM)

    def free(self):
        """Free the counter (collective); later calls do nothing."""
        if self._shared is not None:
            shared, self._shared = self._shared, None
            shared.free()


class Mutex(_Held):
    """Mutual exclusion among the ranks of comm (recursive: the holder may acquire it again)."""

    _TAIL, _NEXT = 0, 1  # rank 0's slot 0 is the queue's tail; every rank's slot 1 its successor

    def __init__(self, *, recursive=False, comm=COMM_SELF, info=INFO_NULL):
        self._recursive, self._count = bool(recursive), 0
        self._comm = comm.Dup()
        self._shared = _Shared(self._comm, 2, "i", info, _NONE)

    def _live(self):
        if self._shared is None:
            raise RuntimeError("mutex already freed")
        return self._shared

    def acquire(self, blocking=True):
        """Acquire the mutex (waiting in the queue when blocking); False when not blocking and held elsewhere."""
        s = self._live()
        if self._count:
            if not self._recursive:
                raise RuntimeError("cannot acquire already held mutex")
            self._count += 1
            return True
        me = self._comm.Get_rank()
        s.fetch_op(_NONE, me, self._NEXT, REPLACE)  # no successor yet
        if blocking:
            pred = s.fetch_op(me, 0, self._TAIL, REPLACE)
            if pred != _NONE:
                s.fetch_op(me, pred, self._NEXT, REPLACE)  # link behind pred, then wait for its hand-off
                _await_signal(self._comm, pred)
        elif s.cas(me, _NONE, 0, self._TAIL) != _NONE:
            return False
        self._count = 1
        return True

    def release(self):
        """Release the mutex (once per acquire when recursive)."""
        s = self._live()
        if not self._count:
            raise RuntimeError("cannot release unacquired mutex")
        if self._count > 1:
            self._count -= 1
            return
        me = self._comm.Get_rank()
        succ = s.fetch_op(0, me, self._NEXT, NO_OP)
        if succ == _NONE:
            if s.cas(_NONE, me, 0, self._TAIL) == me:  # nobody queued behind: the mutex is free
                self._count = 0
                return
            while succ == _NONE:  # a successor swapped in: wait until it has linked itself
                time.sleep(_SPIN_S)
                succ = s.fetch_op(0, me, self._NEXT, NO_OP)
        self._count = 0
        _signal(self._comm, succ)

    def locked(self):
        """Whether this rank holds the mutex."""
        self._live()
        return self._count > 0

    def count(self):
        """How many times this rank holds the mutex (its recursion level)."""
        self._live()
        return self._count

    def free(self):
        """Free the mutex (collective; a holder releases it first); later calls do nothing."""
        if self._shared is None:
            return
        if self._count:
            self._count = 1
            self.release()
        shared, self._shared = self._shared, None
        shared.free()
        self._comm.Free()


class Condition(_Held):
    """A condition variable among the ranks of comm (or of mutex's communicator)."""

    def __init__(self, mutex=None, *, recursive=True, comm=COMM_SELF, info=INFO_NULL):
        self._own = mutex is None
        self._mutex = Mutex(recursive=recursive, comm=comm, info=info) if mutex is None else mutex
        self._comm = self._mutex._comm.Dup()
        size = self._comm.Get_size()
        self._queue = _Shared(self._comm, 1 + size, "i", info, 0, ranks=(0,))  # [n waiting, their ranks...]

    def _live(self):
        if self._queue is None:
            raise RuntimeError("condition already freed")
        return self._queue

    def _held(self, what):
        q = self._live()
        if not self._mutex.locked():
            raise RuntimeError(f"cannot {what} on un-acquired lock")
        return q

    def acquire(self, blocking=True):
        self._live()
        return self._mutex.acquire(blocking)

    def release(self):
        self._live()
        self._mutex.release()

    def locked(self):
        self._live()
        return self._mutex.locked()

    def wait(self):
        """Release the mutex, wait for a notify, then acquire it again (as many times as it was held)."""
        q = self._held("wait")
        size = self._comm.Get_size()
        state = q.get(0, 1 + size)
        n = int(state[0])
        state[1 + n], state[0] = self._comm.Get_rank(), n + 1
        q.put(state, 0)
        count, self._mutex._count = self._mutex._count, 1
        self._mutex.release()
        _await_signal(self._comm, ANY_SOURCE)  # from whichever rank notifies
        self._mutex.acquire()
        self._mutex._count = count
        return True

    def wait_for(self, predicate):
        """Wait until predicate() is true; its last result."""
        self._held("wait")
        result = predicate()
        while not result:
            self.wait()
            result = predicate()
        return result

    def notify(self, n=1):
        """Wake up to n waiting ranks; how many were woken."""
        q = self._held("notify")
        size = self._comm.Get_size()
        state = q.get(0, 1 + size)
        waiting = int(state[0])
        k = min(n, waiting)
        if k:
            woken = [int(r) for r in state[1:1 + k]]
            rest = state[1 + k:1 + waiting].copy()
            state[1:1 + len(rest)], state[0] = rest, waiting - k
            q.put(state, 0)
            for r in woken:
                _signal(self._comm, r)
        return k

    def notify_all(self):
        return self.notify(self._comm.Get_size())

    def free(self):
        """Free the condition (collective; its mutex is released if held, and freed if it made it)."""
        if self._queue is None:
            return
        if self._mutex._shared is not None and self._mutex.locked():
            self._mutex._count = 1
            self._mutex.release()
        queue, self._queue = self._queue, None
        queue.free()
        self._comm.Free()
        if self._own:
            self._mutex.free()


class Semaphore(_Held):
    """A counting semaphore among the ranks of comm (bounded: release never raises it above value)."""

    def __init__(self, value=1, *, bounded=True, comm=COMM_SELF, info=INFO_NULL):
        if value < 0:
            raise ValueError("initial value must be non-negative")
        self._bounded, self._value = bool(bounded), value
        self._counter = Counter(value, comm=comm, info=info)
        self._condition = Condition(comm=comm, info=info)

    def _live(self):
        if self._counter is None:
            raise RuntimeError("semaphore already freed")

    def acquire(self, blocking=True):
        """Decrement the counter, waiting while it is zero (or returning False when not blocking)."""
        self._live()
        with self._condition:
            while self._counter.next(0) == 0:
                if not blocking:
                    return False
                self._condition.wait()
            self._counter.next(-1)
        return True

    def release(self, n=1):
        """Increment the counter by n and wake up to n waiting ranks."""
        self._live()
        if n < 1:
            raise ValueError("n must be one or more")
        with self._condition:
            if self._bounded and self._counter.next(0) + n > self._value:
                raise ValueError("semaphore released too many times")
            self._counter.next(n)
            self._condition.notify(n)

    def free(self):
        """Free the semaphore (collective); later calls do nothing."""
        if self._counter is None:
            return
        self._condition.free()
        self._counter.free()
        self._counter = self._condition = None
