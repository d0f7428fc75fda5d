"""Fully sharded data parallel (FSDP2's fully_shard) on CPU with the commlib backend.

    commrun -n 4 examples/torch/fsdp_train.py

Each rank holds a shard of every parameter; forward all-gathers them and
backward reduce-scatters the gradients. Same model, data and result as
ddp_train.py: the weights equal a single process's (rank 0 prints their sum).
"""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import commlib.torch  # noqa: F401  (registers the "commlib" backend)
from ddp_train import GLOBAL_BATCH, LR, STEPS, batch, model


def main():
    dist.init_process_group("commlib")
    rank, size = dist.get_rank(), dist.get_world_size()
    net = model()
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    per = GLOBAL_BATCH // size
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x[rank * per:(rank + 1) * per]), y[rank * per:(rank + 1) * per]).backward()
        opt.step()
    total = sum(p.full_tensor().double().sum().item() for p in net.parameters())  # DTensor shards, gathered
    if rank == 0:
        print(f"RESULT weight_sum {total:.10f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
