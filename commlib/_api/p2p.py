"""Point-to-point functions of API.md over the matching engine.

Arguments are checked before anything is posted. Every function posts to
the group's matching context in the engine (`_engine.p2p`): blocking ones
wait for their own request only, so they never wait behind unrelated
pending requests, and the engine takes its one-step fast path when nothing
else is outstanding.
"""
import numpy as np

from .._dtypes import DT_BYTES, dtype_code
from .._engine import ANY_SOURCE, ANY_TAG, EAGER_BYTES, Status
from .._errors import MismatchError
from .collectives import _array, _g, _writable


def _tag(tag, allow_any):
    if not isinstance(tag, (int, np.integer)) or isinstance(tag, bool) or (tag < 0 and not (allow_any and tag == ANY_TAG)):
        raise ValueError(f"tag must be a non-negative int{' or ANY_TAG' if allow_any else ''}, got {tag!r}")
    return int(tag)


def _src(g, src):
    return ANY_SOURCE if isinstance(src, (int, np.integer)) and src == ANY_SOURCE else g.check_rank(src, "src")


def _post_send(x, dst, tag, group, sync, block, what):
    g = _g(group)
    dst, tag = g.check_rank(dst, "dst"), _tag(tag, False)
    a, code = _array(x)
    u8 = a.reshape(-1).view(np.uint8)
    if not block and a.nbytes <= EAGER_BYTES:
        u8 = u8.copy()  # a small isend owns its data: the caller may reuse x at once
    return g.engine.send(g.p2p, dst, [u8], tag=tag, dtype=code, count=a.size, sync=sync, what=f"{what}(tag={tag})",
                         block=block)


def send(x, dst, tag=0, *, group=None):
    """Send x to rank dst; up to 64 KiB returns without waiting for the receiver."""
    f = _g(group).p2p_fast
    if f is None or f.send(x, dst, tag) is NotImplemented:
        _post_send(x, dst, tag, group, False, True, "send")


def isend(x, dst, tag=0, *, group=None):
    """Non-blocking send; the Request's wait() returns None once x may be reused."""
    f = _g(group).p2p_fast
    if f is not None:
        req = f.isend(x, dst, tag)
        if req is not NotImplemented:
            return req
    return _post_send(x, dst, tag, group, False, False, "isend")


def issend(x, dst, tag=0, *, group=None):
    """Synchronous non-blocking send: completes only once the receiver has matched it."""
    return _post_send(x, dst, tag, group, True, False, "issend")


def _receive(g, out, src, tag, status, block, what):
    """Post a receive of exactly out's size into `out` (contiguous, writable)."""
    code = dtype_code(out.dtype)
    u8 = out.reshape(-1).view(np.uint8)

    def finish(msg, payload):
        if msg.nbytes != out.nbytes:
            raise MismatchError(f"{what} posted shape {tuple(out.shape)} {out.dtype} ({out.nbytes} bytes) but rank "
                                f"{g.world[msg.source]} sent {msg.nbytes} bytes (tag {msg.tag})", rank=g.world[msg.source])
        st = Status(msg.source, msg.tag, msg.nbytes, msg.count, msg.dtype)
        return (out, st) if status else out

    return g.engine.recv(g.p2p, src, tag, u8, finish, what=what, block=block, check=(code, out.nbytes))


def recv(shape, dtype, src, tag=0, *, status=False, group=None):
    """Receive a message of exactly this shape and dtype from src."""
    g = _g(group)
    f = g.p2p_fast
    if f is not None and not status:
        got = f.recv(shape, dtype, src, tag)
        if got is not NotImplemented:
            return got
    src, tag = _src(g, src), _tag(tag, True)
    return _receive(g, np.empty(shape, dtype), src, tag, status, True, f"recv(tag={tag})")


def irecv(shape, dtype, src, tag=0, *, status=False, group=None):
    """Non-blocking recv: the Request's wait() returns the array (and its Status with status=True)."""
    g = _g(group)
    if type(src) is not int or not 0 <= src < g._size:  # (a plain rank and tag need no more checking)
        src = _src(g, src)
    if type(tag) is not int or tag < 0:
        tag = _tag(tag, True)
    return _receive(g, np.empty(shape, dtype), src, tag, status, False, f"irecv(tag={tag})")


def recv_like(x, src, tag=0, *, status=False, group=None):
    """recv with x's shape and dtype."""
    a = np.asarray(x)
    return recv(a.shape, a.dtype, src, tag, status=status, group=group)


def recv_into(buf, src, tag=0, *, group=None):
    """Receive into buf (writable array-like, up to its size); returns a Status."""
    g = _g(group)
    src, tag = _src(g, src), _tag(tag, True)
    a = _writable(buf, "buf")
    code = dtype_code(a.dtype)
    dst = a if a.flags.c_contiguous else np.empty(a.shape, a.dtype)
    u8 = dst.reshape(-1).view(np.uint8)

    def finish(msg, payload):
        if dst is not a:
            a[...] = dst
        return Status(msg.source, msg.tag, msg.nbytes, msg.count, msg.dtype)

    return g.engine.recv(g.p2p, src, tag, u8, finish, what=f"recv(tag={tag})", block=True, check=(code, a.nbytes))


def sendrecv(x, dst, src, tag=0, *, group=None):
    """Send x to dst and receive a same-shaped array from src, deadlock-free."""
    g = _g(group)
    dst, src, tag = g.check_rank(dst, "dst"), g.check_rank(src, "src"), _tag(tag, False)
    a, _ = _array(x)
    if a.nbytes <= EAGER_BYTES:  # the send completes into the socket buffer: two fast-path steps
        _post_send(a, dst, tag, group, False, True, "sendrecv")
        return _receive(g, np.empty(a.shape, a.dtype), src, tag, False, True, f"sendrecv(tag={tag})")
    r = _receive(g, np.empty(a.shape, a.dtype), src, tag, False, False, f"sendrecv(tag={tag})")
    _post_send(a, dst, tag, group, False, False, "sendrecv").wait()
    return r.wait()


def _status(msg):
    return None if msg is None else Status(msg.source, msg.tag, msg.nbytes, msg.count, msg.dtype)


def probe(src=ANY_SOURCE, tag=ANY_TAG, *, group=None):
    """Status of the next matching message, waiting for one."""
    g = _g(group)
    return _status(g.engine.probe(g.p2p, _src(g, src), _tag(tag, True), True))


def iprobe(src=ANY_SOURCE, tag=ANY_TAG, *, group=None):
    """Status of a matching message already waiting, else None."""
    g = _g(group)
    return _status(g.engine.probe(g.p2p, _src(g, src), _tag(tag, True), False))


__all__ = ["send", "isend", "issend", "recv", "irecv", "recv_like", "recv_into", "sendrecv", "probe", "iprobe",
           "DT_BYTES"]
