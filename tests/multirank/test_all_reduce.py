"""all_reduce through the real launcher: every op x dtype x size, layouts, algorithms, chunking."""
import pytest


NS = [1, 2, 3, 4]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", NS)
def test_matrix(n, assert_ranks_ok, run):
    """Every op x dtype x size (0 .. beyond a chunk) in five call layouts, illegal pairs, extras."""
    assert_ranks_ok(run(n, "all_reduce.py", "full", timeout=170), n, "all_reduce matrix")


# n=1 never reaches an algorithm (the size-1 group copies), so forcing one only matters from n=2.
@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["ring", "doubling", "rabenseifner"])
def test_forced_algorithm(algo, n, assert_ranks_ok, run):
    """Both algorithms give the right, rank-identical answer at every size and group size."""
    assert_ranks_ok(run(n, "all_reduce.py", "algo", env={"COMMLIB_ALGO_ALL_REDUCE": algo}, timeout=170), n,
                    f"all_reduce with COMMLIB_ALGO_ALL_REDUCE={algo}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NS[1:])
@pytest.mark.parametrize("algo", ["ring", "doubling", "rabenseifner"])
def test_tiny_chunks(algo, n, assert_ranks_ok, run):
    """COMMLIB_CHUNK_BYTES=64: many chunks per step, chunk edges inside elements of every size."""
    env = {"COMMLIB_CHUNK_BYTES": "64", "COMMLIB_ALGO_ALL_REDUCE": algo}
    assert_ranks_ok(run(n, "all_reduce.py", "tiny", env=env), n, f"all_reduce with 64-byte chunks ({algo})")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_logical_ops_give_0_1(n, assert_ranks_ok, run):
    """land/lor return 0/1 in the input's dtype at every group size (also 1)."""
    assert_ranks_ok(run(n, "logical.py"), n, "land/lor")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("n", NS[1:])
def test_nan_sign_bits_identical_on_every_rank(n, assert_ranks_ok, run):
    """NaNs of different signs on different ranks still give bit-identical results everywhere."""
    assert_ranks_ok(run(n, "nan_bits.py"), n, "signed NaN bytes")
