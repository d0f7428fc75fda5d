"""Connection set-up between two in-process endpoints: the races that made large jobs fail at start.

A client whose handshake timed out retries; the server may already have
registered its first attempt. That dead first attempt must be replaced, not
reported as a duplicate (which failed every retry until the deadline). A live
duplicate is still refused.
"""
import os
import time

import pytest

from commlib._errors import CommTimeout
from commlib._transport import _io, shm
from commlib._transport.sockets import CH_COLL, CH_P2P, SHARED_GID, Endpoint

FROM_0 = (SHARED_GID, 0)  # incoming_socks key of the point-to-point connection from rank 0 (every group's)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(params=["socket", "auto"])
def pair(request, monkeypatch):
    """Two endpoints on this host: Unix sockets, or Unix sockets carrying shared-memory links."""
    monkeypatch.setenv("COMMLIB_TRANSPORT", request.param)
    secret = os.urandom(32)
    a, b = Endpoint(0, secret, "127.0.0.1", 5.0), Endpoint(1, secret, "127.0.0.1", 5.0)
    a.table = b.table = [a.info(), b.info()]
    yield a, b
    a.close()
    b.close()


def _send(sock, data):
    """Bytes onto a connection as the transport sends them (through its link, if it has one)."""
    if not shm.linked(sock):
        return sock.sendall(data)
    end = time.monotonic() + 5
    view = memoryview(data)
    while view and time.monotonic() < end:
        try:
            view = view[_io.link_sendmsg(sock.fileno(), [view]):]
        except BlockingIOError:
            time.sleep(0.001)
    assert not view


def _recv(sock, n):
    if not shm.linked(sock):
        sock.setblocking(True)
        sock.settimeout(5)
        return sock.recv(n)
    buf = bytearray(n)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            return bytes(buf[:_io.link_recv_into(sock.fileno(), buf)])
        except BlockingIOError:
            time.sleep(0.001)
    raise AssertionError("nothing arrived")


def _registered(ep, key, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        sock = ep.incoming_socks(CH_P2P).get(key)
        if sock is not None:
            return sock
        time.sleep(0.01)
    raise AssertionError(f"{key} never registered")


def test_a_retry_replaces_a_first_attempt_the_client_gave_up_on(pair):
    a, b = pair
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
    first = _registered(b, FROM_0)
    # The client gives up on it (as after a handshake timeout) and connects again.
    shm.close(a._out.pop(a.key(0, CH_P2P, 1)))
    a.fds.pop(a.key(0, CH_P2P, 1) + (1,), None)
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
    end = time.monotonic() + 5
    while b.incoming_socks(CH_P2P).get(FROM_0) is first and time.monotonic() < end:
        time.sleep(0.01)
    second = b.incoming_socks(CH_P2P)[FROM_0]
    assert second is not first
    _send(a.out_sock(0, CH_P2P, 1), b"hello")
    assert _recv(second, 5) == b"hello"


def test_a_live_duplicate_is_still_refused(pair):
    a, b = pair
    a.outgoing(0, CH_COLL, 1, time.monotonic() + 5, "test")
    coll_from_0 = (SHARED_GID, 0)
    end = time.monotonic() + 5
    while coll_from_0 not in b.incoming_socks(CH_COLL) and time.monotonic() < end:
        time.sleep(0.01)
    live = b.incoming_socks(CH_COLL)[coll_from_0]
    # Forget the client side without closing it: the server's connection stays alive.
    kept = a._out.pop(a.key(0, CH_COLL, 1))
    try:
        with pytest.raises(CommTimeout):
            a.outgoing(0, CH_COLL, 1, time.monotonic() + 1.0, "test")
        assert b.incoming_socks(CH_COLL)[coll_from_0] is live
    finally:
        shm.close(kept)


def _frame(tag, data):
    """A point-to-point frame of group 0 from rank 0 carrying the bytes `data`."""
    import numpy as np

    from commlib._dtypes import dtype_code
    from commlib._wire import message_header

    return message_header(group=0, source=0, tag=tag, dtype=dtype_code(np.dtype(np.uint8)), count=len(data),
                          nbytes=len(data)) + data


def _waiting(ep, count, timeout=5.0):
    """Wait until `count` connections wait behind the one being read (Endpoint._next)."""
    end = time.monotonic() + timeout
    while sum(len(q) for q in ep._next.values()) < count and time.monotonic() < end:
        time.sleep(0.01)
    return [len(q) for q in ep._next.values()]


def test_a_point_to_point_connection_that_replaces_a_live_one_waits_behind_it(pair):
    """A sender that closed an idle connection (its last frame FLAG_BYE) and opened a new one
    before the receiver read the old to its end: the new one waits (`_next`) and its frames are
    read only after the old one's, in the order sent, however many replaced each other."""
    import numpy as np

    from commlib._engine import Engine, Group
    from commlib._engine.matching import ANY_TAG
    from commlib._transport import Transport
    from commlib._wire import bye_header

    a, b = pair
    engine = Engine(Transport(b))
    g = Group(engine.transport, engine, 0, [0, 1], 1, 5.0)
    try:
        for k in range(3):  # three connections, each closed after one frame, before anything is read
            a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
            sock = a.out_sock(0, CH_P2P, 1)
            _send(sock, _frame(k, b"msg%d" % k) + bye_header(group=SHARED_GID, source=0))
            if k == 0:
                _registered(b, FROM_0)
            assert _waiting(b, k) == ([k] if k else [])
            a.retire_out(0, CH_P2P, 1, sock)
        a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
        assert _waiting(b, 3) == [3]  # the first is being read; three wait in order
        _send(a.out_sock(0, CH_P2P, 1), _frame(3, b"last"))
        got = [engine.recv(g.p2p, 0, ANY_TAG, np.empty(4, np.uint8), lambda msg, payload: (msg.tag, bytes(payload)),
                           what="irecv", check=None, raw=True).wait() for _ in range(4)]
        assert got == [(0, b"msg0"), (1, b"msg1"), (2, b"msg2"), (3, b"last")]
        assert not b._next and len(b.incoming_socks(CH_P2P)) == 1
    finally:
        engine.close("test over")


def test_connecting_to_a_rank_that_left_is_peer_lost_for_that_call_only(pair):
    from commlib._errors import PeerLost

    a, b = pair
    a.notices.exits[1] = "it called finalize()"
    b.close()
    with pytest.raises(PeerLost, match="finalize"):
        a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "send")
    assert a.failure is None  # not sticky: other operations of this rank go on


def test_the_engine_reads_from_the_retry_that_replaced_a_dead_attempt(pair):
    """The engine had adopted the first attempt and saw it hang up: that is no lost sender (it is
    still here), and the receive posted on it completes from the replacing connection."""
    import numpy as np

    from commlib._dtypes import dtype_code
    from commlib._engine import Engine, Group
    from commlib._transport import Transport
    from commlib._wire import message_header

    a, b = pair
    engine = Engine(Transport(b))
    g = Group(engine.transport, engine, 0, [0, 1], 1, 5.0)
    u8 = dtype_code(np.dtype(np.uint8))
    req = engine.recv(g.p2p, 0, 7, np.empty(4, np.uint8), lambda msg, payload: bytes(payload), what="irecv",
                      check=(u8, 4))
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
    _registered(b, FROM_0)
    with engine.lock:
        engine._adopt_all()
        first = engine._in[0]  # (the progress thread may read its end and forget it from here on)
    shm.close(a._out.pop(a.key(0, CH_P2P, 1)))  # the client gives up on its first attempt ...
    a.fds.pop(a.key(0, CH_P2P, 1) + (1,), None)
    end = time.monotonic() + 5
    while not first.eof and time.monotonic() < end:
        with engine.lock:
            engine._read(first)
        time.sleep(0.01)
    assert first.eof and not req.test()  # ... which fails nobody, and is forgotten
    assert 0 not in engine._in and FROM_0 not in b.incoming_socks(CH_P2P)
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")  # ... and retries
    hdr = message_header(group=0, source=0, tag=7, dtype=u8, count=4, nbytes=4)
    _send(a.out_sock(0, CH_P2P, 1), hdr + b"data")
    try:
        assert req.wait() == b"data"
    finally:
        engine.close("test over")


def test_a_connection_opened_ahead_of_need_fails_only_its_own_call(pair):
    """init()'s eager connect to the ring neighbour times out (a peer too busy to accept): a
    CommTimeout of that call, not the process's failure that every later operation re-raised."""
    a, b = pair
    # Rank 1's address refuses every attempt (closing its listener does not: the accept thread
    # still holds it open, and the kernel completes connections into its backlog).
    a.table = [a.table[0], dict(a.table[1], unix=f"commlib-nobody-{os.getpid()}")]
    with pytest.raises(CommTimeout, match="could not connect to rank 1"):
        a.outgoing(0, CH_P2P, 1, time.monotonic() + 0.5, "init", sticky=False)
    assert a.failure is None
    with pytest.raises(CommTimeout):  # the same failure in an operation that needs the peer is sticky
        a.outgoing(0, CH_P2P, 1, time.monotonic() + 0.5, "send")
    assert isinstance(a.failure, CommTimeout)


def test_a_burst_beyond_the_pending_handshakes_waits_instead_of_failing(monkeypatch, caplog):
    """Many ranks connecting to one rank at once (64 ranks starting together): the connections past
    MAX_PENDING_HANDSHAKES wait in the listen backlog for a slot; every one gets in, none is dropped
    (a dropped connection made its rank retry, and logged a warning per drop)."""
    import socket
    import threading

    from commlib._transport import sockets

    monkeypatch.setattr(sockets, "MAX_PENDING_HANDSHAKES", 2)
    monkeypatch.setattr(sockets, "SERVER_HANDSHAKE_S", 1.0)
    secret = os.urandom(32)
    n = 12
    eps = [Endpoint(r, secret, "127.0.0.1", 10.0) for r in range(n)]
    table = [ep.info() for ep in eps]
    for ep in eps:
        ep.table = table
    # Two silent connections hold both slots for SERVER_HANDSHAKE_S: the burst has to wait.
    silent = [socket.create_connection(tuple(table[0]["tcp"])) for _ in range(2)]
    errors = []

    def connect(ep):
        try:
            ep.outgoing(0, CH_P2P, 0, time.monotonic() + 10, "burst")
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=connect, args=(ep,)) for ep in eps[1:]]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert not errors, errors
        for r in range(1, n):
            _registered(eps[0], (SHARED_GID, r))
        assert all(ep.failure is None for ep in eps)
        waits = [r.getMessage() for r in caplog.records if "pending handshakes" in r.getMessage()]
        assert len(waits) == 1 and "wait for a slot" in waits[0], waits
    finally:
        for s in silent:
            s.close()
        for ep in eps:
            ep.close()


def test_an_unreachable_peer_address_fails_after_the_grace_not_the_deadline(pair, monkeypatch):
    """A peer address with no route (ENETUNREACH: the wrong interface chosen) is a set-up error:
    the connect gives up after UNREACHABLE_GRACE_S naming the address and errno, long before its
    deadline, while the peer waiting for this connection would only say it waited."""
    import errno
    import socket

    from commlib._transport import sockets

    class Unreachable(socket.socket):
        def connect(self, address):
            raise OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))

    a, _ = pair
    a.force_tcp = True
    monkeypatch.setattr(sockets, "UNREACHABLE_GRACE_S", 0.3)
    monkeypatch.setattr(socket, "socket", Unreachable)
    start = time.monotonic()
    with pytest.raises(CommTimeout, match=r"could not connect to rank 1 at tcp 127\.0\.0\.1:\d+: "
                                          r"network is unreachable \(ENETUNREACH\)"):
        a.outgoing(0, CH_P2P, 1, start + 20, "send")
    assert time.monotonic() - start < 5
    assert isinstance(a.failure, CommTimeout)
