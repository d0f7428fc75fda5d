"""A rank's end of the coordinator connection.

`Client.connect` retries until the coordinator is up (under srun, rank 0
starts it while the others are already knocking), authenticates both ways
and reads the welcome; `register` sends this rank's info and waits for the
table; `start_listener` hands every later message (notices, relayed
messages) to a callback on a daemon thread; `close` says goodbye, so the
other ranks are told "left" rather than "lost".
"""
import contextlib
import secrets
import socket
import threading
import time

from .. import _backoff
from .._auth import DIGEST_BYTES, NONCE_BYTES, connect, mac, recv_exact, verify
from .._control import clock_offset
from .._errors import AuthError, CommError, CommTimeout, PeerLost
from .framing import CLIENT_LABEL, MAGIC, SEALED, SERVER_LABEL, encode, fmt_address, recv_message
from .table import Table

CONNECT_RETRY_MAX_S = 0.1
CONNECT_PATIENT_AFTER_S = 5.0  # retrying this long: the coordinator is not just starting, back off further


class Client:
    """A rank's connection to the coordinator."""

    def __init__(self, sock, address, rank):
        self._sock, self.address, self.rank = sock, address, rank
        self._send_lock = threading.Lock()
        self._early = []  # messages read by register() that belong to the listener
        self._listener = None
        self._closing = False
        self.table = None  # the job's table (table.Table), once register() returns

    @property
    def sock(self):
        """The connection (for a transport that reports on its link health)."""
        return self._sock

    @classmethod
    def connect(cls, address, secret, rank, timeout, pumps=None):
        """Connect and authenticate, retrying refused connections until `timeout`; with `pumps`
        (COMMLIB_ENCRYPT: the endpoint's, `_transport/seal.py`) the connection is sealed."""
        sealed = SEALED if pumps is not None else b""
        address = (address[0], int(address[1]))
        deadline = time.monotonic() + timeout
        attempt, last, started = 0, None, time.monotonic()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CommTimeout(
                    f"rank {rank}: could not reach the coordinator at {fmt_address(address)} "
                    f"within {timeout:g} s: {last}",
                    op="connect",
                ) from last
            try:
                sock = connect(address, min(remaining, 5.0))
                break
            except OSError as e:
                last = e
                # Under srun every rank but 0 waits here while rank 0 imports and starts the
                # coordinator: a short cap keeps them from sleeping long after it is up, and a
                # longer one after a while spares a coordinator that is slow to come (the jitter
                # keeps thousands of ranks from retrying in step).
                cap = CONNECT_RETRY_MAX_S if time.monotonic() - started < CONNECT_PATIENT_AFTER_S else 1.0
                time.sleep(min(_backoff.delay(attempt, cap=cap), max(0.0, deadline - time.monotonic())))
                attempt += 1
        try:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            hello = recv_exact(sock, len(MAGIC) + NONCE_BYTES)
            if not hello.startswith(MAGIC):
                raise CommError(f"rank {rank}: {fmt_address(address)} is not a commlib coordinator")
            server_nonce, client_nonce = hello[len(MAGIC) :], secrets.token_bytes(NONCE_BYTES)
            rank_bytes = rank.to_bytes(4, "big")
            digest = mac(secret, CLIENT_LABEL + sealed, server_nonce, client_nonce, rank_bytes)
            sock.sendall(rank_bytes + client_nonce + digest)
            try:
                proof = recv_exact(sock, DIGEST_BYTES)
            except (EOFError, ConnectionError) as e:
                raise AuthError(
                    f"rank {rank}: the coordinator at {fmt_address(address)} refused our credentials "
                    f"(is COMMLIB_SECRET the job's secret, and COMMLIB_ENCRYPT set alike for the whole job?)"
                ) from e
            if not verify(proof, secret, SERVER_LABEL + sealed, client_nonce, server_nonce):
                raise AuthError(f"rank {rank}: the coordinator at {fmt_address(address)} does not know the job secret")
            if pumps is not None:
                left = sock.gettimeout()
                sock = pumps.connection(sock, secret, server_nonce, client_nonce, rank_bytes, True, None,
                                        "the coordinator")
                sock.settimeout(left)
            welcome = recv_message(sock)
            if welcome["kind"] == "error":
                raise CommError(f"rank {rank}: {welcome['message']}")
        except CommError:  # before OSError: AuthError and CommTimeout are OSErrors too
            sock.close()
            raise
        except socket.timeout as e:
            sock.close()
            raise CommTimeout(
                f"rank {rank}: no handshake from the coordinator at {fmt_address(address)} within {timeout:g} s",
                op="connect",
            ) from e
        except (OSError, EOFError, ValueError) as e:
            sock.close()
            raise CommError(f"rank {rank}: handshake with the coordinator at {fmt_address(address)} failed: {e}") from e
        sock.settimeout(None)
        return cls(sock, address, rank)

    def register(self, info, timeout):
        """Send this rank's info; block until every rank has; return the table (a `table.Table`:
        indexed by rank like a list, each rank's row fetched from the coordinator on first use)."""
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
            if kind == "assembled":
                try:
                    self.table = Table(msg, self._ask_rows, self._pump, timeout)
                except (ValueError, KeyError, TypeError) as e:
                    raise CommError(f"rank {self.rank}: the coordinator sent a bad table ({e})") from None
                return self.table
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

    def _ask_rows(self, first, last):
        self.send({"kind": "rows", "first": first, "last": last})

    def _pump(self, seconds):
        """Before start_listener: read one message; rows go to the table, the rest to the listener."""
        msg = self._read(seconds)
        if msg["kind"] == "rows":
            self._rows(msg)
        elif msg["kind"] != "_tick":
            self._early.append(msg)

    def _rows(self, msg):
        try:
            self.table.add(msg)
        except (ValueError, TypeError, KeyError) as e:  # (the listener must live on: fetches then fail, not wait)
            self.table.fail(CommError(f"rank {self.rank}: the coordinator sent bad rows ({e})"))

    def clock_offset(self, tries=5, timeout=1.0):
        """clock_offset() of this connection before start_listener: replies read here, anything
        else kept for the listener."""
        def receive(left):
            while left > 0:
                t = time.monotonic()
                msg = self._read(left)
                if msg.get("kind") == "clock":
                    return msg
                if msg.get("kind") != "_tick":
                    self._early.append(msg)  # the listener handles it once it starts
                left -= time.monotonic() - t
            return None
        return clock_offset(self.send, receive, tries, timeout)

    def _read(self, timeout):
        self._sock.settimeout(timeout)
        try:
            return recv_message(self._sock)
        except socket.timeout:
            return {"kind": "_tick"}
        except (OSError, EOFError, ValueError) as e:
            raise CommError(f"rank {self.rank}: lost the coordinator at {fmt_address(self.address)}: {e}") from e
        finally:
            self._sock.settimeout(None)

    def start_listener(self, callback):
        """Call callback(msg) for every pushed message, from a daemon thread."""

        def dispatch(msg):
            if msg["kind"] == "rows" and self.table is not None:
                self._rows(msg)
            else:
                callback(msg)

        def loop():
            for msg in self._early:
                dispatch(msg)
            self._early = []
            try:
                while True:
                    dispatch(recv_message(self._sock))
            except (OSError, EOFError, ValueError) as e:
                lost = f"lost the coordinator at {fmt_address(self.address)}: {e}"
                if self.table is not None:
                    self.table.fail(CommError(f"rank {self.rank}: {lost}"))
                if not self._closing:
                    callback({"kind": "coordinator_lost", "message": lost})

        self._listener = threading.Thread(target=loop, name="commlib-coordinator-client", daemon=True)
        if self.table is not None:
            self.table.pump = None  # the listener reads the rows now
        self._listener.start()

    def send(self, msg):
        data = encode(msg)
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise CommError(f"rank {self.rank}: lost the coordinator at {fmt_address(self.address)}: {e}") from e

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
