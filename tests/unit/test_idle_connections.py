"""The idle-connection limit's choices, in-process over socket pairs: which outgoing point-to-point
connections close, and the last frame each one gets."""
import socket
import time

import pytest

from commlib._transport.p2p import Outgoing, PointToPoint
from commlib._wire import FLAG_BYE, HEADER_NBYTES, decode

pytestmark = pytest.mark.timeout(30)


class _Endpoint:
    """What retire_idle asks of the endpoint: closing a connection (recorded)."""

    def __init__(self):
        self.closed = []

    def retire_out(self, group, channel, dst, sock):
        self.closed.append(dst)
        sock.close()


def _channel(peers, limit, idle_s, used):
    """A PointToPoint of rank 0 with an Outgoing to each of `peers` over a socket pair, last used
    `used[peer]` seconds ago; {peer: the receiving end}."""
    p2p = PointToPoint.__new__(PointToPoint)
    p2p.rank, p2p.ep, p2p.retired = 0, _Endpoint(), 0
    p2p.max_connections, p2p.idle_s = limit, idle_s
    p2p._out, p2p.used, ends = {}, {}, {}
    now = time.monotonic()
    for peer in peers:
        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        p2p._out[peer] = Outgoing(mine, peer)
        p2p.used[peer] = now - used[peer]
        ends[peer] = theirs
    return p2p, ends


def test_the_least_recently_used_idle_connections_close_with_a_last_frame():
    p2p, ends = _channel([1, 2, 3, 4], limit=2, idle_s=1.0, used={1: 5.0, 2: 9.0, 3: 3.0, 4: 0.0})
    assert p2p.retire_idle(keep=4) == [2, 1]  # oldest first, down to the limit
    assert sorted(p2p._out) == [3, 4] and p2p.ep.closed == [2, 1] and p2p.retired == 2
    for peer in (1, 2):
        h = decode(ends[peer].recv(HEADER_NBYTES))
        assert h.flags & FLAG_BYE and h.root == 0 and h.nbytes == 0
        assert ends[peer].recv(1) == b""  # then the end of the stream


def test_recently_used_queued_unread_and_kept_connections_stay():
    p2p, ends = _channel([1, 2, 3, 4, 5], limit=1, idle_s=1.0, used={1: 0.2, 2: 9.0, 3: 8.0, 4: 7.0, 5: 6.0})
    p2p._out[2].queue.append(object())  # a frame waits on it
    p2p._out[3].sock.send(b"x" * 100)  # its receiver has not taken these bytes
    assert p2p.retire_idle(keep=4) == [5]  # 1: used 0.2 s ago; 4: the one a send is about to use
    assert sorted(p2p._out) == [1, 2, 3, 4]
    ends[3].recv(100)  # the receiver takes them, the frame is written: those two may close now
    p2p._out[2].queue.clear()
    assert p2p.retire_idle(keep=1) == [2, 3, 4]  # (4 is no longer the one being used)
    assert list(p2p._out) == [1]


def test_the_limit_is_not_enforced_on_connections_in_use():
    p2p, _ = _channel([1, 2, 3], limit=1, idle_s=1.0, used={1: 0.1, 2: 0.2, 3: 0.3})
    assert p2p.retire_idle(keep=None) == [] and len(p2p._out) == 3


def test_the_last_frame_goes_whole_or_not_at_all():
    mine, theirs = socket.socketpair()
    mine.setblocking(False)
    out = Outgoing(mine, 1)
    while True:  # fill it: the receiver takes nothing
        try:
            mine.send(b"\0" * 65536)
        except BlockingIOError:
            break
    assert out.write_last(b"x" * HEADER_NBYTES, timeout=0.05) is False  # not a byte went: it stays open
    theirs.close()
    assert out.write_last(b"x" * HEADER_NBYTES) is True  # the peer is gone: close it too
    mine.close()
