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
