"""The receive side of the point-to-point engine: post, probe, deliver.

A receive is posted to its group's matcher (matching.py) unless a message it
matches is already there. A payload that arrives after its receive was
posted lands straight in the user's buffer (progress.py); an unexpected one
is buffered once and copied when a receive takes it. A blocking receive from
a named source first tries the fast paths (fastpath.py). Delivering checks
that the message fits its receive (an array for an array, the dtype, the
size), else the receive fails with `MismatchError`.
"""
from .._dtypes import DT_BYTES, dtype_name
from .._errors import CommError, MismatchError
from .._wire import FLAG_OBJECT
from .fastpath import FALLBACK
from .matching import ANY_SOURCE, Posted
from .requests import Request


class Receives:
    """The receive side of `p2p.Engine`: posting and probing receives, completing them."""

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
                got = FALLBACK
            if got is not FALLBACK:
                return got
        if self.transport is not None and self.transport.ep.failure is not None:
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
                if into is not None and check is not None and src not in (ANY_SOURCE, ctx.rank) and self.transport:
                    req._posted = (ctx, posted)  # its wait may take its frame in one call (_recv_posted)
            else:
                self._take(ctx, posted, msg)
            if not req._finished:
                if not block:
                    self._caller_at_work()
                self._kick(rewatch=False)
        return req.wait() if block else req

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
            self._kick(rewatch=False)
        return req.wait()

    def mprobe(self, ctx, src, tag, block):
        """A matched probe: the oldest matching message (a Message), taken out of matching so that
        no receive but `mrecv` of it can get it; None when there is none yet and not block."""
        with self.lock:
            if self.transport is not None:
                self._service_all_reads()
            posted = Posted(src, tag, probe=True, claim=True)
            msg = ctx.matcher.post(posted) if block else ctx.matcher.claim(src, tag)
            if msg is not None or not block:
                return msg
            if self.transport is None:
                ctx.matcher.cancel(posted)
                raise CommError("mprobe on a group of size 1 with no message sent to self: it would wait forever")
            posted.req = Request("mprobe", timeout=ctx.timeout, waiter=self.wait)
            self.n_posted += 1
            self._kick(rewatch=False)
        return posted.req.wait()

    def mrecv(self, ctx, msg, into, finish, *, what="mrecv", block=False, check=None, raw=False):
        """Receive the message a matched probe took, as recv() would have received it (the same
        into / finish / check / raw); its payload may still be arriving."""
        req = Request(what, timeout=ctx.timeout, waiter=self.wait)
        posted = Posted(msg.source, msg.tag, into=into, req=req, extra=(finish, check, raw))
        with self.lock:
            self._take(ctx, posted, msg)
            if not req.test():
                self._kick(rewatch=False)
        return req.wait() if block else req

    def _take(self, ctx, posted, msg):
        """The receive `posted` takes the matched message `msg`: now if it is whole, else as its
        payload completes (progress.py delivers to msg.taker)."""
        self._matched(ctx, msg)
        if msg.complete:
            payload, msg.data = msg.data, None
            self._deliver(ctx, posted, msg, payload)
        else:
            msg.taker = posted

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

    def _unpost(self, ctx, posted):
        """(lock held) A posted receive first in line for its sender leaves matching while a one-call
        step reads its frame (`_recv_posted`); `_repost` puts it back where that step does not finish."""
        ctx.matcher.posted.remove(posted)
        self.n_posted -= 1

    def _repost(self, ctx, posted):
        """(lock held) Back at the head of the queue: it was first in line for its sender, the only
        sender it matches, so no receive posted since may come before it."""
        ctx.matcher.posted.appendleft(posted)
        self.n_posted += 1

    def _cancel_posted(self, ctx, posted):
        with self.lock:
            if ctx.matcher.cancel(posted):
                self.n_posted -= 1
                return True
            return False


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
