"""The point-to-point channel over sockets: per-peer connections that never block, and a poller.

What: the byte side of the matching engine (`commlib._engine`). Each
connection carries frames in one direction (sockets.py): a 56-byte header
(`commlib._wire`) then its payload. The engine decides what a frame means
and where its payload goes; this module only moves the bytes:

- `Incoming` reads one frame at a time without blocking: `read()` does at
  most one read and says what happened (nothing to read, some bytes, a
  header arrived, the payload is done, the connection is lost). After a
  header the engine names the payload's destination (`receive_into`).
- `Outgoing` writes its FIFO of `Frame`s (each a list of buffers, written
  back to back with one sendmsg) as far as the socket takes them.
- `Poller` waits until a connection can be read or written, a connection
  arrives, the process fails, or someone calls `wake()`.
- `PointToPoint` hands out these objects per peer (one connection each way,
  shared by every group: each header names its group), builds the
  blocking send/recv (`_io.P2PFast`) and runs the receive step its
  continuations take (an expected frame straight into its destination).

Goals: no read or write ever blocks (a waiting caller and the progress
thread share the connections under the engine's lock), and a payload is read
straight into the buffer the engine names, never copied here.
"""
import collections
import contextlib
import heapq
import os
import select
import socket
import threading
import time

import numpy as np

from .. import _debug
from .._errors import CommError
from .._wire import HEADER_NBYTES, bye_header
from . import _io
from .diagnose import status_error
from .sockets import CH_P2P, SHARED_GID, SIOCOUTQ, SIOCOUTQNSD, send_queue_bytes

# An idle-connection limit: beyond MAX_CONNECTIONS outgoing point-to-point connections (a rank that
# sends to every other: a manager and its workers), the least recently used one that has sent
# nothing for IDLE_S and whose bytes its receiver has all taken is closed, its last frame saying so
# (FLAG_BYE); a later send to that peer opens a new one. The receiver closes its end when it reads
# that frame. IDLE_S keeps a rank that cycles through more peers than the limit from reconnecting
# on every send: those connections stay open (the limit is then exceeded, not enforced).
MAX_CONNECTIONS = 256  # COMMLIB_P2P_CONNECTIONS
IDLE_S = 1.0  # COMMLIB_P2P_IDLE_S
# The same limit on incoming connections (a manager answered by thousands of workers): beyond it the
# receiver asks the senders of its least recently used idle ones (nothing read for IDLE_S, nothing
# unread) to close them, over the coordinator ("close_asked"); each sender closes its connection as
# it would for its own limit, if it has not used it since. It looks when a connection arrives and
# when it services its connections, after a look that found none to ask at most every ASK_EVERY_S,
# and asks a sender again (it kept its connection: it was sending) after ASK_AGAIN_S.
ASK_EVERY_S = 0.1
ASK_AGAIN_S = 1.0

FAST_PATH_SLICE_S = 0.02  # a blocking fast path gives the engine a chance to take over this often

# What one Incoming.read() or Outgoing.write() did.
AGAIN = 0  # the socket has nothing to read / no room: wait for the poller
MORE = 1  # some bytes moved, the header or payload is not complete yet
HEADER = 2  # a whole header arrived: it is in `.header`; the engine calls receive_into() (or not, for 0 bytes)
PAYLOAD = 3  # the payload filled its destination
SENT = 4  # the frame at the head of the queue is written to its last byte (and taken off the queue)
LOST = 5  # EOF or an error: the connection is done (`.why`: the OS's words, None for a clean EOF)

ARRIVED = "arrived"  # in Poller.wait()'s answer: a new incoming connection was registered
READY = "ready"  # ... something else (room to write, a wake-up, a failure) was


class Frame:
    """One outgoing frame: buffers written back to back, `pos` bytes of `total` written so far."""

    __slots__ = ("parts", "total", "pos")

    def __init__(self, parts):
        self.parts = parts
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


class Incoming:
    """One incoming point-to-point connection (from world rank src, every group's frames) and its
    read state.

    `msg` and `frame_gid` belong to the reader's owner (the engine's record of the frame whose
    payload is being read, and the group its header named); `busy` is set while a blocking reader reads the socket
    itself, so the poller leaves it out.
    """

    __slots__ = ("sock", "fd", "frame_gid", "src", "header", "_hbuf", "_hview", "_hpos", "_view", "_pos", "msg", "eof",
                 "busy", "why", "linked", "_recv_into", "last", "asked")

    def __init__(self, sock, src):
        self.sock, self.fd, self.src = sock, sock.fileno(), src
        self.frame_gid = None
        # a shared-memory link reads its ring (shm.py); a plain socket, the socket
        fd = self.fd
        self.linked = _io.shm_linked(fd)
        self._recv_into = (lambda view: _io.link_recv_into(fd, view)) if self.linked else sock.recv_into
        self._hbuf = bytearray(HEADER_NBYTES)
        self._hview = memoryview(self._hbuf)
        self._hpos = 0
        self.header = None  # the last whole header read (bytes)
        self._view = None  # where the current payload lands
        self._pos = 0
        self.msg = None
        self.eof = False
        self.busy = False
        self.why = None
        self.last = time.monotonic()  # when its last header arrived (a blocking receive notes it too)
        self.asked = 0.0  # when its sender was last asked to close it (the incoming limit)

    @property
    def idle(self):
        """Between frames: no header byte and no payload outstanding."""
        return self._hpos == 0 and self._view is None

    def read(self):
        """One read without blocking: AGAIN, MORE, HEADER, PAYLOAD or LOST (see the constants)."""
        try:
            if self._view is None:
                n = self._recv_into(self._hview[self._hpos:])
            else:
                n = self._recv_into(self._view[self._pos:])
        except BlockingIOError:
            return AGAIN
        except OSError as exc:
            self.eof, self.why = True, str(exc)
            return LOST
        if n == 0:
            self.eof, self.why = True, None
            return LOST
        if self._view is None:
            self._hpos += n
            if self._hpos < HEADER_NBYTES:
                return MORE
            self._hpos = 0
            self.header = bytes(self._hbuf)
            self.last = time.monotonic()
            return HEADER
        self._pos += n
        if self._pos < len(self._view):
            return MORE
        self._view, self._pos = None, 0
        return PAYLOAD

    def receive_into(self, view):
        """The payload of the header just read goes into `view` (a writable uint8 memoryview, not empty)."""
        self._view, self._pos = view, 0

    def stop(self):
        """Read nothing more from this connection (it broke the protocol, or the process failed)."""
        self.eof = True
        self._view, self._pos, self._hpos = None, 0, 0

    def pending(self):
        """Bytes (or EOF) are waiting to be read."""
        if self.linked:
            return _io.shm_pending(self.fd)
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        return bool(p.poll(0))


class Outgoing:
    """One outgoing point-to-point connection (to world rank dst, every group's frames) and its FIFO
    of Frames (whole frames, one after another: two groups' bytes never interleave)."""

    __slots__ = ("sock", "fd", "dst", "queue", "why", "retired", "_sendmsg")

    def __init__(self, sock, dst):
        self.sock, self.fd, self.dst = sock, sock.fileno(), dst
        self.queue = collections.deque()
        self.why = None
        self.retired = False  # closed for being idle: the next send to dst opens a new connection
        fd = self.fd
        self._sendmsg = (lambda parts: _io.link_sendmsg(fd, parts)) if _io.shm_linked(fd) else sock.sendmsg

    def write(self):
        """Write the frame at the head of the queue as far as the socket takes it without blocking:
        SENT (it is off the queue), AGAIN (the socket is full) or LOST (`.why` says why)."""
        s = self.queue[0]
        while True:
            try:
                n = self._sendmsg(s.iov())
            except BlockingIOError:
                return AGAIN
            except OSError as exc:
                self.why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
                return LOST
            s.pos += n
            if s.pos >= s.total:
                self.queue.popleft()
                return SENT

    def flushed(self):
        """Every byte written so far has left this side: a link's or a Unix socket's reader took
        it, a TCP socket sent it (unacknowledged bytes still count as sent: a receiver that sends
        nothing back on this connection acknowledges late); the connection may close after one
        more small frame."""
        queued = _io.shm_queued(self.fd, True)
        if queued < 0:
            try:
                queued = send_queue_bytes(self.fd, SIOCOUTQ if self.sock.family == socket.AF_UNIX else SIOCOUTQNSD)
            except OSError:
                return False
        return queued == 0

    def write_last(self, frame, timeout=1.0):
        """Write `frame` (a few bytes, onto a flushed connection: it fits at once) as the last.
        True once written, or when the peer is gone (nothing more can go on it either); False
        when not a byte went within `timeout` (the connection stays as it was); CommError when
        only part of it did (the stream is broken)."""
        view, end = memoryview(frame), time.monotonic() + timeout
        while view:
            try:
                view = view[self._sendmsg([view]):]
            except BlockingIOError:
                if time.monotonic() >= end:
                    if len(view) == len(frame):
                        return False
                    raise CommError(f"the last frame to rank {self.dst} stopped after {len(frame) - len(view)} "
                                    f"of its {len(frame)} bytes") from None
                time.sleep(0.0005)
            except OSError:
                return True
        return True


class Poller:
    """Waits on the connections with work, plus new arrivals, the process's failure and its own wake-up."""

    def __init__(self, ep):
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._arrival_r, self._fail_r = ep.arrival_r, ep.wake_r
        self.woken = False  # a wait saw the wake-up pipe readable: clear_wake() has a byte to read
        self._written = False  # a wake-up byte is in the pipe, not yet read: a wake() now has nothing to add
        self._polls = {}  # thread id -> (the events it last waited on, its select.poll with them registered)

    def watch(self, conns_in, conns_out):
        """What the next wait() watches: incoming connections not done nor busy, outgoing ones with
        frames queued. Read now, under the owner's lock, and so are the shared-memory links (each
        asks for its doorbell, or is ready at once): the wait happens without the lock, touching
        only descriptors, so a link closed meanwhile (an idle connection) can be unmapped."""
        events, readers, ready = {}, {}, set()
        for c in conns_in:
            if not c.eof and not c.busy:
                events[c.fd] = select.POLLIN
                readers[c.fd] = c
        for out in conns_out:
            if out.queue:
                events[out.fd] = events.get(out.fd, 0) | select.POLLOUT
        for fd, ev in events.items():
            # a shared-memory link sleeps on its doorbell, unless it can go on now
            link = _io.shm_prepare(fd, ev & select.POLLIN, ev & select.POLLOUT)
            if link > 0:
                c = readers.get(fd)
                ready.add(c if c is not None else READY)
                if c is not None and ev & select.POLLOUT:
                    ready.add(READY)
            if link >= 0:
                events[fd] = select.POLLIN
        return events, readers, ready

    def wait(self, watched, timeout_ms):
        """Wait up to timeout_ms: the set of incoming connections ready to read, plus ARRIVED when
        a connection came in and READY for anything else; None when a signal interrupted the wait."""
        events, readers, ready = watched
        # Each thread waits on a select.poll of its own (one object may not be polled by two threads
        # at once), registered again only when the set changed: most waits watch what the last did.
        me = threading.get_ident()
        last = self._polls.get(me)
        if last is not None and last[0] == events:
            poller = last[1]
        else:
            poller = select.poll()
            for fd, ev in events.items():
                poller.register(fd, ev)
            for fd in (self._wake_r, self._arrival_r, self._fail_r):
                poller.register(fd, select.POLLIN)
            if len(self._polls) > 64:  # (threads come and go: bounded)
                self._polls.clear()
            self._polls[me] = (events, poller)
        try:
            got = poller.poll(0 if ready else timeout_ms)
        except InterruptedError:
            return None
        for fd, _ in got:
            c = readers.get(fd)
            if c is not None:
                ready.add(c)
            elif fd == self._arrival_r:
                ready.add(ARRIVED)
            else:
                if fd == self._wake_r:
                    self.woken = True
                ready.add(READY)
        return ready

    def wake(self):
        """Interrupt a wait() (now or the next one). One byte in the pipe does that: while it is unread,
        a wake-up writes nothing. (A write releases the GIL: a thread that posts receives in a loop,
        each waking the progress thread's wait, would release and retake it every post, and the
        progress thread, woken, then waited for the GIL for as long as the loop ran, since CPython
        makes a running thread hand over only to a thread that waited a whole switch interval (5 ms)
        without the GIL changing hands: a tested-only receive completed 0.2-0.6 s late.)"""
        if self._written:
            return
        self._written = True
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")

    def clear_wake(self):
        """Read the wake-up bytes a wait saw (none to read, no system call, when it saw none: a byte
        written since stays, and makes the next wait return at once). Called under the engine's lock,
        as most wake-ups are: those from other threads outside it (close, a receiver's close request)
        may find the byte read and the flag not yet cleared, and write nothing; the wait they meant
        to cut short then ends by its own timeout."""
        if not self.woken:
            return
        self.woken = False
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self._wake_r, 4096)
        self._written = False

    def clear_arrivals(self):
        # The arrival pipe stays readable until read here: new connections are collected after this.
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self._arrival_r, 4096)

    def close(self):
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class PointToPoint:
    """The point-to-point channel: its connections per peer, a poller, the blocking path."""

    def __init__(self, ep, spin):
        self.ep = ep
        self.rank = ep.rank
        self.state = np.zeros(4, dtype=np.int64)
        self.stepper = _io.Stepper(self.state, 256 << 10, ep.wake_r, 0, 0, spin[0], FAST_PATH_SLICE_S, spin[1],
                                   spin[2])
        self.conn_gid = SHARED_GID  # the group key of the endpoint's point-to-point connections
        self._in = {}  # src world rank -> Incoming
        self._out = {}  # dst world rank -> Outgoing
        self._conn_lock = threading.Lock()  # _out's changes: opened by a sender, closed under the engine's lock
        self.used = {}  # dst world rank -> when a send to it last began (time.monotonic)
        try:
            self.max_connections = _env_count("COMMLIB_P2P_CONNECTIONS", MAX_CONNECTIONS, int, 1)
            self.idle_s = _env_count("COMMLIB_P2P_IDLE_S", IDLE_S, float, 0.0)
        except CommError as exc:
            raise CommError(f"rank {self.rank}: {exc}") from None
        self.retired = 0  # outgoing connections closed for being idle (COMMLIB_DEBUG, tests)
        self.asked = set()  # world ranks whose receivers asked us to close our connection to them
        self.asks = 0  # senders this rank asked to close their connections to it (COMMLIB_DEBUG, tests)
        self.closing = set()  # Incoming whose senders were asked to close them, until they end (or ASK_AGAIN_S)
        self._ask_at = 0.0  # ask_idle looks again from then

    def fast_path(self, engine, ctx, limit, dtype_code, bf16, header):
        """The one-call blocking send/recv (`_io.P2PFast`) of one group over these sockets and this
        stepper; `engine` owns the lock, the queues and the continuations it calls back."""
        return _io.P2PFast(engine, ctx, self, self.ep.fds, limit, dtype_code, bf16, header)

    def poller(self):
        return Poller(self.ep)

    def connected(self, dst):
        """Whether a send to world rank dst finds its connection open (never waits to connect)."""
        with self._conn_lock:
            return dst in self._out or self.ep.out_sock(SHARED_GID, CH_P2P, dst) is not None

    def outgoing(self, dst, deadline, what):
        """The Outgoing connection to world rank dst (connecting on first use)."""
        self.used[dst] = time.monotonic()
        while True:
            # (under _conn_lock: a connection being closed meanwhile, by another thread holding the
            # engine's lock, is never wrapped again after it left _out)
            with self._conn_lock:
                conn = self._out.get(dst)
                if conn is not None:
                    return conn
                sock = self.ep.out_sock(SHARED_GID, CH_P2P, dst)
                if sock is not None:
                    conn = self._out[dst] = Outgoing(sock, dst)
                    return conn
            self.ep.outgoing(SHARED_GID, CH_P2P, dst, deadline, what)  # (without it: this may wait)

    def over_limit(self):
        return len(self._out) > self.max_connections

    def retire_idle(self, keep):
        """Close outgoing connections, least recently used first, while more than max_connections
        are open, leaving `keep` (the one a send is about to use), any used in the last idle_s and
        any with bytes not yet taken by its receiver. The caller holds the engine's lock (no
        frame is being queued or written meanwhile). Returns the world ranks whose connections closed."""
        now, used, excess = time.monotonic(), self.used, len(self._out) - self.max_connections
        closed = []
        for dst in sorted(self._out, key=lambda d: used.get(d, 0.0)):
            if excess <= 0 or now - used.get(dst, 0.0) < self.idle_s:
                break  # (the rest were used more recently still)
            if dst != keep and self._retire(dst):
                closed.append(dst)
                excess -= 1
        if closed and _debug.LEVEL:
            _debug.log(_debug.INFO, lambda: f"closed idle point-to-point connections to rank(s) {closed} "
                       f"({len(self._out)} open, limit {self.max_connections}, idle after {self.idle_s:g} s)")
        return closed

    def close_asked(self):
        """Close the outgoing connections whose receivers asked (`asked`, filled by the coordinator's
        notices: over their incoming limit), each unless used in the last idle_s or not flushed
        (its receiver asks again). The caller holds the engine's lock. Returns the world ranks
        whose connections closed."""
        now, closed = time.monotonic(), []
        while self.asked:
            dst = self.asked.pop()
            if dst in self._out and now - self.used.get(dst, 0.0) >= self.idle_s and self._retire(dst):
                closed.append(dst)
        if closed and _debug.LEVEL:
            _debug.log(_debug.INFO, lambda: f"closed point-to-point connections to rank(s) {closed}, as "
                       f"their receivers asked ({len(self._out)} open)")
        return closed

    def _retire(self, dst):
        """Close the outgoing connection to dst with its last frame (FLAG_BYE) if nothing is queued on
        it and its receiver took every byte; True when it closed."""
        out = self._out[dst]
        if out.queue or not out.flushed():
            return False
        try:
            if not out.write_last(bye_header(group=SHARED_GID, source=self.rank)):
                return False
        except CommError as exc:
            raise self.error(CommError(f"rank {self.rank}: closing an idle connection: {exc}", rank=dst)) from None
        with self._conn_lock:
            out.retired = True
            del self._out[dst]
            self.ep.retire_out(SHARED_GID, CH_P2P, dst, out.sock)
        self.retired += 1
        return True

    def expire_asks(self):
        """Forget the asks of ASK_AGAIN_S ago whose connections have not ended (their senders kept
        them): the receiver need not read on for their last frames."""
        now = time.monotonic()
        self.closing.difference_update([c for c in self.closing if now - c.asked >= ASK_AGAIN_S or c.eof])

    def ask_idle(self, conns):
        """The receiver's side of the limit: with more than max_connections incoming connections
        (`conns`, Incoming), ask the senders of the least recently used idle ones (nothing read for
        idle_s, nothing unread, not asked in the last ASK_AGAIN_S) to close them, in one message
        to the coordinator. After a look that asks none, the next is ASK_EVERY_S later; returns
        the world ranks asked."""
        now = time.monotonic()
        if len(conns) <= self.max_connections or now < self._ask_at:
            return []
        self._ask_at = now + ASK_EVERY_S  # (lifted below when this look asks someone: looks that ask
        # are as many as the connections asked to close, each already worth a reconnection)
        idle, excess = [], len(conns) - self.max_connections
        for c in conns:
            if now - c.asked < ASK_AGAIN_S:
                excess -= 1  # asked already: its last frame is on its way
            elif not c.busy and not c.eof and c.idle and now - c.last >= self.idle_s:
                idle.append(c)
        if excess <= 0:
            return []
        srcs, oldest = [], [(c.last, i, c) for i, c in enumerate(idle)]
        heapq.heapify(oldest)  # (taken in order only as far as needed: a look costs a system call)
        while oldest and len(srcs) < excess:
            c = heapq.heappop(oldest)[2]
            if not c.pending() and not self.ep.waiting_behind(CH_P2P, c.src):
                c.asked = now
                self.closing.add(c)
                srcs.append(c.src)
        if srcs:
            self._ask_at = 0.0
        send = self.ep.notices.send
        if srcs and send is not None:
            with contextlib.suppress(CommError):  # the coordinator is gone: the job is ending anyway
                send({"kind": "close_asked", "to": srcs})
            self.asks += len(srcs)
            if _debug.LEVEL:
                _debug.log(_debug.INFO, lambda: f"asked rank(s) {srcs} to close their idle point-to-point "
                           f"connections ({len(conns)} incoming, limit {self.max_connections})")
        return srcs

    def ended(self, conn):
        """Incoming `conn` ended between frames (its sender's FLAG_BYE, or its end of stream):
        forget it; True when the sender's next connection takes its place."""
        conn.stop()
        self.closing.discard(conn)
        if self._in.get(conn.src) is conn:
            del self._in[conn.src]
        return self.ep.retire_in(SHARED_GID, CH_P2P, conn.src, conn.sock)

    def incoming(self):
        """{src world rank: Incoming} of the connections that have arrived; a connection that
        replaced a dead attempt (the sender's retry) gets a fresh Incoming."""
        conns = {}
        for (_, src), sock in self.ep.incoming_socks(CH_P2P).items():
            c = self._in.get(src)
            if c is None or c.sock is not sock:
                c = self._in[src] = Incoming(sock, src)
            conns[src] = c
        return conns

    def gone(self, peer):
        """Why world rank `peer` will send nothing more (left, died, finishing), or None."""
        return self.ep.notices.gone(peer)

    def finishing(self, peer):
        """True once `peer` is in finalize() with every send flushed."""
        return self.ep.notices.finishing(peer)

    @property
    def notices(self):
        return self.ep.notices

    def recv_step(self, conn, expect, ptr, nbytes, deadline, what, peer, resume):
        """Blocking receive of the frame `expect` (a header) + nbytes into ptr from Incoming `conn`
        (which the caller marked busy).

        Returns None when it arrived; the 56 header bytes of a different frame
        that arrived instead (no payload byte read); or the number of bytes
        received so far (an int) when FAST_PATH_SLICE_S passed without progress.
        """
        rc = self.stepper.raw(-1, b"", 0, 0, conn.fd, ptr, nbytes, deadline, resume, expect)
        return self.recv_status(rc, what, peer, nbytes)

    def save_step(self):
        """The stepper's state after a receive step that stopped midway (what it resumes from): the
        stepper is this process's one for blocking point-to-point, used under the engine's lock, and
        another thread's step may run before this receive steps again (`restore_step` first)."""
        return self.state.copy(), bytes(self.stepper.rhdr)

    def restore_step(self, saved):
        state, rhdr = saved
        self.state[:] = state
        self.stepper.rhdr[:] = rhdr

    def recv_status(self, rc, what, peer, nbytes):
        """What a receive step's status rc means, as recv_step returns it (or the error it raises)."""
        if rc == 0:
            return None
        if rc == _io.MISMATCH:
            return bytes(self.stepper.rhdr)
        if rc == _io.SLOW:
            return int(self.state[1])
        self._raise(rc, what, None, peer, nbytes)

    def _raise(self, rc, what, send_peer, recv_peer, nbytes):
        exc = status_error(self.ep, rc, self.state, what, send_peer, nbytes, recv_peer, nbytes)
        self.ep.spread(exc)
        raise exc

    def error(self, exc):
        """Record exc as the process's failure and tell the other ranks."""
        exc = self.ep.fail(exc)
        self.ep.spread(exc)
        return exc


def _env_count(name, default, kind, least):
    """A numeric setting from the environment, at least `least`; CommError naming it otherwise."""
    from . import env_number  # (the package imports this module)
    value = env_number(name, default, kind)
    if value < least:
        raise CommError(f"{name}={value!r}: expected a number of at least {least}")
    return value
