"""Point-to-point through the real launcher."""
import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_point_to_point(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "p2p.py"), n, "send/recv/sendrecv/probe")
