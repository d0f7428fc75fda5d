"""Device meshes, DTensor, tensor parallelism (ColwiseParallel / RowwiseParallel), HSDP over a 2-D
mesh and torch.distributed.pipelining (GPipe, 1F1B) on the commlib backend, through the real
commrun, each against one process (cases/torch_mesh.py). TORCH_TEST_BACKEND=gloo runs the same
case on torch's gloo backend, which is how it was validated.
"""
import os

import pytest

from _needs import skip_unless_installed

from _harness import TORCH_FORKED

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("torch", "torch is not installed: the torch.distributed backend tests need it")

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_meshes_dtensor_tp_hsdp_pipelining(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "torch_mesh.py", "dtensor", "tp", "mesh2d", "pipeline",
                        env={"TORCH_TEST_BACKEND": BACKEND}, timeout=200, options=TORCH_FORKED), n,
                    f"meshes, DTensor, TP, HSDP and pipelining on backend {BACKEND} vs one process")
