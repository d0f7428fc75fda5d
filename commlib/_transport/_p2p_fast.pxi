# Included at the end of _io.pyx, after _fast.pxi (it uses its dtype table helpers and _now()).
"""The one-call blocking send and receive: the point-to-point latency path in one call.

`P2PFast.send(x, dst, tag)` and `.recv(shape, dtype, src, tag)` take the
common case of `commlib.send`/`recv` — a C-contiguous native NumPy array (a
shape and dtype for recv) of at most the eager limit, a named peer other than
this rank, a plain tag — and do what the engine's Python fast path does
(`_engine/p2p.py`: `_send_fast`, `_recv_fast`) in one call: the cached header,
the engine lock, the checks that nothing else is outstanding (then the
calling thread may own the socket), and one step of the C loop with the GIL
released. The frames are the ones the Python path moves, so either side may
be on either path.

Anything it does not take returns NotImplemented before any byte moves, and
the API's Python path runs (and raises whatever error the arguments
deserve). A step that does not finish in one go is not handled here: a send
stuck mid-frame queues its rest through the engine (`_fast_send_queue`), a
receive hands its claimed connection and the step's status to the engine's
loop (`_fast_recv_rest`), and a failed step raises through the transport's
`_raise`, exactly as the Python path would.
"""
from numpy import dtype as np_dtype


cdef class P2PFast:
    """One group's one-call send/recv. Built by the API once the group has a transport."""

    cdef object engine, lock, idle, ctx, matcher, conns_in, conns_out, last_tag, fds, ep, notices
    cdef object raw, p2p_state, p2p_raise, send_queue, recv_rest, header, empty
    cdef list world
    cdef int n, rank
    cdef unsigned int gid
    cdef double timeout
    cdef Py_ssize_t limit
    cdef dict hdrs, dtypes, whats
    cdef WireCodes codes

    def __init__(self, engine, ctx, p2p, fds, Py_ssize_t limit, dtype_code, bf16, header):
        import numpy as np
        self.engine, self.lock, self.idle = engine, engine.lock, engine.idle
        self.conns_in, self.conns_out, self.last_tag = engine._in, engine._out, engine._last_tag
        self.send_queue, self.recv_rest = engine._fast_send_queue, engine._fast_recv_rest
        self.ctx, self.matcher = ctx, ctx.matcher
        self.world = list(ctx.world)
        self.n, self.rank, self.gid, self.timeout = len(ctx.world), ctx.rank, ctx.gid, ctx.timeout
        self.raw, self.p2p_state, self.p2p_raise = p2p.stepper.raw, p2p.state, p2p._raise
        self.ep, self.notices, self.fds = p2p.ep, p2p.ep.notices, fds
        self.limit, self.header, self.empty = limit, header, np.empty
        self.hdrs, self.dtypes, self.whats = {}, {}, {}
        _wire_codes_fill(&self.codes, dtype_code, bf16)

    cdef object _what(self, str kind, long tag):
        key = (kind, tag)
        w = self.whats.get(key)
        if w is None:
            if len(self.whats) > 1024:
                self.whats.clear()
            w = self.whats[key] = f"{kind}(tag={tag})"
        return w

    def send(self, x, dst, tag):
        """Blocking send of x to group rank dst; None when sent, NotImplemented: take the Python path."""
        cdef cnp.ndarray a
        cdef long d, t
        cdef Py_ssize_t nbytes, count
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
        code = _wire_code(&self.codes, cnp.PyArray_TYPE(a))
        if code < 0:
            return NotImplemented
        count = cnp.PyArray_SIZE(a)
        dst_w = self.world[d]
        fd = self.fds.get((self.gid, 1, dst_w, 1))  # CH_P2P, outgoing: opened by a first Python-path send
        if fd is None or self.ep.failure is not None:
            return NotImplemented
        hkey = (d, t, code, count)
        hdr = self.hdrs.get(hkey)
        if hdr is None:
            if len(self.hdrs) > 1024:  # bounded: programs with ever-new tags or sizes
                self.hdrs.clear()
            hdr = self.hdrs[hkey] = self.header(group=self.gid, source=self.rank, tag=t, dtype=code, count=count,
                                                nbytes=nbytes)
        with self.lock:
            if not self.idle():
                return NotImplemented
            out = self.conns_out.get((self.gid, dst_w))
            if out is not None and out.queue:
                return NotImplemented
            rc = self.raw(fd, hdr, <Py_ssize_t>cnp.PyArray_DATA(a), nbytes, -1, 0, 0, _now() + self.timeout, False)
            if rc == ST_OK:
                return None
            if rc != ST_SLOW:
                self.p2p_raise(rc, self._what("send", t), dst_w, None, nbytes)
            sent = int(self.p2p_state[0])
            if sent == 0:  # nothing written: the Python path starts it over
                return NotImplemented
            # stuck mid-frame (the receiver is not reading): the engine writes the rest, first in line
            req = self.send_queue(self.ctx, d, a, nbytes, t, code, count, sent)
        req.wait()
        return None

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
        src_w = self.world[s]
        hkey = (s, t, code, nbytes)
        expect = self.hdrs.get(hkey)
        if expect is None:
            if len(self.hdrs) > 1024:
                self.hdrs.clear()
            expect = self.hdrs[hkey] = self.header(group=self.gid, source=s, tag=t, dtype=code, count=count,
                                                   nbytes=nbytes)
        if self.ep.failure is not None:
            return NotImplemented
        out = self.empty(shape, descr)
        what = self._what("recv", t)
        deadline = _now() + self.timeout
        with self.lock:
            conn = self.conns_in.get((self.gid, src_w))
            if conn is None or conn.busy or self.matcher.unexpected or not self.idle():
                return NotImplemented
            conn.busy = True  # the engine keeps off this socket until the receive is done
            self.notices.current = (what, src_w, None)
            try:
                rc = self.raw(-1, b"", 0, 0, conn.fd, <Py_ssize_t>cnp.PyArray_DATA(out), nbytes, deadline, False,
                              expect)
            finally:
                self.notices.current = None
            if rc == ST_OK:
                conn.busy = False
                self.last_tag[(self.gid, s)] = t
                return out
        # not in one step (another frame first, a slow sender, an error): the engine's loop goes on
        return self.recv_rest(self.ctx, conn, s, src_w, t, expect, out, nbytes, what, deadline, rc)

