"""The send side of the point-to-point engine: one FIFO of frames per connection.

A blocking send, and a non-blocking one of at most EAGER_BYTES, is written by the calling
thread in one call when nothing is queued or half read, receives posted being no obstacle
(`_io.P2PFast._may_call`: an isend the connection takes whole returns a completed
Request). Otherwise a send becomes a `_Send` (a transport
Frame: its header and the user's buffers, written back to back) queued on the transport's
Outgoing connection to its destination (every group's frames, in order), written at once as far
as the connection takes it, then by whoever makes progress (progress.py). An issend's frame carries
FLAG_SYNC and the connection's next sequence number and waits in
`Engine._acks` after its last byte until the receiver's FLAG_ACK frame comes
back; this rank sends that
acknowledgement when a receive takes an issend (`_matched`). A send to this
rank itself never touches the transport: it arrives in the matcher as a
complete message.
"""
import time

import numpy as np

from .._errors import CommError
from .._transport.p2p import Frame
from .._wire import FLAG_SYNC, ack_header, message_header
from .matching import Message
from .requests import Request

EAGER_BYTES = 64 << 10  # sends up to this size complete into the socket buffer without the receiver


class _Send(Frame):
    """A queued frame and what its completion does: finish req (None: an acknowledgement), or wait for
    the receiver's acknowledgement of issend number seq."""

    __slots__ = ("req", "seq", "tag", "sync")

    def __init__(self, parts, req, seq, tag, sync):
        Frame.__init__(self, parts)
        self.req, self.seq, self.tag, self.sync = req, seq, tag, sync


def _joined(parts, nbytes):
    """The uint8 buffers `parts` copied back to back into one array of nbytes."""
    out = np.empty(nbytes, np.uint8)
    pos = 0
    for p in parts:
        out[pos:pos + p.nbytes] = np.frombuffer(p, np.uint8)
        pos += p.nbytes
    return out


def _u8(a):
    return memoryview(a).cast("B") if not isinstance(a, memoryview) else a


class Sends:
    """The send side of `p2p.Engine`: queued sends, sends to self, issend acknowledgements."""

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
        conn = self._connection(dst_w, deadline, what)
        if sync:
            flags |= FLAG_SYNC
        elif len(parts) == 1 or nbytes <= EAGER_BYTES:
            # the one-call path: a blocking send written by this thread, a small isend written now
            # (complete at once, or its rest queued from a copy); a small message of several parts
            # (a header and its data) joined into one buffer for it
            part = parts[0] if len(parts) == 1 else _joined(parts, nbytes)
            fast = self.one_call(ctx)
            if block:
                if fast.send_bytes(conn, part, self.transport_address(part), nbytes, dst, tag, dtype, count, flags,
                                   what) is None:
                    return None
            elif nbytes <= EAGER_BYTES:
                req = fast.isend_bytes(conn, part, self.transport_address(part), nbytes, dst, tag, dtype, count,
                                       flags, what)
                if req is not NotImplemented:
                    return req
        req = self._queue_send(ctx, dst_w, conn, parts, nbytes, tag, dtype, count, flags, what, timeout)
        if block:
            req.wait()
            return None
        return req

    def _queue_send(self, ctx, dst_w, conn, parts, nbytes, tag, dtype, count, flags, what, timeout, sent=0,
                    seq=None):
        req = Request(what, timeout=timeout, waiter=self.wait)
        with self.lock:
            out = self._out_conn(dst_w, conn, time.monotonic() + timeout, what)
            if seq is None:
                n = self._seq[dst_w] = self._seq.get(dst_w, 0) + 1
                seq = n if flags & FLAG_SYNC else 0
            hdr = message_header(group=ctx.gid, source=ctx.rank, tag=tag, dtype=dtype, count=count, nbytes=nbytes,
                                 flags=flags, seq=seq)
            s = _Send([memoryview(hdr)] + [_u8(p) for p in parts], req, seq, tag, bool(flags & FLAG_SYNC))
            s.pos = sent
            self._enqueue(out, s)
        return req

    def connected(self, ctx, dst):
        """Whether a send to group rank dst can start now, without waiting to open a connection."""
        return dst == ctx.rank or self.p2p.connected(ctx.world[dst])

    def _connection(self, dst_w, deadline, what):
        """The Outgoing connection to world rank dst_w, opened on first use; opening one beyond the
        idle-connection limit closes the least recently used idle ones (p2p.MAX_CONNECTIONS)."""
        conn = self.p2p.outgoing(dst_w, deadline, what)
        if self.p2p.over_limit():
            with self.lock:
                for d in self.p2p.retire_idle(keep=dst_w):
                    self._out.pop(d, None)
        return conn

    def _on_close_asked(self, peer):
        """World rank `peer`'s receiver asked us to close our connection to it (over its incoming
        limit; the coordinator's notice, on its listener thread): closed now if the engine's lock is
        free, else by whoever holds it, at its next servicing (a blocking step is never waited on)."""
        self.p2p.asked.add(peer)
        if self.lock.acquire(blocking=False):
            try:
                self._close_asked()
            finally:
                self.lock.release()
        elif self.poller is not None:
            self.poller.wake()

    def _close_asked(self):
        """(lock held) Close the connections whose receivers asked, those idle and flushed."""
        if self._closed:
            self.p2p.asked.clear()
            return
        for d in self.p2p.close_asked():
            self._out.pop(d, None)

    def _out_conn(self, dst_w, conn, deadline, what):
        """The Outgoing connection to world rank dst_w whose queue this engine writes (lock held):
        `conn`, or a new one where conn was closed for being idle since the caller took it."""
        out = self._out.get(dst_w)
        if out is None:
            if conn.retired:
                conn = self.p2p.outgoing(dst_w, deadline, what)
            out = self._out[dst_w] = conn
        return out

    def _enqueue(self, out, s):
        """Queue a frame behind the connection's others, writing at once what the connection takes."""
        out.queue.append(s)
        self.n_sending += 1
        if len(out.queue) == 1:
            self._write(out)
        if not self.idle():
            self._kick(rewatch=bool(out.queue))  # (written whole: nothing new to watch)

    def _send_local(self, ctx, parts, nbytes, tag, dtype, count, flags, sync, what, block):
        data = _joined(parts, nbytes)
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

    def _matched(self, ctx, msg):
        """A receive took msg: acknowledge it if the sender waits for that (issend)."""
        if not msg.flags & FLAG_SYNC:
            return
        if msg.local_sender is not None:  # a send to self: no acknowledgement frame
            msg.local_sender._finish(None)
            return
        src_w = ctx.world[msg.source]
        deadline, what = time.monotonic() + ctx.timeout, "issend acknowledgement"
        conn = self.p2p.outgoing(src_w, deadline, what)
        ack = _Send([memoryview(ack_header(group=ctx.gid, source=ctx.rank, tag=msg.tag, seq=msg.seq))],
                    None, msg.seq, msg.tag, False)
        self._enqueue(self._out_conn(src_w, conn, deadline, what), ack)
