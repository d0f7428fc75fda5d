"""Connections between ranks: listeners, the authenticated handshake, the sticky failure.

Every rank listens on a TCP port (bound to the interface that routes to the
coordinator or the one COMMLIB_IFNAME names, never 0.0.0.0: interfaces.py)
and on an abstract Unix socket. A connection
carries traffic in ONE direction: the sender opens it on first use, so no
rank ever waits for another to connect before it can make progress (a ring
where everyone connects to the right and reads from the left cannot
deadlock). Peers on the same host and network namespace use the Unix socket.

Each connection is keyed (group id, channel, sender rank) -- the collective
and point-to-point channels' are shared by every group, keyed SHARED_GID --
and authenticated
before a byte of payload is read: the acceptor sends a nonce, the sender
answers with its identity and HMAC-SHA256(secret, nonce, ...), and the
acceptor proves the secret back. A dedicated acceptor thread does this, so a
rank blocked in a collective (GIL released) still lets its peers connect.

Failure is process-wide and sticky: `fail()` records the first error and
makes the wake pipe readable, which interrupts every blocked step (`_io.pyx`).
How a step's status becomes an error is `diagnose.py`'s job; what the
coordinator says about other ranks is `notices.py`'s.
"""
import collections
import contextlib
import errno
import fcntl
import logging
import os
import secrets
import select
import socket
import struct
import threading
import time

from .. import _auth, _backoff, _debug
from .._errors import AuthError, CommError, CommTimeout, PeerLost
from .interfaces import describe, interfaces, listen_address
from .notices import Notices
from . import _io, seal, shm
from .limits import OUT_OF_FDS, fd_limit_text, thread_limit_text

NOTICE_GRACE_S = 0.6  # how long a peer that closed first waits for the job's failure notice (its cause)

log = logging.getLogger("commlib")

CH_COLL, CH_P2P, CH_LANE = 0, 1, 2
# The collective channel's connections are shared by every group: one each way per pair of ranks,
# keyed (SHARED_GID, CH_COLL, peer); each header names its group and a message of another group
# read by a step is parked for it (CollectiveChannel._park). A relayed message (a pipelined chain's:
# it waits on its sender's own input) goes on its group's lane, CH_LANE, one per group and peer, so
# it never holds a shared connection up. Point-to-point's are shared the same way (SHARED_GID,
# CH_P2P, peer): the engine matches each frame in the group its header names.
SHARED_GID = 0xFFFFFFFF
_CHANNELS = {CH_COLL: "collectives", CH_P2P: "point-to-point", CH_LANE: "relayed collectives"}
CHANNEL_NAMES = ("collective", "point-to-point", "relayed collective")
SOCKET_BUFFER_BYTES = 4 << 20
HANDSHAKE_TIMEOUT_S = 10.0  # client side: covers a busy peer
# A peer address with no route (ENETUNREACH/EHOSTUNREACH) for this long is a set-up error, not a
# late peer: the connect fails then instead of at the deadline (and before the peer, waiting for
# this connection, times out with a less precise report).
UNREACHABLE_GRACE_S = 2.0
_UNREACHABLE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
SERVER_HANDSHAKE_S = 3.0  # server side: a silent client is dropped after this (slow-loris bound)
MAX_PENDING_HANDSHAKES = 64
ROUTES_LISTED = 64  # COMMLIB_VERBOSE names every peer's route up to this many peers
LISTEN_BACKLOG = 1024  # every peer may connect at once (the kernel caps it at net.core.somaxconn)

_SERVER_HELLO = struct.Struct("<4s32s")          # magic, server nonce
_CLIENT_HELLO = struct.Struct("<4siIB32s32s")    # magic, rank, group, channel, client nonce, mac
_DATA_MAGIC = b"CMLD"


def host_identity():
    """Same value exactly for processes that can reach each other's abstract Unix sockets."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        boot, netns = "", 0
    return f"{socket.gethostname()}/{boot}/{netns}"


def _fmt(address):
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _why(exc):
    """The errno text of a failed connect ('connection refused (ECONNREFUSED)'), else its message."""
    if exc is None:
        return "no attempt finished in time"
    if isinstance(exc, OSError) and exc.errno:
        return f"{os.strerror(exc.errno).lower()} ({errno.errorcode.get(exc.errno, exc.errno)})"
    if isinstance(exc, TimeoutError):
        return "timed out (no reply: packets dropped by a firewall, or no route back to this host?)"
    return str(exc) or type(exc).__name__


_TCP_INFO = struct.Struct("<8B13I")  # struct tcp_info up to tcpi_last_ack_recv (linux/tcp.h)
SIOCOUTQ = 0x5411  # bytes in a socket's send queue, sent or not
SIOCOUTQNSD = 0x894B  # a TCP socket's bytes not sent yet (linux/sockios.h)


def send_queue_bytes(fd, request=SIOCOUTQ):
    """Bytes in descriptor fd's send queue (SIOCOUTQ: sent or not; SIOCOUTQNSD: not sent yet, TCP);
    OSError where the kernel cannot say."""
    return struct.unpack("i", fcntl.ioctl(fd, request, b"\0" * 4))[0]


def silent_for(sock, queued=False):
    """Seconds since a TCP socket last got an ACK while it has data waiting for one, else None.

    Linux only (TCP_INFO). Data sent and being retransmitted is a link that went
    down (a stopped or busy peer's kernel still acknowledges); with `queued`,
    data that could not even be sent (no route once the link is down) counts
    too: for a connection whose queries are answered within a second.
    """
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
        outq = send_queue_bytes(sock.fileno()) if queued else 0
    except (OSError, AttributeError):
        return None
    info = _TCP_INFO.unpack(raw[:_TCP_INFO.size].ljust(_TCP_INFO.size, b"\0"))
    retransmits, unacked, last_ack_recv_s = info[2], info[12], info[20] / 1000
    if unacked and retransmits or outq and last_ack_recv_s > 1.0:
        return last_ack_recv_s
    return None


def _hung_up(sock):
    """True when the peer of this (unused) connection has closed it."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _dead_attempt(sock):
    """True when this registered connection's sender closed it with nothing left for us to read: a
    handshake attempt it gave up on (its retry replaces it). A point-to-point connection retired
    for being idle ends with a frame of its own (FLAG_BYE), unread until the reader comes to it:
    that one is not replaced, its successor waits (`Endpoint._next`)."""
    return _hung_up(sock) and _io.shm_queued(sock.fileno(), False) <= 0


def _tune(sock, tcp):
    if tcp:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)


class Endpoint:
    """This process's listeners, connections, failure state and wake pipe."""

    def __init__(self, rank, secret, coordinator_host, timeout, spans_hosts=False):
        self.rank = rank  # world rank
        self.secret = secret
        self.timeout = timeout
        self.host_id = host_identity()
        self.shm_mode = shm.mode()  # COMMLIB_TRANSPORT
        self.force_tcp = self.shm_mode == "tcp"
        try:  # before any descriptor exists: nothing to close on this error
            bind_host, self.address_source = listen_address(coordinator_host, spans_hosts)
        except CommError as exc:
            raise CommError(f"rank {rank}: {exc}") from exc
        self.table = None  # world rank -> registration dict
        self.coordinator_sock = None  # our connection to the coordinator (a stall report checks its link)
        self.coordinator_silent = None  # (since, coordinator's address): our agent's link stopped acknowledging
        self.failure = None  # first CommError; sticky
        self.failure_remote = False  # the failure came from another rank's notice
        self.notices = Notices(self)  # what the coordinator tells us about the other ranks
        self._refused = 0  # connections refused (logged 1..10, then at powers of two)
        self._connecting = {}  # (group, channel, dst) -> lock: one connect per key at a time
        self._out = {}  # (group, channel, dst) -> socket
        self._in = {}  # (group, channel, src) -> socket
        self._next = {}  # (SHARED_GID, CH_P2P, src) -> deque of its sender's newer connections (retire_in)
        self.fds = {}  # (group, channel, peer, 1 outgoing | 0 incoming) -> fd: the hot-path lookup
        self.parked = {}  # group -> {world rank: deque of messages (header + payload) read by another group}
        self.parked_lock = threading.Lock()
        self._cond = threading.Condition()
        self._closed = False
        self._pending = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._saturated = False
        try:
            self.sealing = seal.enabled()
            self.pumps = seal.Pumps(f"rank {rank}", self._forged) if self.sealing else None
        except (ValueError, CommError) as exc:
            raise CommError(f"rank {rank}: {exc}") from None
        self.wake_r, self._wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.arrival_r, self._arrival_w = os.pipe()  # a byte per new incoming connection
        os.set_blocking(self.arrival_r, False)
        os.set_blocking(self._arrival_w, False)

        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self._tcp = socket.socket(family, socket.SOCK_STREAM)
        self._tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._tcp.bind((bind_host, 0))
        self._tcp.listen(LISTEN_BACKLOG)
        self._unix = None
        self.unix_name = None
        if hasattr(socket, "AF_UNIX") and os.path.exists("/proc/self/ns/net"):
            self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            name = f"\0commlib-{os.getpid()}-{secrets.token_hex(8)}"
            self._unix.bind(name)
            self._unix.listen(LISTEN_BACKLOG)
            self.unix_name = name[1:]
        self.tcp_address = self._tcp.getsockname()[:2]
        self._threads = [threading.Thread(target=self._accept_loop, args=(lst,), daemon=True,
                                          name=f"commlib-accept-{i}")
                         for i, lst in enumerate(s for s in (self._tcp, self._unix) if s is not None)]
        for t in self._threads:
            t.start()

    # ---------------------------------------------------------------- identity
    def info(self):
        """What this rank registers with the coordinator."""
        return {"host": socket.gethostname(), "host_id": self.host_id, "tcp": list(self.tcp_address),
                "unix": self.unix_name, "pid": os.getpid()}

    # ------------------------------------------------------------- acceptance
    def _accept_loop(self, listener):
        while not self._closed:
            try:
                sock, addr = listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                if exc.errno in OUT_OF_FDS:  # peers would wait in our backlog
                    self._cannot_accept(fd_limit_text(exc.errno))
                time.sleep(0.01)  # back off instead of spinning
                continue
            # Many peers connecting at once wait in the listen backlog for a handshake slot; dropping
            # them made each retry after its own timeout and sleep.
            if not self._pending.acquire(blocking=False):
                if not self._saturated:  # once: a flood of connections must not flood the log
                    self._saturated = True
                    log.warning("commlib rank %d: too many pending handshakes: connections from %s and later "
                                "ones wait for a slot", self.rank, addr or "unix socket")
                while not self._pending.acquire(timeout=0.5):
                    if self._closed:
                        sock.close()
                        return
            try:
                threading.Thread(target=self._handshake_server, args=(sock, addr), daemon=True).start()
            except RuntimeError as exc:  # no memory for its stack, or RLIMIT_NPROC: the peer would wait
                sock.close()
                self._pending.release()
                self._cannot_accept(f"no thread for its handshake ({exc}: {thread_limit_text()})")
                time.sleep(0.01)

    def _cannot_accept(self, why):
        """A limit keeps this rank from accepting peers: fail the job now (they would wait in our
        backlog until their timeout), naming it."""
        if self.failure is None:
            self.spread(self.fail(CommError(f"rank {self.rank}: cannot accept a peer's connection: {why}")))

    def _forged(self, peer, text):
        """A sealed connection's record failed its check: end the job, naming the peer."""
        if self.failure is None:
            self.spread(self.fail(AuthError(text, rank=peer)))

    def _no_fds(self, exc, what, dst):
        """The failure of a connect that found no descriptor left (no retry would free one)."""
        return self.fail(CommError(f"rank {self.rank}: {what} could not connect to rank {dst}: "
                                   f"{fd_limit_text(exc.errno)}", rank=dst))

    def _handshake_server(self, sock, addr):
        try:
            sock.settimeout(SERVER_HANDSHAKE_S)
            nonce = secrets.token_bytes(_auth.NONCE_BYTES)
            sock.sendall(_SERVER_HELLO.pack(_DATA_MAGIC, nonce))
            magic, rank, group, channel, cnonce, mac = _CLIENT_HELLO.unpack(_auth.recv_exact(sock, _CLIENT_HELLO.size))
            ident = struct.pack("<iIB", rank, group, channel)
            if magic != _DATA_MAGIC or not _auth.verify(mac, self.secret, b"commlib/data/client", nonce, cnonce, ident):
                raise AuthError("wrong secret or not a commlib peer")
            if channel not in (CH_COLL, CH_P2P, CH_LANE) or self.table is not None and not 0 <= rank < len(self.table):
                raise AuthError(f"bad channel {channel} or rank {rank}")
            # a peer of this host may offer a shared-memory segment: mapped before the socket is
            # registered (no reader may see its bytes first), answered after the proof
            reply = shm.answer(sock, self.shm_mode) if sock.family == socket.AF_UNIX else b""
            key = self.key(group, channel, rank)
            with self._cond:
                old = self._in.get(key)
                waits = False
                if old is not None and (key in self._next or not _dead_attempt(old)):
                    # A point-to-point sender that closed an idle connection (FLAG_BYE) and opens a
                    # new one before this rank has read the old to its end: the new one waits
                    # behind it (and behind any other waiting already), so no frame overtakes
                    # another (retire_in promotes them in turn).
                    if channel != CH_P2P:
                        raise AuthError(f"duplicate connection for {key}")
                    old, waits = None, True
                if self._closed:  # a peer's late connection while we finish: it learns why from the job
                    if _debug.LEVEL:
                        _debug.log(_debug.INFO, lambda: f"closing: turned away rank {rank}'s connection")
                    return
                # Proof last, registration first: once the client holds the proof the
                # connection is ours. A client that gave up mid-handshake and retries
                # finds its dead first attempt here, hung up with nothing sent: replaced.
                sock.sendall(_auth.mac(self.secret, b"commlib/data/server", cnonce, nonce) + reply)
                if old is not None:
                    self.fds.pop(key + (0,), None)
                    self._forget(old)
                sock.settimeout(None)
                sock.setblocking(False)
                _tune(sock, sock.family != socket.AF_UNIX)
                if self.sealing and sock.family != socket.AF_UNIX:
                    sock = self.pumps.connection(sock, self.secret, nonce, cnonce, ident, False, rank, f"rank {rank}")
                    _tune(sock, False)
                _claimable(sock, channel, self.rank)
                if waits:
                    self._next.setdefault(key, collections.deque()).append(sock)
                else:
                    self._in[key] = sock
                    self._cond.notify_all()
            if _debug.LEVEL:
                _debug.log(_debug.INFO, lambda: f"accepted rank {rank} ({_whose(group, channel)}) over "
                           f"{'unix' if sock.family == socket.AF_UNIX else 'tcp'} from "
                           f"{addr if addr else 'this host'}, {_shm_words(sock)}")
            # the reader drains and rescans; one pending byte is enough
            with contextlib.suppress(BlockingIOError):
                os.write(self._arrival_w, b"\0")
            sock = None
        except (OSError, EOFError, ValueError, struct.error, AuthError) as exc:
            if getattr(exc, "errno", None) in OUT_OF_FDS:  # a limit, not a bad peer: it would only retry
                self._cannot_accept(fd_limit_text(exc.errno))
            self._refused += 1
            if self._refused <= 10 or self._refused & (self._refused - 1) == 0:  # 1..10, then powers of 2
                log.warning("commlib rank %d: refused a connection from %s: %s (%d refused so far)", self.rank,
                            addr or "unix socket", exc, self._refused)
        except CommError as exc:  # a limit (no thread for an encrypted connection's pump), not a bad peer
            self._cannot_accept(str(exc).removeprefix(f"rank {self.rank}: "))
        finally:
            if sock is not None:
                shm.close(sock)
            self._pending.release()

    @staticmethod
    def key(group, channel, peer):
        """The key of the connection that carries group's `channel` traffic with `peer`: the
        collective and point-to-point channels' are shared by every group (SHARED_GID); a relay
        lane is its group's own."""
        return (group, channel, peer) if channel == CH_LANE else (SHARED_GID, channel, peer)

    def incoming(self, group, channel, src, deadline, what, hdr=None, check=None, check_s=0.0):
        """fd of the authenticated connection from world rank `src`, waiting for it to arrive.

        With `check` (a callable returning an exception or None) and check_s > 0,
        a wait longer than check_s asks it whether src is stuck elsewhere.
        """
        key = self.key(group, channel, src)
        sock = self._in.get(key)
        if sock is not None:
            self.fds[key + (0,)] = fd = sock.fileno()
            return fd
        notices = self.notices
        notices.current = (what, src, hdr)
        start = time.monotonic()
        next_check = start + check_s
        try:
            while True:
                with self._cond:
                    if key in self._in:
                        self.fds[key + (0,)] = fd = self._in[key].fileno()
                        return fd
                    self.raise_if_failed()
                    now = time.monotonic()
                    if now >= deadline:
                        raise self.fail(CommTimeout(
                            f"rank {self.rank}: {what} waited {now - start:.3g} s for rank {src} to connect "
                            f"({CHANNEL_NAMES[channel]} channel)" + self.stall_report(), rank=src))
                    self._cond.wait(min(deadline - now, 0.05))
                if check is not None and check_s > 0 and time.monotonic() >= next_check:
                    next_check = time.monotonic() + check_s
                    exc = check()
                    if exc is not None:
                        raise exc
        finally:
            notices.current = None

    def retire_in(self, group, channel, src, sock):
        """The connection `sock` from world rank src ended between frames (its sender retired it,
        or hung up): forget and close it (the caller holds the engine's lock, under which alone
        point-to-point links are used: the link's segment is unmapped). The connection its sender
        opened meanwhile, if one waits (`_next`), takes its place; returns whether one did."""
        key = self.key(group, channel, src)
        with self._cond:
            if self._in.get(key) is not sock:
                return False
            self.fds.pop(key + (0,), None)
            waiting = self._next.get(key)
            nxt = waiting.popleft() if waiting else None
            if waiting is not None and not waiting:
                del self._next[key]
            if nxt is None:
                del self._in[key]
            else:
                self._in[key] = nxt
                self._cond.notify_all()
        self._forget(sock, unmap=True)
        if nxt is not None:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._arrival_w, b"\0")
        return nxt is not None

    def retire_out(self, group, channel, dst, sock):
        """Close our connection `sock` to world rank dst (idle, its last frame written; the engine's
        lock held, its link's segment unmapped): the next send to dst opens a new one."""
        key = self.key(group, channel, dst)
        with self._cond:
            if self._out.get(key) is sock:
                del self._out[key]
                self.fds.pop(key + (1,), None)
        self._forget(sock, unmap=True)

    def _forget(self, sock, unmap=False):
        """Close a connection this rank is done with (its link, and a sealed one's pump: the pump
        puts what is left on the wire, then ends). `unmap`: no thread can be using its link (a
        point-to-point connection closed under the engine's lock), so its segment goes too."""
        if self.pumps is not None:
            self.pumps.forget(sock)
        shm.close(sock, unmap)

    def waiting_behind(self, channel, src):
        """A newer connection from world rank src on `channel` waits behind the current one (`_next`)."""
        return self.key(SHARED_GID, channel, src) in self._next

    def incoming_socks(self, channel):
        """{(group, src world rank): socket} of the connections that have arrived on `channel`."""
        with self._cond:
            return {(k[0], k[2]): s for k, s in self._in.items() if k[1] == channel}

    # -------------------------------------------------------------- connecting
    def outgoing(self, group, channel, dst, deadline, what, sticky=True):
        """fd of the connection to world rank `dst`, opening and authenticating it on first use.

        A connection not made by the deadline fails this process (sticky), unless not `sticky`:
        then it is only this call's error (a best-effort or diagnostic connect).
        """
        key = self.key(group, channel, dst)
        sock = self._out.get(key)
        if sock is not None:
            return sock.fileno()
        with self._cond:
            lock = self._connecting.setdefault(key, threading.Lock())
        with lock:  # two threads (caller, progress) never open the same connection twice
            sock = self._out.get(key)
            if sock is not None:
                return sock.fileno()
            return self._connect(key, deadline, what, sticky)

    def out_sock(self, group, channel, dst):
        """The open connection to world rank dst, or None."""
        return self._out.get(self.key(group, channel, dst))

    def route(self, dst):
        """How this rank reaches world rank dst: ("unix", abstract name) or ("tcp", (host, port))."""
        peer = self.table[dst]
        if peer["host_id"] == self.host_id and peer.get("unix") and not self.force_tcp:
            return "unix", peer["unix"]
        return "tcp", tuple(peer["tcp"])

    def describe_route(self, dst, sock=None):
        """How bytes reach world rank dst: "shared memory", "unix socket" or "tcp HOST:PORT"; with
        `sock` (a connection to dst) what that connection really uses."""
        kind, where = self.route(dst)
        if kind != "unix":
            return f"tcp {_fmt(where)}" + (" encrypted" if self.sealing else "")
        if sock is not None:
            return "shared memory" if shm.linked(sock) else "unix socket"
        return "shared memory" if self.shm_mode in ("auto", "shm") else "unix socket"

    def set_table(self, table):
        """Take the job's table (`_rendezvous.Table`); CommError when a rank on another host
        advertises a loopback address (the coordinator found it: `table.loopback`)."""
        self.table = table
        if table.loopback is not None:
            bad, other, address = table.loopback
            raise CommError(f"rank {self.rank}: rank {bad} listens on the loopback address "
                            f"{address} but ranks {self.rank} and {other} are on different hosts: "
                            f"set COMMLIB_IFNAME (commrun --ifname) to the interface the hosts share; "
                            f"interfaces here: {describe(interfaces())}")

    def routes_text(self):
        """One line: this rank's address and how it reaches every peer (COMMLIB_VERBOSE). Beyond
        ROUTES_LISTED peers, only those whose addresses this rank holds: listing every peer would
        fetch the whole table to every rank (n² addresses in all) and print n² routes."""
        n, table = len(self.table), self.table
        listed = [r for r in range(n) if r != self.rank and (n - 1 <= ROUTES_LISTED or table.known(r))]
        peers = "; ".join(f"{r} {self.describe_route(r)}" for r in listed)
        if len(listed) < n - 1:
            peers += f"; and {n - 1 - len(listed)} more (their addresses fetched on first use)"
        return (f"commlib rank {self.rank} on {socket.gethostname()}: listening on tcp {_fmt(self.tcp_address)} "
                f"(from {self.address_source}); peers: {peers or 'none'}")

    def link_note(self, peer):
        """'tcp 10.0.0.2:4711 unacknowledged for 12 s' when our TCP connection to world rank peer
        has data in flight that it stopped acknowledging (a link down, not a busy peer), else None."""
        with self._cond:
            socks = [s for k, s in list(self._out.items()) + list(self._in.items()) if k[2] == peer]
        wire = self.pumps.wire if self.pumps is not None else {}
        for sock in (wire.get(s, s) for s in socks):
            if sock.family != socket.AF_UNIX and (silent := silent_for(sock)) is not None:
                with contextlib.suppress(OSError):
                    return f"tcp {_fmt(sock.getpeername())} unacknowledged for {silent:.0f} s"
        return None

    def coordinator_note(self):
        """Words for a coordinator connection that stopped acknowledging what we sent (or, where this
        host's agent carries it, the agent's link: the agent says so), else None."""
        if (via := self.coordinator_silent) is not None:
            return (f"the coordinator at {via[1]} has not acknowledged this host's agent for "
                    f"{time.monotonic() - via[0]:.0f} s (is the link to its host down?)")
        sock = self.coordinator_sock
        if sock is not None and self.pumps is not None:
            sock = self.pumps.wire.get(sock, sock)
        silent = silent_for(sock, queued=True) if sock is not None else None
        if silent is None:
            return None
        with contextlib.suppress(OSError):
            return (f"the coordinator at {sock.getpeername()[0]} has not acknowledged for {silent:.0f} s "
                    f"(is the link to its host down?)")
        return None

    def _connect(self, key, deadline, what, sticky=True):
        group, channel, dst = key
        kind, where = self.route(dst)
        local = kind == "unix"
        address = "\0" + where if local else where
        last = None
        unreachable_since = None
        started, tries = time.monotonic(), 0
        while True:
            tries += 1
            self.raise_if_failed()
            if self._closed:
                raise CommError(f"rank {self.rank}: {what}: this rank is closing", rank=dst)
            now = time.monotonic()
            left = deadline - now
            if left <= 0 or unreachable_since is not None and now - unreachable_since >= UNREACHABLE_GRACE_S:
                text = f"rank {self.rank}: {what} could not connect to rank {dst} at {self.describe_route(dst)}: "
                if not sticky:
                    raise CommTimeout(text + _why(last), rank=dst)
                raise self.fail(CommTimeout(text + _why(last) + self.stall_report(), rank=dst))
            family = socket.AF_UNIX if local else (socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                if exc.errno not in OUT_OF_FDS:
                    raise
                raise self._no_fds(exc, what, dst) from None
            memfd = -1
            try:
                sock.settimeout(min(left, HANDSHAKE_TIMEOUT_S))
                sock.connect(address)
                _auth.refuse_self(sock)
                magic, nonce = _SERVER_HELLO.unpack(_auth.recv_exact(sock, _SERVER_HELLO.size))
                if magic != _DATA_MAGIC:
                    raise AuthError(f"rank {self.rank}: rank {dst}'s address answered as something else")
                cnonce = secrets.token_bytes(_auth.NONCE_BYTES)
                ident = struct.pack("<iIB", self.rank, group, channel)
                sock.sendall(_CLIENT_HELLO.pack(_DATA_MAGIC, self.rank, group, channel, cnonce,
                                                _auth.mac(self.secret, b"commlib/data/client", nonce, cnonce, ident)))
                if local:  # a same-host peer: offer it a shared-memory segment (shm.py)
                    memfd, ring = shm.offer(sock, self.shm_mode)
                proof = _auth.recv_exact(sock, _auth.DIGEST_BYTES)
                if not _auth.verify(proof, self.secret, b"commlib/data/server", cnonce, nonce):
                    raise AuthError(f"rank {self.rank}: rank {dst} did not prove the job secret")
                if local:
                    shm.settle(sock, memfd, ring, _auth.recv_exact(sock, 1))
                if _debug.LEVEL:
                    _debug.log(_debug.INFO, lambda: f"connected to rank {dst} ({_whose(group, channel)}) "
                               f"over {kind} {where}, {_shm_words(sock)}, in {(time.monotonic() - started) * 1e3:.1f} ms"
                               f" ({tries} attempt{'s' if tries > 1 else ''})")
                break
            except AuthError:
                shm.close(sock)
                raise
            except (ConnectionError, OSError, EOFError) as exc:  # EOFError: closed mid-handshake
                shm.close(sock)
                if getattr(exc, "errno", None) in OUT_OF_FDS:  # no retry frees one: say which limit
                    raise self._no_fds(exc, what, dst) from None
                last = exc
                if getattr(exc, "errno", None) in _UNREACHABLE:
                    unreachable_since = unreachable_since or time.monotonic()
                else:
                    unreachable_since = None
                self._peer_gone(dst, what)  # refused or cut off by a peer known to be gone
                time.sleep(_backoff.delay(tries - 1, first=0.01, cap=0.2))  # jittered: many ranks may retry at once
            finally:
                if memfd >= 0:
                    os.close(memfd)
        sock.settimeout(None)
        sock.setblocking(False)
        _tune(sock, not local)
        if self.sealing and not local:
            try:
                sealed = self.pumps.connection(sock, self.secret, nonce, cnonce, ident, True, dst, f"rank {dst}")
            except (OSError, CommError) as exc:  # no descriptor for its socketpair, or no thread for its pump
                shm.close(sock)
                if isinstance(exc, CommError):
                    raise self.fail(exc) from None
                if exc.errno in OUT_OF_FDS:
                    raise self._no_fds(exc, what, dst) from None
                raise
            sock = sealed
            _tune(sock, False)
        try:
            _claimable(sock, channel, self.rank)
        except CommError as exc:
            shm.close(sock)
            raise self.fail(exc) from None
        with self._cond:
            if self._closed:  # close() ran while we connected: nobody would close this socket
                shm.close(sock)
                raise CommError(f"rank {self.rank}: {what}: this rank is closing", rank=dst)
            self._out[key] = sock
            self.fds[key + (1,)] = fd = sock.fileno()
        return fd

    def _peer_gone(self, peer, what):
        """PeerLost when the refusing peer is known to be gone (an error of this operation only).

        A peer that left while the job fails (a mismatch it found, an exception) published that
        cause before it closed anything; a cause from another rank may still be on its way: give
        it a bounded moment, and raise the cause rather than the departure."""
        gone = self.notices.exits.get(peer)
        if gone is not None:
            self.await_cause()
            if self.failure is not None:  # not a consequence of this refusal: no "during handling" chain
                f = self.failure
                raise type(f)(str(f), rank=f.rank, op=f.op) from None
            raise PeerLost(f"rank {self.rank}: {what} lost rank {peer} ({gone})", rank=peer, op=what)

    def await_cause(self, seconds=NOTICE_GRACE_S):
        """Wait (bounded) for the job's failure notice when a peer closed before any cause is known."""
        if self.failure is None:
            select.select([self.wake_r], [], [], seconds)

    @property
    def closed(self):
        return self._closed

    # ----------------------------------------------------------------- failure
    def fail(self, exc, remote=False):
        """Record the first failure (sticky), wake every blocked step, return exc."""
        if self.failure is None:
            self.failure = exc
            self.failure_remote = remote
            if _debug.LEVEL:
                _debug.log(_debug.INFO, lambda: f"failure ({'told by another rank' if remote else 'seen here'}): "
                           f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"!")
        return exc

    def spread(self, exc):
        """Tell every other rank about a failure first seen here, so none waits it out."""
        self.notices.spread(exc)

    def stall_report(self):
        """Lines naming what every other rank is doing (asked over the coordinator)."""
        return self.notices.stall_report(len(self.table) if self.table is not None else None)

    def raise_if_failed(self):
        if self.failure is not None:
            raise type(self.failure)(str(self.failure), rank=self.failure.rank, op=self.failure.op)

    def close(self):
        self._closed = True
        with self._cond:
            socks = list(self._out.values()) + list(self._in.values()) + [s for q in self._next.values() for s in q]
            self._out.clear()
            self._in.clear()
            self._next.clear()
            self.fds.clear()
        for s in socks:
            _io.clear_claims(s.fileno())  # a step stopped mid-message (an error) must not hold a reused number
            shm.close(s)
        if self.pumps is not None:  # after the data path's sockets: the pumps send what is left
            self.pumps.close(min(seal.FLUSH_S, self.timeout))
        for s in (self._tcp, self._unix):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        for fd in (self.wake_r, self._wake_w, self.arrival_r, self._arrival_w):
            with contextlib.suppress(OSError):
                os.close(fd)



def _whose(group, channel):
    """'collectives of every group', 'group 3, relayed collectives': what a connection carries (debug lines)."""
    if group == SHARED_GID:
        return f"{_CHANNELS.get(channel)} of every group"
    return f"group {group}, {_CHANNELS.get(channel)}"


def _claimable(sock, channel, rank):
    """A collective connection's descriptor must fit the step loop's claim table."""
    if channel != CH_P2P and sock.fileno() >= _io.CLAIMS_CAPACITY:
        raise CommError(f"rank {rank}: descriptor {sock.fileno()} is beyond the {_io.CLAIMS_CAPACITY} a shared "
                        f"connection may use (too many descriptors open in this process)")


def _shm_words(sock):
    """'shared memory' or 'no shared memory': how a connection's bytes travel (debug lines)."""
    return "shared memory" if sock.family == socket.AF_UNIX and shm.linked(sock) else "no shared memory"
