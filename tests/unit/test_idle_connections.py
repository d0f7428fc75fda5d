"""The idle-connection limit's choices, in-process over socket pairs: which outgoing point-to-point
connections close, and the last frame each one gets; which senders a receiver over its incoming
limit asks to close theirs, and what a sender asked does."""
import socket
import threading
import time

import pytest

from commlib._transport import p2p as p2p_module
from commlib._transport.p2p import Incoming, Outgoing, PointToPoint
from commlib._wire import FLAG_BYE, HEADER_NBYTES, decode

pytestmark = pytest.mark.timeout(30)


class _Notices:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(msg)


class _Endpoint:
    """What the limit asks of the endpoint: closing a connection, a message to the coordinator
    (both recorded), which senders have a newer connection waiting."""

    def __init__(self):
        self.closed = []
        self.notices = _Notices()
        self.waiting = set()

    def retire_out(self, group, channel, dst, sock):
        self.closed.append(dst)
        sock.close()

    def waiting_behind(self, channel, src):
        return src in self.waiting


def _channel(peers, limit, idle_s, used):
    """A PointToPoint of rank 0 with an Outgoing to each of `peers` over a socket pair, last used
    `used[peer]` seconds ago; {peer: the receiving end}."""
    p2p = PointToPoint.__new__(PointToPoint)
    p2p.rank, p2p.ep, p2p.retired = 0, _Endpoint(), 0
    p2p.asked, p2p.asks, p2p._ask_at, p2p.closing = set(), 0, 0.0, set()
    p2p._conn_lock = threading.Lock()
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


def test_a_sender_asked_closes_its_idle_flushed_connections_only():
    p2p, ends = _channel([1, 2, 3, 4], limit=8, idle_s=1.0, used={1: 5.0, 2: 0.1, 3: 4.0, 4: 3.0})
    p2p._out[3].sock.send(b"x" * 10)  # not taken yet
    p2p._out[4].queue.append(object())  # a frame waits on it
    p2p.asked.update({1, 2, 3, 4, 7})  # 7: no connection to it (already closed)
    assert p2p.close_asked() == [1]  # under its own limit still: the receivers asked
    assert not p2p.asked and sorted(p2p._out) == [2, 3, 4] and p2p.retired == 1
    h = decode(ends[1].recv(HEADER_NBYTES))
    assert h.flags & FLAG_BYE and h.root == 0
    assert ends[1].recv(1) == b""


def _incoming(srcs, idle_for):
    """Incoming connections from `srcs` over socket pairs, their last header `idle_for[src]` s ago;
    {src: Incoming}, {src: the sending end}."""
    conns, ends, now = {}, {}, time.monotonic()
    for src in srcs:
        theirs, mine = socket.socketpair()
        mine.setblocking(False)
        conns[src] = Incoming(mine, src)
        conns[src].last = now - idle_for[src]
        ends[src] = theirs
    return conns, ends


def test_a_receiver_over_its_limit_asks_the_senders_of_its_oldest_idle_connections(monkeypatch):
    monkeypatch.setattr(p2p_module, "ASK_EVERY_S", 60.0)
    p2p, _ = _channel([], limit=2, idle_s=1.0, used={})
    srcs = range(1, 9)
    conns, ends = _incoming(srcs, {1: 9.0, 2: 8.0, 3: 7.0, 4: 6.0, 5: 5.0, 6: 4.0, 7: 3.0, 8: 0.5})
    conns[1].busy = True  # a blocking receive reads it
    ends[2].send(b"x")  # a byte waits unread
    conns[3]._hpos = 10  # mid-header
    p2p.ep.waiting.add(4)  # its sender's next connection waits behind it: asked already
    assert p2p.ask_idle(conns.values()) == [5, 6, 7]  # 8 is in use; 8 open - 2 = 6 to ask at most
    assert p2p.ep.notices.sent == [{"kind": "close_asked", "to": [5, 6, 7]}] and p2p.asks == 3
    assert p2p.ask_idle(conns.values()) == []  # a look that asked looks again at once: none left
    conns[8].last -= 1.0  # idle now, but after a look that asked none the next waits ASK_EVERY_S
    assert p2p.ask_idle(conns.values()) == []
    p2p._ask_at = 0.0
    assert p2p.ask_idle(conns.values()) == [8]
    p2p._ask_at = 0.0
    assert p2p.ask_idle(conns.values()) == []  # a sender is asked again only after ASK_AGAIN_S
    p2p._ask_at, conns[5].asked = 0.0, time.monotonic() - p2p_module.ASK_AGAIN_S
    assert p2p.ask_idle(conns.values()) == [5]
    p2p._ask_at = 0.0
    assert p2p.ask_idle(list(conns.values())[:2]) == []  # at the limit: nothing to ask


def test_connections_already_asked_count_against_the_excess():
    p2p, _ = _channel([], limit=2, idle_s=0.0, used={})
    conns, _ = _incoming(range(1, 7), {src: 10.0 - src for src in range(1, 7)})
    conns[5].asked = conns[6].asked = time.monotonic()  # their last frames are on their way
    assert p2p.ask_idle(conns.values()) == [1, 2]  # 6 open, 2 closing: 2 more to reach the limit


def test_a_connection_in_use_is_passed_over_for_the_next_oldest():
    p2p, _ = _channel([], limit=2, idle_s=0.0, used={})
    conns, ends = _incoming([1, 2, 3], {1: 3.0, 2: 2.0, 3: 1.0})
    ends[1].send(b"x")  # the oldest has a byte unread: its sender is sending again
    assert p2p.ask_idle(conns.values()) == [2]


def test_a_sender_never_wraps_a_connection_being_closed():
    """A connection is closed by a thread holding the engine's lock (its own limit, or a receiver's
    ask); another thread opening its connection to that peer without the lock must not wrap the
    socket being closed (it would write on a closed descriptor, or on whatever reuses the number)."""
    import threading

    p2p, _ = _channel([1], limit=8, idle_s=0.0, used={1: 5.0})
    old = p2p._out[1].sock
    closing, go = threading.Event(), threading.Event()

    class _Ep(_Endpoint):
        def __init__(self):
            super().__init__()
            self.current = old

        def out_sock(self, group, channel, dst):
            return self.current

        def retire_out(self, group, channel, dst, sock):
            closing.set()
            go.wait(5)  # the window between forgetting the Outgoing and forgetting its socket
            self.current = None
            super().retire_out(group, channel, dst, sock)

        def outgoing(self, group, channel, dst, deadline, what):
            self.current = socket.socketpair()[0]

    class _Watched:
        """p2p's _conn_lock, saying when a thread finds it held and waits for it."""

        def __init__(self, lock):
            self.lock, self.waited = lock, threading.Event()

        def __enter__(self):
            if not self.lock.acquire(blocking=False):
                self.waited.set()
                self.lock.acquire()

        def __exit__(self, *exc):
            self.lock.release()

    p2p.ep = _Ep()
    p2p._conn_lock = _Watched(p2p._conn_lock)
    p2p.asked.add(1)
    closer = threading.Thread(target=p2p.close_asked)
    closer.start()
    assert closing.wait(5)
    got = []
    opener = threading.Thread(target=lambda: got.append(p2p.outgoing(1, time.monotonic() + 5, "send")))
    opener.start()
    assert p2p._conn_lock.waited.wait(5), "the opener did not wait for the close to finish"
    go.set()
    closer.join(5)
    opener.join(5)
    assert got and got[0].sock is not old and got[0].sock is p2p.ep.current and p2p._out[1] is got[0]


def test_asks_expire_in_the_set_the_engine_watches():
    p2p, _ = _channel([], limit=1, idle_s=0.0, used={})
    conns, _ = _incoming([1, 2, 3], {1: 3.0, 2: 2.0, 3: 1.0})
    watched = p2p.closing  # (the engine's idle() looks at this very set)
    assert p2p.ask_idle(conns.values()) == [1, 2] and watched == {conns[1], conns[2]}
    conns[1].asked -= p2p_module.ASK_AGAIN_S  # its sender kept it: the ask lapses
    conns[2].eof = True  # its last frame came
    p2p.expire_asks()
    assert p2p.closing is watched and not watched
