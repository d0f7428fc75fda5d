"""Encryption of TCP connections (COMMLIB_ENCRYPT=1, `commrun --encrypt`).

Off by default: on a trusted cluster fabric, bytes travel as they are. When on, every TCP
connection between ranks carries AES-256-GCM records (`_seal.pxi`) instead of plain bytes:
confidential, and integrity-protected. A changed, replayed, reordered or foreign record fails
its tag, and the job ends with an AuthError that names the peer. Ranks on one host talk over
shared memory or a Unix socket, which never leave the kernel, and stay in clear (with
COMMLIB_TRANSPORT=tcp they use loopback TCP, sealed like any other).

Keys. Each connection has two, one per direction, derived from the job secret and both
handshake nonces (fresh per connection) with HMAC-SHA256, so no two connections, and no two
jobs, share a key: HMAC(secret, label + server nonce + client nonce + identity), the label
naming the direction. Records are numbered per direction and the number is the IV, so a key
never seals two records with one IV.

How. The data path keeps working on a descriptor: for a sealed connection that is one end of
a socketpair, and a pump thread (C, without the GIL) moves bytes between its other end and the
TCP socket, sealing what goes out and opening what comes in. The cipher is OpenSSL's libcrypto,
the one Python's ssl module links, found at run time: nothing to install.
"""
import contextlib
import ctypes
import ctypes.util
import logging
import os
import socket
import threading
import time

from .. import _auth, _debug
from .._errors import CommError
from .limits import thread_limit_text

log = logging.getLogger("commlib")

ENV = "COMMLIB_ENCRYPT"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")
_FUNCTIONS = ("EVP_CIPHER_CTX_new", "EVP_CIPHER_CTX_free", "EVP_aes_256_gcm", "EVP_EncryptInit_ex",
              "EVP_DecryptInit_ex", "EVP_EncryptUpdate", "EVP_DecryptUpdate", "EVP_EncryptFinal_ex",
              "EVP_DecryptFinal_ex", "EVP_CIPHER_CTX_ctrl")
FLUSH_S = 5.0  # at close, how long pumps may take to put what the data path wrote on the wire
_bound = None  # the libcrypto path once bound


def enabled(environ=os.environ):
    """True when COMMLIB_ENCRYPT asks for encryption; ValueError naming the variable for junk."""
    value = environ.get(ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{ENV}={environ.get(ENV)!r}: use 1 (encrypt connections between hosts) or 0")


def _libcrypto_path():
    """The libcrypto this process already has (Python's ssl module loads it), else the system's."""
    with contextlib.suppress(ImportError):
        import _ssl  # noqa: F401  (maps libcrypto into the process, when Python was built with ssl)
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if "/libcrypto.so" in path and os.path.exists(path):
                return path
    return ctypes.util.find_library("crypto")


def bind():
    """Bind the cipher once (libcrypto's functions, to `_io`); CommError naming what is missing."""
    global _bound
    if _bound is not None:
        return _bound
    from . import _io  # (here: commrun, which reads enabled(), loads the step loop only to seal)
    path = _libcrypto_path()
    if path is None:
        raise CommError(f"{ENV}=1 needs OpenSSL's libcrypto (the library Python's ssl module uses); "
                        f"none was found: install OpenSSL 1.1 or 3, or unset {ENV}")
    try:
        lib = ctypes.CDLL(path)
        _io.seal_bind({name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in _FUNCTIONS})
    except (OSError, AttributeError) as exc:
        raise CommError(f"{ENV}=1: {path} does not provide AES-256-GCM as expected ({exc})") from None
    _bound = path
    return path


def keys(secret, server_nonce, client_nonce, ident):
    """(client-to-server key, server-to-client key) of one connection."""
    return tuple(_auth.mac(secret, label, server_nonce, client_nonce, ident)
                 for label in (b"commlib/seal/client-to-server", b"commlib/seal/server-to-client"))


class Pumps:
    """The sealed connections of one endpoint: a pump thread each, all stopped by close()."""

    def __init__(self, me, on_forged):
        bind()
        self.me = me  # "rank 3", "the coordinator": who speaks in messages
        self._on_forged = on_forged  # (peer, text) -> None: the endpoint fails the job
        self._stop_r, self._stop_w = os.pipe()
        self._threads = []
        self._lock = threading.Lock()
        self.wire = {}  # the data path's socket -> the TCP socket it is sealed onto

    def seal(self, tcp, send_key, recv_key, peer, other):
        """The socket the data path uses instead of `tcp` (non-blocking, like it): bytes written
        there leave sealed, records arriving on tcp are read there opened. `peer`: the other
        side's rank (None: the coordinator); `other`: its name in messages ("rank 5")."""
        mine, theirs = socket.socketpair()
        for s in (mine, theirs, tcp):
            s.setblocking(False)
        t = threading.Thread(target=self._run, args=(tcp, theirs, send_key, recv_key, peer, other),
                             daemon=True, name=f"commlib-seal-{other.replace(' ', '-')}")
        try:
            t.start()
        except RuntimeError as exc:  # RLIMIT_NPROC or no memory for a stack
            for s in (mine, theirs):
                s.close()
            raise CommError(f"{self.me}: no thread to encrypt the connection with {other} "
                            f"({exc}: {thread_limit_text()})", rank=peer) from None
        with self._lock:
            self._threads.append(t)
            self.wire[mine] = tcp
        return mine

    def connection(self, tcp, secret, server_nonce, client_nonce, ident, client, peer, other):
        """`seal` with the keys of this connection's handshake, from the client's or the server's side."""
        c2s, s2c = keys(secret, server_nonce, client_nonce, ident)
        return self.seal(tcp, *((c2s, s2c) if client else (s2c, c2s)), peer, other)

    def _run(self, tcp, theirs, send_key, recv_key, peer, other):
        from . import _io  # (loaded by bind() already)
        try:
            code, detail = _io.seal_pump(tcp.fileno(), theirs.fileno(), self._stop_r, send_key, recv_key)
            if code in (_io.PUMP_FORGED, _io.PUMP_BAD_LENGTH):  # the job fails before the data path sees EOF
                how = "failed its integrity check" if code == _io.PUMP_FORGED else "has an impossible length"
                self._on_forged(peer, f"{self.me}: encrypted record {detail} from {other} {how}: the bytes "
                                      f"were changed, replayed or reordered on the way (or not sent by {other})")
            elif code == _io.PUMP_CUT:
                with contextlib.suppress(OSError):
                    theirs.shutdown(socket.SHUT_WR)
            if _debug.LEVEL:
                _debug.log(_debug.INFO, lambda: f"sealed connection with {other} ended: code {code} ({detail})")
        except Exception as exc:  # noqa: BLE001 -- a pump must not die silently: the data path would wait
            log.warning("commlib %s: the encrypted connection with %s failed: %s", self.me, other, exc)
        finally:
            for s in (theirs, tcp):
                with contextlib.suppress(OSError):
                    s.close()

    def forget(self, sock):
        """The data path closes `sock` before the job ends (an idle connection): its pump ends on
        its own once it has sealed what is left; forget the two."""
        with self._lock:
            self.wire.pop(sock, None)
            self._threads = [t for t in self._threads if t.is_alive()]

    def close(self, flush_s=FLUSH_S):
        """After the data path closed its sockets: let pumps send what is left (bounded), then stop them."""
        with self._lock:
            threads, self._threads = self._threads, []
            self.wire.clear()
        deadline = time.monotonic() + flush_s
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"!")
        for t in threads:
            t.join(1.0)
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
