# Included at the end of _io.pyx: it runs the step loop (`_run`, `Step`) directly.
"""The one-call small-message path: a whole collective in one call, the GIL released once.

For a message up to the group's eager limit, `FastPath` does in C what the
Python path does in a dozen calls: it checks the common argument forms
(a C-contiguous native NumPy array, `out` None or x itself, a known op),
claims the group's stream (only when nothing is queued on it, so program
order with pending i-collectives holds), numbers the collective, builds its
header, folds it into the group's digest and history, and runs the whole
schedule (recursive doubling, dissemination, binomial tree, ring) as
consecutive `_run` steps without the GIL. It moves exactly the frames the
Python algorithms move, so a rank on this path and a rank on the Python
path (different argument forms) interoperate.

Anything it does not handle returns NotImplemented before any side effect
(no sequence number taken, no byte sent), and the caller takes the Python
path. A step that does not finish returns its status to the channel's
`fast_status` (Python): after SLOW it asks the peer and resumes the same
step; any other status becomes the same exception the Python path raises.
"""
cimport numpy as cnp
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdio cimport snprintf
from libc.string cimport memset
from cpython.ref cimport Py_INCREF
from posix.time cimport CLOCK_THREAD_CPUTIME_ID

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewLikeArray(cnp.ndarray prototype, cnp.NPY_ORDER order, void* descr, int subok)
    object PyArray_NewFromDescr(type subtype, void* descr, int nd, cnp.npy_intp* dims, cnp.npy_intp* strides,
                                void* data, int flags, object obj)

cdef extern from "<zlib.h>" nogil:
    unsigned long crc32(unsigned long crc, const unsigned char* buf, unsigned int length)

cdef enum:
    MAX_STEPS = 128
    MAX_DIMS = 32
    # where a step's send/receive bytes are
    R_NONE = 0
    R_X = 1        # the caller's array
    R_RES = 2      # the result array (may be x itself)
    R_SNAP = 3     # scratch of nbytes
    # step flags
    F_SNAPSHOT = 1  # copy RES into SNAP before the step
    F_REDUCE = 2    # reduce what arrives into recv_ref (through the ring)
    F_SWAP = 4      # reduce as op(received, mine)
    F_INIT = 8      # reduce: copy X into recv_ref first (out-of-place first child)

# Wire codes of the collectives (_wire.COLL_NAMES) this path runs.
cdef enum:
    C_ALL_REDUCE = 1
    C_ALL_GATHER = 2
    C_REDUCE_SCATTER = 3
    C_BROADCAST = 4
    C_BARRIER = 5
    C_REDUCE = 6

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


cdef struct Plan:
    int dst             # group rank, -1: no send side
    int src             # group rank, -1: no receive side
    int send_ref
    Py_ssize_t send_off
    Py_ssize_t send_len
    int recv_ref
    Py_ssize_t recv_off
    Py_ssize_t recv_len
    int flags


cdef inline void _put(unsigned char* p, unsigned long long v, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        p[i] = (v >> (8 * i)) & 0xFF


cdef int _plan_doubling(Plan* pl, int n, int r, Py_ssize_t nbytes) noexcept nogil:
    """_algorithms/doubling.all_reduce, step for step (buffer RES, snapshot SNAP)."""
    cdef int p = 1, extra, k = 0, mask, partner
    while p * 2 <= n:
        p *= 2
    extra = n - p
    if r >= p:
        _step(&pl[k], r - p, -1, R_RES, 0, nbytes, R_NONE, 0, 0, 0); k += 1
        _step(&pl[k], -1, r - p, R_NONE, 0, 0, R_RES, 0, nbytes, 0); k += 1
        return k
    if r < extra:
        _step(&pl[k], -1, r + p, R_NONE, 0, 0, R_RES, 0, nbytes, F_REDUCE); k += 1
    mask = 1
    while mask < p:
        partner = r ^ mask
        _step(&pl[k], partner, partner, R_SNAP, 0, nbytes, R_RES, 0, nbytes,
              F_SNAPSHOT | F_REDUCE | (F_SWAP if partner < r else 0)); k += 1
        mask <<= 1
    if r < extra:
        _step(&pl[k], r + p, -1, R_RES, 0, nbytes, R_NONE, 0, 0, 0); k += 1
    return k


cdef int _plan_barrier(Plan* pl, int n, int r) noexcept nogil:
    """_algorithms/doubling.barrier: dissemination, header-only steps."""
    cdef int k = 0, d = 1
    while d < n:
        _step(&pl[k], (r + d) % n, (r - d + n) % n, R_NONE, 0, 0, R_NONE, 0, 0, 0); k += 1
        d <<= 1
    return k


cdef int _plan_broadcast(Plan* pl, int n, int r, int root, Py_ssize_t nbytes) noexcept nogil:
    """_algorithms/tree.broadcast_tree (binomial) on buffer X."""
    cdef int v = (r - root + n) % n, mask = 1, k = 0
    while mask < n:
        if v & mask:
            _step(&pl[k], -1, (v - mask + root) % n, R_NONE, 0, 0, R_X, 0, nbytes, 0); k += 1
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < n:
            _step(&pl[k], (v + mask + root) % n, -1, R_X, 0, nbytes, R_NONE, 0, 0, 0); k += 1
        mask >>= 1
    return k


cdef int _plan_reduce(Plan* pl, int n, int r, int root, Py_ssize_t nbytes, bint* uses_acc) noexcept nogil:
    """_algorithms/tree.reduce_tree: children reduced into RES (the accumulator), sent up from X or RES."""
    cdef int v = (r - root + n) % n, mask = 1, k = 0, have = R_X
    while mask < n:
        if v & mask:
            _step(&pl[k], (v - mask + root) % n, -1, have, 0, nbytes, R_NONE, 0, 0, 0); k += 1
            break
        if v + mask < n:
            _step(&pl[k], -1, (v + mask + root) % n, R_NONE, 0, 0, R_RES, 0, nbytes,
                  F_REDUCE | (F_INIT if have == R_X else 0)); k += 1
            have = R_RES
        mask <<= 1
    uses_acc[0] = have == R_RES
    return k


cdef int _plan_ring_gather(Plan* pl, int n, int r, Py_ssize_t block) noexcept nogil:
    """_algorithms/ring.all_gather with equal blocks, in RES."""
    cdef int s, sb, rb, k = 0
    for s in range(n - 1):
        sb = (r - s + n) % n
        rb = (r - s - 1 + n) % n
        _step(&pl[k], (r + 1) % n, (r - 1 + n) % n, R_RES, sb * block, block, R_RES, rb * block, block, 0); k += 1
    return k


cdef int _plan_doubling_gather(Plan* pl, int n, int r, Py_ssize_t block) noexcept nogil:
    """_algorithms/logstep.all_gather for a power-of-two n (recursive doubling), in RES: round k swaps
    the aligned group of 2^k blocks holding r's with rank r XOR 2^k, both in place."""
    cdef int mask = 1, k = 0, partner
    while mask < n:
        partner = r ^ mask
        _step(&pl[k], partner, partner, R_RES, (r & ~(mask - 1)) * block, mask * block,
              R_RES, (partner & ~(mask - 1)) * block, mask * block, 0); k += 1
        mask <<= 1
    return k


cdef int _plan_halving(Plan* pl, int n, int r, Py_ssize_t block) noexcept nogil:
    """_algorithms/logstep.reduce_scatter (recursive halving, power-of-two n) on SNAP, a copy of x:
    each round sends half the current range to r XOR mask and reduces the partner's copy of the
    other half into it, until block r is left."""
    cdef int lo = 0, width = n, mask = n >> 1, k = 0, half, keep, give
    while mask:
        half = width >> 1
        if r & mask:
            keep, give = lo + half, lo
        else:
            keep, give = lo, lo + half
        _step(&pl[k], r ^ mask, r ^ mask, R_SNAP, give * block, half * block, R_SNAP, keep * block, half * block,
              F_REDUCE); k += 1
        lo, width = keep, half
        mask >>= 1
    return k


cdef inline void _step(Plan* p, int dst, int src, int send_ref, Py_ssize_t send_off, Py_ssize_t send_len,
                       int recv_ref, Py_ssize_t recv_off, Py_ssize_t recv_len, int flags) noexcept nogil:
    p.dst, p.src, p.send_ref, p.send_off, p.send_len = dst, src, send_ref, send_off, send_len
    p.recv_ref, p.recv_off, p.recv_len, p.flags = recv_ref, recv_off, recv_len, flags


cdef class FastPath:
    """One group's one-call path (see the section comment above). Built by the engine's Group."""

    cdef object group          # the engine's Group: seq, digest, history live there
    cdef object queue          # the group stream's queue: the fast path runs only when it is empty
    cdef object acquire, release
    cdef object history_append
    cdef object ep, fds, status, notices
    cdef list out_keys, in_keys
    cdef public object state   # int64[4], the step progress (read by the status handler)
    cdef long long[::1] _state
    cdef public bytearray rhdr
    cdef object snap_buf
    cdef char* snap
    cdef Py_ssize_t ring_ptr, ring_len, chunk
    cdef public Py_ssize_t limit   # largest payload taken, bytes; 0 disables a collective kind below
    cdef public Py_ssize_t reduce_limit, broadcast_limit, gather_limit
    cdef public bint gather_doubling   # all_gather by recursive doubling (power-of-two n), else the ring
    cdef readonly Py_ssize_t rs_limit  # reduce_scatter (recursive halving) up to this input size; 0: off
    cdef int wake_fd, n, rank
    cdef unsigned int gid
    cdef double spin_s, check_s, timeout
    cdef Stepper stepper       # the channel's step loop: its spin rule and per-peer learned waits
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

    def __init__(self, group, stream, ep, fds, list out_keys, list in_keys, status, notices,
                 Py_ssize_t ring_ptr, Py_ssize_t ring_len, Py_ssize_t chunk, int wake_fd, Stepper stepper,
                 double check_s, Py_ssize_t limit, Py_ssize_t reduce_limit, Py_ssize_t broadcast_limit,
                 Py_ssize_t gather_limit, dict ops, legal, dtype_code, bf16):
        import numpy as np
        self.group = group
        self.queue = stream._queue
        self.acquire, self.release = stream._running.acquire, stream._running.release
        self.history_append = group.history.append
        self.ep, self.fds, self.status, self.notices = ep, fds, status, notices
        self.out_keys, self.in_keys = out_keys, in_keys
        self.n, self.rank, self.gid = group._size, group._rank, group.gid
        self.timeout = group.timeout
        self.state = np.zeros(4, dtype=np.int64)
        self._state = self.state
        self.rhdr = bytearray(56)
        self.snap_buf = np.empty(max(limit, reduce_limit, broadcast_limit, 64), dtype=np.uint8)
        self.snap = <char*>cnp.PyArray_DATA(self.snap_buf)
        self.ring_ptr, self.ring_len, self.chunk = ring_ptr, ring_len, chunk
        self.limit, self.reduce_limit, self.broadcast_limit = limit, reduce_limit, broadcast_limit
        self.gather_limit = gather_limit
        self.gather_doubling = False
        self.wake_fd, self.check_s = wake_fd, check_s
        self.stepper, self.spin_s = stepper, stepper.spin_s
        self.ops, self.legal = ops, legal
        memset(self.legal_ok, 0, sizeof(self.legal_ok))
        _wire_codes_fill(&self.codes, dtype_code, bf16)
        self.last_ndim = -1
        self.nogil_ns = 0
        self.timing = 0

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

    cdef bint _claim(self, Plan* plan, int nsteps, int* sfd, int* rfd) except -1:
        """Descriptors of every step's peers, then the group's stream; False: not now (no side effect)."""
        cdef int k
        cdef object fd
        if self.queue or self.ep.failure is not None:
            return False
        for k in range(nsteps):
            sfd[k] = rfd[k] = -1
            if plan[k].dst >= 0:
                fd = self.fds.get(self.out_keys[plan[k].dst])
                if fd is None:
                    return False
                sfd[k] = fd
            if plan[k].src >= 0:
                fd = self.fds.get(self.in_keys[plan[k].src])
                if fd is None:
                    return False
                rfd[k] = fd
        return self.acquire(False)

    cdef bytes _begin(self, int coll, int dtype, int op, unsigned long long count, int root, unsigned int shape):
        """Number the collective and build its header; the group's digest and history record it."""
        g = self.group
        cdef unsigned long long seq = g.seq + 1
        g.seq = seq
        cdef bytes hdr = PyBytes_FromStringAndSize(NULL, 56)
        cdef unsigned char* h = <unsigned char*>PyBytes_AS_STRING(hdr)
        h[0], h[1], h[2], h[3] = b'C', b'M', b'L', b'B'
        h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11] = 1, 1, coll, dtype, op, 0, 0, 0
        _put(h + 12, self.gid, 4)
        _put(h + 16, <unsigned int>root, 4)
        _put(h + 20, shape, 4)
        _put(h + 24, seq, 8)
        _put(h + 32, 0, 8)
        _put(h + 40, count, 8)
        _put(h + 48, 0, 8)
        g.digest = crc32(g.digest, h, 56)
        self.history_append(hdr)
        self.last_coll, self.last_seq = coll, seq
        if self.notices is not None:
            self.notices.last = self
        return hdr

    cdef int _execute(self, Plan* plan, int nsteps, int* sfd, int* rfd, bytes hdr, char* x, char* res,
                      Py_ssize_t nbytes, int dtype, int op, shaped) except -1:
        """Run the planned steps; a status other than OK goes to the channel's handler (which raises or resumes)."""
        cdef int k = 0, rc
        cdef bint resume = False, reported = False
        cdef Step s
        cdef Plan* p
        cdef char* h = PyBytes_AS_STRING(hdr)
        cdef double deadline = _now() + self.timeout
        cdef long long* st = &self._state[0]
        cdef double t0 = 0
        cdef Py_ssize_t item = itemsize_of(dtype) if op >= 0 else 1
        s.send_hdr = h
        s.recv_hdr = <char*>self.rhdr
        s.expect_hdr = h
        s.ring_len = self.ring_len
        s.chunk = self.chunk
        s.wake_fd = self.wake_fd
        s.deadline = deadline
        s.spin_s = self.spin_s
        s.yield_spin = self.stepper.yield_spin
        s.learned = NULL
        s.check_s = self.check_s
        s.state = st
        s.dtype = dtype
        s.op = op if op >= 0 else 0
        s.item = item if item > 0 else 1
        s.relay = RELAY_NONE
        s.init_src = NULL
        try:
            while True:
                with nogil:
                    if self.timing:
                        t0 = _clock(self.timing)
                    rc = ST_OK
                    while k < nsteps:
                        p = &plan[k]
                        if not resume:
                            st[0] = st[1] = st[2] = st[3] = 0
                            if p.flags & F_SNAPSHOT:
                                memcpy(self.snap, res, nbytes)
                        resume = False
                        s.send_fd = sfd[k]
                        s.send_hdr_len = 56 if s.send_fd >= 0 else 0
                        s.send_buf = _ref(p.send_ref, x, res, self.snap) + p.send_off
                        s.send_len = p.send_len
                        s.recv_fd = rfd[k]
                        if self.stepper.adaptive:  # the same per-peer waits the Python path learns
                            s.learned = &self.stepper.learned[(s.recv_fd if s.recv_fd >= 0 else s.send_fd)
                                                              % SPIN_SLOTS]
                        s.recv_hdr_len = 56 if s.recv_fd >= 0 else 0
                        s.recv_len = p.recv_len
                        s.swap = (p.flags & F_SWAP) != 0
                        if p.flags & F_REDUCE:
                            s.reduce_dst = _ref(p.recv_ref, x, res, self.snap) + p.recv_off
                            s.recv_buf = <char*>self.ring_ptr
                            s.init_src = x if p.flags & F_INIT else NULL
                        else:
                            s.reduce_dst = NULL
                            s.init_src = NULL
                            s.recv_buf = _ref(p.recv_ref, x, res, self.snap) + p.recv_off
                        rc = _run(&s)
                        if rc != ST_OK:
                            break
                        k += 1
                    if self.timing:
                        self.nogil_ns += <long long>((_clock(self.timing) - t0) * 1e9)
                if rc == ST_OK:
                    return 0
                p = &plan[k]
                reported = True
                self.status(rc, str(self), hdr, None if shaped is None else shaped.shape, self._world(p.dst), p.send_len, self._world(p.src),
                            p.recv_len, self.state, self.rhdr)
                resume = True  # SLOW and the peer is in this collective too: go on with step k
        finally:
            if reported and self.notices is not None:
                self.notices.current = None

    cdef object _world(self, int r):
        return None if r < 0 else self.out_keys[r][2]

    # ----------------------------------------------------------- collectives
    def all_reduce(self, x, op, out):
        """all_reduce(x, op, out=None|x) in one call; NotImplemented: take the Python path."""
        cdef cnp.ndarray a, res
        cdef int code, opc, nsteps
        cdef Py_ssize_t nbytes
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        if type(x) is not cnp.ndarray or (out is not None and out is not x):
            return NotImplemented
        a = <cnp.ndarray>x
        nbytes = cnp.PyArray_NBYTES(a)
        if (nbytes > self.limit or nbytes == 0 or cnp.PyArray_NDIM(a) > MAX_DIMS
                or not cnp.PyArray_IS_C_CONTIGUOUS(a)):
            return NotImplemented
        if out is not None and not cnp.PyArray_ISWRITEABLE(a):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        opc = self._opc(op, code)
        if opc < 0:
            return NotImplemented
        nsteps = _plan_doubling(plan, self.n, self.rank, nbytes)
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_ALL_REDUCE, code, opc, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            if out is None:
                res = PyArray_NewLikeArray(a, cnp.NPY_CORDER, NULL, 0)
                memcpy(cnp.PyArray_DATA(res), cnp.PyArray_DATA(a), nbytes)
            else:
                res = a
            self._execute(plan, nsteps, sfd, rfd, hdr, <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(res), nbytes,
                          code, opc, x)
        finally:
            self.release()
        return res if out is None else out

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
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int nsteps = _plan_barrier(plan, self.n, self.rank)
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_BARRIER, 0, 0, 0, 0, 0)
            self._execute(plan, nsteps, sfd, rfd, hdr, NULL, NULL, 0, 0, -1, None)
        finally:
            self.release()
        return None

    def broadcast(self, x, root):
        """broadcast(x, root) into x itself (writable on non-roots); NotImplemented: take the Python path."""
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, nsteps, rt = self._root(root)
        cdef cnp.ndarray a
        if rt < 0 or not self._array_ok(x, self.broadcast_limit):
            return NotImplemented
        a = <cnp.ndarray>x
        if rt != self.rank and not cnp.PyArray_ISWRITEABLE(a):
            return NotImplemented
        code = self._code(a)
        if code < 0:
            return NotImplemented
        nsteps = _plan_broadcast(plan, self.n, self.rank, rt, cnp.PyArray_NBYTES(a))
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_BROADCAST, code, 0, cnp.PyArray_SIZE(a), rt, self._shape_hash(a))
            self._execute(plan, nsteps, sfd, rfd, hdr, <char*>cnp.PyArray_DATA(a), NULL, cnp.PyArray_NBYTES(a),
                          code, -1, x)
        finally:
            self.release()
        return x

    def reduce(self, x, op, root):
        """reduce(x, op, root): the result on root, None elsewhere; NotImplemented: take the Python path."""
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, opc, nsteps, rt = self._root(root)
        cdef bint uses_acc = False
        cdef cnp.ndarray a, res = None
        cdef char* acc
        cdef Py_ssize_t nbytes
        if rt < 0 or not self._array_ok(x, self.reduce_limit):
            return NotImplemented
        a = <cnp.ndarray>x
        nbytes = cnp.PyArray_NBYTES(a)
        code = self._code(a)
        if code < 0 or nbytes == 0:
            return NotImplemented
        opc = self._opc(op, code)
        if opc < 0:
            return NotImplemented
        nsteps = _plan_reduce(plan, self.n, self.rank, rt, nbytes, &uses_acc)
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_REDUCE, code, opc, cnp.PyArray_SIZE(a), rt, self._shape_hash(a))
            if self.rank == rt:
                res = PyArray_NewLikeArray(a, cnp.NPY_CORDER, NULL, 0)
                acc = <char*>cnp.PyArray_DATA(res)
            else:
                acc = self.snap
            self._execute(plan, nsteps, sfd, rfd, hdr, <char*>cnp.PyArray_DATA(a), acc, nbytes, code, opc, x)
        finally:
            self.release()
        return res if self.rank == rt else None

    def arm_reduce_scatter(self, Py_ssize_t limit):
        """Take reduce_scatter by recursive halving (power-of-two n only) up to `limit` input bytes."""
        import numpy as np
        if limit <= 0 or self.n & (self.n - 1) or self.n < 2:
            self.rs_limit = 0
            return
        if self.snap_buf.nbytes < limit:
            self.snap_buf = np.empty(limit, dtype=np.uint8)
            self.snap = <char*>cnp.PyArray_DATA(self.snap_buf)
        self.rs_limit = limit

    def reduce_scatter(self, x, op):
        """reduce_scatter(x, op) by recursive halving in one call; NotImplemented: the Python path."""
        cdef cnp.ndarray a, res
        cdef int code, opc, nsteps, nd
        cdef Py_ssize_t nbytes, block
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef cnp.npy_intp dims[MAX_DIMS]
        if self.rs_limit == 0 or type(x) is not cnp.ndarray:
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
        block = nbytes // self.n
        nsteps = _plan_halving(plan, self.n, self.rank, block)
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_REDUCE_SCATTER, code, opc, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            memcpy(self.snap, cnp.PyArray_DATA(a), nbytes)
            memcpy(dims, cnp.PyArray_DIMS(a), nd * sizeof(cnp.npy_intp))
            dims[0] //= self.n
            descr = <object>cnp.PyArray_DESCR(a)
            Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
            res = PyArray_NewFromDescr(cnp.ndarray, <void*>descr, nd, dims, NULL, NULL, 0, None)
            self._execute(plan, nsteps, sfd, rfd, hdr, <char*>cnp.PyArray_DATA(a), <char*>cnp.PyArray_DATA(res),
                          nbytes, code, opc, x)
            memcpy(cnp.PyArray_DATA(res), self.snap + self.rank * block, block)
        finally:
            self.release()
        return res

    def all_gather(self, x):
        """all_gather(x) into a new array (the ring, or recursive doubling with gather_doubling);
        NotImplemented: take the Python path."""
        cdef Plan plan[MAX_STEPS]
        cdef int sfd[MAX_STEPS]
        cdef int rfd[MAX_STEPS]
        cdef int code, nsteps, nd
        cdef cnp.ndarray a, res
        cdef Py_ssize_t block
        cdef cnp.npy_intp dims[MAX_DIMS]
        if self.n > MAX_STEPS or type(x) is not cnp.ndarray:
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
        if self.gather_doubling:
            nsteps = _plan_doubling_gather(plan, self.n, self.rank, block)
        else:
            nsteps = _plan_ring_gather(plan, self.n, self.rank, block)
        if not self._claim(plan, nsteps, sfd, rfd):
            return NotImplemented
        try:
            hdr = self._begin(C_ALL_GATHER, code, 0, cnp.PyArray_SIZE(a), 0, self._shape_hash(a))
            if nd == 0:
                dims[0] = self.n
                nd = 1
            else:
                memcpy(dims, cnp.PyArray_DIMS(a), nd * sizeof(cnp.npy_intp))
                dims[0] *= self.n
            descr = <object>cnp.PyArray_DESCR(a)
            Py_INCREF(descr)  # PyArray_NewFromDescr steals a reference
            res = PyArray_NewFromDescr(cnp.ndarray, <void*>descr, nd, dims, NULL, NULL, 0, None)
            memcpy(<char*>cnp.PyArray_DATA(res) + self.rank * block, cnp.PyArray_DATA(a), block)
            self._execute(plan, nsteps, sfd, rfd, hdr, NULL, <char*>cnp.PyArray_DATA(res), block, code, -1, x)
        finally:
            self.release()
        return res


cdef inline double _clock(int kind) noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC if kind == 1 else CLOCK_THREAD_CPUTIME_ID, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline char* _ref(int ref, char* x, char* res, char* snap) noexcept nogil:
    if ref == R_X:
        return x
    if ref == R_RES:
        return res
    if ref == R_SNAP:
        return snap
    return NULL
