"""The one-call small-message path through the real launcher (cases/fast_path.py)."""
import pytest


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_fast_path(n, assert_ranks_ok, run):
    """Taken for ndarray arguments, numpy's answers, interoperable with the Python path, in program order."""
    assert_ranks_ok(run(n, "fast_path.py", timeout=230), n, "one-call path")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [2, 3])
def test_fast_path_tiny_chunks(n, assert_ranks_ok, run):
    """64-byte chunks: the reduction ring wraps inside every step of the one-call path."""
    assert_ranks_ok(run(n, "fast_path.py", env={"COMMLIB_CHUNK_BYTES": "64"}, timeout=230), n,
                    "one-call path with 64-byte chunks")


@pytest.mark.timeout(120)
def test_fast_path_learns_each_peers_waits(assert_ranks_ok, run):
    """A late partner's waits reach the per-peer average the spin budget reads (and a prompt one's
    bring it back down), on the one-call path as on the step loop."""
    assert_ranks_ok(run(2, "fast_path_spin.py", timeout=100), 2,
                    "one-call path spin learning")
