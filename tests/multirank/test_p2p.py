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
