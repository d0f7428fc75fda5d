# cython: boundscheck=False, wraparound=False
"""The recording wrapper of commlib._trace in C: a traced call costs a few hundred nanoseconds.

One `Traced` per wrapped function. Each outermost call of a thread (a traced call made inside
another traced call of the same thread is not recorded again) writes one record of
commlib._trace.RECORD's layout into the map `set_map` was last given; record numbers come from
one counter, taken with the GIL held. A number outside the mapped chunk asks `mover(chunk)` (the
Recorder) to map the next chunk, or is dropped if its chunk has already passed.
"""
from cpython.object cimport PyObject_Call
from libc.stdint cimport int32_t, int64_t
from libc.time cimport timespec

cdef extern from "<time.h>" nogil:
    int clock_gettime(int clk, timespec* ts)
    int CLOCK_MONOTONIC

cdef extern from "Python.h":
    unsigned long PyThread_get_thread_ident()

ctypedef struct Record:  # commlib._trace.RECORD: "<qqqqiiii"
    int64_t t0
    int64_t t1
    int64_t nbytes
    int64_t seq
    int32_t op
    int32_t gid
    int32_t peer
    int32_t flags

cdef Record* _base = NULL
cdef int64_t _chunk = -1
cdef int _chunk_bits = 15
cdef int64_t _next = 0
cdef set _busy = set()
cdef object _mover = None
cdef dict _algo = {}  # thread -> the algorithm code noted during its current traced call
cdef set _seen = set()  # the groups this recorder has told `_group_note` of
cdef int32_t _last_gid = -1  # ... the last of them (most records: no set lookup)
cdef object _group_note = None
cdef int64_t _slot[3]  # (seq, gid, algorithm code) of the last collective the one-call path numbered
_slot[0] = _slot[1] = -1
_slot[2] = 0
F_ERROR = 1
cdef enum:
    ALGO_SHIFT_C = 8
ALGO_SHIFT = ALGO_SHIFT_C  # flags bits 8..15: 1 + the index in ALGORITHMS of the algorithm chosen, 0: none noted
ALGORITHMS = ("doubling", "ring", "rabenseifner", "bruck", "pairwise", "tree", "chain", "linear", "halving",
              "rails", "leaders", "scatter_gather")
cdef dict _codes = {name: i + 1 for i, name in enumerate(ALGORITHMS)}


def note_algo(name):
    """The algorithm the current traced call of this thread runs (commlib._algorithms.choose)."""
    if PyThread_get_thread_ident() in _busy:
        _algo[PyThread_get_thread_ident()] = _codes.get(name, 0)


def slot_address():
    """Where the one-call path leaves each collective's (seq, gid, algorithm code): _io.set_trace_slot."""
    return <Py_ssize_t>&_slot[0]


def set_group_note(fn):
    """fn(group) is told of each group at its first record (commlib._trace notes its transport)."""
    global _group_note
    _group_note = fn


def set_map(Py_ssize_t address, int64_t chunk, int chunk_bits, mover):
    """Records of chunk `chunk` (2**chunk_bits of them) go to `address` from now on; mover(chunk)
    maps a later chunk (and calls set_map)."""
    global _base, _chunk, _chunk_bits, _mover
    _base, _chunk, _chunk_bits, _mover = <Record*>address, chunk, chunk_bits, mover


def count():
    """Records numbered so far."""
    return _next


def restart():
    """Number records from 0 again (a new recorder)."""
    global _next, _base, _chunk, _last_gid
    _next, _base, _chunk, _last_gid = 0, NULL, -1, -1
    _seen.clear()


def append(int64_t t0, int64_t t1, int64_t nbytes, int64_t seq, int32_t op, int32_t gid, int32_t peer,
           int32_t flags):
    """One record, as a traced call writes it (False: dropped, its chunk already passed)."""
    return _put(t0, t1, nbytes, seq, op, gid, peer, flags)


cdef bint _put(int64_t t0, int64_t t1, int64_t nbytes, int64_t seq, int32_t op, int32_t gid, int32_t peer,
               int32_t flags) except -1:
    global _next
    cdef int64_t i = _next, chunk
    cdef Record* r
    _next += 1
    chunk = i >> _chunk_bits
    if chunk != _chunk:
        _mover(chunk)
        if chunk != _chunk:
            return False
    r = _base + (i & ((<int64_t>1 << _chunk_bits) - 1))
    r.t0, r.t1, r.nbytes, r.seq = t0, t1, nbytes, seq
    r.op, r.gid, r.peer, r.flags = op, gid, peer, flags
    return True


cdef inline int64_t _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef class Traced:
    """fn, recording its outermost calls (see the module)."""
    cdef readonly object __wrapped__
    cdef object group_of, world_of, first
    cdef object peer_kw
    cdef int peer_at
    cdef int32_t op
    cdef bint blocking_coll

    def __init__(self, fn, int op, world_of, first, group_of=None, peer_at=-1, peer_kw=None, blocking_coll=False):
        """op: the op's id; world_of(): the default group; first(): called before the first record
        (makes the recorder); group_of(args, kwargs): the call's group (None: no group);
        blocking_coll: a blocking collective, which the group's one-call path may have run."""
        self.__wrapped__ = fn
        self.op, self.world_of, self.first, self.group_of = op, world_of, first, group_of
        self.peer_at, self.peer_kw, self.blocking_coll = peer_at, peer_kw, blocking_coll

    def __get__(self, obj, cls):  # as a method (Request.wait): bind like a function
        if obj is None:
            return self
        import types
        return types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        cdef unsigned long me = PyThread_get_thread_ident()
        if me in _busy:  # inside another traced call of this thread: that one records
            return PyObject_Call(self.__wrapped__, args, kwargs)
        _busy.add(me)
        cdef int64_t t0 = _now()
        try:
            res = PyObject_Call(self.__wrapped__, args, kwargs)
        except BaseException:
            _busy.discard(me)
            self._record(t0, _now(), args, kwargs, None, 1 | (_algo.pop(me, 0) << 8))
            raise
        cdef int64_t t1 = _now()
        _busy.discard(me)
        self._record(t0, t1, args, kwargs, res, (_algo.pop(me, 0) << 8) if _algo else 0)
        return res

    cdef void _record(self, int64_t t0, int64_t t1, tuple args, dict kwargs, object res, int flags):
        global _last_gid
        cdef int64_t nbytes = 0, seq = -1
        cdef int32_t gid = -1, peer = -1
        try:
            if self.group_of is None:
                g = kwargs.get("group") if kwargs else None
                if g is None:
                    g = self.world_of()
            else:
                g = self.group_of(args, kwargs)
            if g is not None:
                gid = <int32_t>(g.gid & 0x7FFFFFFF)
                seq = g.seq
                if self.blocking_coll and flags == 0 and _slot[0] == seq and _slot[1] == gid:
                    flags = <int>_slot[2] << ALGO_SHIFT_C  # the one-call path ran this call's collective
            if self.peer_at >= 0:
                p = args[self.peer_at] if len(args) > self.peer_at else (kwargs or {}).get(self.peer_kw, -1)
                if type(p) is int:
                    peer = <int32_t>p
            n = getattr(res, "nbytes", 0) if res is not None else 0
            if not n and args:
                n = getattr(args[0], "nbytes", 0)
            if type(n) is int:
                nbytes = n
            if _base == NULL:
                self.first()
            if gid >= 0 and gid != _last_gid and _group_note is not None:
                _last_gid = gid
                if gid not in _seen:
                    _seen.add(gid)
                    _group_note(g)
            _put(t0, t1, nbytes, seq, self.op, gid, peer, flags)
        except Exception as exc:  # a trace must never break the program: say so once
            from commlib import _trace
            _trace._warn_once(exc)
