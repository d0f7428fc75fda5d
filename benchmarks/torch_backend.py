"""commlib as a torch.distributed backend ("commlib", `import commlib.torch`) against torch's own "gloo".

One program, the same timing code for all; for the two backends only the name
given to `dist.init_process_group` differs. It runs under commrun, which
exports RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT:

    commrun -n N benchmarks/torch_backend.py --backend commlib
    commrun -n N benchmarks/torch_backend.py --backend gloo
    commrun -n N benchmarks/torch_backend.py --backend commlib-api

--backend commlib-api measures what the torch layer costs over commlib's own
API: it joins the "commlib" process group too (for the barriers and the
gathering of results), but times commlib's calls on the tensors' memory (x.numpy(),
made once outside the timing), on the commlib Group behind torch's default group
(dist.group.WORLD.commlib_group):

    all_reduce      cl.all_reduce(a, out=a)     (a = x.numpy(); refilled before each call, untimed)
    all_gather      cl.all_gather(blk_np)       (returns a new array)
    reduce_scatter  cl.reduce_scatter(x_np)     (returns a new array)

and, for the training ops, times the same step on the plain model with no
communication at all (no DDP wrapper, no FSDP2 sharding): the floor below which no
backend's step can go on this machine (dtensor_redistribute, all communication, is skipped).

Ops (CPU float32 tensors, blocking calls):

    all_reduce      dist.all_reduce(x, op=SUM), in place     (bytes = x; the input is refilled
                                                               before each call, untimed)
    all_gather      dist.all_gather_into_tensor(out, blk)    (bytes = the gathered output, rounded
                                                               up to n elements)
    reduce_scatter  dist.reduce_scatter_tensor(out, x, SUM)  (bytes = the input x, rounded up to
                                                               n elements)
    ddp_mlp         one DDP training step (zero_grad, forward, MSE loss, backward, SGD step) of
                    3 x Linear(1024, 1024) with ReLUs on a batch of 64       (bytes = parameter bytes)
    ddp_cnn         the same for Conv2d(3, 32, 3) - pool - Conv2d(32, 64, 3) - pool - Linear(4096, 10)
                    on 32 x 32 x 3 images, batch 32, cross-entropy loss      (bytes = parameter bytes)
    ddp_transformer the same for an 8-layer TransformerEncoder (d_model 512, 8 heads, feed-forward
                    2048: 25.2 M parameters) on 4 sequences of 16 tokens, MSE loss; a quarter of
                    --ddp-steps timed steps (at least 3)                      (bytes = parameter bytes)
    fsdp2_mlp       ddp_mlp's step with the model sharded by fully_shard (each Linear, then the
                    whole) instead of DDP                                     (bytes = parameter bytes)
    dtensor_redistribute  a 2 MiB float32 DTensor on a 1-D mesh over the ranks, Shard(0) ->
                    Replicate() -> Shard(0)                                   (bytes = the tensor)

Every rank trains on its own batch (seeded by its rank); DDP with its default
buckets. torch.set_num_threads(1) in every rank.

Sizes: 8 B to 16 MiB in x8 steps, plus 64 KiB and 64 MiB (COLL_SIZES of
benchmarks/_benchlib.py, as for benchmarks/mpi_layer.py); --quick: 8 B, 64 KiB
and 2 MiB only, and 5 timed DDP steps. Methodology as benchmarks/mpi_layer.py
(the same code: _benchlib.measure): each collective point runs warm-up
iterations (3; 1 from 16 MiB up; the first one's result is checked against
the expected value), then as many timed iterations as fit in --budget seconds
(at least 5; 3 from 16 MiB up; at most --max-iters), each preceded by a
barrier. DDP: 3 warm-up steps (the first one's gradients are checked against
the average of every rank's gradients computed locally without DDP), then
--ddp-steps (20) timed steps, each preceded by a barrier. Statistic: the
median over iterations of the maximum over ranks of each rank's time. busbw
(GB/s = 1e9 B/s) uses nccl-tests' factors: all_reduce 2(n-1)/n, all_gather
and reduce_scatter (n-1)/n, DDP 1 (there busbw = algbw = parameter bytes /
step time, compute included: read the time, not the bandwidth).

Rank 0 writes one JSON line per point to stdout, or appends it to --out:

    {"impl", "n", "op", "bytes", "median_us", "busbw", "algbw", "iters", "min_us", "round"[, "check_failed"]}

("impl" is the backend, or "commlib-api"). An op the backend rejects is recorded as
{"impl", "n", "op", "bytes", "error", "round"} and the run goes on.
benchmarks/torch_backend.sh runs all three at n = 2 and 4, interleaved;
benchmarks/torch_backend_table.py turns the lines into markdown tables.
"""
import argparse
import copy
import gc
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

import _benchlib as bl
from _benchlib import COLL_SIZES, MiB

BACKENDS = ("commlib", "gloo", "commlib-api")
COLL_OPS = ("all_reduce", "all_gather", "reduce_scatter")
DDP_OPS = ("ddp_mlp", "ddp_cnn", "ddp_transformer", "fsdp2_mlp", "dtensor_redistribute")
OPS = COLL_OPS + DDP_OPS
QUICK_SIZES = [8, 64 << 10, 2 * MiB]

warnings.filterwarnings("ignore", category=FutureWarning)  # *_into_tensor / *_tensor "deprecated" notices
warnings.filterwarnings("ignore", category=UserWarning, message=".*barrier.*")


class Bench:
    """A torch.distributed backend: the timed calls are torch.distributed's."""

    def __init__(self, backend, name=None):
        if backend == "commlib":
            import commlib.torch  # noqa: F401  (registers the "commlib" backend)
        dist.init_process_group(backend)
        self.name = name or backend
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def barrier(self):
        dist.barrier()

    def gather_f64(self, values):
        t = torch.as_tensor(np.ascontiguousarray(values, dtype=np.float64))
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t)
        return torch.stack(parts).numpy()

    def prepare(self, op, count):
        """(run, check, reset): the timed call, its first result's check, the untimed refill before each call."""
        n, r = self.size, self.rank
        if op == "all_reduce":
            x = torch.full((count,), float(r + 1), dtype=torch.float32)

            def run():
                dist.all_reduce(x, op=dist.ReduceOp.SUM)
            return run, lambda: bl.mismatch(x, n * (n + 1) / 2), lambda: x.fill_(float(r + 1))
        if op == "all_gather":
            blk = torch.full((count // n,), float(r + 1), dtype=torch.float32)
            out = torch.empty(count, dtype=torch.float32)

            def run():
                dist.all_gather_into_tensor(out, blk)
            return run, lambda: bl.gathered(out, count, n), None
        if op == "reduce_scatter":
            x = torch.full((count,), float(r + 1), dtype=torch.float32)
            out = torch.empty(count // n, dtype=torch.float32)

            def run():
                dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)
            return run, lambda: bl.mismatch(out, n * (n + 1) / 2), None
        raise ValueError(op)


class ApiBench(Bench):
    """--backend commlib-api: torch's "commlib" process group for the barriers and the gathering of
    results, but the timed calls are commlib's own API on the tensors' memory (x.numpy(), made once,
    untimed), on the commlib Group behind torch's default group: what the torch layer costs over it."""

    def __init__(self):
        super().__init__("commlib", name="commlib-api")
        import commlib as cl
        world = dist.group.WORLD
        if not hasattr(world, "commlib_group"):
            raise RuntimeError(f"torch's default group ({type(world).__name__}) has no commlib_group: "
                               "commlib.torch too old for --backend commlib-api?")
        self.cl, self.group = cl, world.commlib_group

    def prepare(self, op, count):
        cl, g, n, r = self.cl, self.group, self.size, self.rank
        if op == "all_reduce":
            x = torch.full((count,), float(r + 1), dtype=torch.float32)
            a = x.numpy()

            def run():
                cl.all_reduce(a, out=a, group=g)
            return run, lambda: bl.mismatch(a, n * (n + 1) / 2), lambda: x.fill_(float(r + 1))
        if op == "all_gather":
            blk = torch.full((count // n,), float(r + 1), dtype=torch.float32)
            blk_np = blk.numpy()
            res = {}

            def run():
                res["out"] = cl.all_gather(blk_np, group=g)
            return run, lambda: bl.gathered(res["out"], count, n), None
        if op == "reduce_scatter":
            x = torch.full((count,), float(r + 1), dtype=torch.float32)
            x_np = x.numpy()
            res = {}

            def run():
                res["out"] = cl.reduce_scatter(x_np, group=g)
            return run, lambda: bl.mismatch(res["out"], n * (n + 1) / 2), None
        raise ValueError(op)


def _record(bench, op, nbytes, times, iters, bad, problem, args):
    per_iter = bench.gather_f64(times).max(axis=0)
    return bl.record(bench.name, bench.size, op, nbytes, per_iter, iters, bad, problem, args.round,
                     bl.busbw_factor(op, bench.size))


def run_point(bench, op, nbytes, args):
    n = bench.size
    count = max(1, nbytes // 4)
    if op in ("all_gather", "reduce_scatter"):
        count = max(n, -(-count // n) * n)
    nbytes = count * 4
    run, check, reset = bench.prepare(op, count)
    times, iters, bad, problem = bl.measure(bench, run, check, nbytes, args, reset)
    del run, check, reset
    gc.collect()
    return _record(bench, op, nbytes, times, iters, bad, problem, args)


# ------------------------------------------------------------------- DDP
def make_model(op):
    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    if op == "ddp_transformer":  # 8 layers of d_model 512: 25.2 M parameters
        layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        return nn.TransformerEncoder(layer, 8, enable_nested_tensor=False)
    if op in ("ddp_mlp", "fsdp2_mlp"):
        return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024))
    if op == "ddp_cnn":
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
    raise ValueError(op)


def make_batch(op, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    if op == "ddp_transformer":  # 4 sequences of 16 tokens
        return torch.randn(4, 16, 512, generator=g), torch.randn(4, 16, 512, generator=g), nn.MSELoss()
    if op in ("ddp_mlp", "fsdp2_mlp"):
        return torch.randn(64, 1024, generator=g), torch.randn(64, 1024, generator=g), nn.MSELoss()
    return torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g), nn.CrossEntropyLoss()


def expected_grads(op, n):
    """The gradients DDP must produce at the first step: the mean over ranks of each rank's local gradients."""
    model = make_model(op)
    total = [torch.zeros_like(p) for p in model.parameters()]
    for q in range(n):
        x, y, loss_fn = make_batch(op, q)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        for acc, p in zip(total, model.parameters()):
            acc += p.grad
    return [t / n for t in total]


def grads_problem(model, ref):
    worst, where = 0.0, None
    for i, (p, e) in enumerate(zip(model.parameters(), ref)):
        if p.grad is None:
            return f"parameter {i} has no gradient after the first step"
        grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad  # FSDP2: sharded
        err = float((grad - e).abs().max() / max(float(e.abs().max()), 1e-12))
        if not err <= worst:  # also catches NaN
            worst, where = err, i
            if not err == err:
                break
    if not worst <= 1e-4:
        return f"gradient of parameter {where} differs from the mean of the ranks' gradients (relative {worst:.3g})"
    return None


def run_ddp(bench, op, args):
    if op == "dtensor_redistribute":
        return run_redistribute(bench, op, args)
    from torch.nn.parallel import DistributedDataParallel as DDP
    base = make_model(op)
    nbytes = sum(p.numel() * p.element_size() for p in base.parameters())
    ref = expected_grads(op, bench.size)
    if isinstance(bench, ApiBench):  # the step alone, no communication: the floor any backend's step has
        model = copy.deepcopy(base)
        inner = model
    elif op == "fsdp2_mlp":  # each Linear and the whole model sharded (fully_shard)
        from torch.distributed.fsdp import fully_shard
        model = copy.deepcopy(base)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        inner = model
    else:
        model = DDP(copy.deepcopy(base))
        inner = model.module
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y, loss_fn = make_batch(op, bench.rank)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    last, problem = 0.0, None
    for i in range(args.ddp_warmup):
        bench.barrier()
        t0 = time.perf_counter()
        step()
        last = time.perf_counter() - t0
        if i == 0 and not isinstance(bench, ApiBench):  # compute only: local gradients, nothing to check
            problem = grads_problem(inner, ref)
    agreed = bench.gather_f64(np.array([last, 1.0 if problem else 0.0]))
    bad = bool(agreed[:, 1].max())
    steps = max(3, args.ddp_steps // 4) if op == "ddp_transformer" else args.ddp_steps  # seconds a step here
    times = bl.timed(bench, step, steps)
    return _record(bench, op, nbytes, times, steps, bad, problem, args)


def run_redistribute(bench, op, args):
    """A 2 MiB float32 DTensor, Shard(0) -> Replicate() (an all_gather) and back, on a 1-D mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (bench.size,))
    full = torch.arange(512 * 1024, dtype=torch.float32).reshape(1024, 512)
    d = distribute_tensor(full, mesh, [Shard(0)])

    def step():
        d.redistribute(mesh, [Replicate()]).redistribute(mesh, [Shard(0)])
    got = d.redistribute(mesh, [Replicate()]).to_local()
    problem = None if torch.equal(got, full) else "Shard(0) -> Replicate() is not the full tensor"
    agreed = bench.gather_f64(np.array([1.0 if problem else 0.0]))
    times = bl.timed(bench, step, args.ddp_steps)
    return _record(bench, op, full.numel() * 4, times, args.ddp_steps, bool(agreed[:, 0].max()), problem, args)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", required=True, choices=BACKENDS)
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--sizes", nargs="+", type=bl.parse_size, default=None,
                   help="collective sizes in bytes (K/M suffixes); default 8 B..16 MiB x8, 64 KiB and 64 MiB")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: sizes 8 B, 64 KiB, 2 MiB and 5 timed DDP steps (unless given explicitly)")
    bl.add_timing_args(p)
    p.add_argument("--ddp-steps", type=int, default=None, help="timed DDP steps (default 20; --quick 5)")
    p.add_argument("--ddp-warmup", type=int, default=3, help="warm-up DDP steps (default 3)")
    bl.add_output_args(p)
    args = p.parse_args(argv)
    if args.ddp_steps is None:
        args.ddp_steps = 5 if args.quick else 20
    args.ddp_warmup = max(1, args.ddp_warmup)

    torch.set_num_threads(1)
    bench = ApiBench() if args.backend == "commlib-api" else Bench(args.backend)
    cap = int(args.max_mib * MiB)
    coll = [s for s in (args.sizes or (QUICK_SIZES if args.quick else COLL_SIZES)) if s <= cap]
    sink = bl.Sink(args.out, bench.rank)
    emit = sink.emit

    for op in args.ops:
        if op == "dtensor_redistribute" and isinstance(bench, ApiBench):
            continue  # all communication: no compute-only floor to time
        for nbytes in (coll if op in COLL_OPS else [None]):
            try:
                emit(run_ddp(bench, op, args) if nbytes is None else run_point(bench, op, nbytes, args))
                gc.collect()  # the point's tensors (and a DDP model's reducer) are garbage now
            except (RuntimeError, ValueError, NotImplementedError) as exc:
                # a backend that does not support an op raises on every rank alike: record it, go on
                print(f"rank {bench.rank}: {args.backend} {op} {nbytes}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
                emit({"impl": bench.name, "n": bench.size, "op": op, "bytes": nbytes,
                      "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300],
                      "round": args.round})
                gc.collect()
                break
    bench.barrier()
    if bench.rank == 0:
        sink.close()
        if sink.failed:
            print(f"{bench.name}: {sink.failed} point(s) returned wrong results", file=sys.stderr)
        if sink.errors:
            print(f"{bench.name}: {sink.errors} op(s) raised", file=sys.stderr)
    dist.destroy_process_group()
    return 1 if sink.failed or sink.errors else 0


if __name__ == "__main__":
    sys.exit(main())
