"""Progress: servicing every point-to-point connection without blocking.

Progress is made by one progress thread, which runs only while there is work
outstanding (a posted receive or probe, a queued or unacknowledged send, a
message half read) and nobody is waiting, so the caller can compute while
messages move and any number of requests complete in any order of wait; and
by a caller waiting on a request, which waits on the transport's poller and
services the connections itself (no hand-off to the thread, which parks
meanwhile, and for DEFER_S after: a program that waits again at once, in a
ping-pong or an RMA epoch, never shares its connections with the thread).
Either one waits on every connection with work, then, under the
engine lock and never blocking, adopts new connections, has them read
headers and payloads (matching each header as it completes, and naming
where its payload goes) and write queued frames. The bytes move in the
transport (`commlib._transport.p2p`); this module decides what they mean.
"""
import threading
import time

import numpy as np

from .._dtypes import DT_BYTES
from .._errors import CommError, CommTimeout
from .._transport.limits import thread_limit_text
from .._transport.p2p import AGAIN, ARRIVED, HEADER, LOST, PAYLOAD, SENT
from .._wire import FLAG_ACK, FLAG_BYE, KIND_P2P, ProtocolError, decode
from .matching import Message

_READS_PER_SERVICE = 64  # bound the reads per connection per pass, so one sender cannot starve others
# After a waiting caller drove progress, the thread lets it be for this long before it watches the
# connections itself: a caller that waits again at once (a ping-pong, an RMA epoch's round trips)
# would otherwise share every message with a second thread woken by the same bytes.
DEFER_S = 0.001
# ... but not for longer than this since the connections were last serviced: a program that posts
# receives (or makes one-call sends) more often than DEFER_S without ever waiting would otherwise
# keep the thread away for good, and messages it only tests for would never complete.
DEFER_MAX_S = 0.005
# A waiting caller sleeps in the poller this long at most: its frames and the job's failure wake
# the poller, but another thread may complete what it waits for unseen (a send to itself, a
# collective stream's request in a wait_any, a window's service).
DRIVE_SLICE_S = 0.05


class Progress:
    """How `p2p.Engine` moves bytes: the progress thread, a waiting caller, the connections they service."""

    def _kick(self, rewatch=True):
        """Wake the progress thread (starting it on first use). rewatch: what it waits on changed
        (frames queued to write), so a wait in progress starts again; a receive posted changes
        nothing the thread watches (it watches every incoming connection while work is out)."""
        if self.transport is None:
            return
        if self._thread is None:
            thread = threading.Thread(target=self._run, name="commlib-progress", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # this call fails; a later one tries again
                raise CommError(f"rank {self.transport.ep.rank}: no thread for point-to-point progress "
                                f"({exc}: {thread_limit_text()})") from None
            self._thread = thread
        if self._deferring:  # it looks again within DEFER_S
            return
        self._work.notify_all()
        if rewatch and (self._polling or self._driver is not None):  # a wait on a stale set: interrupt it
            self.poller.wake()

    def _run(self):
        while True:
            with self.lock:
                # Park while idle, and while a waiting caller drives progress itself (it notifies
                # when it stops: _stop_driving); then let it be for DEFER_S more, looking again when
                # that ends (the caller does not wake it: it may wait again).
                while not self._closed:
                    if self.idle():
                        self._work.wait()
                        self._served_at = time.monotonic()  # (nothing was outstanding until now)
                        continue
                    if self._driver is not None:
                        self._behind_driver = True
                        try:
                            self._work.wait()
                        finally:
                            self._behind_driver = False
                        continue
                    now = time.monotonic()
                    rest = min(self._drove_at + DEFER_S, self._served_at + DEFER_MAX_S) - now
                    if rest <= 0:
                        break
                    self._deferring = True
                    try:
                        self._work.wait(rest)
                    finally:
                        self._deferring = False
                if self._closed:
                    return
                self._polling = True
            try:
                self._poll_once(200)
            finally:
                self._polling = False
                self._served_at = time.monotonic()

    def wait(self, req, deadline, any_of=None):
        """Wait for req (or any of `any_of`) until deadline, driving progress meanwhile (or, while
        another caller drives, sleeping on the request)."""
        if self.transport is None:
            if any_of is None and not req.test():
                raise CommError(f"{req.what} on a group of size 1 can never complete: nothing was sent to it")
            return
        if any_of is None and req._posted is not None and self._recv_posted(req, deadline):
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
            if not self._start_driving():  # another caller drives: the result arrives on the request's event
                with self.lock:
                    self._waiters += 1
                    if not self.idle():
                        self._kick()
                try:
                    req._done.wait(max(0.0, slice_end - now))
                finally:
                    with self.lock:
                        self._waiters -= 1
                continue
            try:  # (to the end of the wait: each stop and start costs the thread a wake-up)
                self._drive(lambda: any(r.test() for r in watch), deadline)
            finally:
                self._stop_driving()

    def progress_until(self, ready, until):
        """Make progress from this thread until ready() holds or the monotonic time `until` passes
        (a caller waiting for what no request stands for: a window's counts and locks). False, at
        once, when another thread drives progress (the caller then sleeps its own way)."""
        if self.transport is None or not self._start_driving():
            return False
        try:
            self._drive(ready, until)
        finally:
            self._stop_driving()
        return True

    def progress_once(self):
        """One servicing pass by this thread, without waiting, unless another thread drives progress
        (then False): what a poll of a partition (Parrived) does, so that a loop that only polls sees
        its message as soon as it is in, not when the progress thread next looks."""
        if self.transport is None or not self._start_driving():
            return False
        try:
            self._poll_once(0)
        finally:
            self._stop_driving()
        return True

    def _start_driving(self):
        """Make this thread the one driving progress; False when another already does (or the engine
        closed). The progress thread leaves its wait on these connections, and defers."""
        with self.lock:
            if self._driver is not None or self._closed:
                return False
            self._driver = threading.current_thread()
            if self._polling:
                self.poller.wake()
        return True

    def _caller_at_work(self):
        """(lock held) A caller is at work in the engine (a one-call step, receives being posted): the
        thread leaves a wait it is in and defers to it (DEFER_S), as after a caller drove progress, so
        that a program posting receives and then waiting on them reads its frames itself rather than
        racing a second thread for them and for the lock."""
        if threading.current_thread() is self._thread:  # the thread at work itself (a window's service)
            return
        self._drove_at = time.monotonic()
        if self._polling:
            self.poller.wake()

    def _stop_driving(self):
        with self.lock:
            self._driver = None
            self._served_at = time.monotonic()  # (the caller serviced every connection while it drove)
            if self._waiters:  # callers sleep on requests this one no longer serves: the thread, now
                self._drove_at = 0.0
                self._work.notify_all()
            else:
                self._drove_at = time.monotonic()
                if self._behind_driver:  # it parked while this caller drove: it defers from now on
                    self._work.notify_all()
            if not self.idle():
                self._kick()  # the progress thread takes over (after DEFER_S), on a fresh set

    def _drive(self, done, until):
        """The waiting caller makes progress itself (no hand-off to the progress thread) until
        done(), the monotonic time `until` (None: no limit) or the job's failure: spin on
        zero-timeout waits for spin_s, then sleep in the poller until something is ready, or
        DRIVE_SLICE_S passed."""
        spin_until = time.monotonic() + self.spin_s
        while not done():
            now = time.monotonic()
            if until is not None and now >= until or self.transport.ep.failure is not None:
                return
            if now < spin_until:
                timeout_ms = 0
            else:
                rest = DRIVE_SLICE_S if until is None else min(DRIVE_SLICE_S, until - now)
                timeout_ms = max(1, int(rest * 1000))
            self._poll_once(timeout_ms)

    def _timeout(self, req):
        ep = self.transport.ep
        exc = CommTimeout(f"rank {self.me}: {req.what} did not complete within {req.timeout:g} s"
                          + ep.stall_report(), op=req.what)
        return self.p2p.error(exc)

    def _poll_once(self, timeout_ms):
        """Wait on every connection with work once (no lock held while waiting), then service them.

        The progress thread and a waiting caller may both be here: servicing
        happens under the lock and never blocks, so the one that finds nothing
        to read simply waits again. Returns whether anything was ready.
        """
        with self.lock:
            if self._closed:
                return False
            watched = self.poller.watch(self._in.values(), self._out.values())
        ready = self.poller.wait(watched, timeout_ms)
        if ready is None:
            return False
        with self.lock:
            if self._closed:
                return False
            self.poller.clear_wake()
            self._service(ready)
        return bool(ready)

    def _service(self, ready):
        failure = self.transport.ep.failure
        if failure is not None:
            self._fail_all(failure)
            return
        if ARRIVED in ready:
            self.poller.clear_arrivals()
            self._adopt_all()
        for conn in list(self._in.values()):
            if conn in ready or not conn.idle:
                self._read(conn)
        for out in list(self._out.values()):
            if out.queue:
                self._write(out)
        self._check_departed()
        self._limit_connections()

    def _service_all_reads(self):
        self._adopt_all()
        for conn in list(self._in.values()):
            self._read(conn)
        self._limit_connections()

    def _limit_connections(self):
        """The idle-connection limit's servicing: close the connections whose receivers asked while
        the lock was taken (Sends._on_close_asked); over the limit on incoming ones, ask senders."""
        p2p = self.p2p
        if p2p.asked:
            self._close_asked()
        if p2p.closing:
            p2p.expire_asks()
        if len(self._in) > p2p.max_connections:
            p2p.ask_idle(self._in.values())

    def _adopt_all(self):
        for src, conn in self.p2p.incoming().items():
            old = self._in.get(src)
            if old is not conn:  # new, or the transport replaced a dead attempt
                self._partial.discard(old)
                self._in[src] = conn

    def _ended(self, conn):
        """Incoming conn ended between frames: forget it, adopting the connection its sender opened
        next if one waits. Returns whether one did."""
        if self._in.get(conn.src) is conn:
            del self._in[conn.src]
        self._partial.discard(conn)
        if not self.p2p.ended(conn):
            return False
        self._adopt(conn.src)
        return True

    def _adopt(self, src):
        conn = self.p2p.incoming().get(src)
        if conn is not None:
            self._in[src] = conn
            if len(self._in) > self.p2p.max_connections:
                self._limit_incoming()
        return conn

    def _limit_incoming(self):
        """(lock held) Over the incoming limit, from a blocking receive, which never services:
        ask senders to close idle connections, and have the thread read on for their last frames."""
        if self.p2p.ask_idle(self._in.values()):
            self._kick()

    def _read(self, conn):
        if conn.busy:
            return
        try:
            self._read_some(conn)
        finally:
            self._mark(conn)

    def _read_some(self, conn):
        for _ in range(_READS_PER_SERVICE):
            if conn.eof:
                return
            got = conn.read()
            if got == AGAIN:
                return
            if got == LOST:
                self._conn_lost(conn, conn.why)
                return
            if got == HEADER:
                self._header_done(conn)
            elif got == PAYLOAD:
                self._payload_done(conn)

    def _header_done(self, conn):
        """conn read a whole header: match it in the group it names and say where its payload goes."""
        try:
            h = decode(conn.header)
        except ProtocolError as exc:
            self._protocol_error(conn, str(exc))
            return
        if h.kind != KIND_P2P:
            self._protocol_error(conn, f"unexpected frame {h!r}")
            return
        if h.flags & FLAG_BYE:  # its sender closed it for being idle: the next frames come on a new one
            if h.root != conn.src or h.nbytes:
                self._protocol_error(conn, f"a closing frame that is not rank {conn.src}'s: {h!r}")
                return
            self._ended(conn)
            return
        conn.frame_gid = h.group
        ctx = self.contexts.get(h.group)
        if ctx is None:  # a group not created here yet: read it aside until context() registers it
            if h.flags & FLAG_ACK:  # (an acknowledgement answers a send of a group this rank has)
                self._protocol_error(conn, f"acknowledgement for group {h.group:#x}, which this rank does not have")
                return
            msg = Message(h.root, h.tag, h.nbytes, h.dtype, h.count, h.flags, h.seq)
            self._early.setdefault(h.group, []).append((conn, msg))
            self._receive_aside(conn, msg)
            return
        if h.root != ctx.to_group.get(conn.src):
            self._protocol_error(conn, f"unexpected frame {h!r} (rank {conn.src} is not rank {h.root} of "
                                       f"group {h.group:#x})")
            return
        if h.flags & FLAG_ACK:
            s = self._acks.pop((conn.src, h.seq), None)
            if s is not None:
                self.n_sending -= 1
                s.req._finish(None)
            return
        msg = Message(h.root, h.tag, h.nbytes, h.dtype, h.count, h.flags, h.seq)
        taker, probes = ctx.matcher.arrive(msg)
        self._satisfy_probes(ctx, probes, msg)
        if taker is not None:
            self.n_posted -= 1
            msg.taker = taker
            self._matched(ctx, msg)
            finish, check, raw = taker.extra
            if taker.into is not None and msg.nbytes <= taker.into.nbytes and (raw or _fits(msg, check)):
                view = memoryview(taker.into)[:msg.nbytes]
            else:
                msg.data = np.empty(msg.nbytes, dtype=np.uint8)
                view = memoryview(msg.data)
        else:
            self._receive_aside(conn, msg)
            return
        conn.msg = msg
        if msg.nbytes == 0:
            self._payload_done(conn)
        else:
            conn.receive_into(view)

    def _receive_aside(self, conn, msg):
        """Read msg's payload into a buffer of its own (no receive has taken it yet)."""
        msg.data = np.empty(msg.nbytes, dtype=np.uint8)
        conn.msg = msg
        if msg.nbytes == 0:
            self._payload_done(conn)
        else:
            conn.receive_into(memoryview(msg.data))

    def _arrive_early(self, ctx, conn, msg):
        """A frame read before its group existed here, now that it does (in the order they came)."""
        if msg.source != ctx.to_group.get(conn.src):
            self._protocol_error(conn, f"a frame from rank {conn.src} for group {ctx.gid:#x} as its rank "
                                       f"{msg.source}, which it is not")
            return
        taker, probes = ctx.matcher.arrive(msg)  # (a new group: nothing posted nor probing yet)
        self._satisfy_probes(ctx, probes, msg)
        if taker is not None:
            self.n_posted -= 1
            self._take(ctx, taker, msg)

    def _payload_done(self, conn):
        msg = conn.msg
        conn.msg = None
        msg.complete = True
        if msg.taker is not None:
            ctx = self.contexts[conn.frame_gid]
            taker, msg.taker = msg.taker, None
            payload = msg.data if msg.data is not None else taker.into
            msg.data = None
            self._deliver(ctx, taker, msg, payload)

    def _write(self, out):
        while out.queue:
            s = out.queue[0]
            got = out.write()
            if got != SENT:
                if got == LOST:
                    self._out_lost(out)
                return
            if s.req is None:  # an acknowledgement
                self.n_sending -= 1
            elif s.sync:
                self._acks[(out.dst, s.seq)] = s
            else:
                self.n_sending -= 1
                s.req._finish(None)


def _fits(msg, check):
    if check is None:
        return True
    dtype, nbytes = check
    return msg.dtype == dtype or msg.dtype == DT_BYTES
