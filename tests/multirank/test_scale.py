"""Many ranks on few cores, and the size-1 group."""
import pytest


@pytest.mark.timeout(180)
def test_eight_ranks_on_two_cores(assert_ranks_ok, run):
    """A mixed job (all_reduce small/large, all_gather, reduce_scatter, broadcast, barrier, sendrecv) at n=8."""
    assert_ranks_ok(run(8, "mixed.py", timeout=170), 8, "mixed job at n=8")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_mixed_small_groups(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mixed.py"), n, "mixed job")


@pytest.mark.timeout(60)
def test_size_one_under_commrun(assert_ranks_ok, run):
    assert_ranks_ok(run(1, "single.py"), 1, "size-1 group under commrun")


@pytest.mark.timeout(60)
def test_size_one_without_launcher(assert_ranks_ok, run_plain):
    """commlib.init() with no launcher: a singleton group; init(strict=True) raises CommError."""
    result = run_plain("single.py")
    assert_ranks_ok(result, 1, "size-1 group without a launcher")
    assert "init(strict=True) outside a launcher: CommError" in result[1]
