"""The point-to-point engine: posted receives, unexpected messages, send queues.

One engine per process (plus one without a transport for the size-1 world).
Each group registers a matching context (`matching.Matcher`). One
connection each way per peer carries every group's frames: sends go into
its FIFO and are written without blocking; each frame that arrives is
matched in the group its header names; receives are posted to their group's
matcher. A frame for a group this rank has not created yet (a peer left the
split first and sent at once) is read and kept until `context()` registers
the group. Progress is made by
one progress thread while the caller computes, by a caller waiting on a
request, and, when nothing is queued or half read (`_io.P2PFast._may_call`), by a blocking
call itself on the latency path. `Engine` is this module's state and lifetime, assembled from
one part per job:

- sending.py    the send queues, sends to this rank itself, issend acknowledgements;
- receiving.py  posting and probing receives, and completing one with its message;
- fastpath.py   blocking send/recv on the calling thread, and `_io.P2PFast`'s continuations;
- progress.py   the progress thread, waiting, and servicing the connections (reads and writes
                are the transport's: `commlib._transport.p2p`);
- failures.py   which requests a lost connection or a departed rank fails, and with what.

Messages from a sender on one connection are read in order and matched in
order (non-overtaking, per group too). issend messages carry FLAG_SYNC and a per-connection
sequence number; the receiver acknowledges the match with a FLAG_ACK frame
on its own connection back.
"""
import threading
import time
import weakref

from .._dtypes import BFLOAT16, dtype_code
from .._errors import CommError
from .._kernels import address as _address
from .._lock import RLock
from .._transport import spin_seconds
from .._wire import message_header
from .failures import Failures
from .fastpath import FastPaths
from .matching import Matcher
from .progress import Progress
from .receiving import Receives
from .requests import completed
from .sending import EAGER_BYTES, Sends


class _Context:
    """A group as the engine sees it: its matcher and rank translation."""

    __slots__ = ("gid", "matcher", "world", "rank", "to_group", "timeout", "blocking")

    def __init__(self, gid, world, rank, timeout):
        self.gid, self.world, self.rank, self.timeout = gid, world, rank, timeout
        self.matcher = Matcher()
        self.to_group = {w: g for g, w in enumerate(world)}
        self.blocking = None  # its blocking send/recv (`_io.P2PFast`), once it has a transport


class Engine(Sends, Receives, FastPaths, Progress, Failures):
    """Point-to-point progress for every group of this process."""

    def __init__(self, transport=None):
        self.transport = transport
        self.p2p = transport.p2p if transport is not None else None
        self.me = transport.rank if transport is not None else 0
        self.lock = RLock()  # (threading.RLock's behaviour; the one-call path takes it from C)
        self._work = threading.Condition(self.lock)
        self.contexts = {}
        self.groups = weakref.WeakValueDictionary()  # gid -> Group, for the finalize() digest comparison
        self._in = {}  # src world -> the transport's Incoming connection (every group's frames), once adopted
        self._out = {}  # dst world -> the transport's Outgoing connection (its queue of _Send frames)
        self._seq = {}  # dst world -> sends so far on that connection (numbers issends)
        self._acks = {}  # (dst world, seq) -> _Send waiting for its acknowledgement
        self._early = {}  # gid -> [(Incoming, Message)]: frames of a group not created here yet, in order
        self.n_posted = 0  # posted receives and probes
        self.n_sending = 0  # sends queued or partly written
        self._partial = set()  # incoming connections in the middle of a frame
        self._last_tag = {}  # (gid, src) -> tag of the last message received: an ANY_TAG fast path expects it
        self._thread = None
        self._driver = None  # the caller thread driving progress from wait(), if any
        self._polling = False  # the progress thread is waiting on the poller
        self._deferring = False  # ... is letting a caller that drove progress be (progress.DEFER_S)
        self._behind_driver = False  # ... is parked while a caller drives progress (until it stops)
        self._drove_at = 0.0  # when a caller last stopped driving progress
        self._served_at = 0.0  # when every connection was last serviced (by the thread or a driving caller)
        self._waiters = 0  # callers sleeping on a request while another drives
        self.spin_s = spin_seconds() if transport is not None else 0.0
        self._closed = False
        self.poller = self.p2p.poller() if self.p2p is not None else None
        # incoming connections whose senders were asked to close them: read on until their last
        # frames come (the engine is not idle meanwhile), so their descriptors go at once
        self._closing = self.p2p.closing if self.p2p is not None else set()
        if transport is not None:  # receivers over their incoming limit ask over the coordinator
            transport.ep.notices.on_close_asked = self._on_close_asked

    def context(self, gid, world, rank, timeout):
        with self.lock:
            ctx = self.contexts.get(gid)
            if ctx is None:
                ctx = self.contexts[gid] = _Context(gid, world, rank, timeout)
                for conn, msg in self._early.pop(gid, ()):  # its frames read before it existed here
                    self._arrive_early(ctx, conn, msg)
            return ctx

    def one_call(self, ctx):
        """The blocking send/recv of group context ctx (`_io.P2PFast`): the only blocking path, one
        Cython call from the API or from send()/recv() here, continuing in `_fast_send_queue` /
        `_fast_recv_rest` when a step does not finish."""
        if ctx.blocking is None:
            ctx.blocking = self.p2p.fast_path(self, ctx, EAGER_BYTES, dtype_code, BFLOAT16, message_header)
        return ctx.blocking

    def idle(self):
        """Nothing outstanding: the progress thread has nothing to do."""
        return not (self.n_posted or self.n_sending or self._acks or self._partial or self._closing)

    def _mark(self, conn):
        """Keep the set of connections that are in the middle of a frame up to date."""
        if conn.idle:
            self._partial.discard(conn)
        else:
            self._partial.add(conn)

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
        if self.poller is not None:
            self.poller.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        if self.poller is not None:
            self.poller.close()

    transport_address = staticmethod(_address)
    completed = staticmethod(completed)  # (`_io.P2PFast`: an isend the connection took in its call)
