"""Proof of the job secret, shared by both authenticated handshakes.

Rank to rank (`_transport/sockets.py`) and rank to coordinator
(`_rendezvous/`) the handshake is the same challenge-response: each side
sends a fresh nonce, and the other answers with HMAC-SHA256(secret, label +
nonces + identity). The label names the role (for example
b"commlib/data/client"), so a proof made for one role or one protocol is
never accepted in another. `recv_exact` is the blocking read both
handshakes, and the coordinator's framing, are built on; `connect` and
`refuse_self` the connect they start with. Imports nothing from commlib.
"""
import errno
import hashlib
import hmac
import socket
import struct

NONCE_BYTES = 32
DIGEST_BYTES = 32  # SHA-256


def mac(secret, *parts):
    """HMAC-SHA256(secret) of the parts back to back (the first is the role's label)."""
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def verify(digest, secret, *parts):
    """True when digest is mac(secret, *parts); the comparison takes constant time."""
    return hmac.compare_digest(digest, mac(secret, *parts))


def recv_exact(sock, n):
    """Exactly n bytes from a blocking socket; EOFError when the peer closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def refuse_self(sock):
    """Raise ConnectionRefusedError when `sock` is connected to itself. A TCP connect to a port of
    this host that nobody listens on yet (the coordinator rank 0 is still starting, under srun) can
    draw that same port as its own ephemeral one and open with itself; the socket then holds the
    port (the listener that comes next cannot bind it) and waits for a greeting nobody sends. The
    retry loops treat it as the refusal it stands for. The caller closes the socket: it is set to
    close by a reset, since a close by the book would keep the port in TIME_WAIT for a minute."""
    if sock.family != socket.AF_UNIX and sock.getsockname()[:2] == sock.getpeername()[:2]:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raise ConnectionRefusedError(errno.ECONNREFUSED, "connected to itself (nobody listens on the port yet)")


def connect(address, timeout):
    """socket.create_connection, and refuse_self (closing the socket it refuses)."""
    sock = socket.create_connection(address, timeout=timeout)
    try:
        refuse_self(sock)
    except OSError:
        sock.close()
        raise
    return sock
