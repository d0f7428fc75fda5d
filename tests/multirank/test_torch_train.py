"""torch.distributed training on the commlib backend, through the real commrun: DDP (MLP, CNN,
gradient_as_bucket_view with several buckets, no_sync accumulation, comm hooks chaining .then) and
FSDP (fully_shard, FullyShardedDataParallel on CPU, a hand-written sharded SGD on
all_gather_into_tensor / reduce_scatter_tensor), each against a single-process reference that every
rank computes on its own (cases/torch_train.py).

TORCH_TEST_BACKEND=gloo runs the same cases on torch's gloo backend (to validate the cases);
the default, "commlib", imports commlib.torch to register the backend.
"""
import os

import pytest

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

pytest.importorskip("torch", reason="torch is not installed: the torch.distributed backend tests need it")

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("part", ["mlp", "cnn", "hooks"])
def test_ddp(part, n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "torch_train.py", part, env={"TORCH_TEST_BACKEND": BACKEND}, timeout=150), n,
                    f"DDP {part} on backend {BACKEND} vs the single-process reference")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("part", ["fsdp2", "fsdp1", "shard"])
def test_fsdp(part, n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "torch_train.py", part, env={"TORCH_TEST_BACKEND": BACKEND}, timeout=150), n,
                    f"FSDP {part} on backend {BACKEND} vs the single-process reference")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ddp_uneven_inputs_static_graph_unused_parameters(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "torch_train.py", "uneven", "graph", env={"TORCH_TEST_BACKEND": BACKEND}, timeout=150), n,
                    f"DDP under Join, static_graph, find_unused_parameters on {BACKEND}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_distributed_checkpoint(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "torch_train.py", "dcp", env={"TORCH_TEST_BACKEND": BACKEND}, timeout=150), n,
                    f"torch.distributed.checkpoint of an FSDP2 model on backend {BACKEND}")
