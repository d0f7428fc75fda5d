# cython: language_level=3
"""The engine's lock: a reentrant lock that compiled callers take and let go in a few nanoseconds.

It is `threading.RLock` in behaviour (acquire with blocking and timeout, release by the owner only,
`with`, and the three methods `threading.Condition` looks for, so a condition built on it waits by
releasing every level at once). What differs is the cost from C: `enter()` / `leave()` are direct
calls (the one-call send and receive take the lock twice a message, and `RLock.acquire`, which takes
keywords, is called through a tuple of arguments). Like CPython's own, the count and owner are
changed with the GIL held, and only a thread that must wait lets the GIL go.
"""
from cpython.exc cimport PyErr_CheckSignals

cdef extern from "pythread.h":
    ctypedef enum PyLockStatus:
        PY_LOCK_FAILURE = 0
        PY_LOCK_ACQUIRED = 1
        PY_LOCK_INTR
    PyThread_type_lock PyThread_allocate_lock()
    void PyThread_free_lock(PyThread_type_lock)
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock, long long microseconds, int intr_flag) nogil
    void PyThread_release_lock(PyThread_type_lock) nogil
    unsigned long PyThread_get_thread_ident()

from posix.time cimport clock_gettime, CLOCK_MONOTONIC, timespec


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class RLock:
    """A reentrant lock (threading.RLock's interface), cheap to take from compiled code."""

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock is NULL:
            raise MemoryError("cannot allocate a lock")
        self._owner = 0
        self._count = 0

    def __dealloc__(self):
        if self._lock is not NULL:
            PyThread_free_lock(self._lock)

    cdef int enter(self) except -1:
        """Take the lock, waiting as long as it takes (the GIL let go meanwhile)."""
        self._take(-1.0)
        return 0

    cdef int leave(self) except -1:
        """Let go of one level; RuntimeError from a thread that does not hold it."""
        if self._count == 0 or self._owner != PyThread_get_thread_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            self._owner = 0
            PyThread_release_lock(self._lock)
        return 0

    cdef bint _take(self, double timeout) except -1:
        """Acquire: at once where free or already ours; else wait up to timeout seconds (< 0: no
        bound; 0: not at all). Signals are handled while waiting, as threading's locks do."""
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef PyLockStatus r
        cdef double deadline
        cdef long long us
        if self._count > 0 and self._owner == me:
            self._count += 1
            return True
        r = PyThread_acquire_lock_timed(self._lock, 0, 0)
        if r != PY_LOCK_ACQUIRED and timeout != 0:
            deadline = _now() + timeout if timeout > 0 else 0.0
            while True:
                us = -1 if timeout < 0 else <long long>(max(0.0, deadline - _now()) * 1e6)
                with nogil:
                    r = PyThread_acquire_lock_timed(self._lock, us, 1)
                if r != PY_LOCK_INTR:
                    break
                PyErr_CheckSignals()  # a handler's exception ends the wait (raised from here)
        if r != PY_LOCK_ACQUIRED:
            return False
        self._owner = me
        self._count = 1
        return True

    def acquire(self, bint blocking=True, double timeout=-1):
        """Take the lock; with blocking, waiting up to timeout seconds (-1: no bound). Returns
        whether it was taken."""
        if not blocking and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if timeout < 0 and timeout != -1:
            raise ValueError("timeout value must be a non-negative number")
        return self._take(timeout if blocking else 0.0)

    def release(self):
        """Let go of one level of the lock (RuntimeError where this thread does not hold it)."""
        self.leave()

    def __enter__(self):
        self._take(-1.0)
        return True

    def __exit__(self, *exc):
        self.leave()

    def _is_owned(self):
        """Whether the calling thread holds the lock (threading.Condition's check)."""
        return self._count > 0 and self._owner == PyThread_get_thread_ident()

    def _release_save(self):
        """Let go of every level at once (threading.Condition.wait): the state to restore."""
        if self._count == 0:
            raise RuntimeError("cannot release un-acquired lock")
        state = (self._count, self._owner)
        self._count = 0
        self._owner = 0
        PyThread_release_lock(self._lock)
        return state

    def _acquire_restore(self, state):
        """Take the lock again with the levels _release_save gave up."""
        self._take(-1.0)
        self._count, self._owner = state

    def __repr__(self):
        held = f"owner={self._owner} count={self._count}" if self._count else "unlocked"
        return f"<commlib RLock {held}>"
