"""Rendezvous: where ranks find each other, and the job's control channel.

The coordinator (hosted by ``commrun``, or by rank 0 under srun/torchrun) is a
small TCP service. Every rank connects, proves it knows the job secret, sends
its own info and receives the table of all ranks. The connection then stays
open for the job's life and carries notices (``died``, ``left``, ``lost``) and
messages relayed between ranks.

Wire: each message is a 4-byte big-endian length and a UTF-8 JSON object of at
most 1 MiB. Nothing is ever unpickled. Before any message, the handshake::

    server -> client  MAGIC + server_nonce(32)
    client -> server  rank(4, big-endian) + client_nonce(32)
                      + HMAC(secret, b"commlib/coord/client" + server_nonce + client_nonce + rank)
    server -> client  HMAC(secret, b"commlib/coord/server" + client_nonce + server_nonce)

A connection that fails the handshake, stays silent past the deadline, or
sends an oversized or malformed message is dropped and logged; the job goes on.

Messages pushed by the coordinator to ranks (``kind``):
  ``table``   {"table": [info of rank 0, info of rank 1, ...]} once all registered
  ``died``    {"rank", "code", "message"} from the supervisor (commrun), see notify_died
  ``left``    {"rank"} the rank said goodbye (Client.close) and disconnected
  ``lost``    {"rank", "message"} the rank's connection closed without a goodbye
  ``census``  {"missing": [...], "dead": [...]} the answer to a census request
  ``welcome`` {"size"} first message after the handshake, or instead
  ``error``   {"message"} a refusal (rank out of range, duplicate); the connection closes
  anything a rank sent with "to", plus "from": the sender's rank
"""
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import queue
import re
import secrets
import socket
import struct
import threading
import time
import zlib

from ._errors import AuthError, CommError, CommTimeout, PeerLost

MAGIC = b"commlib-coord/1\n"
NONCE = 32
DIGEST = 32
MAX_MESSAGE = 1 << 20
HANDSHAKE_TIMEOUT = 5.0
MAX_PENDING_HANDSHAKES = 64
SEND_TIMEOUT = 10.0
CONNECT_RETRY_MAX_S = 0.1
_LEN = struct.Struct(">I")
_CLIENT_TAG = b"commlib/coord/client"
_SERVER_TAG = b"commlib/coord/server"

_log = logging.getLogger("commlib")


# ---------------------------------------------------------------- framing


def _encode(msg):
    body = json.dumps(msg, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"coordinator message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return _LEN.pack(len(body)) + body


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _recv_message(sock):
    """One framed JSON object; ValueError for anything malformed or too large."""
    (length,) = _LEN.unpack(_recv_exact(sock, 4))
    if length > MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes exceeds the {MAX_MESSAGE}-byte limit")
    try:
        msg = json.loads(_recv_exact(sock, length).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"bad JSON ({e})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("kind"), str):
        raise ValueError("message is not an object with a 'kind'")
    return msg


def _mac(secret, *parts):
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _fmt(address):
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ---------------------------------------------------------------- coordinator


class _Rank:
    """The coordinator's end of one authenticated rank connection."""

    def __init__(self, rank, sock, peer):
        self.rank, self.sock, self.peer = rank, sock, peer
        self.lock = threading.Lock()

    def push(self, data):
        with self.lock:
            self.sock.sendall(data)


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
        self._lock = threading.Lock()
        self._ranks = {}  # rank -> _Rank, authenticated and connected
        self._table = [None] * size
        self._dead = {}  # rank -> "died" notice, replayed to ranks that connect later
        self._pending = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._saturated = False
        self._notices = queue.Queue()
        self._closed = False
        self._threads = []

    def start(self):
        for target in (self._accept_loop, self._notice_loop):
            t = threading.Thread(target=target, name="commlib-coordinator", daemon=True)
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
            conns = list(self._ranks.values())
        self._notices.put(None)
        for s in [self._listener] + [c.sock for c in conns]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    # -- threads

    def _accept_loop(self):
        while not self._closed:
            try:
                sock, peer = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # e.g. EMFILE: don't spin
                continue
            # Too many handshakes at once (64 ranks starting together, or a flood): wait for a slot,
            # leaving the rest in the listen backlog. Dropping here failed ranks that connected in a burst.
            if not self._pending.acquire(blocking=False):
                if not self._saturated:  # once: a large job meets this at every start
                    self._saturated = True
                    self._log(f"too many pending handshakes: {_fmt(peer)} and later connections wait for a slot")
                while not self._pending.acquire(timeout=0.5):
                    if self._closed:
                        sock.close()
                        return
            threading.Thread(target=self._serve, args=(sock, peer), daemon=True).start()

    def _notice_loop(self):
        while (msg := self._notices.get()) is not None:
            self._broadcast(msg, exclude=msg["rank"])

    def _serve(self, sock, peer):
        try:
            conn = self._handshake(sock, peer)
        except Exception as e:  # noqa: BLE001 - anything a stranger does ends here
            self._log(f"dropped connection from {_fmt(peer)}: {e}")
            sock.close()
            return
        finally:
            self._pending.release()
        if conn is not None:
            self._read_loop(conn)

    def _handshake(self, sock, peer):
        sock.settimeout(HANDSHAKE_TIMEOUT)
        server_nonce = secrets.token_bytes(NONCE)
        sock.sendall(MAGIC + server_nonce)
        try:
            reply = _recv_exact(sock, 4 + NONCE + DIGEST)
        except socket.timeout:
            raise CommError(f"no handshake within {HANDSHAKE_TIMEOUT} s") from None
        rank_bytes, client_nonce, digest = reply[:4], reply[4 : 4 + NONCE], reply[4 + NONCE :]
        expected = _mac(self._secret, _CLIENT_TAG, server_nonce, client_nonce, rank_bytes)
        if not hmac.compare_digest(digest, expected):
            raise AuthError("failed authentication (wrong secret)")
        rank = int.from_bytes(rank_bytes, "big")
        sock.sendall(_mac(self._secret, _SERVER_TAG, client_nonce, server_nonce))
        # Reads block (close() wakes them); a rank that stops reading fails our sends after SEND_TIMEOUT.
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT), 0))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Rank(rank, sock, peer)
        conn.lock.acquire()  # broadcasts to this rank wait until the welcome is out
        with self._lock:
            if rank >= self.size:
                refusal = f"rank {rank} is out of range for a job of size {self.size}"
            elif rank in self._ranks or self._table[rank] is not None:
                refusal = f"rank {rank} is already connected"
            else:
                refusal = None
                self._ranks[rank] = conn
                replay = [m for r, m in self._dead.items() if r != rank]
        try:
            if refusal is not None:
                self._log(f"refused {_fmt(peer)}: {refusal}")
                sock.sendall(_encode({"kind": "error", "message": f"coordinator refused: {refusal}"}))
                sock.close()
                return None
            sock.sendall(b"".join(_encode(m) for m in [{"kind": "welcome", "size": self.size}] + replay))
        finally:
            conn.lock.release()
        return conn

    def _read_loop(self, conn):
        said_bye = False
        why = "closed its coordinator connection"  # EOF or reset: the plain way a rank goes away
        try:
            while not self._closed:
                msg = _recv_message(conn.sock)
                if msg["kind"] == "bye":
                    said_bye = True
                    break
                self._handle(conn, msg)
        except (EOFError, ConnectionError) as e:
            why = "closed its coordinator connection" if isinstance(e, EOFError) else f"reset its connection ({e})"
        except (OSError, ValueError) as e:
            why = f"dropped: {e}"
            if not self._closed:
                self._log(f"rank {conn.rank} ({_fmt(conn.peer)}) {why}")
        with self._lock:
            self._ranks.pop(conn.rank, None)
            closed = self._closed
        conn.sock.close()
        if closed:
            return
        if said_bye:
            self._broadcast({"kind": "left", "rank": conn.rank}, exclude=conn.rank)
        else:
            message = f"rank {conn.rank} {why} without saying goodbye"
            self._broadcast({"kind": "lost", "rank": conn.rank, "message": message}, exclude=conn.rank)

    def _handle(self, conn, msg):
        kind = msg["kind"]
        if kind == "register":
            with self._lock:
                self._table[conn.rank] = msg.get("info", {})
                complete = all(info is not None for info in self._table)
                table = list(self._table)
            if complete:
                self._broadcast({"kind": "table", "table": table})
        elif kind == "census":
            with self._lock:
                dead = sorted(self._dead)
            conn.push(_encode({"kind": "census", "missing": self.missing(), "dead": dead}))
        elif "to" in msg:
            to = msg["to"]
            msg["from"] = conn.rank
            if to == "all":
                self._broadcast(msg, exclude=conn.rank)
            elif isinstance(to, list) and all(isinstance(r, int) for r in to):
                self._broadcast(msg, only=set(to))
            else:
                self._log(f"rank {conn.rank}: ignored message with bad 'to': {to!r}")
        else:
            self._log(f"rank {conn.rank}: ignored message of unknown kind {kind!r}")

    def _broadcast(self, msg, exclude=None, only=None):
        data = _encode(msg)
        with self._lock:
            targets = [c for r, c in self._ranks.items() if r != exclude and (only is None or r in only)]
        for conn in targets:
            try:
                conn.push(data)
            except (BrokenPipeError, ConnectionResetError):
                # The rank closed its end (it is exiting): its reader still drains what the rank sent,
                # a goodbye included, so a shutdown here would turn a goodbye into "lost".
                continue
            except OSError as e:  # a rank that stopped reading (SEND_TIMEOUT): the reader thread cleans up
                with self._lock:
                    still_there = self._ranks.get(conn.rank) is conn
                if not still_there:
                    continue  # it left while we were sending: nothing to report
                self._log(f"could not reach rank {conn.rank}: {e}")
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------- client


class Client:
    """A rank's connection to the coordinator."""

    def __init__(self, sock, address, rank):
        self._sock, self.address, self.rank = sock, address, rank
        self._send_lock = threading.Lock()
        self._early = []  # messages read by register() that belong to the listener
        self._listener = None
        self._closing = False

    @property
    def sock(self):
        """The connection (for a transport that reports on its link health)."""
        return self._sock

    @classmethod
    def connect(cls, address, secret, rank, timeout):
        """Connect and authenticate, retrying refused connections until `timeout`."""
        address = (address[0], int(address[1]))
        deadline = time.monotonic() + timeout
        delay, last = 0.02, None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommTimeout(
                    f"rank {rank}: could not reach the coordinator at {_fmt(address)} "
                    f"within {timeout:g} s: {last}",
                    op="connect",
                ) from last
            try:
                sock = socket.create_connection(address, timeout=min(remaining, 5.0))
                break
            except OSError as e:
                last = e
                # Under srun every rank but 0 waits here while rank 0 imports and starts the
                # coordinator: a short cap keeps them from sleeping long after it is up.
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, CONNECT_RETRY_MAX_S)
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = _recv_exact(sock, len(MAGIC) + NONCE)
            if not hello.startswith(MAGIC):
                raise CommError(f"rank {rank}: {_fmt(address)} is not a commlib coordinator")
            server_nonce, client_nonce = hello[len(MAGIC) :], secrets.token_bytes(NONCE)
            rank_bytes = rank.to_bytes(4, "big")
            digest = _mac(secret, _CLIENT_TAG, server_nonce, client_nonce, rank_bytes)
            sock.sendall(rank_bytes + client_nonce + digest)
            try:
                proof = _recv_exact(sock, DIGEST)
            except (EOFError, ConnectionError) as e:
                raise AuthError(
                    f"rank {rank}: the coordinator at {_fmt(address)} refused our credentials "
                    f"(is COMMLIB_SECRET the job's secret?)"
                ) from e
            if not hmac.compare_digest(proof, _mac(secret, _SERVER_TAG, client_nonce, server_nonce)):
                raise AuthError(f"rank {rank}: the coordinator at {_fmt(address)} does not know the job secret")
            welcome = _recv_message(sock)
            if welcome["kind"] == "error":
                raise CommError(f"rank {rank}: {welcome['message']}")
        except CommError:  # before OSError: AuthError and CommTimeout are OSErrors too
            sock.close()
            raise
        except socket.timeout as e:
            sock.close()
            raise CommTimeout(
                f"rank {rank}: no handshake from the coordinator at {_fmt(address)} within {timeout:g} s",
                op="connect",
            ) from e
        except (OSError, EOFError, ValueError) as e:
            sock.close()
            raise CommError(f"rank {rank}: handshake with the coordinator at {_fmt(address)} failed: {e}") from e
        sock.settimeout(None)
        return cls(sock, address, rank)

    def register(self, info, timeout):
        """Send this rank's info; block until every rank has; return the table."""
        self.send({"kind": "register", "info": info})
        deadline = time.monotonic() + timeout
        census_asked = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if census_asked:
                    raise CommTimeout(f"rank {self.rank}: the coordinator did not answer within {timeout:g} s")
                self.send({"kind": "census"})
                census_asked, deadline = True, time.monotonic() + 5.0
                continue
            msg = self._read(remaining)
            kind = msg["kind"]
            if kind == "table":
                return msg["table"]
            if kind in ("died", "lost"):
                what = msg["message"] if kind == "died" else "lost its coordinator connection"
                raise PeerLost(f"rank {self.rank}: rank {msg['rank']} {what} before the job assembled", rank=msg["rank"])
            if kind == "census" and census_asked:
                missing = ", ".join(map(str, msg["missing"])) or "none"
                raise CommTimeout(
                    f"rank {self.rank}: the job did not assemble within {timeout:g} s; "
                    f"ranks that never checked in: {missing}",
                    op="init",
                )
            self._early.append(msg)

    def _read(self, timeout):
        self._sock.settimeout(timeout)
        try:
            return _recv_message(self._sock)
        except socket.timeout:
            return {"kind": "_tick"}
        except (OSError, EOFError, ValueError) as e:
            raise CommError(f"rank {self.rank}: lost the coordinator at {_fmt(self.address)}: {e}") from e
        finally:
            self._sock.settimeout(None)

    def start_listener(self, callback):
        """Call callback(msg) for every pushed message, from a daemon thread."""

        def loop():
            for msg in self._early:
                callback(msg)
            self._early = []
            try:
                while True:
                    callback(_recv_message(self._sock))
            except (OSError, EOFError, ValueError) as e:
                if not self._closing:
                    callback({"kind": "coordinator_lost", "message": f"lost the coordinator at {_fmt(self.address)}: {e}"})

        self._listener = threading.Thread(target=loop, name="commlib-coordinator-client", daemon=True)
        self._listener.start()

    def send(self, msg):
        data = _encode(msg)
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise CommError(f"rank {self.rank}: lost the coordinator at {_fmt(self.address)}: {e}") from e

    def close(self):
        """Say goodbye (the others get a "left" notice) and disconnect."""
        if self._closing:
            return
        self._closing = True
        # Best effort: a coordinator that is already gone needs no goodbye.
        with contextlib.suppress(OSError, CommError):
            self.send({"kind": "bye"})
            self._sock.shutdown(socket.SHUT_WR)
            # Wait for the coordinator to hang up, so the goodbye is read before a reset.
            if self._listener is not None:
                if self._listener is not threading.current_thread():
                    self._listener.join(1.0)
            else:
                self._sock.settimeout(1.0)
                while self._sock.recv(65536):
                    continue
        self._sock.close()


# ---------------------------------------------------------------- discovery


@dataclasses.dataclass
class JobEnv:
    rank: int
    size: int
    local_rank: int
    local_size: int
    coordinator: tuple  # (host, port)
    secret: bytes
    host_coordinator: bool  # True: this process must run the Coordinator itself
    source: str  # "commrun" | "slurm" | "torchrun"


_warned_weak_secret = False


def discover(environ=os.environ):
    """The job this process belongs to, from the launcher's variables; None outside any.

    Order: COMMLIB_* (commrun), Slurm under srun, Open MPI's mpirun (OMPI_COMM_WORLD_*),
    MPICH/Hydra's mpiexec (PMI_*), torchrun-style variables (also PyTorchJob and Ray Train),
    Kubeflow Trainer v2 running plain python (PET_*), a Kubernetes Indexed Job
    (JOB_COMPLETION_INDEX). A launcher that is detected but whose ranks cannot be joined is a
    CommError saying what to set, never a size-1 world.
    Under Slurm and torchrun, COMMLIB_SECRET should be exported to every rank;
    without it the secret is derived from the job's identity (job id, node
    list or master address), which anyone who can see the job can recompute,
    so it only protects against accidents, not against other local users.
    """
    if "COMMLIB_RANK" in environ:
        return _from_commrun(environ)
    if "SLURM_PROCID" in environ and _under_srun(environ):
        return _from_slurm(environ)
    if "OMPI_COMM_WORLD_RANK" in environ:
        return _from_mpirun(environ, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI's mpirun",
                            f"ompi/{environ.get('PMIX_NAMESPACE', environ.get('OMPI_MCA_ess_base_jobid', ''))}")
    if "PMI_RANK" in environ and "PMI_SIZE" in environ:
        return _from_mpirun(environ, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                            "MPICH/Hydra's mpiexec", f"hydra/{os.getppid()}")
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return _from_torchrun(environ)
    if "PET_NNODES" in environ and "PET_NODE_RANK" in environ:
        return _from_trainer(environ)
    if "JOB_COMPLETION_INDEX" in environ:
        return _from_indexed_job(environ)
    return None


def explicit(rank, size, coordinator, secret, environ=os.environ):
    """The job described by commlib.init(rank=, size=, coordinator=, secret=): for any launcher not
    detected automatically. Rank 0 hosts the coordinator at `coordinator` ("host:port" or a
    (host, port) pair); `secret` (bytes or hex) defaults to COMMLIB_SECRET."""
    missing = [name for name, v in (("rank", rank), ("size", size), ("coordinator", coordinator)) if v is None]
    if missing:
        raise CommError(f"commlib.init(): explicit set-up needs rank, size and coordinator; missing "
                        f"{', '.join(missing)}")
    for name, v in (("rank", rank), ("size", size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise CommError(f"commlib.init(): {name} must be an int, got {v!r}")
    if isinstance(coordinator, str):
        try:
            coordinator = parse_address(coordinator)
        except ValueError:
            raise CommError(f"commlib.init(): coordinator must be 'host:port', got {coordinator!r}") from None
    else:
        try:
            host, port = coordinator
        except (TypeError, ValueError):
            raise CommError(f"commlib.init(): coordinator must be 'host:port' or (host, port), got "
                            f"{coordinator!r}") from None
        coordinator = (str(host), int(port))
    if secret is None:
        if "COMMLIB_SECRET" not in environ:
            raise CommError("commlib.init(): pass secret= (the same bytes or hex string on every rank) or export "
                            "COMMLIB_SECRET")
        secret = _var(environ, "COMMLIB_SECRET", bytes.fromhex)
    elif isinstance(secret, str):
        try:
            secret = bytes.fromhex(secret)
        except ValueError:
            raise CommError("commlib.init(): secret must be bytes or a hex string") from None
    if not isinstance(secret, (bytes, bytearray)) or not secret:
        raise CommError("commlib.init(): secret must be non-empty bytes or a hex string")
    env = JobEnv(rank=rank, size=size, local_rank=rank, local_size=size, coordinator=coordinator,
                 secret=bytes(secret), host_coordinator=rank == 0, source="explicit")
    return _checked(env, ("rank", "size", "rank", "size"))


def via_key_value(rank, size, put, get, peer_host, prefix="commlib/", environ=os.environ):
    """(JobEnv, Coordinator or None) for ranks that already share a key-value store (torch's c10d store).

    Rank 0 starts the coordinator on a free port of the interface that reaches
    `peer_host` (the store's host) and publishes its address with put(key, str);
    the others read it with get(key) -> str, which waits. The secret is
    COMMLIB_SECRET when exported, else a fresh one published the same way (so
    it is as private as the store is).
    """
    given = _var(environ, "COMMLIB_SECRET", bytes.fromhex) if "COMMLIB_SECRET" in environ else None
    coordinator = None
    if rank == 0:
        from ._transport import routed_address

        host = routed_address(peer_host)
        secret = given or secrets.token_bytes(32)
        coordinator = Coordinator(size, secret, host=host)
        coordinator.start()
        if given is None:
            put(prefix + "secret", secret.hex())
        put(prefix + "coordinator", _fmt(coordinator.address))
        address = coordinator.address[:2]
    else:
        secret = given or bytes.fromhex(get(prefix + "secret"))
        address = parse_address(get(prefix + "coordinator"))
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=address, secret=secret,
                 host_coordinator=False, source="store")
    return _checked(env, ("rank", "size", "local rank", "local size")), coordinator


def _given_coordinator(environ):
    """COMMLIB_COORDINATOR, else MASTER_ADDR:MASTER_PORT, else None."""
    if "COMMLIB_COORDINATOR" in environ:
        return _var(environ, "COMMLIB_COORDINATOR", parse_address)
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        return _var(environ, "MASTER_ADDR", str), _var(environ, "MASTER_PORT")
    return None


def _from_mpirun(environ, rank_var, size_var, lrank_var, lsize_var, launcher, identity):
    """Ranks started by an MPI launcher (commlib does not talk PMI): the rank and size come from its
    variables; the coordinator from COMMLIB_COORDINATOR or MASTER_ADDR/PORT, or, when every rank is
    on this host, a loopback port derived from the job's identity, hosted by rank 0."""
    rank, size = _var(environ, rank_var), _var(environ, size_var)
    local_rank = _var(environ, lrank_var) if lrank_var in environ else rank
    local_size = _var(environ, lsize_var) if lsize_var in environ else size
    coordinator = _given_coordinator(environ)
    if coordinator is None:
        if local_size != size:
            raise CommError(f"commlib was started by {launcher} across hosts ({size} ranks, {local_size} on this "
                            f"host) and cannot find its peers without an address: export "
                            f"COMMLIB_COORDINATOR=<host of rank 0>:<free port> (or MASTER_ADDR and MASTER_PORT) "
                            f"to every rank, e.g. mpirun -x COMMLIB_COORDINATOR=node1:29400 ...")
        coordinator = ("127.0.0.1", 20000 + zlib.crc32(f"{identity}/{size}".encode()) % 20000)
    env = JobEnv(rank=rank, size=size, local_rank=local_rank, local_size=local_size, coordinator=coordinator,
                 secret=_secret(environ, f"{identity}/{size}/{_fmt(coordinator)}"), host_coordinator=rank == 0,
                 source="mpirun")
    return _checked(env, (rank_var, size_var, lrank_var, lsize_var))


def _from_trainer(environ):
    """Kubeflow Trainer v2 running plain python: one process per node, PET_* describe the job."""
    nproc = environ.get("PET_NPROC_PER_NODE", "1")
    if nproc not in ("1", "auto", "cpu", ""):
        raise CommError(f"PET_NPROC_PER_NODE={nproc} asks for {nproc} processes per node, but this process was "
                        f"started without torchrun: start the training script with torchrun (it sets RANK and "
                        f"WORLD_SIZE), or set PET_NPROC_PER_NODE=1")
    rank, size = _var(environ, "PET_NODE_RANK"), _var(environ, "PET_NNODES")
    coordinator = _given_coordinator(environ)
    if coordinator is None:
        if "PET_MASTER_ADDR" not in environ or "PET_MASTER_PORT" not in environ:
            raise CommError("Kubeflow Trainer variables (PET_NNODES, PET_NODE_RANK) are set but not "
                            "PET_MASTER_ADDR/PET_MASTER_PORT: set them, or COMMLIB_COORDINATOR=host:port")
        coordinator = (_var(environ, "PET_MASTER_ADDR", str), _var(environ, "PET_MASTER_PORT"))
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=coordinator,
                 secret=_secret(environ, f"trainer/{_fmt(coordinator)}/{size}"), host_coordinator=rank == 0,
                 source="trainer")
    return _checked(env, ("PET_NODE_RANK", "PET_NNODES", "local rank", "local size"))


def _from_indexed_job(environ):
    """A Kubernetes Indexed Job or JobSet: JOB_COMPLETION_INDEX is the rank; the size and the
    coordinator (rank 0's pod, e.g. its headless-service name) must be given."""
    missing = [v for v in ("COMMLIB_SIZE", "COMMLIB_COORDINATOR") if v not in environ]
    if missing:
        raise CommError(f"JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but not {' and '.join(missing)}: "
                        f"set COMMLIB_SIZE to the job's completions and COMMLIB_COORDINATOR to "
                        f"<rank 0's hostname>:<port> (with a headless service: <job>-0.<service>:29400), "
                        f"and COMMLIB_SECRET from a Kubernetes Secret")
    rank, size = _var(environ, "JOB_COMPLETION_INDEX"), _var(environ, "COMMLIB_SIZE")
    coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=coordinator,
                 secret=_secret(environ, f"indexed/{_fmt(coordinator)}/{size}"), host_coordinator=rank == 0,
                 source="indexed-job")
    return _checked(env, ("JOB_COMPLETION_INDEX", "COMMLIB_SIZE", "local rank", "local size"))


def _var(environ, name, parse=int, default=None):
    if name not in environ:
        if default is not None:
            return default
        raise CommError(f"{name} is not set (other launcher variables are)")
    value = environ[name]
    try:
        return parse(value)
    except ValueError:
        raise CommError(f"malformed {name}={value!r}") from None


def _checked(env, names):
    rank_var, size_var, lrank_var, lsize_var = names
    if env.size < 1:
        raise CommError(f"malformed {size_var}={env.size}: must be >= 1")
    if not 0 <= env.rank < env.size:
        raise CommError(f"malformed {rank_var}={env.rank}: must be in [0, {env.size})")
    if env.local_size < 1:
        raise CommError(f"malformed {lsize_var}={env.local_size}: must be >= 1")
    if not 0 <= env.local_rank < env.local_size:
        raise CommError(f"malformed {lrank_var}={env.local_rank}: must be in [0, {env.local_size})")
    return env


def parse_address(value):
    """'host:port' or '[v6]:port' -> (host, port)."""
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", value.strip())
    if not m:
        raise ValueError(value)
    host, port = (m[1], m[2]) if m[1] else (m[3], m[4])
    if not 0 < int(port) < 65536:
        raise ValueError(value)
    return host, int(port)


class DerivedSecret(bytes):
    """A secret derived from the job's identity (no COMMLIB_SECRET): warned about when it is used."""


def _secret(environ, identity):
    if "COMMLIB_SECRET" in environ:
        return _var(environ, "COMMLIB_SECRET", bytes.fromhex)
    return DerivedSecret(hashlib.sha256(b"commlib/derived-secret\0" + identity.encode()).digest())


def warn_if_derived(secret):
    """Warn once per process when the job runs on a secret anyone who sees the job can recompute."""
    global _warned_weak_secret
    if isinstance(secret, DerivedSecret) and not _warned_weak_secret:
        _warned_weak_secret = True
        _log.warning(
            "commlib: COMMLIB_SECRET is not set; using a secret derived from the job's identity, "
            "which anyone who can see the job can recompute. Export COMMLIB_SECRET "
            "(e.g. `export COMMLIB_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')`)"
        )


def _from_commrun(environ):
    rank = _var(environ, "COMMLIB_RANK")
    size = _var(environ, "COMMLIB_SIZE")
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "COMMLIB_LOCAL_RANK", default=rank),
        local_size=_var(environ, "COMMLIB_LOCAL_SIZE", default=size),
        coordinator=_var(environ, "COMMLIB_COORDINATOR", parse_address),
        secret=_var(environ, "COMMLIB_SECRET", bytes.fromhex),
        host_coordinator=False,
        source="commrun",
    )
    return _checked(env, ("COMMLIB_RANK", "COMMLIB_SIZE", "COMMLIB_LOCAL_RANK", "COMMLIB_LOCAL_SIZE"))


# Slurm's step ids above this are the batch, extern and interactive pseudo-steps.
_SLURM_MAX_STEP = 0xFFFFFFF0


def _under_srun(environ):
    """True inside a task started by srun; False in an salloc/sbatch shell."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    try:
        return step is not None and 0 <= int(step) < _SLURM_MAX_STEP
    except ValueError:
        raise CommError(f"malformed SLURM_STEP_ID={step!r}") from None


def _tasks_per_node(value):
    """'2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in value.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(value)
        counts += [int(m[1])] * int(m[2] or 1)
    return counts


def _from_slurm(environ):
    rank = _var(environ, "SLURM_PROCID")
    size = _var(environ, "SLURM_NTASKS")
    step = _var(environ, "SLURM_STEP_ID" if "SLURM_STEP_ID" in environ else "SLURM_STEPID")
    job = _var(environ, "SLURM_JOB_ID")
    nodelist_var = "SLURM_STEP_NODELIST" if "SLURM_STEP_NODELIST" in environ else "SLURM_NODELIST"
    nodes = _var(environ, nodelist_var, expand_nodelist)
    if not nodes:
        raise CommError(f"malformed {nodelist_var}: empty")
    tpn_var = "SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in environ else "SLURM_TASKS_PER_NODE"
    if tpn_var in environ and "SLURM_NODEID" in environ:
        counts = _var(environ, tpn_var, _tasks_per_node)
        node = _var(environ, "SLURM_NODEID")
        if not 0 <= node < len(counts):
            raise CommError(f"malformed SLURM_NODEID={node}: {tpn_var} lists {len(counts)} nodes")
        local_size = counts[node]
    else:
        local_size = max(1, -(-size // len(nodes)))
    if "COMMLIB_COORDINATOR" in environ:
        coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    else:
        # Consecutive steps of one job get different ports; two jobs can still
        # collide, which then fails loudly (AuthError), never silently.
        coordinator = (nodes[0], 20000 + (job + step) % 20000)
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "SLURM_LOCALID"),
        local_size=local_size,
        coordinator=coordinator,
        secret=_secret(environ, f"slurm/{job}/{step}/{environ[nodelist_var]}"),
        host_coordinator=rank == 0,
        source="slurm",
    )
    return _checked(env, ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", tpn_var))


def _from_torchrun(environ):
    rank = _var(environ, "RANK")
    size = _var(environ, "WORLD_SIZE")
    if "COMMLIB_COORDINATOR" in environ:
        coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    else:
        port = _var(environ, "MASTER_PORT")
        if not 0 < port < 65535:
            raise CommError(f"malformed MASTER_PORT={port}")
        # Under torchrun itself the agent's store already holds MASTER_PORT.
        if environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true"):
            port += 1
        coordinator = (_var(environ, "MASTER_ADDR", str), port)
    identity = f"torchrun/{environ.get('TORCHELASTIC_RUN_ID', '')}/{_fmt(coordinator)}/{size}"
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "LOCAL_RANK", default=rank),
        local_size=_var(environ, "LOCAL_WORLD_SIZE", default=size),
        coordinator=coordinator,
        secret=_secret(environ, identity),
        host_coordinator=rank == 0,
        source="torchrun",
    )
    return _checked(env, ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))


def expand_nodelist(s):
    """Slurm host list -> host names: 'node[01-03,07],gpu5' -> node01 node02 node03 node07 gpu5."""
    hosts, depth, start = [], 0, 0
    for i, ch in enumerate(s + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {s!r}")
        elif ch == "," and depth == 0:
            item = s[start:i].strip()
            if item:
                hosts += _expand_one(item, s)
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in node list {s!r}")
    return hosts


def _expand_one(item, whole):
    m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\](.*)", item)
    if not m:
        if "[" in item or "]" in item:
            raise ValueError(f"bad node list {whole!r}")
        return [item]
    prefix, ranges, rest = m.groups()
    suffixes = _expand_one(rest, whole) if rest else [""]
    out = []
    for part in ranges.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {part!r} in node list {whole!r}")
        width = len(lo)
        for n in range(int(lo), int(hi if sep else lo) + 1):
            out += [f"{prefix}{n:0{width}d}{suffix}" for suffix in suffixes]
    return out
