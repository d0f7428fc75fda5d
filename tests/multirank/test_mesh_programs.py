"""commlib.mesh through the real launcher, cases/mesh_programs.py: Mesh geometry, jax.lax-style named-axis
collectives and their errors; ShardedArray's every transition between every pair
of placements (each dimension replicated or split over one or two mesh axes, sources also with pending
partial sums) on 1-D and 2-D meshes, even, uneven and 0-size shapes, checked block by block against
np.array_split of the global array; the module functions; from_local's and shard's errors on every rank;
the same on torch tensors; large results kept across calls. The programs of a size share one job."""
from _harness import batched
from _needs import installed

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

_PROGRAMS = ["mesh_axes", "mesh_sharded", "mesh_recycle"] + (["mesh_torch"] if installed("torch") else [])

test_mesh_programs = batched("mesh_programs.py", [1, 2, 3, 4, 6, 8], env={"COMMLIB_TIMEOUT": "30"}, only=_PROGRAMS,
                             timeout=400)
