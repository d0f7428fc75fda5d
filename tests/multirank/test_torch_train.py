"""torch.distributed training on the commlib backend, through the real commrun: DDP (MLP, CNN,
gradient_as_bucket_view with several buckets, no_sync accumulation, comm hooks chaining .then) and
FSDP (fully_shard, FullyShardedDataParallel on CPU, a hand-written sharded SGD on
all_gather_into_tensor / reduce_scatter_tensor), each against a single-process reference that every
rank computes on its own (cases/torch_train.py).

TORCH_TEST_BACKEND=gloo runs the same cases on torch's gloo backend (to validate the cases);
the default, "commlib", imports commlib.torch to register the backend.
"""
import os

from _needs import skip_unless_installed

from _harness import TORCH_FORKED, batched

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("torch", "torch is not installed: the torch.distributed backend tests need it")

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")


# DDP (mlp, cnn, hooks at 1, 2 and 4 ranks; uneven and graph: DDP under Join, static_graph,
# find_unused_parameters, at 1 to 4), FSDP (fsdp2, fsdp1, shard at 2 and 4) and
# torch.distributed.checkpoint of an FSDP2 model (dcp, at 2 to 4): one job per n, each part an item.
test_torch_train = batched("torch_train.py", [1, 2, 3, 4], env={"TORCH_TEST_BACKEND": BACKEND}, options=TORCH_FORKED,
                           doc=f"Each part of cases/torch_train.py on backend {BACKEND} vs the single-process "
                               "reference.")
