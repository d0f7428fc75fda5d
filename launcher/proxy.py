"""An agent's coordinator proxy: its host's ranks talk to the coordinator through one connection.

Without it each rank holds a connection to the coordinator: 10,000 ranks are 10,000 sockets and
every notice ("rank 7 left") is sent 10,000 times. With it the agent (agent.py) listens on
loopback, runs the coordinator's handshake with each of its ranks itself (it has the job's secret),
and carries what they say and are told on its host's link (framing.py: LINK_* frames): the
coordinator holds one connection a host, and a notice for all of a host's ranks crosses it once.
The ranks are unchanged but for COMMLIB_COORDINATOR_VIA, the address they connect to; the
coordinator's own address still picks the interface they publish.

A rank that times out asks the coordinator what every rank is doing; where no answer comes it
checks whether its coordinator connection stopped acknowledging (a link down). Its connection
is now the agent's, on loopback, so the agent watches its link instead and tells its ranks
("link_silent": since when, on their own host's monotonic clock; "since": null once it is
acknowledged again).

Everything runs in the agent's event loop, never blocking on a rank: each socket has an outbox
written as it drains. A rank whose outbox passes OUTBOX_LIMIT (it stopped reading) is cut off,
as the coordinator cuts off a rank that stops reading.
"""
import contextlib
import secrets
import selectors
import socket
import time

from commlib._auth import DIGEST_BYTES, NONCE_BYTES, connect, mac, recv_exact, verify
from commlib._rendezvous.framing import (AGENT_LABEL, CLIENT_LABEL, LINK_DATA, LINK_DROP, LINK_GONE, LINK_HOST,
                                         LINK_JOIN, LINK_TO, MAGIC, SERVER_LABEL, LinkFrames, encode, link_frame,
                                         link_targets)
from commlib._transport.sockets import silent_for

HANDSHAKE_S = 5.0  # a rank's handshake with the agent, as with the coordinator
CONNECT_S = 30.0  # the agent's link to the coordinator
OUTBOX_LIMIT = 64 << 20
SILENT_S = 0.5  # the link unacknowledged this long (on top of silent_for's second): its ranks are told
TICK_S = 0.2  # tick()'s checks at most this often (the agent's loop turns on every rank's output)
_HELLO = 4 + NONCE_BYTES + DIGEST_BYTES  # what a rank answers the agent's greeting with


def connect_link(address, secret, host, timeout=CONNECT_S):
    """The agent's authenticated link to the coordinator at `address` (blocking, then nonblocking)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = connect(address, max(0.1, deadline - time.monotonic()))
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    try:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = recv_exact(sock, len(MAGIC) + NONCE_BYTES)
        if not hello.startswith(MAGIC):
            raise OSError(f"{address[0]}:{address[1]} is not a commlib coordinator")
        server_nonce, client_nonce, zero = hello[len(MAGIC):], secrets.token_bytes(NONCE_BYTES), bytes(4)
        sock.sendall(zero + client_nonce + mac(secret, AGENT_LABEL, server_nonce, client_nonce, zero))
        if not verify(recv_exact(sock, DIGEST_BYTES), secret, SERVER_LABEL, client_nonce, server_nonce):
            raise OSError("the coordinator does not know the job's secret")
        sock.sendall(link_frame(LINK_HOST, 0, host.encode()))
    except (OSError, EOFError) as e:
        sock.close()
        raise OSError(f"no link to the coordinator: {e}") from e
    sock.setblocking(False)
    return sock


class _Conn:
    """One nonblocking socket of the proxy, with what is still to be written to it."""

    def __init__(self, sock, rank=None):
        self.sock, self.rank = sock, rank
        self.out = bytearray()
        self.inbuf = bytearray()  # a rank's handshake, until it is whole
        self.nonce = secrets.token_bytes(NONCE_BYTES)
        self.since = time.monotonic()
        self.closing = False  # close once `out` is written
        self.writing = False  # registered for EVENT_WRITE: `out` waits for room
        self.welcomed = False  # the coordinator has sent it something: its welcome came


class Proxy:
    """The coordinator link and the loopback listener of one agent (its host's `ranks`)."""

    def __init__(self, sel, link, secret, ranks, log):
        self.sel, self.secret, self.ranks, self.log = sel, secret, set(ranks), log
        self.link = _Conn(link)
        self.frames = LinkFrames()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(len(self.ranks) + 16)
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()[:2]
        self.pending = {}  # fd -> _Conn still in its handshake
        self.by_rank = {}  # rank -> _Conn
        self.closed = False
        self.suspect = None  # when the link was first seen unacknowledged
        self.said_silent = False  # the ranks were told the link stopped acknowledging
        self.ticked = 0.0  # when tick() last looked
        sel.register(self.listener, selectors.EVENT_READ, ("proxy", self.accept))
        sel.register(link, selectors.EVENT_READ, ("proxy", self.read_link))

    # -- writing

    def send(self, conn, data):
        if conn.sock.fileno() < 0:
            return
        conn.out += data
        if len(conn.out) > OUTBOX_LIMIT and conn is not self.link:
            self.log(f"rank {conn.rank} stopped reading its coordinator messages: cut off")
            conn.out.clear()
            self.lost(conn, "stopped reading its coordinator connection")
            return
        self.flush(conn)

    def flush(self, conn):
        """Write what the socket takes; wait for it to take more only while something is left."""
        try:
            while conn.out:
                del conn.out[:conn.sock.send(conn.out)]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # gone: its read side finds out
            conn.out.clear()
        if conn.closing and not conn.out:
            self.close(conn)
        elif bool(conn.out) != conn.writing and conn.sock.fileno() >= 0:
            conn.writing = bool(conn.out)
            self.sel.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.writing else 0),
                            self.sel.get_key(conn.sock).data)

    def to_link(self, kind, rank, payload=b""):
        self.send(self.link, link_frame(kind, rank, payload))

    # -- the ranks' side

    def accept(self, events):
        for _ in range(64):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors: the rank waits in the backlog
                self.log(f"cannot accept a rank's connection: {e}")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            self.pending[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, ("proxy", lambda ev, c=conn: self.on_rank(c, ev)))
            self.send(conn, MAGIC + conn.nonce)

    def on_rank(self, conn, events):
        if events & selectors.EVENT_WRITE:
            self.flush(conn)
        if not events & selectors.EVENT_READ or conn.sock.fileno() < 0:
            return
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.lost(conn, f"reset its connection ({e})")
            return
        if not data:
            self.lost(conn, "closed its coordinator connection")
        elif conn.rank is not None:
            self.to_link(LINK_DATA, conn.rank, data)
        else:
            conn.inbuf += data
            if len(conn.inbuf) >= _HELLO:
                self.handshake(conn)

    def handshake(self, conn):
        hello, rest = bytes(conn.inbuf[:_HELLO]), bytes(conn.inbuf[_HELLO:])
        rank_bytes, nonce, digest = hello[:4], hello[4:4 + NONCE_BYTES], hello[4 + NONCE_BYTES:]
        rank = int.from_bytes(rank_bytes, "big")
        if not verify(digest, self.secret, CLIENT_LABEL, conn.nonce, nonce, rank_bytes):
            why = "failed authentication (wrong secret, or COMMLIB_ENCRYPT set for this rank alone)"
        elif rank not in self.ranks:
            why = f"claims rank {rank}, which this host does not run"
        elif rank in self.by_rank:
            why = f"rank {rank} is already connected"
        else:
            why = None
        if why is not None:
            self.log(f"refused a local connection: {why}")
            self.lost(conn, why)
            return
        del self.pending[conn.sock.fileno()]
        conn.rank, conn.inbuf = rank, None
        self.by_rank[rank] = conn
        self.send(conn, mac(self.secret, SERVER_LABEL, nonce, conn.nonce))
        self.to_link(LINK_JOIN, rank)  # the coordinator sends the welcome (or a refusal)
        if rest:
            self.to_link(LINK_DATA, rank, rest)

    def lost(self, conn, why):
        """A rank's connection ended (its goodbye, if it said one, went up before)."""
        if conn.rank is not None and self.by_rank.get(conn.rank) is conn:
            del self.by_rank[conn.rank]
            self.to_link(LINK_GONE, conn.rank, why.encode())
        self.pending.pop(conn.sock.fileno(), None)
        self.close(conn)

    def close(self, conn):
        if conn.sock.fileno() < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()

    def tick(self):
        """Ranks that connected and stayed silent past HANDSHAKE_S are let go; a link that stopped
        acknowledging (or started again) is reported to the ranks."""
        now = time.monotonic()
        if now - self.ticked < TICK_S:
            return
        self.ticked = now
        for conn in [c for c in self.pending.values() if now - c.since > HANDSHAKE_S]:
            self.log(f"refused a local connection: no handshake within {HANDSHAKE_S:g} s")
            self.lost(conn, "no handshake")
        if self.closed:
            return
        silent = silent_for(self.link.sock, queued=True)
        if silent is None:
            self.suspect = None
            if self.said_silent:
                self.said_silent = False
                self.tell({"kind": "link_silent", "since": None})
        elif self.suspect is None:
            self.suspect = now
        elif now - self.suspect >= SILENT_S and not self.said_silent:
            self.said_silent = True
            with contextlib.suppress(OSError):
                self.tell({"kind": "link_silent", "since": now - silent,
                           "coordinator": self.link.sock.getpeername()[0]})

    def tell(self, msg):
        """A message of the agent's own to each rank the coordinator has welcomed."""
        data = encode(msg)
        for conn in list(self.by_rank.values()):
            if conn.welcomed:
                self.send(conn, data)

    # -- the coordinator's side

    def read_link(self, events):
        if events & selectors.EVENT_WRITE:
            self.flush(self.link)
        if not events & selectors.EVENT_READ or self.closed:
            return
        try:
            data = self.link.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self.shut(f"the coordinator link failed ({e})")
            return
        if not data:
            self.shut(None)
            return
        try:
            frames = self.frames.feed(data)
            for kind, rank, payload in frames:
                if kind == LINK_TO:
                    ranks, body = link_targets(rank, payload)
                    for r in ranks:
                        if (conn := self.by_rank.get(r)) is not None:
                            conn.welcomed = True  # (its first message is its welcome)
                            self.send(conn, body)
                elif kind == LINK_DROP:  # refused, or its goodbye answered: hang up once its bytes are out
                    if (conn := self.by_rank.pop(rank, None)) is not None:
                        conn.closing = True
                        self.flush(conn)
                else:
                    raise ValueError(f"unknown frame kind {kind}")
        except ValueError as e:
            self.shut(f"the coordinator sent garbage ({e})")

    def shut(self, why):
        """The coordinator is gone: every rank's connection ends, as a direct one would."""
        if why is not None:
            self.log(why)
        self.closed = True
        for conn in list(self.by_rank.values()) + list(self.pending.values()) + [self.link]:
            self.close(conn)
        self.by_rank.clear()
        self.pending.clear()
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.listener)
        self.listener.close()

    def finish(self, timeout=2.0):
        """The agent is ending: what its ranks said last (goodbyes, ends) reaches the coordinator."""
        if self.closed or not self.link.out:
            return
        with contextlib.suppress(OSError):
            self.link.sock.settimeout(timeout)
            self.link.sock.sendall(self.link.out)
