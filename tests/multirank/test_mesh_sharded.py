"""ShardedArray through the real launcher (cases/mesh_sharded.py): every transition between every pair
of placements (each dimension replicated or split over one or two mesh axes, sources also with pending
partial sums) on 1-D and 2-D meshes, even, uneven and 0-size shapes, checked block by block against
np.array_split of the global array; the module functions; from_local's and shard's errors on every rank."""
import pytest

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8], ids=lambda n: f"n{n}")
def test_sharded_transitions(n, run, assert_ranks_ok):
    assert_ranks_ok(run(n, "mesh_sharded.py", env={"COMMLIB_TIMEOUT": "30"}, timeout=180), n, "mesh_sharded")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_torch_tensors(n, run, assert_ranks_ok):
    pytest.importorskip("torch")
    assert_ranks_ok(run(n, "mesh_torch.py", env={"COMMLIB_TIMEOUT": "30"}, timeout=100), n, "mesh_torch")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"n{n}")
def test_large_results_kept_across_calls(n, run, assert_ranks_ok):
    """Mesh all_gathers over 1 MiB reuse result buffers: what the program still holds is never one."""
    assert_ranks_ok(run(n, "mesh_recycle.py", env={"COMMLIB_TIMEOUT": "30"}, timeout=100), n, "mesh_recycle")
