"""Failures of the point-to-point engine: which requests can never complete now, and why.

An incoming connection that closes between messages is a sender that left:
receives from it fail once everything it sent has been read (it may have
sent before leaving), and so do issends whose receiver left without
matching them. A connection that closes mid-message, a frame that is not a
point-to-point frame of its group, or the transport's sticky failure fails
everything posted or queued; the first two become the job's failure through
the transport (`PointToPoint.error`), so every rank hears of it.
"""
from .._errors import CommError, PeerLost
from .matching import ANY_SOURCE


class Failures:
    """How `p2p.Engine` fails requests: lost connections, departed ranks, protocol errors."""

    def _conn_lost(self, conn, why):
        """EOF or an error on an incoming connection: the sender left (or died)."""
        gone = self.p2p.gone(conn.src)
        if conn.msg is not None:
            self._protocol_error(conn, f"connection closed in the middle of a message "
                                       f"({gone or why or 'connection closed'})", lost=True)
            return
        # Between messages: a sender that left is an error for the receives that wait on it, in
        # every group (they all come on this connection), unless a connection it opened next
        # waits (it sent more before it left); one that is still here closed a handshake attempt
        # it gave up on, and its retry replaces this connection. If it died instead, the job's
        # notice says so.
        if not self._ended(conn) and gone is not None:
            for ctx in self.contexts.values():
                if conn.src in ctx.to_group:
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
        an issend whose receiver left without matching it. (Every servicing asks: nothing to do, and
        no rank to look at, while no rank of the job has left.)"""
        notices = self.p2p.notices
        if not notices.exits and not notices.finished:
            return
        for key in list(self._acks):
            w, _ = key
            gone = self.p2p.gone(w)
            if gone is not None and self._drained(w):
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
                if self._drained(w):
                    self._fail_posted_from(ctx, w, gone)

    def _drained(self, w):
        """Everything world rank w sent us has been read (or it never connected)."""
        conn = self._in.get(w) or self._adopt(w)
        return conn is None or conn.eof or (conn.idle and not conn.pending())

    def _out_lost(self, out):
        gone = self.p2p.gone(out.dst) or out.why
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
        conn.stop()
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
            conn.stop()
        self._partial.clear()
        self._closing.clear()  # (no last frame is read now)
