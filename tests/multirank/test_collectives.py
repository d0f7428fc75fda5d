"""all_gather, reduce_scatter, broadcast and barrier through the real launcher."""
import pytest


NS = [1, 2, 3, 4]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS)
def test_collectives(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "collectives.py", "full"), n, "all_gather/reduce_scatter/broadcast/barrier")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["tree", "chain", "linear"])
def test_broadcast_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every root, every dtype, large and odd sizes with the broadcast algorithm forced."""
    assert_ranks_ok(run(n, "collectives.py", "bcast", env={"COMMLIB_ALGO_BROADCAST": algo}), n,
                    f"broadcast with COMMLIB_ALGO_BROADCAST={algo}")


@pytest.mark.timeout(240)
def test_broadcast_and_reduce_beyond_eight_ranks(assert_ranks_ok, run):
    """10 ranks: a large broadcast or reduce below BROADCAST_CHAIN_BYTES / REDUCE_CHAIN_BYTES takes the
    tree, above it the chain (every root, large and odd sizes, as chosen by default); gather and scatter take the
    binomial tree."""
    assert_ranks_ok(run(10, "collectives.py", "rooted", timeout=220), 10, "broadcast and reduce at 10 ranks")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n,algo", [(2, "pairwise"), (3, "pairwise"), (4, "pairwise"), (2, "bruck"), (3, "bruck"),
                                    (4, "bruck"), (10, "bruck")])
def test_all_to_all_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every dtype, empty to multi-chunk blocks, other axes and iall_to_all, with the algorithm forced
    (by default Bruck's, which needs no full mesh, beyond 64 ranks for blocks up to 1 KiB and beyond 512
    at any size)."""
    assert_ranks_ok(run(n, "collectives.py", "a2a", env={"COMMLIB_ALGO_ALL_TO_ALL": algo}, timeout=220), n,
                    f"all_to_all with COMMLIB_ALGO_ALL_TO_ALL={algo}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["linear", "tree"])
def test_gather_scatter_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every root and dtype, empty to multi-chunk blocks, with the gather and scatter algorithm forced
    (by default the binomial tree beyond 8 ranks: test_broadcast_and_reduce_beyond_eight_ranks)."""
    env = {"COMMLIB_ALGO_GATHER": algo, "COMMLIB_ALGO_SCATTER": algo}
    assert_ranks_ok(run(n, "collectives.py", "gs", env=env), n, f"gather/scatter with COMMLIB_ALGO_*={algo}")


@pytest.mark.parametrize("algo,n", [("rails", 2), ("rails", 3), ("rails", 4), ("chain", 3), ("tree", 4)])
def test_reduce_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every root, op and size with the reduce algorithm forced: rails on one host is its reduce-scatter
    within the host and root's gather (across hosts: tests/multihost, the 8-host job)."""
    assert_ranks_ok(run(n, "collectives.py", "reduce", env={"COMMLIB_ALGO_REDUCE": algo}), n,
                    f"reduce with COMMLIB_ALGO_REDUCE={algo}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["ring", "doubling", "halving", "pairwise"])
def test_reduce_scatter_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Every op and dtype, small, odd and large sizes with the reduce_scatter algorithm forced (by default
    recursive halving at power-of-two n up to 2 MiB, doubling up to 16 KiB at other n, the direct
    schedule above, the ring beyond 8 ranks)."""
    assert_ranks_ok(run(n, "collectives.py", "rs", env={"COMMLIB_ALGO_REDUCE_SCATTER": algo}), n,
                    f"reduce_scatter with COMMLIB_ALGO_REDUCE_SCATTER={algo}")


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
