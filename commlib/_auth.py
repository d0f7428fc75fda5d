"""Proof of the job secret, shared by both authenticated handshakes.

Rank to rank (`_transport/sockets.py`) and rank to coordinator
(`_rendezvous/`) the handshake is the same challenge-response: each side
sends a fresh nonce, and the other answers with HMAC-SHA256(secret, label +
nonces + identity). The label names the role (for example
b"commlib/data/client"), so a proof made for one role or one protocol is
never accepted in another. `recv_exact` is the blocking read both
handshakes, and the coordinator's framing, are built on. Imports nothing
from commlib.
"""
import hashlib
import hmac

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
