"""The point-to-point progress engine: posted receives, unexpected messages, send queues.

One engine per process (plus one without a transport for the size-1 world).
Each group registers a matching context (`matching.Matcher`). Sends go into
a FIFO per (group, destination) connection and are written without
blocking; receives are posted to their group's matcher. Progress — reading
headers and payloads from every point-to-point connection, matching them,
writing queued sends, sending and taking issend acknowledgements — is made:

- by one progress thread, which runs only while there is work outstanding
  (a posted receive or probe, a queued or unacknowledged send, a message
  half read) and nobody is waiting, so the caller can compute while messages
  move, and any number of requests complete in any order of wait;
- by a caller waiting on a request: it polls and services the connections
  itself (no hand-off to the thread, which parks meanwhile);
- by the calling thread itself when nothing is outstanding: a blocking send,
  or a blocking receive from a named source, runs as steps of the C loop
  straight between the socket and the user's buffer (the latency path). Every
  FAST_PATH_SLICE_S without progress it checks whether other work was posted
  meanwhile (or, for a send, whether it is stuck mid-frame) and, if so, hands
  what remains to the engine.

Messages from a sender on one connection are read in order and matched in
order (non-overtaking). A receive whose payload arrives after it was posted
lands directly in the user's buffer; an unexpected one is buffered once and
copied when a receive takes it. issend messages carry FLAG_SYNC and a
per-connection sequence number; the receiver acknowledges the match with a
FLAG_ACK frame on its own connection back.
"""
import collections
import contextlib
import os
import select
import threading
import time
import weakref

import numpy as np

from .._dtypes import BFLOAT16, DT_BYTES, dtype_code, dtype_name, dtype_of
from .._kernels import address as _address
from .._transport import spin_seconds
from .._errors import CommError, CommTimeout, MismatchError, PeerLost
from .._wire import (FLAG_ACK, FLAG_OBJECT, FLAG_SYNC, HEADER_NBYTES, KIND_P2P, ProtocolError, ack_header, decode,
                     message_header)
from .matching import ANY_SOURCE, ANY_TAG, Matcher, Message, Posted, matches
from .requests import Request

EAGER_BYTES = 64 << 10  # sends up to this size complete into the socket buffer without the receiver
_FALLBACK = object()  # a fast path's answer: the engine must serve this one
_NO_STEP = object()  # _step_frame: no step taken yet
_READS_PER_SERVICE = 64  # bound the reads per connection per pass, so one sender cannot starve others


class _In:
    """Read state of one incoming point-to-point connection."""

    __slots__ = ("sock", "fd", "gid", "src", "hbuf", "hpos", "msg", "view", "pos", "eof", "busy")

    def __init__(self, sock, gid, src):
        self.sock, self.fd, self.gid, self.src = sock, sock.fileno(), gid, src
        self.hbuf = bytearray(HEADER_NBYTES)
        self.hpos = 0
        self.msg = None  # the Message whose payload is being read
        self.view = None  # where it lands
        self.pos = 0
        self.eof = False
        self.busy = False  # a blocking fast path is reading this socket itself: the engine keeps off it

    @property
    def idle(self):
        return self.hpos == 0 and self.msg is None


class _Send:
    __slots__ = ("parts", "total", "pos", "req", "seq", "tag", "sync")

    def __init__(self, parts, req, seq, tag, sync):
        self.parts, self.req, self.seq, self.tag, self.sync = parts, req, seq, tag, sync
        self.total = sum(p.nbytes for p in parts)
        self.pos = 0

    def iov(self):
        out, skip = [], self.pos
        for p in self.parts:
            if skip >= p.nbytes:
                skip -= p.nbytes
                continue
            out.append(p[skip:] if skip else p)
            skip = 0
        return out


class _Out:
    __slots__ = ("sock", "fd", "queue", "seq", "dst", "gid")

    def __init__(self, sock, gid, dst):
        self.sock, self.fd, self.gid, self.dst = sock, sock.fileno(), gid, dst
        self.queue = collections.deque()
        self.seq = 0


class _Context:
    """A group as the engine sees it: its matcher and rank translation."""

    __slots__ = ("gid", "matcher", "world", "rank", "to_group", "timeout")

    def __init__(self, gid, world, rank, timeout):
        self.gid, self.world, self.rank, self.timeout = gid, world, rank, timeout
        self.matcher = Matcher()
        self.to_group = {w: g for g, w in enumerate(world)}


def _u8(a):
    return memoryview(a).cast("B") if not isinstance(a, memoryview) else a


class Engine:
    """Point-to-point progress for every group of this process."""

    def __init__(self, transport=None):
        self.transport = transport
        self.p2p = transport.p2p if transport is not None else None
        self.me = transport.rank if transport is not None else 0
        self.lock = threading.RLock()
        self._work = threading.Condition(self.lock)
        self.contexts = {}
        self.groups = weakref.WeakValueDictionary()  # gid -> Group, for the finalize() digest comparison
        self._in = {}  # (gid, src world) -> _In
        self._out = {}  # (gid, dst world) -> _Out
        self._acks = {}  # (gid, dst world, seq) -> _Send waiting for its acknowledgement
        self.n_posted = 0  # posted receives and probes
        self.n_sending = 0  # sends queued or partly written
        self._partial = set()  # incoming connections in the middle of a frame
        self._expect = {}  # (gid, src, tag, dtype, nbytes) -> (header a plain send of that carries, count)
        self._last_tag = {}  # (gid, src) -> tag of the last message received: an ANY_TAG fast path expects it
        self._thread = None
        self._driver = None  # the caller thread driving progress from wait(), if any
        self._polling = False  # the progress thread is in poll(2)
        self.spin_s = spin_seconds() if transport is not None else 0.0
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # ------------------------------------------------------------ contexts
    def context(self, gid, world, rank, timeout):
        with self.lock:
            ctx = self.contexts.get(gid)
            if ctx is None:
                ctx = self.contexts[gid] = _Context(gid, world, rank, timeout)
                if self.p2p is not None:  # connections of this group that arrived before it existed here
                    self._adopt_all()
                    if any(key[0] == gid for key in self._in):
                        self._kick()
            return ctx

    def one_call(self, ctx):
        """The one-call blocking send/recv of group context ctx (`_io.P2PFast`): the latency path in
        one Cython call, continuing in `_fast_send_queue` / `_fast_recv_rest` when a step does not finish."""
        return self.p2p.fast_path(self, ctx, EAGER_BYTES, dtype_code, BFLOAT16, message_header)

    def idle(self):
        """Nothing outstanding: the caller may use a blocking fast path."""
        return not (self.n_posted or self.n_sending or self._acks or self._partial)

    def _mark(self, conn):
        """Keep the set of connections that are in the middle of a frame up to date."""
        if conn.idle:
            self._partial.discard(conn)
        else:
            self._partial.add(conn)

    # ------------------------------------------------------------ posting
    def send(self, ctx, dst, parts, *, tag, dtype, count, flags=0, sync=False, what="send", block=False):
        """Send the uint8 buffers `parts` back to back as one message to group rank dst.

        Returns a Request (None result), or None when `block` and it completed
        on the fast path.
        """
        nbytes = parts[0].nbytes if len(parts) == 1 else sum(p.nbytes for p in parts)
        timeout = ctx.timeout
        if dst == ctx.rank:
            return self._send_local(ctx, parts, nbytes, tag, dtype, count, flags, sync, what, block)
        self.transport.raise_if_failed()
        dst_w = ctx.world[dst]
        deadline = time.monotonic() + timeout
        sock = self.p2p.out_sock(ctx.gid, dst_w, deadline, what)
        if sync:
            flags |= FLAG_SYNC
        key = (ctx.gid, dst_w)
        if block and not sync and len(parts) == 1:
            done = self._send_fast(ctx, key, sock, parts[0], nbytes, tag, dtype, count, flags, deadline, what, dst_w)
            if done is True:
                return None
            req = done
        else:
            req = self._queue_send(ctx, key, sock, parts, nbytes, tag, dtype, count, flags, what, timeout)
        if block:
            req.wait()
            return None
        return req

    def _queue_send(self, ctx, key, sock, parts, nbytes, tag, dtype, count, flags, what, timeout, sent=0, seq=None):
        req = Request(what, timeout=timeout, waiter=self.wait)
        with self.lock:
            out = self._out_conn(key, sock)
            if seq is None:
                out.seq += 1
                seq = out.seq if flags & FLAG_SYNC else 0
            hdr = message_header(group=ctx.gid, source=ctx.rank, tag=tag, dtype=dtype, count=count, nbytes=nbytes,
                                 flags=flags, seq=seq)
            s = _Send([memoryview(hdr)] + [_u8(p) for p in parts], req, seq, tag, bool(flags & FLAG_SYNC))
            s.pos = sent
            self._enqueue(out, s)
        return req

    def _out_conn(self, key, sock):
        """The send queue of connection key = (gid, dst world rank), created on first use."""
        out = self._out.get(key)
        if out is None:
            out = self._out[key] = _Out(sock, *key)
        return out

    def _enqueue(self, out, s):
        """Queue a frame behind the connection's others, writing at once what the socket takes."""
        out.queue.append(s)
        self.n_sending += 1
        if len(out.queue) == 1:
            self._write(out)
        if not self.idle():
            self._kick()

    def _send_fast(self, ctx, key, sock, part, nbytes, tag, dtype, count, flags, deadline, what, dst_w):
        """Blocking steps of the C loop while nothing else is outstanding; True when sent, else the
        Request that now carries the rest.

        A step that makes no progress for FAST_PATH_SLICE_S (the receiver is not
        reading: it may itself be sending to us) hands what remains to the
        engine, which reads while it writes, so two ranks sending each other
        large messages first never deadlock.
        """
        hdr = message_header(group=ctx.gid, source=ctx.rank, tag=tag, dtype=dtype, count=count, nbytes=nbytes,
                             flags=flags)
        addr = self.transport_address(part)
        sent = 0
        while True:
            with self.lock:
                out = self._out.get(key)
                if sent == 0 and (not self.idle() or (out is not None and out.queue)):
                    break  # other work is waiting: the engine sends this one in turn
                got = self.p2p.send_step(sock, hdr, addr, nbytes, deadline, what, dst_w, sent > 0)
                if got is None:
                    return True
                sent = got
                if sent > 0:  # stalled mid-frame: the engine finishes it, queued before anything else
                    return self._queue_send(ctx, key, sock, [part], nbytes, tag, dtype, count, flags, what,
                                            ctx.timeout, sent=sent, seq=0)
        return self._queue_send(ctx, key, sock, [part], nbytes, tag, dtype, count, flags, what, ctx.timeout)

    def _send_local(self, ctx, parts, nbytes, tag, dtype, count, flags, sync, what, block):
        data = np.empty(nbytes, dtype=np.uint8)
        pos = 0
        for p in parts:
            data[pos:pos + p.nbytes] = np.frombuffer(p, dtype=np.uint8)
            pos += p.nbytes
        msg = Message(ctx.rank, tag, nbytes, dtype, count, flags, data=data, complete=True)
        req = Request(what, timeout=ctx.timeout, waiter=self.wait)
        with self.lock:
            if sync:
                msg.flags |= FLAG_SYNC
                msg.local_sender = req  # a local issend completes when matched
            taker, probes = ctx.matcher.arrive(msg)
            self._satisfy_probes(ctx, probes, msg)
            if taker is not None:
                self.n_posted -= 1
                self._matched(ctx, msg)
                self._deliver(ctx, taker, msg, data)
        if not sync:
            req._finish(None)
        if block:
            if not req.test():
                if self.transport is None:
                    raise CommError(f"{what} to self on a group of size 1 with no matching receive posted: "
                                    "it would wait forever")
                req.wait()
            return None
        return req

    def recv(self, ctx, src, tag, into, finish, *, what="recv", block=False, check=None, raw=False):
        """Post a receive of (src, tag) into the uint8 array `into` (None: allocate on arrival).

        finish(msg, payload) gives the result. With `block` the result is
        returned, else a Request. check: (dtype code, capacity in bytes) the
        message must fit, None for an object (send_obj) message. raw: take any
        message, array or object, of any dtype (commlib.MPI's semantics);
        check's dtype then only names the header the fast path expects, and a
        message over the capacity is not copied: finish() sees msg.nbytes
        larger than `into` and reports the truncation.
        """
        if block and self.transport is not None and src != ANY_SOURCE and src != ctx.rank:
            if into is not None:
                got = self._recv_fast(ctx, src, tag, into, finish, what, check)
            elif raw:
                got = self._recv_fast_sized(ctx, src, tag, finish, what)
            else:
                got = _FALLBACK
            if got is not _FALLBACK:
                return got
        if self.transport is not None:
            self.transport.raise_if_failed()
        req = Request(what, timeout=ctx.timeout, waiter=self.wait)
        posted = Posted(src, tag, into=into, req=req, extra=(finish, check, raw))
        req._cancel = lambda r: self._cancel_posted(ctx, posted)
        with self.lock:
            msg = ctx.matcher.post(posted)
            if msg is None:
                if self.transport is None and block:
                    ctx.matcher.cancel(posted)
                    raise CommError(f"{what} on a group of size 1 with no message sent to self: it would wait forever")
                self.n_posted += 1
            else:
                self._matched(ctx, msg)
                if msg.complete:
                    self._deliver(ctx, posted, msg, msg.data)
                else:
                    msg.taker = posted
            if not req.test():
                self._kick()
        return req.wait() if block else req

    def _recv_fast(self, ctx, src, tag, into, finish, what, check):
        src_w = ctx.world[src]
        key = (ctx.gid, src_w)
        if tag == ANY_TAG:  # expect the tag this source used last; any other frame hands over to the engine
            tag = self._last_tag.get((ctx.gid, src), 0)
        dtype, nbytes = check if check is not None else (DT_BYTES, into.nbytes)
        hkey = (ctx.gid, src, tag, dtype, nbytes)
        cached = self._expect.get(hkey)
        if cached is None:
            if len(self._expect) > 1024:  # bounded: programs with ever-new tags or sizes
                self._expect.clear()
            count = _count(dtype, nbytes)
            cached = self._expect[hkey] = (message_header(group=ctx.gid, source=src, tag=tag, dtype=dtype,
                                                          count=count, nbytes=nbytes), count)
        expect, count = cached
        deadline = time.monotonic() + ctx.timeout
        conn = self._claim(ctx, key, src, tag)
        if conn is None:
            return _FALLBACK
        try:
            return self._read_exact(ctx, conn, src, src_w, tag, expect, into, nbytes, dtype, count, finish, what,
                                    deadline)
        finally:
            conn.busy = False

    def _claim(self, ctx, key, src, tag):
        """The connection from src, marked busy for a blocking fast path (the engine keeps off the socket
        until the caller clears it: a frame may be half read); None when the engine must serve the
        receive (no connection yet, another fast path on it, or messages already waiting)."""
        with self.lock:
            conn = self._in.get(key)
            if conn is None:
                conn = self._adopt(key)
            if conn is None or conn.busy or ctx.matcher.find(src, tag) is not None or ctx.matcher.unexpected:
                return None
            conn.busy = True
            return conn

    def _read_exact(self, ctx, conn, src, src_w, tag, expect, into, nbytes, dtype, count, finish, what, deadline):
        got = self._step_frame(conn, expect, self.transport_address(into), nbytes, deadline, what, src_w)
        if got is _FALLBACK:
            return got
        if got is None:
            self._last_tag[ctx.gid, src] = tag
            return finish(Message(src, tag, nbytes, dtype, count), into)
        self._hand_over(conn, got)  # another frame came first: the engine takes it from here
        return _FALLBACK

    def _step_frame(self, conn, expect, addr, nbytes, deadline, what, src_w, first=_NO_STEP):
        """Steps of the C loop reading the frame `expect` + nbytes into addr from a busy connection.

        Returns None once it arrived; the header of another frame that came instead (no payload
        byte read); or _FALLBACK when other work appeared before any byte of the frame (the engine
        then serves this receive with the rest). `first`: what a first step already taken (a fresh
        one, by the one-call path) returned.
        """
        notices = self.p2p.notices
        resume = False
        got = first
        while True:
            with self.lock:
                if got is _NO_STEP:
                    if not resume and not self.idle():
                        return _FALLBACK
                    notices.current = (what, src_w, None)
                    try:
                        got = self.p2p.recv_step(conn.sock, expect, addr, nbytes, deadline, what, src_w, resume)
                    finally:
                        notices.current = None
                if got is None or isinstance(got, bytes):
                    return got
                if got == 0 and not self.idle():
                    return _FALLBACK
                if got == 0 and not resume and self.p2p.finishing(src_w):
                    raise PeerLost(f"rank {self.me}: {what} lost rank {src_w} (it called finalize())",
                                   rank=src_w, op=what)
                resume = got > 0 or resume
                got = _NO_STEP

    # ------------------------------------------- the one-call path's continuations
    # `_io.P2PFast` runs a blocking send or receive as one step in one call; a step that does not
    # finish goes on here, exactly as the Python fast path above would.
    def _fast_send_queue(self, ctx, dst, a, nbytes, tag, dtype, count, sent):
        """The rest of a one-call send stuck `sent` bytes into its frame (lock held): queued first in
        line, the engine writes it; the caller waits on the Request returned."""
        dst_w = ctx.world[dst]
        sock = self.p2p.out_sock(ctx.gid, dst_w, time.monotonic() + ctx.timeout, "send")
        return self._queue_send(ctx, (ctx.gid, dst_w), sock, [a.reshape(-1).view(np.uint8)], nbytes, tag, dtype,
                                count, 0, f"send(tag={tag})", ctx.timeout, sent=sent, seq=0)

    def _fast_recv_rest(self, ctx, conn, src, src_w, tag, expect, out, nbytes, what, deadline, rc):
        """A one-call receive whose first step stopped with status rc, on `conn` (claimed busy): the
        result, or NotImplemented when the engine must serve it (nothing of its frame was read)."""
        try:
            with self.lock:
                got = self.p2p.recv_status(rc, what, src_w, nbytes)
            got = self._step_frame(conn, expect, self.transport_address(out), nbytes, deadline, what, src_w,
                                   first=got)
            if got is None:
                self._last_tag[ctx.gid, src] = tag
                return out
            if got is not _FALLBACK:
                self._hand_over(conn, got)  # another frame came first: the engine takes it from here
            return NotImplemented
        finally:
            conn.busy = False

    def _hand_over(self, conn, header):
        """A header a fast path read but does not take: the engine goes on with that frame."""
        with self.lock:
            conn.hbuf[:] = header
            conn.hpos = HEADER_NBYTES
            conn.busy = False
            self._header_done(conn)
            self._mark(conn)

    def _recv_fast_sized(self, ctx, src, tag, finish, what):
        """A blocking receive of a message of any size from a named source (commlib.MPI's recv() of an
        object): the header, then a buffer of its size, then the payload, as steps of the C loop.

        Reading "expecting" a header no frame can carry returns the real one with no payload byte
        read; a frame this receive does not take (another tag, an acknowledgement) goes to the
        engine exactly as the plain fast path hands over a mismatch.
        """
        src_w = ctx.world[src]
        key = (ctx.gid, src_w)
        deadline = time.monotonic() + ctx.timeout
        conn = self._claim(ctx, key, src, tag)
        if conn is None:
            return _FALLBACK
        try:
            return self._read_sized(ctx, conn, src, src_w, tag, finish, what, deadline)
        finally:
            conn.busy = False

    def _read_sized(self, ctx, conn, src, src_w, tag, finish, what, deadline):
        got = self._step_frame(conn, _NO_FRAME, 0, 0, deadline, what, src_w)
        if got is _FALLBACK:
            return got
        if got is None:
            with self.lock:
                self._protocol_error(conn, "a frame of all-zero bytes")
            return _FALLBACK
        try:
            h = decode(got)
        except ProtocolError:
            h = None
        if (h is None or h.kind != KIND_P2P or h.group != ctx.gid or h.flags & FLAG_ACK
                or not matches(src, tag, h.root, h.tag)):
            self._hand_over(conn, got)  # not this receive's (or not a frame at all: the engine says so)
            return _FALLBACK
        msg = Message(src, h.tag, h.nbytes, h.dtype, h.count, h.flags, h.seq)
        with self.lock:
            self._matched(ctx, msg)  # an issend's acknowledgement
            self._last_tag[ctx.gid, src] = h.tag
        payload = np.empty(h.nbytes, dtype=np.uint8)
        addr, resume = self.transport_address(payload), False
        while h.nbytes:
            with self.lock:
                got = self.p2p.recv_step(conn.sock, None, addr, h.nbytes, deadline, what, src_w, resume)
            if got is None:
                break
            resume = True
        return finish(msg, payload)

    def probe(self, ctx, src, tag, block):
        """Header facts (a Message) of the oldest matching message, left queued; None if none yet."""
        with self.lock:
            if self.transport is not None:
                self._service_all_reads()
            msg = ctx.matcher.find(src, tag)
            if msg is not None or not block:
                return msg
            if self.transport is None:
                raise CommError("probe on a group of size 1 with no message sent to self: it would wait forever")
            req = Request("probe", timeout=ctx.timeout, waiter=self.wait)
            posted = Posted(src, tag, probe=True, req=req)
            ctx.matcher.post(posted)
            self.n_posted += 1
            self._kick()
        return req.wait()

    # ------------------------------------------------------------ matching
    def _matched(self, ctx, msg):
        """A receive took msg: acknowledge it if the sender waits for that (issend)."""
        if not msg.flags & FLAG_SYNC:
            return
        if msg.local_sender is not None:  # a send to self: no acknowledgement frame
            msg.local_sender._finish(None)
            return
        src_w = ctx.world[msg.source]
        sock = self.p2p.out_sock(ctx.gid, src_w, time.monotonic() + ctx.timeout, "issend acknowledgement")
        ack = _Send([memoryview(ack_header(group=ctx.gid, source=ctx.rank, tag=msg.tag, seq=msg.seq))],
                    None, msg.seq, msg.tag, False)
        self._enqueue(self._out_conn((ctx.gid, src_w), sock), ack)

    def _deliver(self, ctx, posted, msg, payload):
        """Complete a receive with a whole message (payload: the uint8 bytes it arrived in)."""
        finish, check, raw = posted.extra
        req = posted.req
        if msg.tag >= 0:
            self._last_tag[ctx.gid, msg.source] = msg.tag
        try:
            if not raw:
                _check_fit(ctx, msg, posted, check, self.me)
            if posted.into is not None and payload is not posted.into and msg.nbytes <= posted.into.nbytes:
                posted.into[:msg.nbytes] = payload[:msg.nbytes]
                payload = posted.into
            req._finish(finish(msg, payload))
        except Exception as exc:  # the layer above reports it (truncation, unpickling): the receive's error
            req._finish(error=exc)

    def _satisfy_probes(self, ctx, probes, msg):
        for p in probes:
            self.n_posted -= 1
            p.req._finish(msg)

    def _cancel_posted(self, ctx, posted):
        with self.lock:
            if ctx.matcher.cancel(posted):
                self.n_posted -= 1
                return True
            return False

    # ------------------------------------------------------------ progress
    def _kick(self):
        """Wake the progress thread (starting it on first use)."""
        if self.transport is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="commlib-progress", daemon=True)
            self._thread.start()
        self._work.notify_all()
        if self._polling or self._driver is not None:  # a poll with a stale set: interrupt it
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"\0")

    def _run(self):
        while True:
            with self.lock:
                # Park while idle, and while a waiting caller drives progress itself.
                while not self._closed and (self.idle() or self._driver is not None):
                    self._work.wait()
                if self._closed:
                    return
                self._polling = True
            try:
                self._poll_once(200)
            finally:
                self._polling = False

    def _poll_once(self, timeout_ms):
        """Poll every connection with work once (no lock held while waiting), then service them.

        The progress thread and a waiting caller may both be here: servicing
        happens under the lock and never blocks, so the one that finds nothing
        to read simply polls again. Returns whether anything was ready.
        """
        with self.lock:
            if self._closed:
                return False
            fds = self._poll_set()
        poller = select.poll()
        for fd, ev in fds.items():
            poller.register(fd, ev)
        poller.register(self._wake_r, select.POLLIN)
        poller.register(self.p2p.arrival_r, select.POLLIN)
        poller.register(self.p2p.wake_r, select.POLLIN)
        try:
            events = poller.poll(timeout_ms)
        except InterruptedError:
            return False
        with self.lock:
            if self._closed:
                return False
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self._wake_r, 4096)
            self._service(events)
        return bool(events)

    def _poll_set(self):
        fds = {c.fd: select.POLLIN for c in self._in.values() if not c.eof and not c.busy}
        for out in self._out.values():
            if out.queue:
                fds[out.fd] = fds.get(out.fd, 0) | select.POLLOUT
        return fds

    def _service(self, events):
        failure = self.transport.ep.failure
        if failure is not None:
            self._fail_all(failure)
            return
        ready = {fd for fd, _ in events}
        if self.p2p.arrival_r in ready:  # a connection arrived (the pipe stays readable until read here)
            with contextlib.suppress(BlockingIOError, OSError):
                os.read(self.p2p.arrival_r, 4096)
            self._adopt_all()
        for conn in list(self._in.values()):
            if conn.fd in ready or not conn.idle:
                self._read(conn)
        for out in list(self._out.values()):
            if out.queue:
                self._write(out)
        self._check_departed()

    def _service_all_reads(self):
        self._adopt_all()
        for conn in list(self._in.values()):
            self._read(conn)

    def _adopt_all(self):
        # A connection of a group this rank has not created yet (a peer left split() first and
        # sent at once) stays unread in the transport until context() registers the group.
        for key, sock in self.p2p.in_socks().items():
            if key[0] not in self.contexts:
                continue
            conn = self._in.get(key)
            if conn is None or conn.sock is not sock:  # new, or the transport replaced a dead attempt
                self._partial.discard(conn)
                self._in[key] = _In(sock, *key)

    def _adopt(self, key):
        sock = self.p2p.in_socks().get(key)
        if sock is None or key[0] not in self.contexts:
            return None
        conn = self._in[key] = _In(sock, *key)
        return conn

    def _read(self, conn):
        if conn.busy:
            return
        try:
            self._read_some(conn)
        finally:
            self._mark(conn)

    def _read_some(self, conn):
        sock = conn.sock
        for _ in range(_READS_PER_SERVICE):
            if conn.eof:
                return
            try:
                if conn.msg is None:
                    n = sock.recv_into(memoryview(conn.hbuf)[conn.hpos:])
                else:
                    n = sock.recv_into(conn.view[conn.pos:]) if conn.pos < len(conn.view) else -1
            except BlockingIOError:
                return
            except OSError as exc:
                self._conn_lost(conn, str(exc))
                return
            if n == 0:
                self._conn_lost(conn, None)
                return
            if conn.msg is None:
                conn.hpos += n
                if conn.hpos == HEADER_NBYTES:
                    self._header_done(conn)
            else:
                if n > 0:
                    conn.pos += n
                if conn.pos >= len(conn.view):
                    self._payload_done(conn)

    def _header_done(self, conn):
        conn.hpos = 0
        ctx = self.contexts.get(conn.gid)
        try:
            h = decode(bytes(conn.hbuf))
        except ProtocolError as exc:
            self._protocol_error(conn, str(exc))
            return
        src_g = ctx.to_group.get(conn.src) if ctx is not None else None
        if ctx is None or h.kind != KIND_P2P or h.group != conn.gid or h.root != src_g:
            self._protocol_error(conn, f"unexpected frame {h!r}")
            return
        if h.flags & FLAG_ACK:
            s = self._acks.pop((conn.gid, conn.src, h.seq), None)
            if s is not None:
                self.n_sending -= 1
                s.req._finish(None)
            return
        msg = Message(src_g, h.tag, h.nbytes, h.dtype, h.count, h.flags, h.seq)
        taker, probes = ctx.matcher.arrive(msg)
        self._satisfy_probes(ctx, probes, msg)
        if taker is not None:
            self.n_posted -= 1
            msg.taker = taker
            self._matched(ctx, msg)
            finish, check, raw = taker.extra
            if taker.into is not None and msg.nbytes <= taker.into.nbytes and (raw or _fits(msg, check)):
                conn.view = memoryview(taker.into)[:msg.nbytes]
            else:
                msg.data = np.empty(msg.nbytes, dtype=np.uint8)
                conn.view = memoryview(msg.data)
        else:
            msg.data = np.empty(msg.nbytes, dtype=np.uint8)
            conn.view = memoryview(msg.data)
        conn.msg, conn.pos = msg, 0
        if msg.nbytes == 0:
            self._payload_done(conn)

    def _payload_done(self, conn):
        msg = conn.msg
        conn.msg, conn.view, conn.pos = None, None, 0
        msg.complete = True
        if msg.taker is not None:
            ctx = self.contexts[conn.gid]
            taker, msg.taker = msg.taker, None
            payload = msg.data if msg.data is not None else taker.into
            msg.data = None
            self._deliver(ctx, taker, msg, payload)

    def _write(self, out):
        while out.queue:
            s = out.queue[0]
            try:
                n = out.sock.sendmsg(s.iov())
            except BlockingIOError:
                return
            except OSError as exc:
                self._out_lost(out, exc)
                return
            s.pos += n
            if s.pos < s.total:
                continue
            out.queue.popleft()
            if s.req is None:  # an acknowledgement
                self.n_sending -= 1
            elif s.sync:
                self._acks[(out.gid, out.dst, s.seq)] = s
            else:
                self.n_sending -= 1
                s.req._finish(None)

    # ------------------------------------------------------------ failures
    def _conn_lost(self, conn, why):
        """EOF or an error on an incoming connection: the sender left (or died)."""
        conn.eof = True
        gone = self.p2p.gone(conn.src)
        if conn.msg is not None:
            self._protocol_error(conn, f"connection closed in the middle of a message "
                                       f"({gone or why or 'connection closed'})", lost=True)
            return
        # Between messages: a sender that left is an error for the receives that wait on it;
        # one that is still here closed a handshake attempt it gave up on, and its retry
        # replaces this connection (_adopt_all). If it died instead, the job's notice says so.
        ctx = self.contexts.get(conn.gid)
        if ctx is not None and gone is not None:
            self._fail_posted_from(ctx, conn.src, gone)

    def _fail_posted_from(self, ctx, src_w, gone):
        src_g = ctx.to_group.get(src_w)
        for p in list(ctx.matcher.posted):
            if p.source == src_g or (p.source == ANY_SOURCE and self._all_gone(ctx)):
                ctx.matcher.cancel(p)
                self.n_posted -= 1
                p.req._finish(error=PeerLost(f"rank {self.me}: {p.req.what} lost rank {ctx.world[p.source] if p.source >= 0 else src_w} ({gone})", rank=src_w, op=p.req.what))

    def _all_gone(self, ctx):
        """Every OTHER member has left (a group of one never is: a send to self may still come)."""
        others = [w for w in ctx.world if w != self.me]
        return bool(others) and all(self.p2p.gone(w) is not None for w in others)

    def _check_departed(self):
        """Receives from a rank that has left (and sent all it will) can never complete, nor can
        an issend whose receiver left without matching it."""
        for key in list(self._acks):
            gid, w, _ = key
            gone = self.p2p.gone(w)
            if gone is not None and self._drained(gid, w):
                s = self._acks.pop(key)
                self.n_sending -= 1
                s.req._finish(error=PeerLost(f"rank {self.me}: {s.req.what} lost rank {w} ({gone}) before it "
                                             f"received the message", rank=w, op=s.req.what))
        for ctx in self.contexts.values():
            if not ctx.matcher.posted:
                continue
            for p in list(ctx.matcher.posted):
                if p.source == ANY_SOURCE:
                    if self._all_gone(ctx):
                        self._fail_posted_from(ctx, self.me, "every other rank has left")
                    continue
                w = ctx.world[p.source]
                gone = self.p2p.gone(w) if w != self.me else None
                if gone is None:
                    continue
                if self._drained(ctx.gid, w):
                    self._fail_posted_from(ctx, w, gone)

    def _drained(self, gid, w):
        """Everything world rank w sent us on group gid has been read (or it never connected)."""
        conn = self._in.get((gid, w)) or self._adopt((gid, w))
        return conn is None or conn.eof or (conn.idle and not _readable(conn.fd))

    def _out_lost(self, out, exc):
        gone = self.p2p.gone(out.dst) or (os.strerror(exc.errno).lower() if exc.errno else str(exc))
        while out.queue:
            s = out.queue.popleft()
            self.n_sending -= 1
            if s.req is not None:
                s.req._finish(error=PeerLost(f"rank {self.me}: {s.req.what} lost rank {out.dst} ({gone})",
                                             rank=out.dst, op=s.req.what))

    def _protocol_error(self, conn, text, lost=False):
        cls = PeerLost if lost else CommError
        exc = self.p2p.error(cls(f"rank {self.me}: point-to-point channel from rank {conn.src}: {text}",
                                 rank=conn.src))
        conn.eof = True
        self._fail_all(exc)

    def _fail_all(self, failure):
        exc_of = lambda what: type(failure)(str(failure), rank=failure.rank, op=what)  # noqa: E731
        for ctx in self.contexts.values():
            for p in ctx.matcher.drop_posted():
                self.n_posted -= 1
                p.req._finish(error=exc_of(p.req.what))
        for out in self._out.values():
            while out.queue:
                s = out.queue.popleft()
                self.n_sending -= 1
                if s.req is not None:
                    s.req._finish(error=exc_of(s.req.what))
        for s in self._acks.values():
            self.n_sending -= 1
            s.req._finish(error=exc_of(s.req.what))
        self._acks.clear()
        for conn in self._in.values():
            if conn.msg is not None and conn.msg.taker is not None:
                conn.msg.taker.req._finish(error=exc_of(conn.msg.taker.req.what))
            conn.msg = None
            conn.eof = True
        self._partial.clear()

    # ------------------------------------------------------------ waiting
    def wait(self, req, deadline, any_of=None):
        """Wait for req (or any of `any_of`) until deadline, driving progress meanwhile (or, while
        another caller drives, sleeping on the request)."""
        if self.transport is None:
            if any_of is None and not req.test():
                raise CommError(f"{req.what} on a group of size 1 can never complete: nothing was sent to it")
            return
        ep = self.transport.ep
        watch = any_of if any_of is not None else (req,)
        ep.notices.current = (req.what if any_of is None else f"wait_any of {len(any_of)} requests", None, None)
        try:
            self._wait(req, deadline, any_of, ep, watch)
        finally:
            ep.notices.current = None

    def _wait(self, req, deadline, any_of, ep, watch):
        while True:
            if any(r.test() for r in watch):
                return
            if ep.failure is not None:
                with self.lock:
                    self._fail_all(ep.failure)
                if any(r.test() for r in watch):
                    return
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                if any_of is not None:
                    return
                raise self._timeout(req)
            slice_end = now + 0.05 if deadline is None else min(now + 0.05, deadline)
            with self.lock:
                driving = self._driver is None and not self._closed
                if driving:
                    self._driver = threading.current_thread()
            if not driving:  # another caller drives: the result arrives on the request's event
                self._kick_locked()
                req._done.wait(max(0.0, slice_end - now))
                continue
            try:
                self._drive(watch, slice_end)
            finally:
                with self.lock:
                    self._driver = None
                    if not self.idle():
                        self._kick()  # the progress thread takes over, with a fresh poll set

    def _drive(self, watch, until):
        """The waiting caller makes progress itself (no hand-off to the progress thread):
        spin on non-blocking polls for spin_s, then sleep in poll until something is ready."""
        spin_until = time.monotonic() + self.spin_s
        while not any(r.test() for r in watch):
            now = time.monotonic()
            if now >= until or self.transport.ep.failure is not None:
                return
            timeout_ms = 0 if now < spin_until else max(1, int((until - now) * 1000))
            self._poll_once(timeout_ms)

    def _kick_locked(self):
        with self.lock:
            if not self.idle():
                self._kick()

    def _timeout(self, req):
        ep = self.transport.ep
        exc = CommTimeout(f"rank {self.me}: {req.what} did not complete within {req.timeout:g} s"
                          + ep.stall_report(), op=req.what)
        return self.p2p.error(exc)

    # ------------------------------------------------------------ shutdown
    def drain(self, deadline):
        """Let queued sends finish (a receiver may still need them); True when none is left."""
        while time.monotonic() < deadline:
            with self.lock:
                if self.n_sending == 0 and not self._acks:
                    return True
                if self.transport is None or self.transport.ep.failure is not None:
                    return False
                self._kick()
            time.sleep(0.005)
        return False

    def close(self, reason):
        """Fail what is still posted (it can never complete now) and stop the progress thread."""
        with self.lock:
            self._closed = True
            for ctx in self.contexts.values():
                for p in ctx.matcher.drop_posted():
                    self.n_posted -= 1
                    p.req._finish(error=CommError(f"{p.req.what}: {reason}", op=p.req.what))
            self._work.notify_all()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    transport_address = staticmethod(_address)


_NO_FRAME = bytes(HEADER_NBYTES)  # a header no frame carries (its magic is zero)


def _readable(fd):
    """Bytes (or EOF) are waiting on fd."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(0))


def _count(dtype, nbytes):
    if dtype == DT_BYTES:
        return nbytes
    return nbytes // dtype_of(dtype).itemsize


def _fits(msg, check):
    if check is None:
        return True
    dtype, nbytes = check
    return msg.dtype == dtype or msg.dtype == DT_BYTES


def _check_fit(ctx, msg, posted, check, me):
    """MismatchError when a message does not fit the receive that matched it."""
    what = posted.req.what
    sender = ctx.world[msg.source]
    want_object = check is None
    if bool(msg.flags & FLAG_OBJECT) != want_object:
        kind = "an object (send_obj)" if msg.flags & FLAG_OBJECT else "an array (send)"
        raise MismatchError(f"rank {me}: {what} expected {'an object' if want_object else 'an array'} but rank "
                            f"{sender} sent {kind} with tag {msg.tag}", rank=sender)
    if check is not None:
        dtype, nbytes = check
        if msg.dtype != dtype and msg.dtype != DT_BYTES:
            raise MismatchError(f"rank {me}: {what} posted {dtype_name(dtype)} but rank {sender} sent "
                                f"{dtype_name(msg.dtype)} (tag {msg.tag})", rank=sender)
        if msg.nbytes > nbytes:
            raise MismatchError(f"rank {me}: {what} posted {nbytes} bytes but rank {sender} sent "
                                f"{msg.nbytes} (tag {msg.tag})", rank=sender)
