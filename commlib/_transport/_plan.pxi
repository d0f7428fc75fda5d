# Included in _io.pyx after Stepper: the one executor of schedules.
"""Run a plan (`commlib._plan`): every row of a collective with the GIL released once.

A row names its regions by slot and units; `_region` turns one into an
address and a length from the call's slot addresses and unit boundaries, and
`_fill` turns a STEP row into the step loop's `Step` (the group's constants
come from the channel's `Stepper`). `_execute` walks the rows from `at`:
COPY rows are memmoves, STEP rows run `_run`. It stops at the first status
other than OK and leaves `at` on that row, so the caller can connect a
missing peer (NEED_PEER), ask a slow peer where it is (SLOW) and resume the
same row with its progress kept, or turn the status into an error. The
one-call path (`_fast.pxi`) and the channel's Python driver
(`CollectiveChannel.run`) both call it; the unit tests' in-memory fake moves
bytes where `resolve()` says, which is `_region` too.
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from posix.time cimport CLOCK_THREAD_CPUTIME_ID

import commlib._plan as _planmod

cnp.import_array()

if _planmod.FIELDS != ("kind", "dst", "src", "send_slot", "send_lo", "send_hi", "recv_slot", "recv_lo", "recv_hi",
                       "init_slot", "flags"):
    raise ImportError("commlib._plan.FIELDS does not match the executor's Row struct")

cdef struct Row:  # one int32 row of a Plan, field for field as commlib._plan.FIELDS
    int kind
    int dst
    int src
    int send_slot
    int send_lo
    int send_hi
    int recv_slot
    int recv_lo
    int recv_hi
    int init_slot
    int flags

cdef enum:
    MAX_PARTS = 256   # units whose boundaries fit on the stack (the one-call path runs no more)

cdef int K_COPY = _planmod.COPY
cdef int NSLOTS_ = _planmod.NSLOTS
cdef int PF_REDUCE = _planmod.REDUCE
cdef int PF_SWAP = _planmod.SWAP
cdef int PF_RELAY_RECEIVED = _planmod.RELAY_RECEIVED
cdef int PF_RELAY_REDUCED = _planmod.RELAY_REDUCED
cdef int PF_SEND_LOCAL = _planmod.SEND_LOCAL
cdef int PF_RECV_LOCAL = _planmod.RECV_LOCAL
cdef int PF_INIT_LOCAL = _planmod.INIT_LOCAL
cdef int PF_FROM_RELAY = _planmod.FROM_RELAY
PLAN_SLOTS = _planmod.NSLOTS


cdef inline char* _region(const Py_ssize_t* slots, const Py_ssize_t* bounds, int slot, int lo, bint local) noexcept nogil:
    if slot < 0:
        return NULL
    return <char*>slots[slot] + (0 if local else bounds[lo])


cdef inline Py_ssize_t _span(const Py_ssize_t* bounds, int slot, int lo, int hi) noexcept nogil:
    return bounds[hi] - bounds[lo] if slot >= 0 else 0


cdef inline void _fill(Step* s, const Row* row, const Py_ssize_t* slots, const Py_ssize_t* bounds, int sfd, int rfd,
                       char* ring) noexcept nogil:
    """The row-dependent fields of a step (the constants and header are set once per plan)."""
    cdef char* dst
    cdef const char* init
    s.send_fd = sfd if row.dst >= 0 else -1
    s.send_hdr_len = 56 if s.send_fd >= 0 else 0
    s.send_buf = _region(slots, bounds, row.send_slot, row.send_lo, row.flags & PF_SEND_LOCAL)
    s.send_len = _span(bounds, row.send_slot, row.send_lo, row.send_hi)
    s.recv_fd = rfd if row.src >= 0 else -1
    s.recv_hdr_len = 56 if s.recv_fd >= 0 or s.recv_fd == FD_MEM_ else 0
    s.recv_len = _span(bounds, row.recv_slot, row.recv_lo, row.recv_hi)
    s.swap = (row.flags & PF_SWAP) != 0
    s.relay = (RELAY_RECEIVED if row.flags & PF_RELAY_RECEIVED else
               RELAY_REDUCED if row.flags & PF_RELAY_REDUCED else RELAY_NONE)
    dst = _region(slots, bounds, row.recv_slot, row.recv_lo, row.flags & PF_RECV_LOCAL)
    if row.flags & PF_REDUCE:
        s.reduce_dst = dst
        s.recv_buf = ring
        init = _region(slots, bounds, row.init_slot, row.recv_lo, row.flags & PF_INIT_LOCAL)
        s.init_src = init if init != dst else NULL  # in place: X and RES are one buffer
    else:
        s.reduce_dst = NULL
        s.init_src = NULL
        s.recv_buf = dst


cdef inline void _put_nbytes(char* hdr, Py_ssize_t n) noexcept nogil:
    """A header's nbytes field (offset 48, little-endian 64 bits: _wire's layout)."""
    cdef int i
    cdef unsigned long long v = <unsigned long long>n
    for i in range(8):
        hdr[48 + i] = <char>((v >> (8 * i)) & 0xFF)


cdef int _execute(Stepper st, const Row* rows, int nrows, int* at, const Py_ssize_t* slots, const Py_ssize_t* bounds,
                  const int* sfd, const int* rfd, const char* hdr, int dtype, int op, double deadline, bint resume,
                  long long* nogil_ns, int timing) noexcept nogil:
    """Run rows[at[0]:] (see the section comment); returns a status, `at` the row it stopped on."""
    cdef Step s
    cdef const Row* row
    cdef char send_hdr[56]
    cdef char expect_hdr[56]
    cdef int k = at[0], rc = ST_OK
    cdef long long* state = &st._state[0]
    cdef char* dst
    cdef const char* src
    cdef Py_ssize_t n
    cdef double t0 = _clock(timing) if timing else 0.0
    st._bind(&s, deadline)
    # each message's header is the collective's with the message's payload length in `nbytes`: a
    # receiver that reads another group's message on a shared connection knows how long it is
    memcpy(send_hdr, hdr, 56)
    memcpy(expect_hdr, hdr, 56)
    s.send_hdr = send_hdr  # (expect_hdr is set per row: a row reading another group's payload has none)
    s.recv_hdr = <char*>st.rhdr_ptr
    s.dtype = dtype
    s.op = op if op >= 0 else 0
    s.item = itemsize_of(dtype) if op >= 0 else 1
    if s.item <= 0:
        s.item = 1
    while k < nrows:
        row = &rows[k]
        if row.kind == K_COPY:
            dst = _region(slots, bounds, row.recv_slot, row.recv_lo, row.flags & PF_RECV_LOCAL)
            src = _region(slots, bounds, row.send_slot, row.send_lo, row.flags & PF_SEND_LOCAL)
            n = _span(bounds, row.recv_slot, row.recv_lo, row.recv_hi)
            if n > 0 and dst != src:
                memmove(dst, src, n)
            k += 1
            continue
        if (row.dst >= 0 and sfd[k] < 0) or (row.src >= 0 and rfd[k] < 0 and rfd[k] != FD_MEM_):
            rc = ST_NEED_PEER
            break
        if not resume:
            state[0] = state[1] = state[2] = state[3] = 0
        resume = False
        _fill(&s, row, slots, bounds, sfd[k], rfd[k], <char*>st.ring_ptr)
        _put_nbytes(send_hdr, s.send_len)
        _put_nbytes(expect_hdr, s.recv_len)
        s.expect_hdr = expect_hdr
        s.lane_send = (row.flags & (PF_RELAY_RECEIVED | PF_RELAY_REDUCED)) != 0
        s.lane_recv = (row.flags & PF_FROM_RELAY) != 0
        s.draining = st.drain_ptr != NULL
        if s.draining:  # another group's payload comes first: read it, send what is ours meanwhile
            s.recv_buf, s.recv_len = st.drain_ptr, st.drain_len
            s.reduce_dst = s.init_src = NULL
            s.expect_hdr = NULL
            if s.relay != RELAY_NONE:  # a relay's payload is what this row has yet to receive
                s.send_len = state[0] - s.send_hdr_len if state[0] > s.send_hdr_len else 0
                s.relay = RELAY_NONE
        st._learn_peer(&s)
        rc = _run(&s)
        if rc != ST_OK:
            break
        k += 1
    at[0] = k
    if timing:
        nogil_ns[0] += <long long>((_clock(timing) - t0) * 1e9)
    return rc


cdef inline double _clock(int kind) noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC if kind == 1 else CLOCK_THREAD_CPUTIME_ID, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef int _bounds_even(Py_ssize_t* b, Py_ssize_t count, Py_ssize_t item, int parts) noexcept nogil:
    """`parts` near-equal blocks of count elements (the first count % parts one longer), in bytes."""
    cdef Py_ssize_t base = count // parts, extra = count % parts
    cdef int i
    for i in range(parts + 1):
        b[i] = (i * base + (i if i < extra else extra)) * item
    return 0


cdef int _peer_fds(const Row* rows, int nrows, dict fds, list out_keys, list in_keys, int* sfd, int* rfd) except -1:
    """Each row's descriptors from the endpoint's table (-1: no such side, -2: not connected yet);
    returns the number of rows whose peer is not connected. The key lists hold the shared
    connections' keys for ranks 0..n-1, then the group's lanes' (a relayed message's, both ends)."""
    cdef int k, missing = 0, n = len(out_keys) // 2
    cdef object fd
    for k in range(nrows):
        sfd[k] = rfd[k] = -1
        if rows[k].dst >= 0:
            fd = fds.get(out_keys[rows[k].dst + (n if rows[k].flags & (PF_RELAY_RECEIVED | PF_RELAY_REDUCED) else 0)])
            sfd[k] = -2 if fd is None else <int>fd
            missing += fd is None
        if rows[k].src >= 0:
            fd = fds.get(in_keys[rows[k].src + (n if rows[k].flags & PF_FROM_RELAY else 0)])
            rfd[k] = -2 if fd is None else <int>fd
            missing += fd is None
    return missing


cdef const Row* _rows(object rows, int* nrows) except NULL:
    """The Row array of a Plan's int32 (k, FIELDS) table."""
    cdef cnp.ndarray a = <cnp.ndarray?>rows
    if (cnp.PyArray_TYPE(a) != cnp.NPY_INT32 or cnp.PyArray_NDIM(a) != 2 or cnp.PyArray_DIMS(a)[1] != 11
            or not cnp.PyArray_IS_C_CONTIGUOUS(a)):
        raise ValueError("not a plan's row table")
    nrows[0] = <int>cnp.PyArray_DIMS(a)[0]
    return <const Row*>cnp.PyArray_DATA(a) if nrows[0] else <const Row*>&_no_row


cdef Row _no_row


cdef int _check_plan(const Row* rows, int nrows, int nparts, int nbounds) except -1:
    """Every slot known and every region inside the units given (run before a Python-path plan; a peer
    outside the group fails its descriptor look-up)."""
    cdef int k
    cdef const Row* r
    if nbounds != nparts + 1:
        raise ValueError(f"the plan has {nparts} units but {nbounds} bounds were given")
    for k in range(nrows):
        r = &rows[k]
        if r.send_slot >= NSLOTS_ or r.recv_slot >= NSLOTS_ or r.init_slot >= NSLOTS_:
            raise ValueError(f"plan row {k} names a slot out of range")
        if not (0 <= r.send_lo <= r.send_hi <= nparts and 0 <= r.recv_lo <= r.recv_hi <= nparts):
            raise ValueError(f"plan row {k} names units out of range")
    return 0


def execute(Stepper st not None, plan_rows, int nparts, slots, bounds, int[::1] sfd, int[::1] rfd, bytes hdr,
            int dtype, int op, double deadline, int at, bint resume):
    """Run a plan's rows from row `at` (the Python path's driver, `CollectiveChannel.run`).

    slots: the slots' addresses (PLAN_SLOTS ints, 0 for unused); bounds: int64 unit boundaries in
    bytes (nparts + 1), or (count, item) for nparts near-equal blocks (`_plan.even`), computed here;
    sfd/rfd: each row's descriptors (`peer_fds`). Returns (status, row it stopped on).
    """
    cdef int nrows, k, rc
    cdef const Row* rows = _rows(plan_rows, &nrows)
    cdef Py_ssize_t addr[8]
    cdef Py_ssize_t stack[MAX_PARTS + 1]
    cdef Py_ssize_t* even = NULL
    cdef const long long[::1] b
    cdef const Py_ssize_t* bp
    cdef const char* h
    cdef const int* sp
    cdef const int* rp
    if len(slots) != NSLOTS_ or sfd.shape[0] < nrows or rfd.shape[0] < nrows or PyBytes_GET_SIZE(hdr) != 56:
        raise ValueError("bad plan arguments")
    if sizeof(long long) != sizeof(Py_ssize_t):
        raise ValueError("unsupported platform")
    if nparts < 1:
        raise ValueError(f"a plan of {nparts} units")
    if type(bounds) is tuple:
        count, item = bounds
        if count < 0 or item < 1:
            raise ValueError(f"bad units: {count} elements of {item} bytes")
        _check_plan(rows, nrows, nparts, nparts + 1)
        if nparts <= MAX_PARTS:
            bp = stack
        else:
            even = <Py_ssize_t*>PyMem_Malloc((nparts + 1) * sizeof(Py_ssize_t))
            if even == NULL:
                raise MemoryError()
            bp = even
        _bounds_even(<Py_ssize_t*>bp, count, item, nparts)
    else:
        b = bounds
        _check_plan(rows, nrows, nparts, b.shape[0])
        bp = <const Py_ssize_t*>&b[0]
    for k in range(NSLOTS_):
        addr[k] = slots[k]
    h = PyBytes_AS_STRING(hdr)
    sp = &sfd[0] if sfd.shape[0] else NULL
    rp = &rfd[0] if rfd.shape[0] else NULL
    try:
        with nogil:
            rc = _execute(st, rows, nrows, &at, addr, bp, sp, rp, h, dtype, op, deadline, resume, NULL, 0)
    finally:
        PyMem_Free(even)
    return rc, at


def peer_fds(plan_rows, dict fds, list out_keys, list in_keys, int[::1] sfd, int[::1] rfd):
    """Fill sfd/rfd with each row's descriptors (-2 where the peer is not connected yet); returns how many are not."""
    cdef int nrows
    cdef const Row* rows = _rows(plan_rows, &nrows)
    if sfd.shape[0] < nrows or rfd.shape[0] < nrows:
        raise ValueError("descriptor arrays shorter than the plan")
    if nrows == 0:
        return 0
    return _peer_fds(rows, nrows, fds, out_keys, in_keys, &sfd[0], &rfd[0])


def resolve(plan_rows, slots, bounds):
    """What each row does, with the executor's own address arithmetic (for tests and the in-memory fake):
    ("copy", dst, src, nbytes) or ("step", dst, send_ptr, send_len, src, recv_ptr, recv_len, reduce_dst,
    init, swap, relay) with ranks None where a side is absent and addresses 0 where a region is."""
    cdef int nrows, k
    cdef const Row* rows = _rows(plan_rows, &nrows)
    cdef Py_ssize_t addr[8]
    cdef const long long[::1] b = bounds
    cdef const Py_ssize_t* bp = <const Py_ssize_t*>&b[0]
    cdef Step s
    cdef const Row* row
    for k in range(NSLOTS_):
        addr[k] = slots[k]
    out = []
    for k in range(nrows):
        row = &rows[k]
        if row.kind == K_COPY:
            out.append(("copy", <Py_ssize_t>_region(addr, bp, row.recv_slot, row.recv_lo, row.flags & PF_RECV_LOCAL),
                        <Py_ssize_t>_region(addr, bp, row.send_slot, row.send_lo, row.flags & PF_SEND_LOCAL),
                        _span(bp, row.recv_slot, row.recv_lo, row.recv_hi)))
            continue
        _fill(&s, row, addr, bp, 0, 0, NULL)
        out.append(("step", row.dst if row.dst >= 0 else None, <Py_ssize_t>s.send_buf, s.send_len,
                    row.src if row.src >= 0 else None, 0 if s.reduce_dst != NULL else <Py_ssize_t>s.recv_buf,
                    s.recv_len, <Py_ssize_t>s.reduce_dst, <Py_ssize_t>s.init_src, bool(s.swap),
                    {RELAY_NONE: None, RELAY_RECEIVED: "received", RELAY_REDUCED: "reduced"}[s.relay]))
    return out
