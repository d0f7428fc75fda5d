"""Connections between ranks, and the one place where I/O failures become errors.

Every rank listens on a TCP port (bound to the interface that routes to the
coordinator, never 0.0.0.0) and on an abstract Unix socket. A connection
carries traffic in ONE direction: the sender opens it on first use, so no
rank ever waits for another to connect before it can make progress (a ring
where everyone connects to the right and reads from the left cannot
deadlock). Peers on the same host and network namespace use the Unix socket.

Each connection is keyed (group id, channel, sender rank) and authenticated
before a byte of payload is read: the acceptor sends a nonce, the sender
answers with its identity and HMAC-SHA256(secret, nonce, ...), and the
acceptor proves the secret back. A dedicated acceptor thread does this, so a
rank blocked in a collective (GIL released) still lets its peers connect.

Failure is process-wide and sticky: `fail()` records the first error and
makes the wake pipe readable, which interrupts every blocked step (`_io.pyx`).
"""
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import select
import socket
import struct
import threading
import time

import numpy as np

from . import _io
from ._errors import AuthError, CommError, CommTimeout, MismatchError, PeerLost
from ._protocol import HEADER_NBYTES, ProtocolError, decode

log = logging.getLogger("commlib")

CH_COLL, CH_P2P = 0, 1
CHANNEL_NAMES = ("collective", "point-to-point")
SOCKET_BUFFER_BYTES = 4 << 20
HANDSHAKE_TIMEOUT_S = 10.0  # client side: covers a busy peer
SERVER_HANDSHAKE_S = 3.0  # server side: a silent client is dropped after this (slow-loris bound)
MAX_PENDING_HANDSHAKES = 64
NOTICE_GRACE_S = 0.6  # how long a closed connection waits for the job's failure notice
LOST_GRACE_S = 0.5  # how long a "lost" peer waits for the launcher's "died" notice (exit status)

_SERVER_HELLO = struct.Struct("<4s32s")          # magic, server nonce
_CLIENT_HELLO = struct.Struct("<4siIB32s32s")    # magic, rank, group, channel, client nonce, mac
_DATA_MAGIC = b"CMLD"


def _mac(secret, label, *parts):
    return hmac.new(secret, label + b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed during handshake")
        buf += chunk
    return bytes(buf)


def host_identity():
    """Same value exactly for processes that can reach each other's abstract Unix sockets."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        boot, netns = "", 0
    return f"{socket.gethostname()}/{boot}/{netns}"


def routed_address(host):
    """The local address this machine uses to reach `host` (UDP connect sends nothing)."""
    try:
        infos = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
        family, _, _, _, addr = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            return s.getsockname()[0]
    except OSError as exc:
        raise CommError(f"cannot find a local interface that reaches the coordinator {host}: {exc}") from exc


def _tune(sock, tcp):
    if tcp:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)


class Endpoint:
    """This process's listeners, connections, failure state and wake pipe."""

    def __init__(self, rank, secret, coordinator_host, timeout):
        self.rank = rank  # world rank
        self.secret = secret
        self.timeout = timeout
        self.host_id = host_identity()
        transport = os.environ.get("COMMLIB_TRANSPORT", "auto")
        if transport not in ("auto", "tcp"):
            raise CommError(f"COMMLIB_TRANSPORT={transport!r}: expected 'auto' (Unix sockets within a host) or 'tcp'")
        self.force_tcp = transport == "tcp"
        self.table = None  # world rank -> registration dict
        self.failure = None  # first CommError; sticky
        self.failure_remote = False  # the failure came from another rank's notice
        self.notify = None  # callable(dict): message to the coordinator (set by init)
        self._spread = False
        self.current = None  # (what, peer) while blocked in a step: answers stall queries
        self.last = None  # the last operation this rank entered
        self._statuses = {}  # replies to our stall query: rank -> text
        self._refused = 0  # connections refused (logged 1..10, then at powers of two)
        self.exits = {}  # world rank -> "exited with code 3" (from the coordinator)
        self._out = {}  # (group, channel, dst) -> socket
        self._in = {}  # (group, channel, src) -> socket
        self.fds = {}  # (group, channel, peer, 1 outgoing | 0 incoming) -> fd: the hot-path lookup
        self._cond = threading.Condition()
        self._closed = False
        self._pending = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self.wake_r, self._wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.arrival_r, self._arrival_w = os.pipe()  # a byte per new incoming connection
        os.set_blocking(self.arrival_r, False)
        os.set_blocking(self._arrival_w, False)

        bind_host = routed_address(coordinator_host)
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self._tcp = socket.socket(family, socket.SOCK_STREAM)
        self._tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._tcp.bind((bind_host, 0))
        self._tcp.listen(128)
        self._unix = None
        self.unix_name = None
        if hasattr(socket, "AF_UNIX") and os.path.exists("/proc/self/ns/net"):
            self._unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            name = f"\0commlib-{os.getpid()}-{secrets.token_hex(8)}"
            self._unix.bind(name)
            self._unix.listen(128)
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
            except OSError:
                if self._closed:
                    return
                time.sleep(0.01)  # e.g. EMFILE: back off instead of spinning
                continue
            if not self._pending.acquire(blocking=False):
                log.warning("commlib rank %d: dropped a connection from %s: too many pending handshakes",
                            self.rank, addr or "unix socket")
                sock.close()
                continue
            threading.Thread(target=self._handshake_server, args=(sock, addr), daemon=True).start()

    def _handshake_server(self, sock, addr):
        try:
            sock.settimeout(SERVER_HANDSHAKE_S)
            nonce = secrets.token_bytes(32)
            sock.sendall(_SERVER_HELLO.pack(_DATA_MAGIC, nonce))
            magic, rank, group, channel, cnonce, mac = _CLIENT_HELLO.unpack(_recv_exact(sock, _CLIENT_HELLO.size))
            ident = struct.pack("<iIB", rank, group, channel)
            if magic != _DATA_MAGIC or not hmac.compare_digest(
                    mac, _mac(self.secret, b"commlib/data/client", nonce, cnonce, ident)):
                raise AuthError("wrong secret or not a commlib peer")
            if channel not in (CH_COLL, CH_P2P) or self.table is not None and not 0 <= rank < len(self.table):
                raise AuthError(f"bad channel {channel} or rank {rank}")
            sock.sendall(_mac(self.secret, b"commlib/data/server", cnonce, nonce))
            sock.settimeout(None)
            sock.setblocking(False)
            _tune(sock, sock.family != socket.AF_UNIX)
            with self._cond:
                key = (group, channel, rank)
                if key in self._in or self._closed:
                    raise AuthError(f"duplicate connection for {key}")
                self._in[key] = sock
                self._cond.notify_all()
            # the reader drains and rescans; one pending byte is enough
            with contextlib.suppress(BlockingIOError):
                os.write(self._arrival_w, b"\0")
            sock = None
        except (OSError, ValueError, struct.error, AuthError) as exc:
            self._refused += 1
            if self._refused <= 10 or self._refused & (self._refused - 1) == 0:  # 1..10, then powers of 2
                log.warning("commlib rank %d: refused a connection from %s: %s (%d refused so far)", self.rank,
                            addr or "unix socket", exc, self._refused)
        finally:
            if sock is not None:
                sock.close()
            self._pending.release()

    def incoming(self, group, channel, src, deadline, what, hdr=None, dims=None, check_s=0.0):
        """fd of the authenticated connection from world rank `src`, waiting for it to arrive.

        With `hdr` (a collective's header) and check_s > 0, a wait longer than
        check_s asks src which collective it is in, as a stuck step does.
        """
        key = (group, channel, src)
        sock = self._in.get(key)
        if sock is not None:
            self.fds[key + (0,)] = fd = sock.fileno()
            return fd
        self.current = (what, src, hdr)
        next_check = time.monotonic() + check_s
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
                            f"rank {self.rank}: {what} waited {self.timeout:g} s for rank {src} to connect "
                            f"({CHANNEL_NAMES[channel]} channel)" + self.stall_report(), rank=src))
                    self._cond.wait(min(deadline - now, 0.05))
                if hdr is not None and check_s > 0 and time.monotonic() >= next_check:
                    next_check = time.monotonic() + check_s
                    exc = self.check_peer(src, hdr, dims)
                    if exc is not None:
                        self.spread(exc)
                        raise exc
        finally:
            self.current = None

    def incoming_fds(self, group, channel):
        """{fd: src world rank} of the connections that have arrived for group/channel."""
        with self._cond:
            return {s.fileno(): k[2] for k, s in self._in.items() if k[0] == group and k[1] == channel}

    # -------------------------------------------------------------- connecting
    def outgoing(self, group, channel, dst, deadline, what):
        """fd of the connection to world rank `dst`, opening and authenticating it on first use."""
        key = (group, channel, dst)
        sock = self._out.get(key)
        if sock is not None:
            return sock.fileno()
        peer = self.table[dst]
        local = peer["host_id"] == self.host_id and peer.get("unix") and not self.force_tcp
        address = "\0" + peer["unix"] if local else tuple(peer["tcp"])
        last = None
        while True:
            self.raise_if_failed()
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.fail(CommTimeout(f"rank {self.rank}: {what} could not connect to rank {dst} at "
                                            f"{address if not local else 'its unix socket'}: {last}"
                                            + self.stall_report(), rank=dst))
            family = socket.AF_UNIX if local else (socket.AF_INET6 if ":" in address[0] else socket.AF_INET)
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(min(left, HANDSHAKE_TIMEOUT_S))
                sock.connect(address)
                magic, nonce = _SERVER_HELLO.unpack(_recv_exact(sock, _SERVER_HELLO.size))
                if magic != _DATA_MAGIC:
                    raise AuthError(f"rank {self.rank}: rank {dst}'s address answered as something else")
                cnonce = secrets.token_bytes(32)
                ident = struct.pack("<iIB", self.rank, group, channel)
                sock.sendall(_CLIENT_HELLO.pack(_DATA_MAGIC, self.rank, group, channel, cnonce,
                                                _mac(self.secret, b"commlib/data/client", nonce, cnonce, ident)))
                proof = _recv_exact(sock, 32)
                if not hmac.compare_digest(proof, _mac(self.secret, b"commlib/data/server", cnonce, nonce)):
                    raise AuthError(f"rank {self.rank}: rank {dst} did not prove the job secret")
                break
            except AuthError:
                sock.close()
                raise
            except (ConnectionError, OSError) as exc:
                sock.close()
                last = exc
                self._peer_gone(dst, what)  # refused or cut off by a peer known to be gone
                time.sleep(0.01)
        sock.settimeout(None)
        sock.setblocking(False)
        _tune(sock, not local)
        self._out[key] = sock
        self.fds[key + (1,)] = fd = sock.fileno()
        return fd

    def _peer_gone(self, peer, what):
        if peer in self.exits:
            raise self.fail(PeerLost(f"rank {self.rank}: {what} lost rank {peer} ({self.exits[peer]})", rank=peer))

    # ----------------------------------------------------------------- failure
    def fail(self, exc, remote=False):
        """Record the first failure (sticky), wake every blocked step, return exc."""
        if self.failure is None:
            self.failure = exc
            self.failure_remote = remote
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"!")
        return exc

    def spread(self, exc):
        """Tell every other rank about a failure first seen here, so none waits it out."""
        if self._spread or self.failure_remote or self.notify is None:
            return
        self._spread = True
        try:
            self.notify({"kind": "abort", "to": "all", "error": type(exc).__name__, "message": str(exc),
                         "rank": self.rank})
        except (OSError, CommError) as err:
            log.warning("commlib rank %d: could not report the failure to the job: %s", self.rank, err)

    def on_notice(self, msg):
        """Coordinator push (listener thread): peer exits, aborts, stall queries."""
        kind, peer = msg.get("kind"), msg.get("rank")
        if kind == "died":
            self.exits[peer] = msg.get("message") or f"exited with code {msg.get('code')}"
            if msg.get("code") != 0 and not self._closed:
                self.fail(PeerLost(f"rank {self.rank}: lost rank {peer} ({self.exits[peer]})", rank=peer),
                          remote=True)
        elif kind == "lost":
            # The coordinator sees the connection drop before the launcher has
            # reaped the process: give its "died" notice (with the exit status)
            # a moment, then fail with what is known.
            self.exits.setdefault(peer, msg.get("message") or "lost its coordinator connection")
            timer = threading.Timer(LOST_GRACE_S, self._lost, args=(peer,))
            timer.daemon = True
            timer.start()
        elif kind == "left":
            self.exits.setdefault(peer, "it called finalize()")
        elif kind == "abort":
            cls = {"MismatchError": MismatchError, "CommTimeout": CommTimeout}.get(msg.get("error"), PeerLost)
            text, origin = msg.get("message", ""), msg.get("from", peer)
            if msg.get("error") not in ("MismatchError", "CommTimeout", "PeerLost", "CommError", "AuthError"):
                text = f"rank {self.rank}: rank {origin} failed: {text}"
            elif msg.get("error") != "MismatchError":  # the text is rank origin's view: say so
                text = f"rank {self.rank}: rank {origin} reported: {text}"
            self.fail(cls(text, rank=msg.get("from", peer)), remote=True)
        elif kind == "status_query" and self.notify is not None:
            current = self.current
            hdr = current[2].hex() if current is not None and current[2] is not None else None
            # If the coordinator is gone the asker learns that from its own connection.
            with contextlib.suppress(CommError):
                self.notify({"kind": "status", "to": [msg.get("from")], "rank": self.rank,
                             "state": self.describe(), "hdr": hdr})
        elif kind == "status":
            with self._cond:
                self._statuses[msg.get("from", peer)] = msg
                self._cond.notify_all()
        elif kind == "coordinator_lost" and not self._closed:
            self.fail(PeerLost(f"rank {self.rank}: lost the job's coordinator ({msg.get('message', '')})"),
                      remote=True)

    def _lost(self, peer):
        if not self._closed:
            self.fail(PeerLost(f"rank {self.rank}: lost rank {peer} ({self.exits[peer]})", rank=peer), remote=True)

    def describe(self):
        """What this rank is doing, for another rank's stall report."""
        current = self.current
        if current is not None:
            what, peer, _ = current
            return f"in {what}" + (f", waiting on rank {peer}" if peer is not None else "")
        return f"not in a commlib call (last: {self.last or 'none'})"

    def _ask(self, ranks, wait_s):
        """Status replies ({rank: message}) of `ranks` to a query over the coordinator."""
        with self._cond:
            self._statuses.clear()
        self.notify({"kind": "status_query", "to": ranks})
        deadline = time.monotonic() + wait_s
        with self._cond:
            while len(self._statuses) < len(ranks) and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return dict(self._statuses)

    def stall_report(self, wait_s=1.0):
        """Ask every other rank what it is doing; lines for a CommTimeout message."""
        if self.notify is None or self.table is None:
            return ""
        others = [r for r in range(len(self.table)) if r != self.rank]
        try:
            got = self._ask(others, wait_s)
        except (OSError, CommError):
            return "\n  stall report: the coordinator is unreachable"

        def line(r):
            if r in got:
                return got[r].get("state", "?")
            return f"gone: {self.exits[r]}" if r in self.exits else "no answer (stopped, or holding the GIL?)"

        return "\n  stall report:\n" + "\n".join(f"    rank {r}: {line(r)}" for r in others)

    def check_peer(self, peer, hdr, dims, wait_s=0.5):
        """MismatchError if `peer` is blocked in a different collective of this group, else None."""
        if self.notify is None or peer is None:
            return None
        try:
            got = self._ask([peer], wait_s).get(peer)
        except (OSError, CommError):
            return None
        if not got or not got.get("hdr"):
            return None  # between operations, or busy outside commlib: nothing to conclude
        try:
            theirs, mine = decode(bytes.fromhex(got["hdr"])), decode(hdr)
        except (ValueError, ProtocolError):
            return None
        if theirs.group != mine.group or theirs.encode() == hdr:
            return None
        return self.fail(MismatchError(self._mismatch_text(mine, peer, theirs, dims), rank=peer))

    def _mismatch_text(self, mine, peer, theirs, dims):
        if all(getattr(mine, f) == getattr(theirs, f) for f in mine.__slots__ if f != "shape"):
            return (f"rank {self.rank} called {mine.describe()} with shape {tuple(dims) if dims else '?'} "
                    f"but rank {peer} called it with a different shape")
        return f"rank {self.rank} called {mine.describe()} but rank {peer} called {theirs.describe()}"

    def raise_if_failed(self):
        if self.failure is not None:
            raise type(self.failure)(str(self.failure), rank=self.failure.rank, op=self.failure.op)

    def status_error(self, rc, state, what, send_peer, send_len, recv_peer, recv_len, expect, got, dims=None):
        """Turn an _io status into the exception to raise (and mark the process failed)."""
        sent, recvd, _, err = (int(v) for v in state)
        me = self.rank
        if rc == _io.WAKE:
            f = self.failure
            return type(f)(str(f), rank=f.rank, op=what)
        if rc == _io.TIMEOUT:
            if recv_peer is not None and recvd < recv_len + HEADER_NBYTES:
                text = (f"rank {me}: {what} waited {self.timeout:g} s for rank {recv_peer} "
                        f"({max(0, recvd - HEADER_NBYTES)} of {recv_len} bytes)")
                peer = recv_peer
            else:
                text = (f"rank {me}: {what} waited {self.timeout:g} s sending to rank {send_peer} "
                        f"({max(0, sent - HEADER_NBYTES)} of {send_len} bytes)")
                peer = send_peer
            return self.fail(CommTimeout(text + self.stall_report(), rank=peer, op=what))
        if rc in (_io.EOF, _io.SEND_ERROR, _io.RECV_ERROR) and self.failure is None:
            # A peer that closes first often did so because the job is failing:
            # its notice is in flight; report that cause rather than the symptom.
            select.select([self.wake_r], [], [], NOTICE_GRACE_S)
        if self.failure is not None and self.failure_remote:
            f = self.failure
            return type(f)(str(f), rank=f.rank, op=what)
        if rc == _io.EOF:
            why = self.exits.get(recv_peer, "connection closed")
            return self.fail(PeerLost(f"rank {me}: {what} lost rank {recv_peer} ({why})", rank=recv_peer, op=what))
        if rc in (_io.SEND_ERROR, _io.RECV_ERROR):
            peer = send_peer if rc == _io.SEND_ERROR else recv_peer
            if err == 0:
                return self.fail(CommError(f"rank {me}: {what}: reduction kernel refused the data", op=what))
            why = self.exits.get(peer) or os.strerror(err).lower()
            exc = PeerLost(f"rank {me}: {what} lost rank {peer} ({why})", rank=peer, op=what)
            exc.__cause__ = OSError(err, os.strerror(err))
            return self.fail(exc)
        if rc == _io.MISMATCH:
            try:
                theirs, mine = decode(bytes(got)), decode(bytes(expect))
            except ProtocolError as exc:
                return self.fail(CommError(f"rank {me}: {what}: garbage from rank {recv_peer}: {exc}",
                                           rank=recv_peer, op=what))
            return self.fail(MismatchError(self._mismatch_text(mine, recv_peer, theirs, dims),
                                           rank=recv_peer, op=what))
        return self.fail(CommError(f"rank {me}: {what}: poll failed: {os.strerror(err)}", op=what))

    def close(self):
        self._closed = True
        with self._cond:
            socks = list(self._out.values()) + list(self._in.values())
            self._out.clear()
            self._in.clear()
            self.fds.clear()
        for s in socks + [x for x in (self._tcp, self._unix) if x is not None]:
            with contextlib.suppress(OSError):
                s.close()
        for fd in (self.wake_r, self._wake_w, self.arrival_r, self._arrival_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def new_state():
    return np.zeros(4, dtype=np.int64)
