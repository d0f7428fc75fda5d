"""Point-to-point through the real launcher."""
import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_point_to_point(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "p2p.py"), n, "send/recv/sendrecv/probe")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_blocking_sends_before_receives_do_not_deadlock(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "send_first.py"), n, "16 MiB blocking sends to both neighbours before any receive")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_one_call_send_recv(n, assert_ranks_ok, run):
    """Blocking send/recv take the one-call path, interoperate with the Python path, survive a late
    sender and out-of-order tags, and still raise MismatchError."""
    assert_ranks_ok(run(n, "p2p_fast.py", timeout=100), n, "one-call send/recv")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_groups_share_point_to_point_connections(n, assert_ranks_ok, run):
    """One point-to-point connection each way per peer for every group: frames of a group the
    receiver has not made yet are kept for it, same source and tag on three groups never cross,
    two threads exchange on two groups at once."""
    assert_ranks_ok(run(n, "shared_p2p.py", timeout=120), n, "groups sharing point-to-point connections")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["shm", "socket", "tcp"], indirect=True)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_idle_connections_close_and_reopen(n, transport, assert_ranks_ok, run):
    """With a limit of one outgoing point-to-point connection: a manager's connections to its
    workers close and open again every round; a connection closed while its receiver was not
    reading is read to its end before the one that replaced it; two threads send while
    connections close under them; every result checked against NumPy."""
    env = {"COMMLIB_P2P_CONNECTIONS": "1", "COMMLIB_P2P_IDLE_S": "0"}
    assert_ranks_ok(run(n, "idle_p2p.py", env=env, timeout=120), n, "idle point-to-point connections")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["tcp"], indirect=True)
def test_idle_encrypted_connections_close_and_reopen(transport, assert_ranks_ok, run):
    """The same over encrypted TCP: a closed connection's pump seals its last frame and ends."""
    env = {"COMMLIB_P2P_CONNECTIONS": "1", "COMMLIB_P2P_IDLE_S": "0", "COMMLIB_ENCRYPT": "1"}
    assert_ranks_ok(run(3, "idle_p2p.py", env=env, timeout=120), 3, "idle encrypted point-to-point connections")
