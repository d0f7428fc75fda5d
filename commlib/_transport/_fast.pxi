# Included at the end of _io.pyx: it runs the step loop (`_run`, `Step`) directly.
"""The one-call small-message path: a whole collective in one call, the GIL released once.

For a message up to the group's eager limit, `FastPath` does in C what the
Python path does in a dozen calls: it checks the common argument forms
(a C-contiguous native NumPy array, `out` None or x itself, a known op),
claims the group's stream (only when nothing is queued on it, so program
order with pending i-collectives holds), numbers the collective, builds its
header, folds it into the group's digest and history, and runs the whole
schedule, the same cached plan the Python path runs (`_algorithms/`), with
the one executor (`_plan.pxi`) without the GIL. It moves exactly the frames
the Python path moves, so a rank on this path and a rank on the Python path
(different argument forms) interoperate.

Anything it does not handle returns NotImplemented before any side effect
(no sequence number taken, no byte sent), and the caller takes the Python
path. A step that does not finish returns its status to the channel's
`stopped` (Python), as on the Python path: after SLOW it asks the peer and
the same step resumes; any other status becomes the exception to raise.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdio cimport snprintf
from libc.string cimport memset
from cpython.ref cimport Py_INCREF

from commlib._wire cimport (COLL_ALL_GATHER, COLL_ALL_GATHER_OBJ, COLL_ALL_REDUCE, COLL_BARRIER, COLL_BROADCAST,
                            COLL_BROADCAST_OBJ, COLL_REDUCE, COLL_REDUCE_SCATTER, HEADER_LEN, WIRE_KIND_COLL,
                            WIRE_KIND_P2P, WIRE_VERSION, pack_header)

# While calls are traced (commlib._trace): where each collective this path numbers leaves its
# (sequence number, group, algorithm code), for the recording wrapper that returns next
cdef long long* _trace_slot = NULL


def set_trace_slot(Py_ssize_t address):
    """The int64[3] the one-call path writes each collective's (seq, gid & 0x7FFFFFFF, algorithm code)
    to; 0: none (commlib._tracecall's slot)."""
    global _trace_slot
    _trace_slot = <long long*>address

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewLikeArray(cnp.ndarray prototype, cnp.NPY_ORDER order, void* descr, int subok)
    object PyArray_NewFromDescr(type subtype, void* descr, int nd, cnp.npy_intp* dims, cnp.npy_intp* strides,
                                void* data, int flags, object obj)

cdef extern from "<zlib.h>" nogil:
    unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int length)

cdef enum:
    MAX_STEPS = 128   # rows of a plan this path runs (from the stack)
    MAX_DIMS = 32

cdef struct WireCodes:
    signed char code[24]   # numpy builtin type number -> wire dtype code; -1: not for the one-call paths
    int bf16_num           # ml_dtypes' bfloat16 type number, -1 without it
    int bf16_code


cdef int _wire_codes_fill(WireCodes* w, dtype_code, bf16) except -1:
    """The table both one-call paths read their dtype codes from (dtype_code: _dtypes.dtype_code)."""
    import numpy as np
    cdef int t
    for t in range(24):
        w.code[t] = -1
    for ch in np.typecodes["All"]:  # the builtin types, by number
        dt = np.dtype(ch)
        if dt.num < 24:
            try:
                w.code[dt.num] = dtype_code(dt)
            except TypeError:
                w.code[dt.num] = -1
    w.bf16_num = bf16.num if bf16 is not None else -1
    w.bf16_code = dtype_code(bf16) if bf16 is not None else -1
    return 0


cdef inline int _wire_code(WireCodes* w, int t) noexcept nogil:
    """Wire dtype code of numpy type number t (native byte order is the caller's check), or -1."""
    if 0 <= t < 24:
        return w.code[t]
    if t == w.bf16_num and t >= 0:
        return w.bf16_code
    return -1


cdef class FastPath:
    """One group's one-call path (see the section comment above). Built by the engine's Group."""

    cdef object group          # the engine's Group: seq, digest, history live there
    cdef object queue          # the group stream's queue: the fast path runs only when it is empty
    cdef object acquire, release
    cdef object history_append
    cdef object ep, fds, status, notices
    cdef list out_keys, in_keys
    cdef Stepper stepper       # the channel's step loop: its constants, spin rule and per-peer learned waits
    cdef public object state   # int64[4], the step progress (the stepper's)
    cdef object snap_buf
    cdef char* snap
    # plans (commlib._plan tables) of the rootless collectives, None: not on this path; rooted ones per root
    cdef object ar_rows, barrier_rows, ag_rows, rs_rows
    cdef int ar_parts, ag_parts, rs_parts
    cdef object bcast_plan, reduce_plan   # callables root -> Plan
    cdef list bcast_rows, reduce_rows     # per root, filled on first use
    cdef list reduce_uses_acc
    cdef public Py_ssize_t limit   # largest payload taken, bytes; 0 disables a collective kind below
    cdef public Py_ssize_t reduce_limit, broadcast_limit, gather_limit
    cdef readonly Py_ssize_t rs_limit  # reduce_scatter up to this input size; 0: off
    cdef int n, rank
    cdef unsigned int gid
    cdef double timeout
    cdef WireCodes codes
    cdef dict ops              # op as given -> op code, for ops known to be legal on some dtype
    cdef object legal          # callable(op, dtype code) -> op code, raises for an illegal pair
    cdef signed char legal_ok[16][16]   # [op code][dtype code]: 1 checked legal, 0 not yet
    # shape hash of the last shape seen
    cdef int last_ndim
    cdef Py_ssize_t last_dims[MAX_DIMS]
    cdef unsigned int last_hash
    # the last operation, for error messages and stall reports (formatted only when asked)
    cdef int last_coll
    cdef unsigned long long last_seq
    # Measuring the Python share of a call: with `timing` 1 (wall clock) or 2 (this
    # thread's CPU time, immune to preemption) the time spent with the GIL
    # released accumulates in nogil_ns; 0 (the default) reads no clock.
    cdef public int timing
    cdef public long long nogil_ns
    cdef int algo_codes[32]   # wire collective code -> its plan's algorithm code (commlib._tracecall), 0: none

    def __init__(self, group, stream, ep, fds, list out_keys, list in_keys, status, notices, Stepper stepper,
                 dict plans, dict limits, dict ops, legal, dtype_code, bf16):
        """plans: {kind: Plan} for all_reduce, barrier, all_gather, reduce_scatter (absent: not taken here) and
        {kind: callable(root) -> Plan} for broadcast and reduce; limits: {kind: largest payload in bytes}."""
        import numpy as np
        self.group = group
        self.queue = stream._queue
        self.acquire, self.release = stream._running.acquire, stream._running.release
        self.history_append = group.history.append
        self.ep, self.fds, self.status, self.notices = ep, fds, status, notices
        self.out_keys, self.in_keys = out_keys, in_keys
        self.n, self.rank, self.gid = group.size(), group.rank(), group.gid
        self.timeout = group.timeout
        self.stepper = stepper
        self.state = stepper.state
        self.limit = limits.get("all_reduce", 0)
        self.reduce_limit = limits.get("reduce", 0)
        self.broadcast_limit = limits.get("broadcast", 0)
        self.gather_limit = limits.get("all_gather", 0)
        self.rs_limit = limits.get("reduce_scatter", 0)
        self.ar_rows, self.ar_parts = self._plan(plans.get("all_reduce"), self.limit)
        self.barrier_rows, _ = self._plan(plans.get("barrier"), 1)
        self.ag_rows, self.ag_parts = self._plan(plans.get("all_gather"), self.gather_limit)
        self.rs_rows, self.rs_parts = self._plan(plans.get("reduce_scatter"), self.rs_limit)
        self.bcast_plan, self.reduce_plan = plans.get("broadcast"), plans.get("reduce")
        self.bcast_rows = [None] * self.n
        self.reduce_rows = [None] * self.n
        self.reduce_uses_acc = [False] * self.n
        self.snap_buf = np.empty(max(self.limit, self.reduce_limit, self.broadcast_limit, self.gather_limit,
                                     self.rs_limit, 64), dtype=np.uint8)
        self.snap = <char*>cnp.PyArray_DATA(self.snap_buf)
        self.ops, self.legal = ops, legal
        memset(self.legal_ok, 0, sizeof(self.legal_ok))
        _wire_codes_fill(&self.codes, dtype_code, bf16)
        self.last_ndim = -1
        self.nogil_ns = 0
        self.timing = 0
        memset(self.algo_codes, 0, sizeof(self.algo_codes))

    def set_algos(self, dict codes):
        """{wire collective code: algorithm code}: what each plan is, for the records of a trace."""
        for coll, code in codes.items():
            self.algo_codes[<int>coll & 31] = <int>code

    cdef tuple _plan(self, plan, Py_ssize_t limit):
        """(rows, parts) of a plan this path can run from the stack, else (None, 0)."""
        if plan is None or limit <= 0 or len(plan.rows) > MAX_STEPS or plan.parts > MAX_PARTS:
            return None, 0
        return plan.rows, plan.parts

    cdef object _rooted(self, list cache, object make, int root):
        """The rows of a rooted plan for `root` (built once), or None when this path cannot run it."""
        rows = cache[root]
        if rows is None and make is not None:
            plan = make(root)
            rows, _ = self._plan(plan, 1)
            if rows is not None:
                cache[root] = rows
                if cache is self.reduce_rows:
                    self.reduce_uses_acc[root] = 1 in plan.slots  # RES: this rank accumulates children's data
        return rows

    def __str__(self):
        from commlib._wire import COLL_NAMES
        return f"{COLL_NAMES[self.last_coll]} #{self.last_seq}"

    # --------------------------------------------------------------- checks
    cdef int _code(self, cnp.ndarray a) except -3:
        """Wire dtype code of a, or -1: not for this path (unsupported, byte-swapped, user type)."""
        if not cnp.PyArray_ISNOTSWAPPED(a):
            return -1
        return _wire_code(&self.codes, cnp.PyArray_TYPE(a))

    cdef unsigned int _shape_hash(self, cnp.ndarray a) noexcept:
        """crc32 of repr(shape), as _wire.shape_hash, remembered for the last shape (callers keep ndim <= MAX_DIMS)."""
        cdef int nd = cnp.PyArray_NDIM(a), i, pos
        cdef cnp.npy_intp* d = cnp.PyArray_DIMS(a)
        cdef char text[MAX_DIMS * 24 + 4]
        if nd == self.last_ndim:
            for i in range(nd):
                if d[i] != self.last_dims[i]:
                    break
            else:
                return self.last_hash
        text[0] = b'('
        pos = 1
        for i in range(nd):
            pos += snprintf(text + pos, 24, b"%lld, " if i + 1 < nd else b"%lld", <long long>d[i])
        if nd == 1:
            text[pos] = b','
            pos += 1
        text[pos] = b')'
        pos += 1
        self.last_hash = crc32(0, <unsigned char*>text, pos)
        self.last_ndim = nd
        for i in range(nd):
            self.last_dims[i] = d[i]
        return self.last_hash

    cdef int _opc(self, op, int code) except -2:
        """Op code of `op` on dtype `code`; raises as the Python path does for an illegal pair; -1: not here."""
        cdef object got = self.ops.get(op) if isinstance(op, str) else None
        cdef int opc
        if got is None:
            return -1
        opc = got
        if not 0 <= opc < 16 or not 0 <= code < 16:
            return -1
        if not self.legal_ok[opc][code]:
            self.legal(op, code)  # raises for an illegal pair, as the Python path would
            self.legal_ok[opc][code] = 1
        return opc

    cdef bint _claim(self, object rows, int* sfd, int* rfd) except -1:
        """Every row's descriptors, then the group's stream; False: not now (no side effect)."""
        cdef int nrows
        cdef const Row* r = _rows(rows, &nrows)
        if self.queue or self.ep.failure is not None:
            return False
        if nrows and _peer_fds(r, nrows, self.fds, self.out_keys, self.in_keys, sfd, rfd):
            return False  # a peer not connected yet: the Python path connects it
        return self.acquire(False)

    cdef bytes _begin(self, int coll, int dtype, int op, unsigned long long count, int root, unsigned int shape):
        """Number the collective and build its header; the group's digest and history record it."""
        g = self.group
        cdef unsigned long long seq = g.seq + 1
        g.seq = seq
        cdef bytes hdr = PyBytes_FromStringAndSize(NULL, 56)
        cdef unsigned char* h = <unsigned char*>PyBytes_AS_STRING(hdr)
        pack_header(h, WIRE_KIND_COLL, coll, dtype, op, 0, self.gid, root, shape, seq, 0, count, 0)
        g.digest = crc32(g.digest, h, 56)
        self.history_append(hdr)
        self.last_coll, self.last_seq = coll, seq
        if _trace_slot != NULL:
            _trace_slot[0], _trace_slot[1], _trace_slot[2] = seq, self.gid & 0x7FFFFFFF, self.algo_codes[coll & 31]
        if self.notices is not None:
            self.notices.last = self
        return hdr

    cdef int _execute(self, object rows, int parts, Py_ssize_t count, Py_ssize_t item, int* sfd, int* rfd, bytes hdr,
                      char* x, char* res, int dtype, int op, shaped) except -1:
        """Run a claimed plan (count elements of item bytes in `parts` units); a status other than OK goes to
        the channel's `stopped` handler, which raises or lets the same row resume."""
        cdef int nrows, at = 0, rc
        cdef const Row* r = _rows(rows, &nrows)
        cdef bint resume = False, reported = False
        cdef Py_ssize_t bounds[MAX_PARTS + 1]
        cdef Py_ssize_t slots[8]
        cdef const char* h = PyBytes_AS_STRING(hdr)
        cdef double deadline = _now() + self.timeout
        cdef long long* ns = &self.nogil_ns
        _bounds_even(bounds, count, item, parts)
        slots[0], slots[1], slots[2], slots[3], slots[4] = <Py_ssize_t>x, <Py_ssize_t>res, <Py_ssize_t>self.snap, 0, 0
        try:
            while True:
                with nogil:
                    rc = _execute(self.stepper, r, nrows, &at, slots, bounds, sfd, rfd, h, dtype, op, deadline,
                                  resume, ns, self.timing)
                if rc == ST_OK:
                    return 0
                reported = True
                fd = self.status(rc, str(self), hdr, None if shaped is None else shaped.shape,
                                 self._world(r[at].dst), _span(bounds, r[at].send_slot, r[at].send_lo, r[at].send_hi),
                                 self._world(r[at].src), _span(bounds, r[at].recv_slot, r[at].recv_lo, r[at].recv_hi),
                                 self.state, self.stepper.rhdr)
                if fd is not None:  # BUSY: this row reads a message parked for this group
                    rfd[at] = fd
                resume = True  # SLOW and the peer is in this collective too, BUSY, a message parked: go on
        finally:
            if reported:
                self.stepper.check_reset()
                self.stepper.drop_parked()
                if self.notices is not None:
                    self.notices.current = None

    cdef object _world(self, int r):
        return None if r < 0 else self.out_keys[r][2]

    # ----------------------------------------------------------- collectives
    def all_reduce(self, x, op, out):
        """all_reduce(x, op, out=None|x|array) in one call (a separate out: the same dtype and shape,
        C-contiguous, writable, not overlapping x); NotImplemented: take the Python path."""
        cdef cnp.ndarray a, res
        cdef int code, opc
        cdef Py_ssize_t nbytes
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        if self.ar_rows is None or type(x) is not cnp.ndarray:
            return NotImplemented
        a = <cnp.ndarray>x
        nbytes = cnp.PyArray_NBYTES(a)
        if (nbytes > self.limit or nbytes == 0 or cnp.PyArray_NDIM(a) > MAX_DIMS
                or not cnp.PyArray_IS_C_CONTIGUOUS(a)):
            return NotImplemented
        if out is not None and not self._same_layout(out, a, out is not x):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        opc = self._opc(op, code)
        if opc < 0:
            return NotImplemented
        if not self._claim(self.ar_rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(COLL_ALL_REDUCE, code, opc, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            res = PyArray_NewLikeArray(a, cnp.NPY_CORDER, NULL, 0) if out is None else <cnp.ndarray>out
            self._execute(self.ar_rows, self.ar_parts, cnp.PyArray_SIZE(a), cnp.PyArray_ITEMSIZE(a), sfd, rfd, hdr,
                          <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(res), code, opc, x)
        finally:
            self.release()
        return res if out is None else out

    cdef bint _same_layout(self, out, cnp.ndarray a, bint apart) except -1:
        """out is a writable C-contiguous ndarray of a's dtype and shape (apart: not overlapping a)."""
        cdef cnp.ndarray o
        cdef int i
        cdef char* od
        cdef char* ad
        if type(out) is not cnp.ndarray:
            return False
        o = <cnp.ndarray>out
        if (cnp.PyArray_TYPE(o) != cnp.PyArray_TYPE(a) or not cnp.PyArray_ISNOTSWAPPED(o)
                or not cnp.PyArray_IS_C_CONTIGUOUS(o) or not cnp.PyArray_ISWRITEABLE(o)
                or cnp.PyArray_NDIM(o) != cnp.PyArray_NDIM(a)):
            return False
        for i in range(cnp.PyArray_NDIM(a)):
            if cnp.PyArray_DIMS(o)[i] != cnp.PyArray_DIMS(a)[i]:
                return False
        if apart:
            od, ad = <char*>cnp.PyArray_DATA(o), <char*>cnp.PyArray_DATA(a)
            if od < ad + cnp.PyArray_NBYTES(a) and ad < od + cnp.PyArray_NBYTES(o):
                return False
        return True

    cdef int _root(self, root) except -2:
        """A root given as a plain int in range, else -1 (the Python path checks and names the problem)."""
        if type(root) is not int:
            return -1
        r = <long long>root
        return <int>r if 0 <= r < self.n else -1

    cdef bint _array_ok(self, x, Py_ssize_t limit) except -1:
        """x is an exact, C-contiguous ndarray of at most limit bytes (limit 0: this kind is off)."""
        return (limit > 0 and type(x) is cnp.ndarray and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x)
                and cnp.PyArray_NBYTES(<cnp.ndarray>x) <= limit and cnp.PyArray_NDIM(<cnp.ndarray>x) <= MAX_DIMS)

    def barrier(self):
        """barrier() in one call; NotImplemented: take the Python path."""
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        if self.barrier_rows is None or not self._claim(self.barrier_rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(COLL_BARRIER, 0, 0, 0, 0, 0)
            self._execute(self.barrier_rows, 1, 0, 1, sfd, rfd, hdr, NULL, NULL, 0, -1, None)
        finally:
            self.release()
        return None

    def broadcast(self, x, root, int coll=COLL_BROADCAST):
        """broadcast(x, root) into x itself (writable on non-roots); NotImplemented: take the Python path.
        coll: the collective the header names (broadcast_obj for an object's first round)."""
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, rt = self._root(root)
        cdef cnp.ndarray a
        if rt < 0 or not self._array_ok(x, self.broadcast_limit) or coll not in (COLL_BROADCAST, COLL_BROADCAST_OBJ):
            return NotImplemented
        a = <cnp.ndarray>x
        if rt != self.rank and not cnp.PyArray_ISWRITEABLE(a):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        rows = self._rooted(self.bcast_rows, self.bcast_plan, rt)
        if rows is None or not self._claim(rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(coll, code, 0, cnp.PyArray_SIZE(a), rt, self._shape_hash(a))
            self._execute(rows, 1, cnp.PyArray_NBYTES(a), 1, sfd, rfd, hdr, NULL, <char*>cnp.PyArray_DATA(a), code,
                          -1, x)
        finally:
            self.release()
        return x

    def reduce(self, x, op, root):
        """reduce(x, op, root): the result on root, None elsewhere; NotImplemented: take the Python path."""
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, opc, rt = self._root(root)
        cdef cnp.ndarray a, res = None
        cdef char* acc
        if rt < 0 or not self._array_ok(x, self.reduce_limit):
            return NotImplemented
        a = <cnp.ndarray>x
        code = self._code(a)
        if code < 0 or cnp.PyArray_NBYTES(a) == 0:
            return NotImplemented
        opc = self._opc(op, code)
        if opc < 0:
            return NotImplemented
        rows = self._rooted(self.reduce_rows, self.reduce_plan, rt)
        if rows is None or not self._claim(rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(COLL_REDUCE, code, opc, cnp.PyArray_SIZE(a), rt, self._shape_hash(a))
            if self.rank == rt:
                res = PyArray_NewLikeArray(a, cnp.NPY_CORDER, NULL, 0)
                acc = <char*>cnp.PyArray_DATA(res)
            else:
                acc = self.snap if self.reduce_uses_acc[rt] else NULL
            self._execute(rows, 1, cnp.PyArray_SIZE(a), cnp.PyArray_ITEMSIZE(a), sfd, rfd, hdr,
                          <char*>cnp.PyArray_DATA(a), acc, code, opc, x)
        finally:
            self.release()
        return res if self.rank == rt else None

    def reduce_scatter(self, x, op, out=None):
        """reduce_scatter(x, op) in one call (recursive halving) into a new array or `out` (a C-contiguous,
        writable array of x's dtype and x.size / n elements, apart from x); NotImplemented: the Python
        path (which checks and names problems)."""
        cdef cnp.ndarray a, res
        cdef char* od
        cdef char* xd
        cdef int code, opc, nd
        cdef Py_ssize_t nbytes
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef cnp.npy_intp dims[MAX_DIMS]
        if self.rs_rows is None or type(x) is not cnp.ndarray:
            return NotImplemented
        a = <cnp.ndarray>x
        nbytes = cnp.PyArray_NBYTES(a)
        nd = cnp.PyArray_NDIM(a)
        if (nbytes == 0 or nbytes > self.rs_limit or nd == 0 or nd > MAX_DIMS
                or not cnp.PyArray_IS_C_CONTIGUOUS(a) or cnp.PyArray_DIMS(a)[0] % self.n):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        opc = self._opc(op, code)
        if opc < 0:
            return NotImplemented
        if out is not None:
            if type(out) is not cnp.ndarray:
                return NotImplemented
            res = <cnp.ndarray>out
            if (cnp.PyArray_TYPE(res) != cnp.PyArray_TYPE(a) or not cnp.PyArray_ISNOTSWAPPED(res)
                    or not cnp.PyArray_IS_C_CONTIGUOUS(res) or not cnp.PyArray_ISWRITEABLE(res)
                    or cnp.PyArray_SIZE(res) * self.n != cnp.PyArray_SIZE(a)):
                return NotImplemented
            od, xd = <char*>cnp.PyArray_DATA(res), <char*>cnp.PyArray_DATA(a)
            if od < xd + nbytes and xd < od + nbytes // self.n:
                return NotImplemented  # out overlaps x
        if not self._claim(self.rs_rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(COLL_REDUCE_SCATTER, code, opc, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            if out is None:
                memcpy(dims, cnp.PyArray_DIMS(a), nd * sizeof(cnp.npy_intp))
                dims[0] //= self.n
                descr = <object>cnp.PyArray_DESCR(a)
                Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
                res = PyArray_NewFromDescr(cnp.ndarray, <void*>descr, nd, dims, NULL, NULL, 0, None)
            self._execute(self.rs_rows, self.rs_parts, cnp.PyArray_SIZE(a), cnp.PyArray_ITEMSIZE(a), sfd, rfd, hdr,
                          <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(res), code, opc, x)
        finally:
            self.release()
        return res

    def all_gather(self, x, out=None, int coll=COLL_ALL_GATHER):
        """all_gather(x, out=None|array) into a new array or `out` (exactly the result's C-contiguous array,
        x at most its block of it); NotImplemented: take the Python path (which checks and names problems).
        coll: the collective the header names (all_gather_obj for an object all-gather's first round)."""
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, nd, i
        cdef cnp.ndarray a, res
        cdef Py_ssize_t block
        cdef char* mine
        cdef char* xd
        cdef cnp.npy_intp dims[MAX_DIMS]
        if self.ag_rows is None or type(x) is not cnp.ndarray or coll not in (COLL_ALL_GATHER, COLL_ALL_GATHER_OBJ):
            return NotImplemented
        a = <cnp.ndarray>x
        block = cnp.PyArray_NBYTES(a)
        nd = cnp.PyArray_NDIM(a)
        if (block == 0 or block * self.n > self.gather_limit or nd > MAX_DIMS
                or not cnp.PyArray_IS_C_CONTIGUOUS(a)):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        if nd == 0:
            dims[0] = self.n
            nd = 1
        else:
            memcpy(dims, cnp.PyArray_DIMS(a), nd * sizeof(cnp.npy_intp))
            dims[0] *= self.n
        if out is not None:
            if type(out) is not cnp.ndarray:
                return NotImplemented
            res = <cnp.ndarray>out
            if (cnp.PyArray_TYPE(res) != cnp.PyArray_TYPE(a) or not cnp.PyArray_ISNOTSWAPPED(res)
                    or not cnp.PyArray_IS_C_CONTIGUOUS(res) or not cnp.PyArray_ISWRITEABLE(res)
                    or cnp.PyArray_NDIM(res) != nd):
                return NotImplemented
            for i in range(nd):
                if cnp.PyArray_DIMS(res)[i] != dims[i]:
                    return NotImplemented
            mine = <char*>cnp.PyArray_DATA(res) + self.rank * block
            xd = <char*>cnp.PyArray_DATA(a)
            if xd != mine and xd < <char*>cnp.PyArray_DATA(res) + self.n * block and xd + block > <char*>cnp.PyArray_DATA(res):
                return NotImplemented  # x overlaps out other than as this rank's block of it
        if not self._claim(self.ag_rows, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(coll, code, 0, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            if out is None:
                descr = <object>cnp.PyArray_DESCR(a)
                Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
                res = PyArray_NewFromDescr(cnp.ndarray, <void*>descr, nd, dims, NULL, NULL, 0, None)
            mine = <char*>cnp.PyArray_DATA(res) + self.rank * block
            if mine != <char*>cnp.PyArray_DATA(a):
                memcpy(mine, cnp.PyArray_DATA(a), block)
            self._execute(self.ag_rows, self.ag_parts, self.n * block, 1, sfd, rfd, hdr, NULL,
                          <char*>cnp.PyArray_DATA(res), code, -1, x)
        finally:
            self.release()
        return res
