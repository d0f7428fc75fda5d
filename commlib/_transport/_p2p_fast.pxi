# Included at the end of _io.pyx, after _fast.pxi (it uses its dtype table helpers and _now()).
"""The one-call point-to-point path: a send or receive made by the calling thread in one call.

Every blocking send, and every blocking receive of a known size from a named
source, runs here when nothing is queued, half read or driven by another thread
(`P2PFast._may_call()`: receives posted elsewhere, a window's service, are no
obstacle; a receive's group must have none posted), and so
does every isend of at most the eager size (`isend`, `isend_bytes`): an isend
the connection takes whole returns a completed Request; one it does not stops after the step's spin (never waiting
for the receiver) and its rest is queued from a copy, so the caller may reuse
its buffer at once. The
header from the one header cache, the engine lock, the checks that nothing
else is queued (then the calling thread may own the connection), and steps
of the C loop with the GIL released, straight between the connection and
the user's buffer. Two entry points share that core: `send(x, dst, tag)` /
`recv(shape, dtype, src, tag)` take the API's common case (a C-contiguous
native NumPy array, a named peer, a plain tag) before any Python runs, and
`send_bytes` / `recv_bytes` take the engine's blocking calls (any buffer,
dtype code and size, from `commlib._engine`).

Anything it does not take returns NotImplemented before any byte moves, and
the engine queues or posts it (and raises whatever error the arguments
deserve). A step that stalls is not handled here: a send's rest (all of it
where the receiver took no byte) is queued first in line through the engine
(`_fast_send_queue`), whose loop reads incoming frames while it waits, so
ranks that send to each other at once never wait on each other; a receive hands its claimed
connection and the step's status to the engine's loop (`_fast_recv_rest`),
and a failed step raises through the transport's `_raise`.
"""
from numpy import dtype as np_dtype


_U8 = np_dtype("uint8")
_NO_FRAME = bytes(HEADER_LEN)  # a header no frame carries (its magic is zero): a step "expecting" it reads any header
cdef unsigned long long MAX_SIZED_NBYTES = 1ULL << 46  # _wire.MAX_FRAME_NBYTES


cdef inline unsigned long long _le(const unsigned char* p, int n) noexcept nogil:
    """The n-byte little-endian unsigned integer at p (the header's byte order on every host)."""
    cdef unsigned long long v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


# how long a wait on a posted receive keeps its one-call step (and the engine's lock) for its frame
# before the engine's loop, which serves every connection, waits instead: a peer's prompt answer
# (a ping-pong's, a server's) comes well within it; the progress thread defers as long (DEFER_S)
cdef double POSTED_STEP_S = 0.001
# how stale a send's note in the transport's `used` (when a peer's connection was last used, for the
# idle closer, whose clock is IDLE_S: a second) may be
cdef double USED_NOTE_S = 0.001


cdef inline Py_ssize_t _count_of(int code, Py_ssize_t nbytes):
    """The element count of nbytes of wire dtype `code` (DT_BYTES: bytes); -1 for a code of no known size."""
    cdef Py_ssize_t itemsize
    if code == 255:  # DT_BYTES
        return nbytes
    itemsize = itemsize_of(code)
    return nbytes // itemsize if itemsize > 0 else -1


cdef class P2PFast:
    """One group's blocking send/recv. Built by the engine once per group context with a transport."""

    cdef RLock lock  # the engine's (commlib._lock): taken twice a call, from C
    cdef object engine, ctx, matcher, ep, notices, adopt, conn_gid, caller_at_work
    cdef object p2p_state, p2p_raise, send_queue, recv_rest, header, empty, limit_incoming, save_step
    cdef object unpost, repost
    # the engine's and the transport's tables (bound once, changed in place): read here as dicts and sets
    cdef dict conns_in, conns_out, last_tag, fds, used, acks
    cdef set partial, closing
    cdef Stepper stepper
    cdef list out_keys  # group rank -> the key of its outgoing point-to-point connection in `fds`
    # the header of the last plain send and of the last plain receive, and what it holds: a program
    # that sends or receives the same kind of message again (a loop) builds no key to look it up
    cdef object send_hdr, recv_hdr
    cdef long send_key[5]
    cdef long recv_key[5]
    cdef object completed
    cdef list world
    cdef int n, rank
    cdef Py_ssize_t max_in
    cdef unsigned int gid
    cdef double timeout
    cdef Py_ssize_t limit
    cdef dict hdrs, dtypes, whats
    cdef WireCodes codes
    # per group rank: when a send to it last noted `used` (the idle closer's clock, noted at most every
    # USED_NOTE_S), the tag last noted in `last_tag` by a receive from it, and that entry's key
    cdef double* used_at
    cdef long* noted_tag
    cdef list tag_keys
    # the last call's description and the notice a blocked receive shows (kind, tag, peer) -> both
    cdef object last_kind, last_what, last_current
    cdef long last_what_tag, last_current_src

    def __init__(self, engine, ctx, p2p, fds, Py_ssize_t limit, dtype_code, bf16, header):
        import numpy as np
        self.engine, self.lock, self.caller_at_work = engine, engine.lock, engine._caller_at_work
        self.acks, self.partial, self.closing = engine._acks, engine._partial, engine._closing
        self.completed = engine.completed  # the Request of an isend done in its own call
        self.conns_in, self.conns_out, self.last_tag = engine._in, engine._out, engine._last_tag
        self.send_queue, self.recv_rest, self.adopt = engine._fast_send_queue, engine._fast_recv_rest, engine._adopt
        self.unpost = engine._unpost  # (lock held) a posted receive leaves its queue: its frame is being read
        self.repost = engine._repost  # (lock held) ... and goes back to its head: the engine serves it
        self.limit_incoming, self.max_in = engine._limit_incoming, p2p.max_connections
        self.ctx, self.matcher = ctx, ctx.matcher
        self.world = list(ctx.world)
        self.n, self.rank, self.gid, self.timeout = len(ctx.world), ctx.rank, ctx.gid, ctx.timeout
        self.stepper, self.p2p_state, self.p2p_raise, self.save_step = p2p.stepper, p2p.state, p2p._raise, p2p.save_step
        self.ep, self.notices, self.fds, self.used = p2p.ep, p2p.ep.notices, fds, p2p.used
        self.conn_gid = p2p.conn_gid  # the group key of every group's connections (sockets.SHARED_GID)
        self.limit, self.header, self.empty = limit, header, np.empty
        self.hdrs, self.dtypes, self.whats = {}, {}, {}
        _wire_codes_fill(&self.codes, dtype_code, bf16)
        self.out_keys = [(self.conn_gid, 1, w, 1) for w in self.world]  # CH_P2P, outgoing
        self.send_hdr = self.recv_hdr = None
        self.used_at = <double*>PyMem_Calloc(self.n, sizeof(double))
        self.noted_tag = <long*>PyMem_Malloc(self.n * sizeof(long))
        if self.used_at == NULL or self.noted_tag == NULL:
            raise MemoryError()
        for i in range(self.n):
            self.noted_tag[i] = -2  # (no tag is -2: the first receive notes its tag)
        self.tag_keys = [(self.gid, i) for i in range(self.n)]
        self.last_kind = self.last_current = None

    def __dealloc__(self):
        PyMem_Free(self.used_at)
        PyMem_Free(self.noted_tag)

    cdef bint _may_call(self) except -1:
        """(lock held) Whether a one-call send or receive may own a connection now: nothing is queued
        to write, awaits an acknowledgement or is half read, and no other thread drives progress.
        Receives posted (a window's service, a pending irecv) are no obstacle: a one-call receive
        takes only its own frame, where its group has no receive posted (the caller checks), and
        hands any other frame to the engine. A caller at work here counts as one driving progress:
        the engine's thread defers to it (DEFER_S) and leaves a wait it is in."""
        e = self.engine
        if self.acks or self.partial or self.closing or e.n_sending:
            return False
        if e.n_posted:
            if e._driver is not None:
                return False
            self.caller_at_work()
        return True

    cdef inline void _note_used(self, long d, object dst_w, double now):
        """(lock held) The idle closer's record that a send to group rank d began now, at most every
        USED_NOTE_S a peer: its clock is seconds (IDLE_S), and a dict entry a message cost as much as
        the rest of a small send."""
        if now - self.used_at[d] >= USED_NOTE_S:
            self.used_at[d] = now
            self.used[dst_w] = now

    cdef inline void _note_tag(self, long s, long t):
        """(lock held) The tag of the frame just received from group rank s, for an ANY_TAG receive's
        expected header (a hint: the engine's own receives note theirs in the same dict)."""
        if self.noted_tag[s] != t:  # (a hint: an entry the engine changed meanwhile costs a slow receive)
            self.noted_tag[s] = t
            self.last_tag[self.tag_keys[s]] = t

    cdef object _current(self, object what, long s, object src_w):
        """The notice `(what, src world rank, None)` a blocked receive shows (the last one reused)."""
        if self.last_current is None or self.last_current_src != s or self.last_current[0] is not what:
            self.last_current = (what, src_w, None)
            self.last_current_src = s
        return self.last_current

    cdef object _what(self, str kind, long tag):
        if kind is self.last_kind and tag == self.last_what_tag:  # (a loop: the same call again)
            return self.last_what
        w = self._what_lookup(kind, tag)
        self.last_kind, self.last_what_tag, self.last_what = kind, tag, w
        return w

    cdef object _what_lookup(self, str kind, long tag):
        key = (kind, tag)
        w = self.whats.get(key)
        if w is None:
            if len(self.whats) > 1024:
                self.whats.clear()
            w = self.whats[key] = f"{kind}(tag={tag if tag >= 0 else 'ANY_TAG'})"
        return w

    cdef object _last_header(self, bint send, long source, long tag, int code, Py_ssize_t count,
                             Py_ssize_t nbytes):
        """_header() of a plain message, remembering the last one of each direction."""
        cdef long* k = &self.send_key[0]
        if not send:
            k = &self.recv_key[0]
        last = self.send_hdr if send else self.recv_hdr
        if last is not None and k[0] == source and k[1] == tag and k[2] == code and k[3] == count and k[4] == nbytes:
            return last
        hdr = self._header(source, tag, code, count, nbytes, 0)
        k[0] = source
        k[1] = tag
        k[2] = code
        k[3] = count
        k[4] = nbytes
        if send:
            self.send_hdr = hdr
        else:
            self.recv_hdr = hdr
        return hdr

    cdef object _header(self, long source, long tag, int code, Py_ssize_t count, Py_ssize_t nbytes, int flags):
        """The header of a plain message (source = this rank for a send, the sender for a receive):
        the one cache of them, keyed by what it holds."""
        if flags:
            return self.header(group=self.gid, source=source, tag=tag, dtype=code, count=count, nbytes=nbytes,
                               flags=flags)
        key = (source, tag, code, count, nbytes)
        hdr = self.hdrs.get(key)
        if hdr is None:
            if len(self.hdrs) > 1024:  # bounded: programs with ever-new tags or sizes
                self.hdrs.clear()
            hdr = self.hdrs[key] = self.header(group=self.gid, source=source, tag=tag, dtype=code, count=count,
                                               nbytes=nbytes)
        return hdr

    cdef object _post(self, object fd, long d, long t, int code, Py_ssize_t count, int flags, object buf,
                      Py_ssize_t ptr, Py_ssize_t nbytes, object what, bint block, bint trim=False):
        """Steps sending the frame; NotImplemented when other work is queued first. Blocking: None once
        sent. Not (an isend): a completed Request when the connection took the whole frame, else the
        Request of its rest, queued first in line from a copy of the data (the caller may reuse its
        buffer at once) after the step's spin: an isend never waits for a receiver that does not read."""
        cdef int rc
        cdef double now
        cdef bytearray copy
        dst_w = self.world[d]
        hdr = self._header(self.rank, t, code, count, nbytes, flags) if flags else \
            self._last_header(True, self.rank, t, code, count, nbytes)
        now = cl_coarse_now()
        self.lock.enter()
        try:
            if not self._may_call():
                return NotImplemented
            out = self.conns_out.get(dst_w)
            if out is not None and out.queue:
                return NotImplemented
            open_fd = self.fds.get(self.out_keys[d])  # (fd None: the caller's is the one open now)
            if open_fd is None or fd is not None and open_fd != fd:
                return NotImplemented  # (closed for being idle since the caller took it; or never opened)
            self._note_used(d, dst_w, now)
            # (a blocking send's bound, from its call; an isend takes what the connection takes now)
            rc = self.stepper.raw_step(open_fd, hdr, ptr, nbytes, -1, 0, 0, now + self.timeout if block else now,
                                       False, None)
            if rc == ST_OK:
                return None if block else self.completed(what)
            if rc != ST_SLOW and (block or rc != ST_TIMEOUT):
                self.p2p_raise(rc, what, dst_w, None, nbytes)
            # stuck, mid-frame or before its first byte (the receiver is not reading): the engine writes
            # the rest, first in line, and reads what arrives while a blocking caller waits, so two ranks
            # stuck sending to each other (a full buffer each way) both go on
            if not block:
                copy = bytearray(nbytes)
                if nbytes:
                    memcpy(<char*>copy, <const char*>_ptr(ptr), nbytes)
                buf = copy
            if trim:  # (a buffer longer than the message: the engine writes the message's bytes only)
                buf = memoryview(buf).cast("B")[:nbytes]
            req = self.send_queue(self.ctx, d, buf, nbytes, t, code, count, flags, what, int(self.p2p_state[0]))
        finally:
            self.lock.leave()
        if not block:
            return req
        req.wait()
        return None

    cdef object _post_array(self, x, dst, tag, bint block, int wire=-1, str kind=None):
        """A send of x (a C-contiguous native NumPy array of at most the eager size) to group rank dst:
        as _post; NotImplemented for anything else (the Python path takes it). wire: the message's dtype
        code where the caller names it (commlib.MPI's datatype), else x's dtype's."""
        cdef cnp.ndarray a
        cdef long d, t
        cdef Py_ssize_t nbytes
        cdef int code
        if type(x) is not cnp.ndarray or type(dst) is not int or type(tag) is not int:
            return NotImplemented
        if not 0 <= dst < self.n or not 0 <= tag <= 0x7FFFFFFF:
            return NotImplemented
        d, t = dst, tag
        a = <cnp.ndarray>x
        nbytes = cnp.PyArray_NBYTES(a)
        if d == self.rank or nbytes > self.limit or not cnp.PyArray_IS_C_CONTIGUOUS(a) \
                or not cnp.PyArray_ISNOTSWAPPED(a):
            return NotImplemented
        code = wire if wire >= 0 else _wire_code(&self.codes, cnp.PyArray_TYPE(a))
        if code < 0:
            return NotImplemented
        if self.ep.failure is not None:
            return NotImplemented
        return self._post(None, d, t, code, cnp.PyArray_SIZE(a), 0, a, <Py_ssize_t>cnp.PyArray_DATA(a), nbytes,
                          self._what(kind or ("send" if block else "isend"), t), block)

    cdef bint _first_in_line(self, posted, long s, long t):
        """(lock held) Whether the posted receive `posted` (of tag t from group rank s) is still posted and
        takes the next frame of its group from s that is (s, t): no receive or probe posted before it
        could match that frame. A receive of any tag is first in line only with nothing posted before
        it for that sender at all (the step expects the sender's last tag, and another tag may come:
        the receive then goes back to the head of the queue, which must be where it was for s)."""
        cdef long ps, pt
        cdef bint any_tag = posted.tag == -1  # (ANY_TAG)
        for p in self.matcher.posted:
            if p is posted:
                return True
            ps, pt = p.source, p.tag
            if ps != s and ps != -1:  # (ANY_SOURCE) another sender's
                continue
            if any_tag or pt == t or pt == -1 and t >= 0:
                return False
        return False

    cdef object _recv(self, long s, long t, int code, Py_ssize_t count, Py_ssize_t nbytes, object out,
                      Py_ssize_t ptr, object what, double deadline, object posted=None):
        """A step receiving the frame into out; out when received, NotImplemented when the engine must serve it.
        posted: the receive's Posted entry where it was posted first (a wait on an irecv): it must be
        first in line for s in its group, and leaves the posted queue while its frame is read."""
        cdef int rc = ST_OK
        # A posted receive's wait steps for its frame POSTED_STEP_S at most (not the blocking path's
        # slice): while this step holds the engine's lock nobody serves the other connections (a
        # window's requests, another group's frames), and a wait in the engine's loop serves them all.
        cdef double step_deadline = deadline if posted is None else min(deadline, _now() + POSTED_STEP_S)
        src_w = self.world[s]
        expect = self._last_header(False, s, t, code, count, nbytes)
        self.lock.enter()
        try:
            if len(self.conns_in) > self.max_in:  # over the incoming limit: ask senders to close idle ones
                self.limit_incoming()
            conn = self.conns_in.get(src_w)
            if conn is None:
                conn = self.adopt(src_w)
            if conn is None or conn.busy or self.matcher.unexpected:
                return NotImplemented
            if (self.matcher.posted if posted is None else not self._first_in_line(posted, s, t)) or not self._may_call():
                return NotImplemented
            if posted is not None:  # out of matching while its frame is read (the engine's rest puts it back)
                self.unpost(self.ctx, posted)
            # a frame already there is read with the GIL and the lock held, nobody the wiser; one to wait
            # for, with the connection marked (the engine keeps off it until the receive is done) and
            # the wait noted (what a peer's failure reports this rank blocked in)
            rc = self.stepper.raw_step(-1, b"", 0, 0, conn.fd, ptr, nbytes, step_deadline, False, expect, True)
            if rc != ST_OK:
                conn.busy = True
            if rc == ST_AGAIN:
                self.notices.current = self._current(what, s, src_w)
                try:
                    rc = self.stepper.raw_step(-1, b"", 0, 0, conn.fd, ptr, nbytes, step_deadline, True, expect)
                finally:
                    self.notices.current = None
            if rc == ST_OK:
                conn.busy = False
                conn.last = cl_coarse_now()  # (the incoming limit's idea of when it was last used)
                self._note_tag(s, t)
                return out
            if posted is not None and rc == ST_TIMEOUT:
                if self.stepper._state[S_RECVD] == 0:  # nothing came within the spin: the engine waits
                    conn.busy = False
                    self.repost(self.ctx, posted)
                    return NotImplemented
                rc = ST_SLOW  # mid-frame: the frame is read to its end (from where the step stopped)
            saved = self.save_step()  # (another thread's step may use the stepper once the lock is let go)
        finally:
            self.lock.leave()
        # not in one step (another frame first, a slow sender, an error): the engine's loop goes on
        return self.recv_rest(self.ctx, conn, s, src_w, t, expect, out, nbytes, what, deadline, rc, saved, posted)

    def send_bytes(self, conn, buf, Py_ssize_t ptr, Py_ssize_t nbytes, long dst, long tag, int code,
                   Py_ssize_t count, int flags, what):
        """Blocking send of the nbytes at ptr (those of buf, a uint8 buffer) to group rank dst over
        Outgoing conn; None when sent, NotImplemented: queue it."""
        return self._post(conn.fd, dst, tag, code, count, flags, buf, ptr, nbytes, what, True)

    def isend_bytes(self, conn, buf, Py_ssize_t ptr, Py_ssize_t nbytes, long dst, long tag, int code,
                    Py_ssize_t count, int flags, what):
        """Non-blocking send of the nbytes at ptr (those of buf, at most the eager size) to group rank dst
        over Outgoing conn: its Request (complete where the connection took it whole), NotImplemented:
        queue it."""
        if nbytes > self.limit:
            return NotImplemented
        return self._post(conn.fd, dst, tag, code, count, flags, buf, ptr, nbytes, what, False)

    def recv_bytes(self, into, Py_ssize_t ptr, Py_ssize_t nbytes, long src, long tag, int code, what):
        """Blocking receive from group rank src of the plain frame of nbytes (tag, dtype code) into
        `into` (a writable uint8 buffer at ptr): its element count once received, NotImplemented: post it."""
        cdef Py_ssize_t count = _count_of(code, nbytes)
        if count < 0:
            return NotImplemented
        if self._recv(src, tag, code, count, nbytes, into, ptr, what, cl_coarse_now() + self.timeout) is NotImplemented:
            return NotImplemented
        return count

    def recv_posted(self, posted, into, Py_ssize_t ptr, Py_ssize_t nbytes, long src, long tag, int code, what,
                    double deadline):
        """A wait on the posted receive `posted` (its plain frame of nbytes from group rank src with this
        tag and dtype code, into `into` at ptr) by the same steps, where it is first in line for src
        in its group: its element count once received (it has left the posted queue then; the caller
        completes it), NotImplemented: the engine serves it (still posted, or taken meanwhile)."""
        cdef Py_ssize_t count = _count_of(code, nbytes)
        if count < 0:
            return NotImplemented
        if self._recv(src, tag, code, count, nbytes, into, ptr, what, deadline, posted) is NotImplemented:
            return NotImplemented
        return count

    def recv_sized(self, long s, long t, what):
        """A blocking receive from group rank s (tag t, or -1: any tag of the user's) of a plain frame of
        any size (commlib.MPI's recv() of an object): its header's step, a buffer of the size it
        announces, the payload's step, in one call. Returns
          ("done", tag, dtype code, count, payload)  received whole (payload: a new uint8 array);
          ("header", conn, status, saved)            the header's step stopped midway (or found nothing
                                                     within its slice): the engine goes on (`_read_sized`);
          ("payload", conn, (tag, code, count, nbytes), payload, status, saved)  ... the payload's step did;
          None                                       a frame that is not this receive's came first: the
                                                     engine took it over, the caller posts the receive;
          NotImplemented                             nothing read: the engine serves it.
        In the two continuations the connection stays claimed (busy) for the caller, the stepper's state
        in `saved`."""
        cdef int rc
        cdef const unsigned char* h
        cdef unsigned long long nbytes, count
        cdef long long htag
        cdef int code, flags
        cdef double deadline = _now() + self.timeout
        cdef cnp.ndarray payload
        if s == self.rank or not 0 <= s < self.n or t < -1 or self.ep.failure is not None:
            return NotImplemented
        src_w = self.world[s]
        self.lock.enter()
        try:
            if len(self.conns_in) > self.max_in:
                self.limit_incoming()
            conn = self.conns_in.get(src_w)
            if conn is None:
                conn = self.adopt(src_w)
            if conn is None or conn.busy or self.matcher.unexpected or self.matcher.posted or not self._may_call():
                return NotImplemented
            conn.busy = True
            self.notices.current = (what, src_w, None)
            try:
                rc = self.stepper.raw_step(-1, b"", 0, 0, conn.fd, 0, 0, deadline, False, _NO_FRAME)
            finally:
                self.notices.current = None
            if rc != ST_MISMATCH:  # (ST_OK cannot be: no frame's header is all zeros)
                return ("header", conn, rc, self.save_step())
            h = <const unsigned char*>self.stepper.rhdr_ptr
            flags = h[9]
            code = h[7]
            htag = <long long>_le(h + 32, 8)
            count, nbytes = _le(h + 40, 8), _le(h + 48, 8)
            if (memcmp(h, b"CMLB", 4) != 0 or h[4] != WIRE_VERSION or h[5] != WIRE_KIND_P2P or h[6] != 0
                    or h[8] != 0 or flags & ~1 or _le(h + 12, 4) != self.gid or <long>(<int>_le(h + 16, 4)) != s
                    or not (htag == t or t == -1 and htag >= 0) or nbytes > MAX_SIZED_NBYTES
                    or code != 255 and itemsize_of(code) <= 0):
                # not a plain frame of this receive's (another tag or group, an issend's, an acknowledgement,
                # or no frame at all): the engine reads it from here, and matches or refuses it
                conn.busy = False
                self.engine._hand_over(conn, bytes(self.stepper.rhdr))
                return None
            self._note_tag(s, htag)
            payload = self.empty(nbytes, _U8)
            if nbytes:
                self.notices.current = (what, src_w, None)
                try:
                    rc = self.stepper.raw_step(-1, b"", 0, 0, conn.fd, <Py_ssize_t>cnp.PyArray_DATA(payload),
                                               nbytes, deadline, False, None)
                finally:
                    self.notices.current = None
                if rc != ST_OK:
                    return ("payload", conn, (htag, code, count, nbytes), payload, rc, self.save_step())
            conn.busy = False
            conn.last = _now()
            return ("done", htag, code, count, payload)
        finally:
            self.lock.leave()

    def send(self, x, dst, tag):
        """Blocking send of x to group rank dst; None when sent, NotImplemented: take the Python path."""
        return self._post_array(x, dst, tag, True)

    def send_wire(self, x, dst, tag, int wire, str kind):
        """Blocking send of x (commlib.MPI's Send of an array; send() of a pickle, a uint8 array, as
        DT_BYTES) to group rank dst as a message of dtype code `wire`, its count x's size (kind: the call,
        for errors); None when sent, NotImplemented: take the Python path."""
        return self._post_array(x, dst, tag, True, wire, kind)

    def recv_wire(self, out, long src, long tag, int wire):
        """Blocking receive (commlib.MPI's Recv) into `out` (a C-contiguous writable NumPy array) from
        group rank src of a message of exactly its bytes and dtype code `wire`, with tag >= 0 or -1 (any
        of the user's, `_recv_tagged`): the tag received, NotImplemented: take the Python path (which
        matches whatever came instead)."""
        cdef cnp.ndarray a
        if type(out) is not cnp.ndarray:
            return NotImplemented
        a = <cnp.ndarray>out
        if not cnp.PyArray_IS_C_CONTIGUOUS(a) or not cnp.PyArray_ISWRITEABLE(a):
            return NotImplemented
        return self._recv_tagged(src, tag, wire, cnp.PyArray_NBYTES(a), a, <Py_ssize_t>cnp.PyArray_DATA(a))

    cdef object _recv_tagged(self, long src, long tag, int wire, Py_ssize_t nbytes, object into, Py_ssize_t ptr):
        """A blocking receive into the nbytes at ptr (those of `into`) from group rank src of a message of
        exactly nbytes and dtype code `wire`; tag -1: any tag of the user's (the frame expected is of the
        tag src sent last, `_tag_hint`: a frame of another tag goes to the engine, which matches it). The
        tag received, NotImplemented: take the Python path."""
        cdef Py_ssize_t count
        cdef long t = tag
        if src == self.rank or not 0 <= src < self.n or not -1 <= tag <= 0x7FFFFFFF or self.ep.failure is not None:
            return NotImplemented
        count = _count_of(wire, nbytes)
        if count < 0:
            return NotImplemented
        if tag == -1:
            t = self._tag_hint(src)
        if self._recv(src, t, wire, count, nbytes, into, ptr, self._what("Recv", tag),
                      cl_coarse_now() + self.timeout) is NotImplemented:
            return NotImplemented
        return t

    def send_buffer(self, buf, Py_ssize_t nbytes, dst, tag, int wire, Py_ssize_t count, str kind):
        """Blocking send of the first nbytes of buf (an object of the buffer protocol, contiguous: a
        bytearray, an mmap) to group rank dst as a message of dtype code `wire` and `count` elements
        (commlib.MPI's Send of [buf, count, datatype]); None when sent, NotImplemented: take the
        Python path."""
        cdef Py_buffer view
        cdef long d, t
        if type(dst) is not int or type(tag) is not int or not 0 <= dst < self.n or not 0 <= tag <= 0x7FFFFFFF:
            return NotImplemented
        d, t = dst, tag
        if d == self.rank or nbytes < 0 or nbytes > self.limit or self.ep.failure is not None:
            return NotImplemented
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS)
        except (BufferError, TypeError):  # (the Python path says what is wrong with it)
            return NotImplemented
        try:
            if nbytes > view.len:
                return NotImplemented
            return self._post(None, d, t, wire, count, 0, buf, <Py_ssize_t>view.buf, nbytes, self._what(kind, t),
                              True, nbytes != view.len)
        finally:
            PyBuffer_Release(&view)

    def recv_buffer(self, buf, Py_ssize_t nbytes, long src, long tag, int wire):
        """Blocking receive into the first nbytes of buf (a writable object of the buffer protocol,
        contiguous) from group rank src of a message of exactly nbytes and dtype code `wire` (commlib.MPI's
        Recv of [buf, count, datatype]); tag as recv_wire's. The tag received, once received;
        NotImplemented: take the Python path."""
        cdef Py_buffer view
        if nbytes < 0:
            return NotImplemented
        try:
            PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)
        except (BufferError, TypeError):  # (read-only, say: the Python path raises what the caller should see)
            return NotImplemented
        try:
            if nbytes > view.len:
                return NotImplemented
            return self._recv_tagged(src, tag, wire, nbytes, buf, <Py_ssize_t>view.buf)
        finally:
            PyBuffer_Release(&view)

    cdef long _tag_hint(self, long s):
        """The tag an ANY_TAG receive from group rank s expects: the one s sent last (the engine's hint,
        a user's tag only), 0 before any."""
        hint = self.last_tag.get(self.tag_keys[s])
        if hint is not None and 0 <= hint <= 0x7FFFFFFF:  # (a user's tag: never one of the layers' own)
            return hint
        return 0

    def isend(self, x, dst, tag):
        """Non-blocking send of x (at most the eager size) to group rank dst: its Request, or
        NotImplemented: take the Python path."""
        return self._post_array(x, dst, tag, False)

    def recv(self, shape, dtype, src, tag):
        """Blocking receive of a (shape, dtype) array from group rank src with this tag; the array, or
        NotImplemented: take the Python path."""
        cdef long s, t, dim
        cdef Py_ssize_t count = 1, nbytes, itemsize
        cdef int code
        cdef cnp.ndarray out
        if type(src) is not int or type(tag) is not int:
            return NotImplemented
        if not 0 <= src < self.n or not 0 <= tag <= 0x7FFFFFFF:
            return NotImplemented
        s, t = src, tag
        if s == self.rank:
            return NotImplemented
        ent = self.dtypes.get(dtype)
        if ent is None:
            try:
                descr = np_dtype(dtype)
            except (TypeError, ValueError):
                return NotImplemented
            code = _wire_code(&self.codes, descr.num) if descr.isnative else -1
            if code < 0:
                return NotImplemented
            if len(self.dtypes) > 256:
                self.dtypes.clear()
            ent = self.dtypes[dtype] = (descr, code, descr.itemsize)
        descr, code, itemsize = ent
        if type(shape) is int:
            if shape < 0:
                return NotImplemented
            count = shape
        elif type(shape) is tuple:
            for dim_obj in shape:
                if type(dim_obj) is not int or dim_obj < 0:
                    return NotImplemented
                dim = dim_obj
                count *= dim
        else:
            return NotImplemented
        nbytes = count * itemsize
        if nbytes > self.limit:
            return NotImplemented
        if self.ep.failure is not None:
            return NotImplemented
        out = self.empty(shape, descr)
        return self._recv(s, t, code, count, nbytes, out, <Py_ssize_t>cnp.PyArray_DATA(out), self._what("recv", t),
                          cl_coarse_now() + self.timeout)
