"""Data-parallel training with DistributedDataParallel on the commlib backend.

    commrun -n 4 examples/torch/ddp_train.py        (or torchrun --nproc-per-node 4 ...)

Every rank trains on its slice of each global batch; DDP averages the
gradients, so the weights after training equal a single process's on the
whole batches (rank 0 prints their sum).
"""
import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401  (registers the "commlib" backend)

GLOBAL_BATCH, STEPS, LR = 48, 20, 0.05


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(GLOBAL_BATCH, 16, generator=g)
    return x, x[:, :4].sum(dim=1, keepdim=True).sin()


def train(net, rank=0, size=1):
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    per = GLOBAL_BATCH // size
    for step in range(STEPS):
        x, y = batch(step)
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return net


def main():
    dist.init_process_group("commlib")
    rank, size = dist.get_rank(), dist.get_world_size()
    net = train(torch.nn.parallel.DistributedDataParallel(model()), rank, size).module
    total = sum(p.double().sum().item() for p in net.parameters())
    if rank == 0:
        print(f"RESULT weight_sum {total:.10f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
