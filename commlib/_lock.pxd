cdef extern from "pythread.h":
    ctypedef void* PyThread_type_lock


cdef class RLock:
    cdef PyThread_type_lock _lock
    cdef unsigned long _owner  # the holding thread's ident (valid while _count > 0)
    cdef unsigned long _count  # the holder's acquisitions not yet released
    cdef int enter(self) except -1
    cdef int leave(self) except -1
    cdef bint _take(self, double timeout) except -1
