"""Shared memory between the ranks of one host: which connections use it, and its handshake.

A connection between two ranks of one host is a Unix socket. Under COMMLIB_TRANSPORT=auto (the
default) or shm, the connecting side also creates a memfd segment and passes it over that socket
right after its hello (SCM_RIGHTS); the accepting side maps it and says yes after its proof.
From then on the connection's bytes go through the segment's two rings (`_shm.h`), and the
socket is the doorbell and the failure detector. Nothing is ever named in /dev/shm: the segment
lives as long as a mapping of it, so a killed rank, a killed launcher or a full machine leaves
nothing behind. Ranks that cannot reach each other's Unix socket (other hosts, or containers that
share no network namespace) never get this far and stay on TCP.

    COMMLIB_TRANSPORT     auto (default): shared memory within a host, falling back to the Unix
                          socket with one warning when no segment can be made; shm: the same,
                          but a connection without a segment is an error; socket: Unix sockets
                          within a host; tcp: TCP everywhere.
    COMMLIB_SHM_SINGLE_COPY  0: every byte goes through the rings; 1 (or a size in bytes): a piece
                          of more than 64 KiB (or that size) is copied once, by the reader,
                          straight from the writer's memory (Linux cross-memory attach), where the
                          kernel allows it (probed per connection). Unset: pieces of more than
                          8 MiB where this host's ranks outnumber its cores, none otherwise.
    COMMLIB_SHM_RING_KB   each ring's size (a power of two, at least 4); default 1024, or less when
                          many ranks share the host (256 beyond 8 local ranks, 128 beyond 16).
                          Below 128 a send of 64 KiB waits for its receiver (it is eager otherwise).
"""
import contextlib
import errno
import logging
import os
import socket
import struct

from .._errors import CommError
from . import _io
from .limits import OUT_OF_FDS, fd_limit_text

log = logging.getLogger("commlib")

MODES = ("auto", "shm", "socket", "tcp")
_OFFER = struct.Struct("<4sIQ")  # magic, 1 when a segment (SCM_RIGHTS) comes with it, ring bytes
_MAGIC = b"CLSH"
_warned = []
SINGLE_COPY_MIN = 64 << 10  # COMMLIB_SHM_SINGLE_COPY=1: pieces larger than this are copied once
SINGLE_COPY_SHARED_MIN = 8 << 20  # by default, where ranks outnumber cores (measured: RESULTS.md)


def mode():
    """COMMLIB_TRANSPORT, checked: one of MODES."""
    value = os.environ.get("COMMLIB_TRANSPORT", "") or "auto"
    if value not in MODES:
        raise CommError(f"COMMLIB_TRANSPORT={value!r}: expected 'auto' (shared memory within a host, "
                        f"TCP between hosts), 'shm' (the same, failing when shared memory cannot be "
                        f"used), 'socket' (Unix sockets within a host) or 'tcp' (TCP everywhere)")
    return value


def ring_bytes():
    """Each ring's size in bytes (COMMLIB_SHM_RING_KB, else by how many ranks share the host)."""
    raw = os.environ.get("COMMLIB_SHM_RING_KB", "")
    if raw:
        try:
            kb = int(raw)
        except ValueError:
            kb = 0
        if kb < 4 or kb & (kb - 1):
            raise CommError(f"COMMLIB_SHM_RING_KB={raw!r}: expected a power of two, at least 4")
        return kb << 10
    from . import env_number

    local = env_number("COMMLIB_LOCAL_SIZE", 1)
    # 1 MiB rings halved the time of 1-16 MiB pingpong and all_reduce at n = 2 against 256 KiB
    # (RESULTS.md); a ring is touched only once used, and a host holds one per used connection.
    # Never below 128 KiB: a send of up to EAGER_BYTES (64 KiB) must complete without its receiver.
    return (1024 if local <= 8 else 256 if local <= 16 else 128) << 10


def single_copy():
    """Whether pieces may be copied straight from the peer's memory, setting the size above which
    they are (COMMLIB_SHM_SINGLE_COPY: 0 never; 1 above SINGLE_COPY_MIN; a size in bytes, at least
    64 KiB, above that size). Unset: above SINGLE_COPY_SHARED_MIN where the ranks of this host
    outnumber its cores, never otherwise. With two ranks a core every copy takes CPU from a rank
    that needs it, and halving the copies won (n = 4 on 2 cores, 8 MiB pieces: 16-64 MiB
    collectives 0.51-0.87x the time, nothing slower); with a core each the rings' two copies run
    side by side and the single copy only lost (n = 2: 4-16 MiB broadcasts and ping-pongs up to
    1.9x, 64 MiB 0.84-0.96x) (RESULTS.md, "Single copy")."""
    from . import env_number

    raw = os.environ.get("COMMLIB_SHM_SINGLE_COPY", "")
    if raw in ("0", "no", "off", "false"):
        return False
    if raw == "":
        if env_number("COMMLIB_LOCAL_SIZE", 1) <= len(os.sched_getaffinity(0)):
            return False
        nbytes = SINGLE_COPY_SHARED_MIN
    elif raw in ("1", "yes", "on", "true"):
        nbytes = SINGLE_COPY_MIN
    else:
        try:
            nbytes = int(raw)
        except ValueError:
            raise CommError(f"COMMLIB_SHM_SINGLE_COPY={raw!r}: expected 0 (off), 1 (on) or a size in bytes") from None
    _io.shm_single_copy_min(nbytes)
    return True


def _unavailable(exc, strict):
    text = f"shared memory unavailable ({fd_limit_text(exc.errno) if exc.errno in OUT_OF_FDS else exc})"
    if strict:
        raise CommError(f"COMMLIB_TRANSPORT=shm: {text}")
    if not _warned:
        _warned.append(True)
        log.warning("commlib: %s: ranks on this host use Unix sockets instead", text)


def offer(sock, how):
    """Connector, right after its hello: offer a new segment (or none). Returns (memfd, ring bytes);
    memfd is -1 when none was offered. The caller closes memfd."""
    memfd = -1
    ring = 0
    if how in ("auto", "shm"):
        try:
            ring = ring_bytes()
            memfd = os.memfd_create("commlib-link", os.MFD_CLOEXEC)
            os.ftruncate(memfd, _io.shm_segment_bytes(ring))
            _io.shm_prime(memfd)
        except OSError as exc:
            if memfd >= 0:
                os.close(memfd)
            memfd, ring = -1, 0
            _unavailable(exc, how == "shm")
    if memfd >= 0:
        socket.send_fds(sock, [_OFFER.pack(_MAGIC, 1, ring)], [memfd])
    else:
        sock.sendall(_OFFER.pack(_MAGIC, 0, 0))
    return memfd, ring


def answer(sock, how):
    """Acceptor, after the connector's hello: read its offer and map the segment when both want
    one. Returns the byte that follows the proof (b"\\1": linked, b"\\0": a plain socket)."""
    data, fds, flags, _addr = socket.recv_fds(sock, _OFFER.size, 1)
    try:
        if flags & socket.MSG_CTRUNC:  # the kernel could not give us the segment's descriptor
            raise OSError(errno.EMFILE, "the segment a peer offered could not be received (MSG_CTRUNC)")
        while len(data) < _OFFER.size:  # the rest of the fixed-size offer (no descriptor comes later)
            more = sock.recv(_OFFER.size - len(data))
            if not more:
                raise EOFError("connection closed inside the shared-memory offer")
            data += more
        magic, flag, ring = _OFFER.unpack(data)
        if magic != _MAGIC or flag not in (0, 1) or flag != len(fds):
            raise EOFError("malformed shared-memory offer")
        if not fds or how not in ("auto", "shm"):
            return b"\0"
        try:
            _io.shm_attach(sock.fileno(), fds[0], ring, True, False, single_copy())
        except OSError as exc:
            _unavailable(exc, how == "shm")
            return b"\0"
        return b"\1"
    finally:
        for fd in fds:
            os.close(fd)


def settle(sock, memfd, ring, reply):
    """Connector, after the acceptor's proof: the reply byte says whether to map the segment."""
    if reply == b"\1":
        if memfd < 0:
            raise EOFError("the peer mapped a shared-memory segment that was never offered")
        _io.shm_attach(sock.fileno(), memfd, ring, False, True, single_copy())
    elif reply != b"\0":
        raise EOFError("malformed shared-memory reply")


def close(sock, unmap=False):
    """Close a connection, forgetting its link first (descriptor numbers are reused). The link's
    segment stays mapped until the process ends (a thread woken mid-read by a failure may still
    touch it), unless `unmap`: the caller knows no thread uses the link any more."""
    with contextlib.suppress(OSError, ValueError):
        (_io.shm_release if unmap else _io.shm_detach)(sock.fileno())
    with contextlib.suppress(OSError):
        sock.close()


def linked(sock):
    """True when the connection's bytes go through shared memory."""
    try:
        return _io.shm_linked(sock.fileno())
    except (OSError, ValueError):
        return False
