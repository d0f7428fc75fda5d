"""The one place where a step's status becomes the error the user sees.

`status_error` turns an `_io` status code into the exception to raise (and
records it as the process's sticky failure); `mismatch_text` names both
sides of a mismatched collective; `peer_mismatch` decides whether a peer that
is blocked elsewhere is really in a different collective.

The rule for a mismatch: the SAME sequence number of the same group with
different contents. A peer whose sequence number differs is ahead (it
finished this collective: its messages for it are already on their way) or
behind (it will get here): neither is a mismatch, so a late or early rank is
never mistaken for a wrong one.
"""
import os

from .._errors import CommError, CommTimeout, MismatchError, PeerLost
from .._wire import HEADER_NBYTES, ProtocolError, decode
from . import _io


def mismatch_text(me, mine, peer, theirs, dims):
    if all(getattr(mine, f) == getattr(theirs, f) for f in mine.__slots__ if f not in ("shape", "nbytes")):
        return (f"rank {me} called {mine.describe()} with shape {tuple(dims) if dims else '?'} "
                f"but rank {peer} called it with a different shape")
    return f"rank {me} called {mine.describe()} but rank {peer} called {theirs.describe()}"


def peer_mismatch(me, hdr, peer, theirs_bytes, dims):
    """MismatchError if the peer's current header is the same collective number with other contents."""
    if theirs_bytes is None:
        return None
    try:
        theirs, mine = decode(theirs_bytes), decode(hdr)
    except ProtocolError:
        return None
    if theirs.group != mine.group or theirs.seq != mine.seq or theirs_bytes == hdr:
        return None
    return MismatchError(mismatch_text(me, mine, peer, theirs, dims), rank=peer)


def _why_gone(ep, peer):
    """Why `peer` closed its connection, as far as known: a rank that finished (its program ended)
    is asked for its exit status first (Notices.departure); None when nothing is known."""
    notices = ep.notices
    if peer is not None and notices.finishing(peer):
        return notices.departure(peer)
    return notices.exits.get(peer)


def status_error(ep, rc, state, what, send_peer, send_len, recv_peer, recv_len, expect=b"", got=b"", dims=None):
    """Turn an _io status into the exception to raise (and mark the process failed)."""
    what = str(what)  # callers may pass an object that formats itself only when needed
    sent, recvd, _, err = (int(v) for v in state)
    me = ep.rank
    if rc == _io.WAKE:
        f = ep.failure
        return type(f)(str(f), rank=f.rank, op=what)
    if rc == _io.TIMEOUT:
        if recv_peer is not None and recvd < recv_len + HEADER_NBYTES:
            text = (f"rank {me}: {what} waited {ep.timeout:g} s for rank {recv_peer} "
                    f"({max(0, recvd - HEADER_NBYTES)} of {recv_len} bytes)")
            peer = recv_peer
        else:
            text = (f"rank {me}: {what} waited {ep.timeout:g} s sending to rank {send_peer} "
                    f"({max(0, sent - HEADER_NBYTES)} of {send_len} bytes)")
            peer = send_peer
        return ep.fail(CommTimeout(text + ep.stall_report(), rank=peer, op=what))
    closed = rc in (_io.EOF, _io.SEND_ERROR, _io.RECV_ERROR)
    lost = closed and (rc == _io.EOF or err != 0)  # err 0: the kernel refused the data, the peer is there
    peer = send_peer if rc == _io.SEND_ERROR else recv_peer
    if closed:
        # A peer that closes first often did so because the job is failing:
        # its notice is in flight; report that cause rather than the symptom.
        ep.await_cause()
    why = _why_gone(ep, peer) if lost else None  # a rank that finished: may wait for its exit report
    # the cause wins: another rank's (its exit status included), or one this rank already found
    # with this peer (a sealed connection's forged record: its pump closed the connection after)
    if ep.failure is not None and (ep.failure_remote or ep.failure.rank == peer):
        f = ep.failure
        return type(f)(str(f), rank=f.rank, op=what)
    if rc == _io.EOF:
        return ep.fail(PeerLost(f"rank {me}: {what} lost rank {peer} ({why or 'connection closed'})", rank=peer,
                                op=what))
    if rc in (_io.SEND_ERROR, _io.RECV_ERROR):
        if err == 0:
            return ep.fail(CommError(f"rank {me}: {what}: reduction kernel refused the data", op=what))
        exc = PeerLost(f"rank {me}: {what} lost rank {peer} ({why or os.strerror(err).lower()})", rank=peer, op=what)
        exc.__cause__ = OSError(err, os.strerror(err))
        return ep.fail(exc)
    if rc == _io.MISMATCH:
        try:
            theirs, mine = decode(bytes(got)), decode(bytes(expect))
        except ProtocolError as exc:
            return ep.fail(CommError(f"rank {me}: {what}: garbage from rank {recv_peer}: {exc}",
                                     rank=recv_peer, op=what))
        return ep.fail(MismatchError(mismatch_text(me, mine, recv_peer, theirs, dims), rank=recv_peer, op=what))
    return ep.fail(CommError(f"rank {me}: {what}: poll failed: {os.strerror(err)}", op=what))
