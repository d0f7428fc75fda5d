"""The blocking path's continuations: what the engine does when a step does not finish.

Every blocking send, and every blocking receive of a known size from a named
source, is `_io.P2PFast` (`Engine.one_call`): when nothing is queued, half
read or driven by another thread (`_io.P2PFast._may_call`: receives posted in other
groups are no obstacle, a receive's own group must have none) it runs steps
of the transport's C loop straight between the connection and the user's
buffer, with no queue and no progress thread (the latency path), from the
API in one call or from `Engine.send`/`recv`. Every FAST_PATH_SLICE_S
without progress a step stops; then, if other work was posted meanwhile (or,
for a send, it is stuck mid-frame, the receiver perhaps sending to us), what
remains goes to the engine here: a send's rest is queued first in line
(`_fast_send_queue`), and a receive goes on stepping (`_fast_recv_rest`)
until its frame is in or a frame that is not this receive's comes first,
which goes to the engine with its header already read. A blocking receive
of any size (commlib.MPI's recv() of an object) reads the header first, as
steps of the same loop (`_recv_fast_sized`).
"""
import time

import numpy as np

from .._dtypes import DT_BYTES
from .._errors import PeerLost
from .._wire import FLAG_ACK, FLAG_BYE, HEADER_NBYTES, KIND_P2P, ProtocolError, decode
from .matching import ANY_TAG, Message, matches

FALLBACK = object()  # a fast path's answer: the engine must serve this one
_NO_STEP = object()  # _step_frame: no step taken yet
_NO_FRAME = bytes(HEADER_NBYTES)  # a header no frame carries (its magic is zero)


class FastPaths:
    """The blocking receives of `p2p.Engine` and the continuations of `_io.P2PFast`."""

    def _recv_fast(self, ctx, src, tag, into, finish, what, check):
        """A blocking receive of a known size from src, through the one blocking path (`_io.P2PFast`)."""
        tag = self._expected_tag(ctx, src, tag)
        dtype, nbytes = check if check is not None else (DT_BYTES, into.nbytes)
        count = self.one_call(ctx).recv_bytes(into, self.transport_address(into), nbytes, src, tag, dtype, what)
        if count is NotImplemented:
            return FALLBACK
        return finish(Message(src, tag, nbytes, dtype, count), into)

    def _expected_tag(self, ctx, src, tag):
        """The tag a one-call receive's header expects: for ANY_TAG the one this source used last (any
        other frame hands over to the engine, which matches it). Only a user's tag (>= 0): the hint may
        hold the negative tag of a layer's own receive, whose frame an ANY_TAG receive must never take."""
        if tag != ANY_TAG:
            return tag
        hint = self._last_tag.get((ctx.gid, src), 0)
        return hint if hint >= 0 else 0

    def _recv_posted(self, req, deadline):
        """A wait on a posted receive of a known size from a named source (an irecv) that is first in
        line for that source in its group: its frame through the same one blocking path, straight into
        its buffer. True once the request completed here; False: the engine serves it (a frame that is
        not its own came first, other work is queued, a receive posted before it could match, or it
        completed meanwhile: another thread's progress may finish it, and clear its slot, any time)."""
        slot = req._posted  # (read once: None once it completed)
        if slot is None or self.transport.ep.failure is not None:
            return False
        ctx, posted = slot
        finish, check, raw = posted.extra
        src, into = posted.source, posted.into
        tag = self._expected_tag(ctx, src, posted.tag)
        dtype, nbytes = check
        if deadline is None:
            deadline = time.monotonic() + ctx.timeout
        count = self.one_call(ctx).recv_posted(posted, into, self.transport_address(into), nbytes, src, tag, dtype,
                                               req.what, deadline)
        if count is NotImplemented:
            return False
        try:  # (its frame was the header expected, so it fits: no _check_fit)
            req._finish(finish(Message(src, tag, nbytes, dtype, count), into))
        except Exception as exc:  # the layer above reports it: the receive's error
            req._finish(error=exc)
        return True

    def _step_frame(self, conn, expect, addr, nbytes, deadline, what, src_w, first=_NO_STEP, saved=None):
        """Steps of the C loop reading the frame `expect` + nbytes into addr from a busy connection.

        Returns None once it arrived; the header of another frame that came instead (no payload
        byte read); or FALLBACK when other work appeared, or another connection has bytes waiting,
        before any byte of the frame (the engine then serves this receive with the rest). `first`:
        what a first step already taken (by `_io.P2PFast`) returned, `saved` the stepper's state it
        stopped in. The stepper is shared: between steps, with the lock let go, another thread's
        blocking send or receive may use it, so each step resumes from the state the last one saved.
        """
        notices, p2p = self.p2p.notices, self.p2p
        resume = False
        got = first
        while True:
            departed = False
            with self.lock:
                if got is _NO_STEP:
                    if not resume and not self.idle():
                        return FALLBACK
                    notices.current = (what, src_w, None)
                    try:
                        if resume:
                            p2p.restore_step(saved)
                        got = p2p.recv_step(conn, expect, addr, nbytes, deadline, what, src_w, resume)
                        if type(got) is int:
                            saved = p2p.save_step()
                    finally:
                        notices.current = None
                if got is None or isinstance(got, bytes):
                    return got
                if got == 0 and (not self.idle() or self._others_waiting(conn)):
                    return FALLBACK
                departed = got == 0 and not resume and self.p2p.finishing(src_w)
                resume = got > 0 or resume
                got = _NO_STEP
            if departed:  # why it left (its exit code, once the launcher reports it): without the lock
                raise PeerLost(f"rank {self.me}: {what} lost rank {src_w} ({notices.departure(src_w)})",
                               rank=src_w, op=what)

    def _others_waiting(self, conn):
        """(lock held) Whether an incoming connection other than conn has bytes waiting: its sender
        may be stuck writing to this rank (ranks that each send before they receive), and only the
        engine's loop reads every connection while it waits, so a receive that has read nothing of
        its frame for a slice hands itself over."""
        return any(c is not conn and not c.busy and c.pending() for c in self._in.values())

    # `_io.P2PFast` runs every blocking send and receive; a step that does not finish goes on here.
    def _fast_send_queue(self, ctx, dst, buf, nbytes, tag, dtype, count, flags, what, sent):
        """The rest of a one-call send stuck `sent` bytes into its frame (0: before its first byte; lock
        held): queued first in line, the engine writes it; a blocking caller waits on the Request
        returned, an isend returns it (its data then a copy of the caller's)."""
        dst_w = ctx.world[dst]
        conn = self.p2p.outgoing(dst_w, time.monotonic() + ctx.timeout, what)
        part = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else buf
        return self._queue_send(ctx, dst_w, conn, [part], nbytes, tag, dtype, count, flags, what,
                                ctx.timeout, sent=sent, seq=0)

    def _fast_recv_rest(self, ctx, conn, src, src_w, tag, expect, out, nbytes, what, deadline, rc, saved,
                        posted=None):
        """A one-call receive whose first step stopped with status rc, on `conn` (claimed busy), the
        stepper then in state `saved`: the result, or NotImplemented when the engine must serve it
        (nothing of its frame was read). posted: a posted receive out of matching meanwhile
        (`_recv_posted`), back in line first where its frame is not taken here."""
        try:
            with self.lock:
                self.p2p.restore_step(saved)
                got = self.p2p.recv_status(rc, what, src_w, nbytes)
            got = self._step_frame(conn, expect, self.transport_address(out), nbytes, deadline, what, src_w,
                                   first=got, saved=saved)
            if got is None:
                self._last_tag[ctx.gid, src] = tag
                posted = None
                return out
            if posted is not None:  # before the frame that came instead is matched: it may be this receive's
                with self.lock:
                    self._repost(ctx, posted)
                posted = None
            if got is not FALLBACK:
                self._hand_over(conn, got)  # another frame came first: the engine takes it from here
            return NotImplemented
        finally:
            if posted is not None:  # an error: back in line, where the engine fails it with the others
                with self.lock:
                    self._repost(ctx, posted)
            conn.busy = False
            conn.last = time.monotonic()  # (the incoming limit's idea of when it was last used)

    def _hand_over(self, conn, header):
        """A header a fast path read but does not take: the engine goes on with that frame."""
        with self.lock:
            conn.header = header
            conn.busy = False
            self._header_done(conn)
            self._mark(conn)

    def _recv_fast_sized(self, ctx, src, tag, finish, what):
        """A blocking receive of a message of any size from a named source (commlib.MPI's recv() of an
        object): the header, then a buffer of its size, then the payload, in one call of `_io.P2PFast`
        (`recv_sized`) as a rule; where one of its steps stopped midway, the rest here, as steps of the C loop.

        Reading "expecting" a header no frame can carry returns the real one with no payload byte
        read; a frame this receive does not take (another tag, an acknowledgement) goes to the
        engine exactly as the plain fast path hands over a mismatch.
        """
        got = self.one_call(ctx).recv_sized(src, tag, what)  # the whole of it in one call, as a rule
        if got is None or got is NotImplemented:
            return FALLBACK
        if got[0] == "done":
            _, tag, dtype, count, payload = got
            return finish(Message(src, tag, payload.nbytes, dtype, count), payload)
        src_w = ctx.world[src]
        deadline = time.monotonic() + ctx.timeout
        conn = got[1]  # (claimed by the call: busy until this receive is done with it)
        try:
            if got[0] == "header":  # its header's step stopped midway or found nothing in its slice: go on
                _, _, rc, saved = got
                with self.lock:
                    self.p2p.restore_step(saved)
                    first = self.p2p.recv_status(rc, what, src_w, 0)
                return self._read_sized(ctx, conn, src, src_w, tag, finish, what, deadline, first, saved)
            _, _, (tag, dtype, count, nbytes), payload, rc, saved = got  # its payload's step did
            msg = Message(src, tag, nbytes, dtype, count)
            with self.lock:
                self.p2p.restore_step(saved)
                self.p2p.recv_status(rc, what, src_w, nbytes)  # (raises what a failed step means)
            self._read_payload(conn, payload, deadline, what, src_w, saved)
            return finish(msg, payload)
        finally:
            conn.busy = False
            conn.last = time.monotonic()  # (the incoming limit's idea of when it was last used)

    def _read_sized(self, ctx, conn, src, src_w, tag, finish, what, deadline, first, saved):
        """The rest of a sized receive whose header's step (`P2PFast.recv_sized`) returned `first`
        (recv_status's answer) with the stepper's state `saved`."""
        got = self._step_frame(conn, _NO_FRAME, 0, 0, deadline, what, src_w, first=first, saved=saved)
        if got is FALLBACK:
            return got
        if got is None:
            with self.lock:
                self._protocol_error(conn, "a frame of all-zero bytes")
            return FALLBACK
        try:
            h = decode(got)
        except ProtocolError:
            h = None
        if (h is None or h.kind != KIND_P2P or h.group != ctx.gid or h.flags & (FLAG_ACK | FLAG_BYE)
                or not matches(src, tag, h.root, h.tag)):
            self._hand_over(conn, got)  # not this receive's (or not a frame at all: the engine says so)
            return FALLBACK
        msg = Message(src, h.tag, h.nbytes, h.dtype, h.count, h.flags, h.seq)
        with self.lock:
            self._matched(ctx, msg)  # an issend's acknowledgement
            self._last_tag[ctx.gid, src] = h.tag
        payload = np.empty(h.nbytes, dtype=np.uint8)
        if h.nbytes:
            self._read_payload(conn, payload, deadline, what, src_w, None)
        return finish(msg, payload)

    def _read_payload(self, conn, payload, deadline, what, src_w, saved):
        """Steps reading the payload of the frame whose header was read into `payload` (uint8); saved:
        the state a first step stopped in (None: no payload step yet)."""
        addr, resume, p2p = self.transport_address(payload), saved is not None, self.p2p
        while True:
            with self.lock:  # (each step resumes from the state the last saved: see _step_frame)
                if resume:
                    p2p.restore_step(saved)
                got = p2p.recv_step(conn, None, addr, payload.nbytes, deadline, what, src_w, resume)
                if got is not None:
                    saved = p2p.save_step()
            if got is None:
                return
            resume = True


