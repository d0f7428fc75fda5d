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
from commlib._transport.sockets import CH_P2P, Endpoint

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def pair():
    secret = os.urandom(32)
    a, b = Endpoint(0, secret, "127.0.0.1", 5.0), Endpoint(1, secret, "127.0.0.1", 5.0)
    a.table = b.table = [a.info(), b.info()]
    yield a, b
    a.close()
    b.close()


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
    first = _registered(b, (0, 0))
    # The client gives up on it (as after a handshake timeout) and connects again.
    a._out.pop((0, CH_P2P, 1)).close()
    a.fds.pop((0, CH_P2P, 1, 1), None)
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
    end = time.monotonic() + 5
    while b.incoming_socks(CH_P2P).get((0, 0)) is first and time.monotonic() < end:
        time.sleep(0.01)
    second = b.incoming_socks(CH_P2P)[(0, 0)]
    assert second is not first
    a.out_sock(0, CH_P2P, 1).sendall(b"hello")
    second.setblocking(True)
    second.settimeout(5)
    assert second.recv(5) == b"hello"


def test_a_live_duplicate_is_still_refused(pair):
    a, b = pair
    a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "test")
    live = _registered(b, (0, 0))
    # Forget the client side without closing it: the server's connection stays alive.
    kept = a._out.pop((0, CH_P2P, 1))
    try:
        with pytest.raises(CommTimeout):
            a.outgoing(0, CH_P2P, 1, time.monotonic() + 1.0, "test")
        assert b.incoming_socks(CH_P2P)[(0, 0)] is live
    finally:
        kept.close()


def test_connecting_to_a_rank_that_left_is_peer_lost_for_that_call_only(pair):
    from commlib._errors import PeerLost

    a, b = pair
    a.notices.exits[1] = "it called finalize()"
    b.close()
    with pytest.raises(PeerLost, match="finalize"):
        a.outgoing(0, CH_P2P, 1, time.monotonic() + 5, "send")
    assert a.failure is None  # not sticky: other operations of this rank go on
