"""Training steps with a torch.distributed backend: the step of a model alone, under DDP and under FSDP2.

usage: commrun -n N python benchmarks/training_steps.py --backend commlib|gloo --out FILE.jsonl
       [--threads LABEL] [--params 1M 5M 25M] [--steps 10] [--warmup 3]

Each model is an MLP of four square Linear layers (width chosen for the parameter count), batch 16,
SGD. Per model, rank 0 appends one JSON line to --out per mode: "plain" (the same step on the bare
model: no wrapper, no communication, the floor of any backend's step here), "ddp"
(DistributedDataParallel), "fsdp2" (fully_shard on each Linear and on the model) and, asked for,
"ddp-local" (DDP with a communication hook that returns each bucket as it is: DDP's own work), with the
median step over --steps timed steps (each started together after a barrier) and whether the ranks
agree on the parameters afterwards. benchmarks/training_steps.sh runs it for both backends, n = 2
and 4, with one compute thread a rank and with a thread a core; training_steps_table.py prints the
table (step, step without communication, overhead).
"""
import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn

SIZES = {"1M": 512, "5M": 1120, "25M": 2500}  # width: 4 layers of width^2 + width parameters


def make_model(width):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def wrap(base, mode):
    model = copy.deepcopy(base)
    if mode == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    if mode == "ddp-local":  # DDP's own work (buckets, copies, hooks) with a hook that communicates nothing
        ddp = nn.parallel.DistributedDataParallel(model)

        def local(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, local)
        return ddp
    if mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    return model


def checksum(model):
    """The sum of every parameter, the full tensors of sharded ones."""
    total = 0.0
    for p in model.parameters():
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        total += float(p.detach().double().sum())
    return total


def run(mode, width, args, rank):
    model = wrap(make_model(width), mode)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1000 + rank)
    x, y = torch.randn(16, width, generator=g), torch.randn(16, width, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    agree = True
    if mode in ("ddp", "fsdp2"):  # every rank holds the same parameters after the same steps
        s = torch.tensor([checksum(model)], dtype=torch.float64)
        lo, hi = s.clone(), s.clone()
        dist.all_reduce(lo, dist.ReduceOp.MIN)
        dist.all_reduce(hi, dist.ReduceOp.MAX)
        agree = bool(abs(hi.item() - lo.item()) <= 1e-6 * max(1.0, abs(hi.item())))
    mine = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(mine, dist.ReduceOp.MAX)  # the slowest rank's median: the step the job takes
    return mine.item(), agree


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True, choices=("commlib", "gloo"))
    p.add_argument("--out", required=True)
    p.add_argument("--threads", default=None, help="label of the thread setting (default: torch's count)")
    p.add_argument("--params", nargs="+", default=list(SIZES), choices=list(SIZES))
    p.add_argument("--modes", nargs="+", default=["plain", "ddp", "fsdp2"],
                   choices=("plain", "ddp", "ddp-local", "fsdp2"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--round", type=int, default=0)
    args = p.parse_args()
    if args.backend == "commlib":
        import commlib.torch  # noqa: F401 -- registers the backend
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for size in args.params:
        width = SIZES[size]
        for mode in args.modes:
            step, agree = run(mode, width, args, rank)
            rows.append({"backend": args.backend, "n": n, "params": size, "mode": mode, "step_ms": step * 1e3,
                         "agree": agree, "torch_threads": torch.get_num_threads(),
                         "threads": args.threads or str(torch.get_num_threads()),
                         "wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "round": args.round})
    if rank == 0:
        with open(args.out, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        for row in rows:
            print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
