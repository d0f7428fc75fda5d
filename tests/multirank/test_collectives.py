"""all_gather, reduce_scatter, broadcast and barrier through the real launcher."""
import pytest


NS = [1, 2, 3, 4]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS)
def test_collectives(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "collectives.py", "full"), n, "all_gather/reduce_scatter/broadcast/barrier")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["tree", "chain"])
def test_broadcast_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every root, every dtype, large and odd sizes with the broadcast algorithm forced."""
    assert_ranks_ok(run(n, "collectives.py", "bcast", env={"COMMLIB_ALGO_BROADCAST": algo}), n,
                    f"broadcast with COMMLIB_ALGO_BROADCAST={algo}")
