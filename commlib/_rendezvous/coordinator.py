"""The coordinator: the rendezvous service every rank of a job connects to.

Hosted by ``commrun``, or by rank 0 under srun/torchrun. It authenticates
each rank (framing.py's handshake), collects every rank's info and, once all
have registered, tells each rank the hosts of all and the addresses of its
likely peers (table.py: O(log n) rows a rank, the rest on request), then
stays connected for the job's life:
it relays messages between ranks and tells the others when one dies
(``died``, from the supervisor), says goodbye (``left``) or vanishes
(``lost``). At finalize() it holds every rank's collective digest, tells the
others who is finishing (``finishing``), and once every rank has sent its
digest or is gone, compares them and answers each rank (``verdict``): n
messages for the job, not n per rank.

Threads: two. One event loop (selectors: 10,000 ranks are 10,000 sockets, not 10,000 threads)
accepts, runs every handshake a step at a time as its bytes arrive (at most
MAX_PENDING_HANDSHAKES at once, each ended after HANDSHAKE_TIMEOUT), so a slow or hostile client
never holds up the job, and reads every authenticated connection, handling each message. One
sends (notices, relays, replies, in the order they were queued), so that a rank that stops
reading delays deliveries (up to SEND_TIMEOUT) but never the reading. (Sealed connections, with
COMMLIB_ENCRYPT, each have a pump thread of their own: seal.py.)
"""
import contextlib
import errno
import logging
import os
import queue
import secrets
import selectors
import socket
import struct
import threading
import time

from .. import _backoff
from .._auth import DIGEST_BYTES, NONCE_BYTES, mac, verify
from .._control import census_wait_s, pack_peers, pack_ranks
from .._errors import AuthError, CommError
from .framing import (AGENT_LABEL, CLIENT_LABEL, LINK_DATA, LINK_DROP, LINK_GONE, LINK_HOST, LINK_JOIN, MAGIC,
                      MAX_MESSAGE, SEALED, SERVER_LABEL, LinkFrames, decode, encode, fmt_address, link_frame, link_to,
                      sealing_pumps)
from .table import MAX_INFO_BYTES, Book

HANDSHAKE_TIMEOUT = 5.0
MAX_PENDING_HANDSHAKES = 64
SEND_TIMEOUT = 10.0
LEFT_COALESCE_S = 0.02  # how long a goodbye (or a digest) waits for the next to share its "left" ("finishing")
LEFT_COALESCE_MAX_S = 0.1  # ... and at most how long in all while they keep coming
_COALESCED = ("left", "finishing")
CENSUS_FRESH_S = 2.0  # a census this recent answers a stall report as it is (ranks time out together)
CENSUS_GROUPS = 1000  # the most distinct states a census lists (its frame stays well under 1 MiB)
_NOTHING = object()  # (the notice loop holds no message back)
READ_BYTES = 1 << 18  # what the event loop takes from one connection at a time

_log = logging.getLogger("commlib")


class _Inbox:
    """A rank's messages, from the bytes it sent (`inbox`: the event loop's, set by each kind)."""

    def messages(self, data):
        """The whole messages `data` completes (ValueError for a malformed or oversized one)."""
        self.inbox += data
        out, at = [], 0
        while len(self.inbox) - at >= 4:
            length = int.from_bytes(self.inbox[at:at + 4], "big")
            if length > MAX_MESSAGE:
                raise ValueError(f"message of {length} bytes exceeds the {MAX_MESSAGE}-byte limit")
            if len(self.inbox) - at - 4 < length:
                break
            out.append(decode(bytes(self.inbox[at + 4:at + 4 + length])))
            at += 4 + length
        del self.inbox[:at]
        return out


class _Rank(_Inbox):
    """The coordinator's end of one authenticated rank connection."""

    def __init__(self, rank, sock, peer):
        self.rank, self.sock, self.peer = rank, sock, peer
        self.lock = threading.Lock()
        self.inbox = bytearray()  # bytes read and not yet a whole message

    def push(self, data):
        with self.lock:
            self.sock.sendall(data)


class _Link:
    """The coordinator's end of a host agent's connection (framing's "host link"): one socket for
    the ranks of that host, each a _Via."""

    def __init__(self, sock, peer):
        self.sock, self.peer = sock, peer
        self.host = fmt_address(peer)  # its host's name, once the agent says it
        self.lock = threading.Lock()
        self.frames = LinkFrames()
        self.ranks = {}  # rank -> _Via: joined, not yet gone

    def push(self, data):
        with self.lock:
            self.sock.sendall(data)


class _Via(_Inbox):
    """A rank behind its host's agent: what it sends arrives in LINK_DATA frames, and what the
    coordinator sends it goes down the link (_deliver sends a notice once a link, for all its ranks)."""

    def __init__(self, rank, link):
        self.rank, self.link, self.peer = rank, link, link.peer
        self.inbox = bytearray()

    @property
    def sock(self):
        return self.link.sock

    def push(self, data):
        self.link.push(link_to([self.rank], data))


class _Pending:
    """A connection in its handshake: the reply bytes so far, our nonce, and its deadline."""

    __slots__ = ("sock", "peer", "nonce", "got", "deadline")

    def __init__(self, sock, peer, nonce, deadline):
        self.sock, self.peer, self.nonce, self.got, self.deadline = sock, peer, nonce, b"", deadline


_LISTENER = object()  # (the selector's data for the listening socket)
_REPLY_BYTES = 4 + NONCE_BYTES + DIGEST_BYTES  # a client's handshake reply: rank, nonce, proof


class Coordinator:
    """The rendezvous service: authenticates ranks, hands out the table, relays notices.

    The socket is bound and listening once the constructor returns (so
    ``address`` is known before any thread exists, which lets commrun fork ranks
    safely); ``start()`` launches the accept thread.
    """

    def __init__(self, size, secret, host="127.0.0.1", port=0, log=None):
        if size < 1:
            raise ValueError(f"size must be >= 1, not {size}")
        self.size, self._secret = size, bytes(secret)
        self._log = log or (lambda line: _log.warning("commlib coordinator: %s", line))
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
            self._listener.listen(max(128, size))
        except OSError:
            self._listener.close()
            raise
        self.address = self._listener.getsockname()[:2]
        backlog = _backoff.somaxconn()
        if backlog is not None and size > backlog:  # a start-up burst overflows the backlog: SYNs retried 1 s, 3 s later
            self._log(f"{size} ranks but the kernel caps a listen backlog at {backlog} (net.core.somaxconn): ranks "
                      f"connecting at once beyond it wait for TCP to retry; raise it on this host "
                      f"(sysctl -w net.core.somaxconn={1 << (size - 1).bit_length()})")
        self._lock = threading.Lock()
        self._ranks = {}  # rank -> _Rank (its own connection) or _Via (through its host's agent)
        self._links = set()  # _Link: the host agents' connections
        self._counts = {"links": 0, "via": 0, "direct": 0}  # connections taken on: agents', ranks' through them, ranks'
        self._table = [None] * size
        self._registered = 0  # ranks whose info is in the table
        self._book = None  # the complete table (table.Book), once every rank registered
        self._dead = {}  # rank -> its "died" (or "lost") notice, replayed to ranks that connect later
        self._digests = {}  # rank -> its finalize() digest message
        self._accounted = set()  # ranks that sent their digest, gave up on finalize ("release") or are gone
        self._verdict_sent = False
        self._census = None  # the last stall census: {"epoch", "asked", "states", "waiters", "reply", "at"}
        self._census_epoch = 0
        self._first_heard = {}  # rank -> monotonic time it first reported a failure, said goodbye or vanished
        self._handshakes = {}  # socket -> _Pending (the event loop's)
        self._accepting = False  # the listener is in the selector (not while handshakes are at their limit)
        self._paused_until = 0.0  # out of descriptors: accepting again from then
        self._saturated = False
        self._out_of_fds = False
        self._notices = queue.Queue()
        self._closed = False
        self._threads = []
        self._sel = selectors.DefaultSelector()  # the event loop's: every authenticated connection
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._listener.setblocking(False)
        try:
            self._pumps = sealing_pumps("the coordinator")  # COMMLIB_ENCRYPT: every rank's connection sealed
        except (ValueError, CommError):
            self._listener.close()
            raise
        self._sealed = SEALED if self._pumps is not None else b""

    def start(self):
        for target, name in ((self._notice_loop, "commlib-coordinator"), (self._event_loop, "commlib-coordinator-io")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def missing(self):
        with self._lock:
            return [r for r, info in enumerate(self._table) if info is None]

    def notify_died(self, rank, code, message):
        """Tell every connected rank that `rank` is gone (asynchronously, never blocks)."""
        msg = {"kind": "died", "rank": rank, "code": code, "message": message}
        with self._lock:
            self._dead[rank] = msg
        self._notices.put(msg)
        self._account(rank)

    def departures(self):
        """{rank: monotonic time} of the first sign each rank gave of leaving or failing (an abort it
        sent, its goodbye, its connection dropping): the order in which the job learned of them."""
        with self._lock:
            return dict(self._first_heard)

    def announced_exits(self):
        """{rank: code} of the ranks whose program ended with a non-zero sys.exit code, as their
        at-exit digest said (a rank may take a while yet to end after that)."""
        with self._lock:
            return {r: m["exit_code"] for r, m in self._digests.items()
                    if m.get("at_exit") and isinstance(m.get("exit_code"), int) and m["exit_code"] != 0}

    def _heard(self, rank):
        with self._lock:
            self._first_heard.setdefault(rank, time.monotonic())

    def connections(self):
        """How ranks reached this coordinator, so far: {"links": host agents' connections, "via": ranks
        that came through them, "direct": ranks with a connection of their own}."""
        with self._lock:
            return dict(self._counts)

    def connected(self):
        """Ranks whose connection is open (they have not said goodbye or died)."""
        with self._lock:
            return sorted(self._ranks)

    def wait_until_alone(self, host_rank, timeout):
        """Wait until every rank but `host_rank` has disconnected; False on timeout.

        A rank that hosts the coordinator (srun/torchrun) calls this before
        closing it, so ranks still working are not cut off.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not [r for r in self.connected() if r != host_rank]:
                return True
            time.sleep(0.05)
        return False

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            socks = {c.sock for c in self._ranks.values()} | {link.sock for link in self._links}
        self._notices.put(None)
        self._wake()
        for s in [self._listener] + list(socks):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        loop = next((t for t in self._threads if t.name == "commlib-coordinator-io"), None)
        if loop is not None and loop is not threading.current_thread():
            loop.join(1.0)
        with self._lock:
            fds, self._wake_r, self._wake_w = (self._wake_r, self._wake_w), None, None
        if loop is None:  # never started
            self._sel.close()
        if loop is None or not loop.is_alive():  # (else the loop still selects on it: left to the process)
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        else:
            self._log("the coordinator's event loop did not end within 1 s of close()")
        if self._pumps is not None:
            self._pumps.close(1.0)

    # -- threads

    def _notice_loop(self):
        """Broadcast queued notices in order. Goodbyes are coalesced: a "left" waits up to
        LEFT_COALESCE_S for the next one (LEFT_COALESCE_MAX_S in all), and they go out as one message, so a job's ranks
        finishing together cost a few messages per rank rather than one per other rank."""
        pending = _NOTHING
        while True:
            if pending is not _NOTHING:
                msg, pending = pending, _NOTHING
            else:
                msg = self._notices.get()
            if msg is None:  # close()
                return
            if isinstance(msg, tuple) and msg[0] == "assembled":  # each rank its own message (table.Book)
                self._assemble(msg[1])
                continue
            if isinstance(msg, tuple) and msg[0] == "join":  # a rank behind an agent passed its handshake
                self._admit_via(msg[1])
                continue
            if isinstance(msg, tuple) and msg[0] == "link":  # a frame for an agent (after what its ranks got)
                self._push_link(msg[1], msg[2])
                continue
            if isinstance(msg, tuple):  # ("deliver", message, exclude, only): queued by _broadcast
                self._deliver(*msg[1:])
                continue
            kind = msg["kind"]
            if kind not in _COALESCED:
                self._deliver(msg, exclude=msg["rank"])
                continue
            # The window stays open while goodbyes keep coming (each gives the next LEFT_COALESCE_S),
            # up to LEFT_COALESCE_MAX_S: a loaded host spreads a job's goodbyes over more than one
            # fixed window, and then each host would be sent a notice a window.
            same, cap = [msg], time.monotonic() + LEFT_COALESCE_MAX_S
            until = min(cap, time.monotonic() + LEFT_COALESCE_S)
            while (left := until - time.monotonic()) > 0:
                try:
                    more = self._notices.get(timeout=left)
                except queue.Empty:
                    break
                if isinstance(more, tuple) and more[0] == "link":
                    # A hang-up answering a goodbye behind an agent comes just before that goodbye's
                    # "left": holding it would end each window at the first goodbye. It concerns only
                    # its rank, which the notice held here no longer reaches (the agent drops frames
                    # for a rank it hung up), so it goes out now.
                    self._push_link(more[1], more[2])
                    continue
                if not isinstance(more, dict) or more["kind"] != kind:
                    pending = more  # in order: after these (None included: close() comes last)
                    break
                same.append(more)
                until = min(cap, time.monotonic() + LEFT_COALESCE_S)
            ranks = [m["rank"] for m in same]
            # (to all: the leavers are gone already); the ranks as runs or a bitmap (_control.pack_ranks)
            out = {"kind": kind, "rank": ranks[0], "ranks": pack_ranks(sorted(set(ranks)))}
            if kind == "finishing":  # how each program ended, where it did (sys.exit(7), or its end)
                ends = {}
                for m in same:
                    if m["at_exit"] or m["exit_code"] is not None:
                        ends.setdefault((m["at_exit"], m["exit_code"]), set()).add(m["rank"])
                out["ends"] = [[at_exit, code, pack_ranks(sorted(rs))] for (at_exit, code), rs in ends.items()]
            self._deliver(out)

    def _accept(self):
        """Take on the connections waiting in the backlog, each starting its handshake (our hello
        sent), up to MAX_PENDING_HANDSHAKES at once; the rest wait in the backlog for a slot."""
        while len(self._handshakes) < MAX_PENDING_HANDSHAKES:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if self._closed:
                    return
                if e.errno in (errno.EMFILE, errno.ENFILE):  # ranks wait in the backlog; try again soon
                    if not self._out_of_fds:
                        self._out_of_fds = True
                        from .._transport.limits import fd_limit_text  # (here: commrun never loads the transport)
                        self._log(f"cannot accept ranks' connections: {fd_limit_text(e.errno)}")
                    self._paused_until = time.monotonic() + 0.05
                    self._listen(False)
                return
            pending = _Pending(sock, peer, secrets.token_bytes(NONCE_BYTES), time.monotonic() + HANDSHAKE_TIMEOUT)
            try:
                sock.setblocking(False)
                sock.send(MAGIC + pending.nonce)  # (a new connection's buffer takes these 36 bytes whole)
                self._sel.register(sock, selectors.EVENT_READ, pending)
            except OSError as e:
                self._log(f"dropped connection from {fmt_address(peer)}: {e}")
                sock.close()
                continue
            self._handshakes[sock] = pending
        if not self._saturated:  # once: a large job meets this at every start
            self._saturated = True
            self._log("too many pending handshakes: later connections wait in the listen backlog for a slot")
        self._listen(False)

    def _listen(self, on):
        """Put the listener in the selector (on) or take it out (while handshakes are at their limit,
        or for a moment without descriptors)."""
        if on == self._accepting or self._closed:
            return
        with contextlib.suppress(KeyError, ValueError, OSError):
            if on:
                self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)
            else:
                self._sel.unregister(self._listener)
        self._accepting = on

    def _handshake_step(self, pending):
        """What a connection in its handshake sent: once its whole reply is in, the handshake ends
        (taken on as a rank or an agent's link, or dropped)."""
        try:
            data = pending.sock.recv(_REPLY_BYTES - len(pending.got))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._end_handshake(pending, e)
            return
        if not data:
            self._end_handshake(pending, "closed during its handshake")
            return
        pending.got += data
        if len(pending.got) < _REPLY_BYTES:
            return
        self._end_handshake(pending, None)
        try:
            conn = self._handshake(pending)
        except Exception as e:  # noqa: BLE001 - anything a stranger does ends here
            self._log(f"dropped connection from {fmt_address(pending.peer)}: {e}")
            pending.sock.close()
            return
        if conn is not None:
            with contextlib.suppress(OSError, ValueError):  # (closed by close() meanwhile: nothing to read)
                self._sel.register(conn.sock, selectors.EVENT_READ, conn)

    def _end_handshake(self, pending, why):
        """`pending` leaves the handshakes (its slot free again); with `why`, dropped and logged."""
        self._handshakes.pop(pending.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(pending.sock)
        if why is not None:
            self._log(f"dropped connection from {fmt_address(pending.peer)}: {why}")
            pending.sock.close()

    def _expire_handshakes(self, now):
        """Drop the handshakes past their deadline; seconds until the next one's (None: none)."""
        nearest = None
        for pending in list(self._handshakes.values()):
            if pending.deadline <= now:
                self._end_handshake(pending, f"no handshake within {HANDSHAKE_TIMEOUT} s")
            elif nearest is None or pending.deadline < nearest:
                nearest = pending.deadline
        return None if nearest is None else nearest - now

    def _handshake(self, pending):
        """The reply of a finished handshake checked: an agent's link or a rank's connection, set up and
        returned (a rank admitted, its welcome sent), None for a rank refused; raises for a stranger."""
        sock, peer, server_nonce, reply = pending.sock, pending.peer, pending.nonce, pending.got
        sock.settimeout(HANDSHAKE_TIMEOUT)  # (blocking again, for the proof we send)
        rank_bytes, client_nonce, digest = reply[:4], reply[4 : 4 + NONCE_BYTES], reply[4 + NONCE_BYTES :]
        if not self._sealed and verify(digest, self._secret, AGENT_LABEL, server_nonce, client_nonce, rank_bytes):
            sock.sendall(mac(self._secret, SERVER_LABEL, client_nonce, server_nonce))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT), 0))
            link = _Link(sock, peer)
            with self._lock:
                self._links.add(link)
                self._counts["links"] += 1
            return link
        if not verify(digest, self._secret, CLIENT_LABEL + self._sealed, server_nonce, client_nonce, rank_bytes):
            if verify(digest, self._secret, CLIENT_LABEL + (SEALED[:0] if self._sealed else SEALED), server_nonce,
                      client_nonce, rank_bytes):
                on, off = ("off", "on") if self._sealed else ("on", "off")
                raise AuthError(f"rank {int.from_bytes(rank_bytes, 'big')} has COMMLIB_ENCRYPT {on} but the "
                                f"coordinator has it {off}: set it alike for the whole job (commrun --encrypt does)")
            raise AuthError("failed authentication (wrong secret)")
        rank = int.from_bytes(rank_bytes, "big")
        sock.sendall(mac(self._secret, SERVER_LABEL + self._sealed, client_nonce, server_nonce))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._pumps is not None:
            sock = self._pumps.connection(sock, self._secret, server_nonce, client_nonce, rank_bytes, False, rank,
                                          f"rank {rank}")
        # Reads are the loop's (MSG_DONTWAIT); a rank that stops reading fails our sends after SEND_TIMEOUT.
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT), 0))
        conn = _Rank(rank, sock, peer)
        with conn.lock:  # broadcasts to this rank wait until the welcome is out
            if not self._admit(conn, sock.sendall):
                sock.close()
                return None
        return conn

    def _admit(self, conn, send):
        """Take `conn` on as its rank's connection and send(bytes) it the welcome (with the deaths so
        far), or send it the refusal and return False."""
        rank = conn.rank
        with self._lock:
            if not 0 <= rank < self.size:
                refusal = f"rank {rank} is out of range for a job of size {self.size}"
            elif rank in self._ranks or self._table[rank] is not None:
                refusal = f"rank {rank} is already connected"
            else:
                refusal = None
                self._ranks[rank] = conn
                self._counts["via" if isinstance(conn, _Via) else "direct"] += 1
                replay = [m for r, m in self._dead.items() if r != rank]
        if refusal is not None:
            self._log(f"refused {fmt_address(conn.peer)}: {refusal}")
            send(encode({"kind": "error", "message": f"coordinator refused: {refusal}"}))
            return False
        send(b"".join(encode(m) for m in [{"kind": "welcome", "size": self.size}] + replay))
        return True

    def _admit_via(self, via):
        """(the sending thread's, so nothing reaches the rank before its welcome) A rank behind an
        agent: admitted, or refused and its connection dropped."""
        try:
            admitted = self._admit(via, via.push)
        except OSError as e:
            self._link_failed(via.link, e)
            return
        if not admitted:
            via.link.ranks.pop(via.rank, None)
            self._push_link(via.link, link_frame(LINK_DROP, via.rank))

    def _push_link(self, link, data):
        try:
            link.push(data)
        except OSError as e:
            self._link_failed(link, e)

    def _link_failed(self, link, e):
        """A send to an agent failed: a link it closed is found closed by the event loop, which loses
        its ranks; one that stopped reading (SEND_TIMEOUT) is shut so the event loop does the same."""
        if isinstance(e, (BrokenPipeError, ConnectionResetError)):
            return
        self._log(f"could not reach the agent on {link.host}: {e}")
        with contextlib.suppress(OSError):
            link.sock.shutdown(socket.SHUT_RDWR)

    def _wake(self):
        with self._lock:  # (close() closes the pipe under the lock: never a write to a reused fd)
            if self._wake_w is not None:
                with contextlib.suppress(BlockingIOError):  # full: the loop is awake already
                    os.write(self._wake_w, b"!")

    def _event_loop(self):
        """Accept, run the handshakes, read every rank's and agent's connection; handle each whole
        message in the order it came."""
        self._listen(True)
        try:
            while not self._closed:
                now = time.monotonic()
                wait = self._expire_handshakes(now)
                if not self._accepting and len(self._handshakes) < MAX_PENDING_HANDSHAKES:
                    if now >= self._paused_until:
                        self._listen(True)
                    else:
                        wait = min(wait if wait is not None else 1.0, self._paused_until - now)
                for key, _ in self._sel.select(None if wait is None else max(wait, 0.0)):
                    if key.data is None:
                        with contextlib.suppress(BlockingIOError):
                            os.read(key.fd, 4096)
                    elif key.data is _LISTENER:
                        self._accept()
                    elif isinstance(key.data, _Pending):
                        self._handshake_step(key.data)
                    else:
                        self._read(key.data)
        finally:
            for pending in list(self._handshakes.values()):
                pending.sock.close()
            self._handshakes.clear()
            self._sel.close()

    def _take(self, conn, data):
        """Handle the whole messages `data` completes from `conn`; True once one is its goodbye."""
        for msg in conn.messages(data):
            if msg["kind"] == "bye":
                return True
            self._handle(conn, msg)
        return False

    def _read(self, conn):
        """What `conn` sent: its messages handled, or its end (a goodbye, EOF, a reset) taken care of."""
        if isinstance(conn, _Link):
            self._read_link(conn)
            return
        why, said_bye = None, False
        try:
            data = conn.sock.recv(READ_BYTES, socket.MSG_DONTWAIT)
            if not data:
                why = "closed its coordinator connection"  # EOF: the plain way a rank goes away
            else:
                said_bye = self._take(conn, data)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionError as e:
            why = f"reset its connection ({e})"
        except (OSError, ValueError) as e:
            why = f"dropped: {e}"
            if not self._closed:
                self._log(f"rank {conn.rank} ({fmt_address(conn.peer)}) {why}")
        except Exception as e:  # noqa: BLE001 -- a message we could not handle ends its sender, not the loop
            why = f"dropped: its message could not be handled ({type(e).__name__}: {e})"
            self._log(f"rank {conn.rank} ({fmt_address(conn.peer)}) {why}")
        if why is None and not said_bye:
            return
        with contextlib.suppress(KeyError, ValueError):  # (closed by close() already)
            self._sel.unregister(conn.sock)
        conn.sock.close()
        self._gone(conn, None if said_bye else why)

    def _read_link(self, link):
        """What a host agent's link carried: its ranks' joins, messages and ends; or the link's own end,
        which loses every rank still behind it."""
        why = None
        try:
            data = link.sock.recv(READ_BYTES, socket.MSG_DONTWAIT)
            if not data:
                why = "closed its coordinator connection"
            else:
                for kind, r, payload in link.frames.feed(data):
                    self._link_frame(link, kind, r, payload)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionError as e:
            why = f"reset its connection ({e})"
        except Exception as e:  # noqa: BLE001 -- a malformed frame ends the link, not the loop
            why = f"was dropped: {type(e).__name__}: {e}"
            if not self._closed:
                self._log(f"the agent on {link.host} ({fmt_address(link.peer)}) {why}")
        if why is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(link.sock)
        link.sock.close()
        with self._lock:
            self._links.discard(link)
        for r in sorted(link.ranks):
            if (via := link.ranks.pop(r, None)) is not None:
                self._gone(via, f"was lost with its host's agent on {link.host}, which {why},")

    def _link_frame(self, link, kind, r, payload):
        if kind == LINK_DATA:
            via = link.ranks.get(r)
            if via is None:  # refused, or gone: nobody reads it
                return
            why = None
            try:
                if not self._take(via, payload):
                    return
            except Exception as e:  # noqa: BLE001 -- as on a rank's own connection: its sender is dropped
                why = f"dropped: {e}" if isinstance(e, ValueError) else \
                    f"dropped: its message could not be handled ({type(e).__name__}: {e})"
                self._log(f"rank {r} (through the agent on {link.host}) {why}")
            link.ranks.pop(r, None)
            self._notices.put(("link", link, link_frame(LINK_DROP, r)))  # its goodbye's answer: the hang-up
            self._gone(via, why)
        elif kind == LINK_JOIN:
            if r in link.ranks:
                raise ValueError(f"rank {r} joined twice")
            link.ranks[r] = via = _Via(r, link)
            self._notices.put(("join", via))
        elif kind == LINK_GONE:
            via = link.ranks.pop(r, None)
            if via is not None:
                self._gone(via, payload.decode(errors="replace")[:200] or "closed its coordinator connection")
        elif kind == LINK_HOST:
            link.host = payload.decode(errors="replace")[:200]
        else:
            raise ValueError(f"unknown link frame kind {kind}")

    def _gone(self, conn, why):
        """`conn`'s rank left: said goodbye (why None), or its connection ended as `why` says."""
        with self._lock:
            if self._ranks.get(conn.rank) is conn:
                del self._ranks[conn.rank]
            closed = self._closed
        self._heard(conn.rank)  # its goodbye, or its connection dropping
        if closed:
            return
        self._account(conn.rank)
        if why is None:
            self._notices.put({"kind": "left", "rank": conn.rank})  # coalesced with other goodbyes
        else:
            lost = {"kind": "lost", "rank": conn.rank, "message": f"rank {conn.rank} {why} without saying goodbye"}
            with self._lock:  # replayed, like a death, to a rank that connects later (before the job assembled)
                self._dead.setdefault(conn.rank, lost)
            self._broadcast(lost, exclude=conn.rank)

    def _handle(self, conn, msg):
        kind = msg["kind"]
        if kind == "register":
            info = msg.get("info", {})
            if not isinstance(info, dict):  # (the table could not be packed: the job would wait)
                raise ValueError("its registration's info is not an object")
            if len(encode(info)) > MAX_INFO_BYTES:
                raise ValueError(f"its registration's info is larger than {MAX_INFO_BYTES} bytes")
            with self._lock:
                if self._table[conn.rank] is None:
                    self._registered += 1
                self._table[conn.rank] = info
                complete = self._registered == self.size
                table = list(self._table) if complete else None
            if complete:  # each rank: the hosts of all, the addresses of its likely peers (table.py)
                self._book = Book(table)
                self._notices.put(("assembled", self._book))
        elif kind == "rows":  # a rank needs the addresses of ranks it was not given
            first, last = msg.get("first"), msg.get("last")
            if self._book is None or type(first) is not int or type(last) is not int or not first <= last \
                    or last - first >= self.size:
                raise ValueError(f"bad rows request {first!r}..{last!r}" + (" before the job assembled"
                                                                         if self._book is None else ""))
            for part in self._book.rows(first, last):
                self._broadcast(part, only={conn.rank})
        elif kind == "clock":  # a rank aligning its trace's clock with ours (commlib._trace)
            self._broadcast({"kind": "clock", "t": time.monotonic_ns(), "echo": msg.get("echo")}, only={conn.rank})
        elif kind == "digest":  # finalize(): this rank's collectives, compared here with every other rank's
            self._digest(conn.rank, msg)
        elif kind == "release":  # it failed waiting on a rank that finished: it sends no digest
            self._account(conn.rank)
        elif kind == "stall":  # a rank timed out: what is every rank doing? (one census for many askers)
            self._stall(conn.rank)
        elif kind == "status" and "census" in msg:
            self._census_answer(conn.rank, msg)
        elif kind == "census":
            with self._lock:
                dead = sorted(self._dead)
            self._broadcast({"kind": "census", "missing": self.missing(), "dead": dead}, only={conn.rank})
        elif "to" in msg:
            to = msg["to"]
            if kind == "abort":  # a failure
                self._heard(conn.rank)
            msg["from"] = conn.rank
            if to == "all":
                self._broadcast(msg, exclude=conn.rank)
            elif isinstance(to, list) and all(isinstance(r, int) for r in to):
                self._broadcast(msg, only=set(to))
            else:
                self._log(f"rank {conn.rank}: ignored message with bad 'to': {to!r}")
        else:
            self._log(f"rank {conn.rank}: ignored message of unknown kind {kind!r}")

    def _digest(self, rank, msg):
        if msg.get("at_exit"):  # its program ended
            self._heard(rank)
        exit_code = msg.get("exit_code")
        ended = {"kind": "finishing", "rank": rank, "at_exit": bool(msg.get("at_exit")),
                 "exit_code": exit_code if isinstance(exit_code, int) else None}
        with self._lock:
            self._digests[rank] = msg
            late = self._verdict_sent  # it gave up on finalize ("release") and then finalized after all
        self._notices.put(ended)  # a rank blocked on this one learns it will send nothing more
        if late:
            self._send_verdicts([rank])
        else:
            self._account(rank)

    def _account(self, rank):
        """`rank` will send no digest after this one (or none at all): once every rank is accounted
        for, compare the digests and answer each rank that sent one."""
        with self._lock:
            self._accounted.add(rank)
            if self._verdict_sent or len(self._accounted) < self.size or not self._digests:
                return
            self._verdict_sent = True
            ranks = sorted(self._digests)
        self._send_verdicts(ranks)

    def _send_verdicts(self, ranks):
        with self._lock:
            digests = dict(self._digests)
        first = first_differences(digests)
        agree = [r for r in ranks if first[r] is None]
        if agree:
            self._broadcast({"kind": "verdict", "peers": {}}, only=set(agree))
        for r in ranks:
            if first[r] is not None:
                self._broadcast({"kind": "verdict", "peers": {str(first[r]): digests[first[r]]}}, only={r})

    def _stall(self, rank):
        now = time.monotonic()
        with self._lock:
            c = self._census
            if c is not None and c["reply"] is None:  # being taken: this rank gets it too
                c["waiters"].add(rank)
                return
            if c is not None and now - c["at"] < CENSUS_FRESH_S:
                reply = c["reply"]
            else:
                self._census_epoch += 1
                c = self._census = {"epoch": self._census_epoch, "asked": set(self._ranks), "states": {},
                                    "waiters": {rank}, "reply": None, "at": now}
                reply = None
        if reply is not None:
            self._broadcast(reply, only={rank})
            return
        self._broadcast({"kind": "status_query", "census": c["epoch"]}, only=c["asked"])
        timer = threading.Timer(census_wait_s(self.size), self._census_done, args=(c["epoch"],))
        timer.daemon = True
        timer.start()

    def _census_answer(self, rank, msg):
        state, peer = msg.get("state"), msg.get("peer")
        with self._lock:
            c = self._census
            if c is None or c["reply"] is not None or msg["census"] != c["epoch"] or rank not in c["asked"]:
                return
            c["states"][rank] = (str(state)[:300], peer if type(peer) is int and 0 <= peer < self.size else None)
            complete = len(c["states"]) == len(c["asked"])
        if complete:
            self._census_done(c["epoch"])

    def _census_done(self, epoch):
        """Answer every rank waiting on census `epoch` (all ranks answered, or census_wait_s passed)."""
        with self._lock:
            c = self._census
            if c is None or c["epoch"] != epoch or c["reply"] is not None:
                return
            c["reply"], c["at"] = census_reply(epoch, c["states"]), time.monotonic()
            waiters = set(c["waiters"])
        self._broadcast(c["reply"], only=waiters)

    def _broadcast(self, msg, exclude=None, only=None):
        """Queue msg for _deliver (in the sending thread, after what was queued before it): the event
        loop and the census timer never wait on a rank's socket."""
        self._notices.put(("deliver", msg, exclude, only))

    def _assemble(self, book):
        """Send every connected rank its "assembled" message (a rank that connects later is refused:
        its number is in the table already)."""
        with self._lock:
            targets = list(self._ranks.values())
        for conn in targets:
            self._deliver(book.assembled(conn.rank), only={conn.rank})

    def _deliver(self, msg, exclude=None, only=None):
        """Send msg (a dict, or bytes already encoded) to every connected rank, or to those in `only`
        (looked up one by one: a relay to a few ranks costs no scan of all of them)."""
        data = msg if isinstance(msg, bytes) else encode(msg)
        with self._lock:
            if only is None:
                targets = [c for r, c in self._ranks.items() if r != exclude]
            else:
                targets = [c for r in only if r != exclude and (c := self._ranks.get(r)) is not None]
        links, direct = {}, []  # the ranks behind agents: one frame a host for all of them
        for conn in targets:
            if isinstance(conn, _Via):
                links.setdefault(conn.link, []).append(conn.rank)
            else:
                direct.append(conn)
        for link, ranks in links.items():
            self._push_link(link, link_to(sorted(ranks), data))
        for conn in direct:
            try:
                conn.push(data)
            except (BrokenPipeError, ConnectionResetError):
                # The rank closed its end (it is exiting): its reader still drains what the rank sent,
                # a goodbye included, so a shutdown here would turn a goodbye into "lost".
                continue
            except OSError as e:  # a rank that stopped reading (SEND_TIMEOUT): shut, so the event loop cleans up
                with self._lock:
                    still_there = self._ranks.get(conn.rank) is conn
                # EBADF: the event loop closed it as the rank left, before taking it off the table
                if not still_there or e.errno == errno.EBADF:
                    continue  # it left while we were sending: nothing to report
                self._log(f"could not reach rank {conn.rank}: {e}")
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)


def _groups(digest):
    """{group id: (collective count, digest)} of one rank's digest message (junk reads as none)."""
    groups = digest.get("groups")
    if not isinstance(groups, dict):
        return {}
    return {gid: _history(g.get("n"), g.get("digest")) for gid, g in groups.items() if isinstance(g, dict)}


def _history(n, digest):
    """A group's (count, digest) as a dictionary key; a value that is no integer (a malformed
    message) compares as its text, so it can differ but never stop the coordinator."""
    if isinstance(n, int) and isinstance(digest, int):
        return n, digest
    return repr(n), repr(digest)


def first_differences(digests):
    """{rank: the lowest other rank whose collectives differ from its own in a group both belong
    to, or None}: what each rank's finalize() would find comparing its digest with every other
    rank's in rank order, in O(ranks x groups x distinct histories) instead of O(ranks²)."""
    lowest = {}  # group id -> {(count, digest): the lowest rank with that history}
    per_rank = {r: _groups(d) for r, d in digests.items()}
    for r in sorted(per_rank):
        for gid, value in per_rank[r].items():
            lowest.setdefault(gid, {}).setdefault(value, r)
    first = {}
    for r, groups in per_rank.items():
        others = [low for gid, value in groups.items() for other, low in lowest[gid].items() if other != value]
        first[r] = min(others) if others else None
    return first


def census_reply(epoch, states):
    """The encoded "stall" message of a census: {rank: (state, the rank it waits on)} grouped by
    state ([state, ranks, one peer for all or a peer each]); beyond CENSUS_GROUPS distinct states
    the smallest groups are left out, their ranks listed as "omitted"."""
    groups = {}
    for r in sorted(states):
        state, peer = states[r]
        ranks, peers = groups.setdefault(state, ([], []))
        ranks.append(r)
        peers.append(peer)
    kept = sorted(groups.items(), key=lambda g: -len(g[1][0]))[:CENSUS_GROUPS]
    listed = {state for state, _ in kept}
    omitted = sorted(r for state, (ranks, _) in groups.items() if state not in listed for r in ranks)
    out = [[state, pack_ranks(ranks), peers[0] if len(set(peers)) == 1 else pack_peers(ranks, peers)]
           for state, (ranks, peers) in kept]
    return encode({"kind": "stall", "epoch": epoch, "groups": out, "omitted": pack_ranks(omitted)})
