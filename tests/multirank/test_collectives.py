"""all_gather, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all and barrier through the
real launcher: one job per (group size, transport) runs every check of cases/collectives.py."""
import pytest

from _harness import batched

NS = [1, 2, 3, 4]

test_collectives = batched("collectives.py", NS)
# 10 ranks: a large broadcast or reduce below BROADCAST_CHAIN_BYTES / REDUCE_CHAIN_BYTES takes the tree,
# above it the chain; gather and scatter the binomial tree; all_to_all Bruck's, forced.
test_collectives_ten_ranks = batched("collectives.py", [10], only=["broadcast_and_reduce_ten_ranks",
                                                                  "gather_scatter_ten_ranks",
                                                                  "all_to_all_forced[bruck]"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS)
def test_out_arguments(n, assert_ranks_ok, run):
    """reduce, reduce_scatter, gather and scatter write into a caller's out= and return it; a wrong one is a
    ValueError on every rank, and the group goes on."""
    assert_ranks_ok(run(n, "out_args.py"), n, "out= arguments")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_groups_share_connections(n, assert_ranks_ok, run):
    """One collective connection each way per peer for every group; another group's message read
    first is parked for it (crossed orders, up to 2.4 MB); two groups' collectives at once in two
    threads over the same connections."""
    assert_ranks_ok(run(n, "shared_connections.py", timeout=280), n, "groups sharing connections")
