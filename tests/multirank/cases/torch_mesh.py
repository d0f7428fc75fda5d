"""Device meshes, DTensor, tensor parallelism, HSDP and pipelining on torch.distributed, checked
against one process.

The backend is TORCH_TEST_BACKEND ("commlib" by default, or "gloo" to validate the case). Every
rank also computes the single-process result itself; the distributed one must match it to
float32 tolerance, and results every rank holds in full must be bit-identical across ranks.
Output and exit code as torch_train.py (whose checker this uses).

usage: torch_mesh.py SEED PART...
  dtensor   init_device_mesh("cpu", (n,)): distribute_tensor with Shard(0), Shard(1) (uneven where
            n does not divide the size) and Replicate; redistribute Shard -> Replicate, Replicate ->
            Shard, Partial -> Replicate (all_reduce) and Partial -> Shard (reduce_scatter),
            Shard(0) -> Shard(1) (all_to_all); full_tensor; a matmul and a sum on sharded DTensors
  tp        parallelize_module with ColwiseParallel / RowwiseParallel on an MLP over the n ranks:
            forward, backward and three SGD steps against the unsharded model
  mesh2d    (n = 4) init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")): its sub-meshes
            and groups, a DTensor over both dimensions, TP on "tp" with data parallelism on "dp",
            and HSDP (fully_shard over the 2-D mesh) training steps against one process
  pipeline  torch.distributed.pipelining: one stage per rank, ScheduleGPipe and Schedule1F1B with a
            loss, against the whole model in one process (outputs, loss and every stage's gradients)
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from torch_train import gen, run_parts

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")
STEPS = 3
LR = 0.05
MICRO = 4  # pipelining's micro-batches


def part_dtensor(c):
    n, me = c.size, c.rank
    mesh = init_device_mesh("cpu", (n,))
    full = torch.randn(4 * n + 1, 6, generator=gen(c.seed, "dtensor"))  # rows: uneven for every n > 1
    d0 = distribute_tensor(full, mesh, [Shard(0)])
    rows = torch.tensor([d0.to_local().shape[0]], dtype=torch.int64)
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(every, rows)
    c.ok(sum(int(r) for r in every) == full.shape[0], "Shard(0): the local shards cover every row",
         f"shard rows {[int(r) for r in every]}")
    c.close(d0.full_tensor(), full, "Shard(0).full_tensor")
    c.close(d0.redistribute(mesh, [Replicate()]).to_local(), full, "Shard(0) -> Replicate")
    d1 = distribute_tensor(full, mesh, [Shard(1)])
    c.close(d1.full_tensor(), full, "Shard(1).full_tensor")
    c.close(d0.redistribute(mesh, [Shard(1)]).full_tensor(), full, "Shard(0) -> Shard(1)")
    rep = distribute_tensor(full, mesh, [Replicate()])
    chunks = list(torch.chunk(full, n))  # torch's sharding: chunk's sizes, empty shards at the end
    chunks += [full[:0]] * (n - len(chunks))
    c.close(rep.redistribute(mesh, [Shard(0)]).to_local(), chunks[me], "Replicate -> Shard(0): this rank's rows",
            record=False)
    part = DTensor.from_local(full * (me + 1), mesh, [Partial()])
    total = full * (n * (n + 1) / 2)
    c.close(part.redistribute(mesh, [Replicate()]).to_local(), total, "Partial -> Replicate (all_reduce)")
    c.close(part.redistribute(mesh, [Shard(0)]).full_tensor(), total, "Partial -> Shard(0) (reduce_scatter)")
    w = torch.randn(6, 5, generator=gen(c.seed, "dtensor w"))
    prod = torch.matmul(d0, distribute_tensor(w, mesh, [Replicate()]))
    c.close(prod.full_tensor(), full @ w, "Shard(0) @ Replicate")
    c.close(d1.sum().full_tensor().reshape(1), full.sum().reshape(1), "sum of a Shard(1) DTensor", atol=1e-4)


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 12))


def sgd_steps(model, x, y, steps=STEPS):
    """steps of plain SGD on MSE; the losses."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def full_param(p):
    return p.full_tensor() if isinstance(p, DTensor) else p


def part_tp(c):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (c.size,))
    x = torch.randn(8, 12, generator=gen(c.seed, "tp x"))
    y = torch.randn(8, 12, generator=gen(c.seed, "tp y"))
    ref = mlp(c.seed)
    tp = parallelize_module(mlp(c.seed), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    c.close(tp(x), ref(x), "TP forward")
    ref_losses, tp_losses = sgd_steps(ref, x, y), sgd_steps(tp, x, y)
    for i, (a, b) in enumerate(zip(tp_losses, ref_losses)):
        c.close(full_param(a).reshape(1), b.reshape(1), f"TP loss at step {i}")
    for (name, p), q in zip(tp.named_parameters(), ref.parameters()):
        c.close(full_param(p), q, f"TP parameter {name} after {STEPS} steps")


def part_mesh2d(c):
    if c.size != 4:
        c.ok(True, "mesh2d: needs 4 ranks (skipped)")
        return
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"], mesh["tp"]
    c.ok(dp.size() == 2 and tp.size() == 2 and dp.get_local_rank() == c.rank // 2 and
         tp.get_local_rank() == c.rank % 2, "2-D mesh: sub-mesh sizes and coordinates",
         f"dp {dp.size()}/{dp.get_local_rank()}, tp {tp.size()}/{tp.get_local_rank()}")
    members = dist.get_process_group_ranks(tp.get_group())
    c.ok(members == [c.rank - c.rank % 2, c.rank - c.rank % 2 + 1], "2-D mesh: the tp group's ranks", str(members))
    full = torch.randn(8, 6, generator=gen(c.seed, "mesh2d"))
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    c.close(d.full_tensor(), full, "DTensor sharded over both mesh dimensions")
    c.close(d.redistribute(mesh, [Replicate(), Shard(0)]).full_tensor(), full, "redistribute over the 2-D mesh")

    # tensor parallel on "tp", data parallel on "dp": each dp half trains on its half of the batch
    x = torch.randn(8, 12, generator=gen(c.seed, "2d x"))
    y = torch.randn(8, 12, generator=gen(c.seed, "2d y"))
    ref = mlp(c.seed)
    ref_losses = sgd_steps(ref, x, y)
    model = parallelize_module(mlp(c.seed), tp, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    def average_over_dp(m):  # the two halves of the batch: the gradients averaged over dp by hand
        for p in m.parameters():
            g = p.grad.to_local()
            dist.all_reduce(g, group=dp.get_group())
            g /= dp.size()
    dp_steps(c, "TP x DP", model, ref, ref_losses, x, y, dp, average_over_dp)

    # HSDP: fully_shard over the 2-D mesh (replicated over dp, sharded over tp)
    ref = mlp(c.seed + 1)
    ref_losses = sgd_steps(ref, x, y)
    model = mlp(c.seed + 1)
    fully_shard(model, mesh=mesh)
    dp_steps(c, "HSDP", model, ref, ref_losses, x, y, dp, None)  # FSDP averages over the mesh itself


def dp_steps(c, label, model, ref, ref_losses, x, y, dp, after_backward):
    """STEPS of SGD, each dp rank on its half of the batch, against the reference's losses and
    final parameters; after_backward(model) runs between backward and the optimizer step."""
    half = slice(4 * dp.get_local_rank(), 4 * dp.get_local_rank() + 4)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for i in range(STEPS):
        opt.zero_grad()
        loss = ((model(x[half]) - y[half]) ** 2).mean()
        loss.backward()
        if after_backward is not None:
            after_backward(model)
        opt.step()
        whole = loss.detach().clone()
        dist.all_reduce(whole, group=dp.get_group())
        c.close((whole / dp.size()).reshape(1), ref_losses[i].reshape(1), f"{label} loss at step {i}")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        c.close(full_param(p), q, f"{label} parameter {name}")


def part_pipeline(c):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    n, me = c.size, c.rank
    if n == 1:
        c.ok(True, "pipeline: needs 2 ranks or more (skipped)")
        return
    for name, schedule in (("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)):
        torch.manual_seed(c.seed)
        layers = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(n)]
        whole = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(n)])
        whole.load_state_dict(nn.Sequential(*layers).state_dict())
        x = torch.randn(8, 8, generator=gen(c.seed, "pipe x"))
        y = torch.randn(8, 8, generator=gen(c.seed, "pipe y"))

        def loss_fn(out, target):
            return ((out - target) ** 2).sum()
        ref_out = whole(x)
        loss_fn(ref_out, y).backward()
        stage = PipelineStage(layers[me], me, n, torch.device("cpu"))
        sched = schedule(stage, n_microbatches=MICRO, loss_fn=loss_fn)
        losses = []
        if me == 0:
            sched.step(x)
        elif me == n - 1:
            out = sched.step(target=y, losses=losses)
            c.close(out, ref_out, f"{name}: the last stage's output", record=False)
            c.close(sum(losses).reshape(1), loss_fn(ref_out, y).reshape(1), f"{name}: the loss over the micro-batches",
                    atol=1e-4, record=False)
        else:
            sched.step()
        for (pname, p), q in zip(layers[me].named_parameters(), whole[me].parameters()):  # scaled by 1/micro-batches
            c.close(p.grad, q.grad / MICRO, f"{name}: stage {me}'s gradient of {pname}", atol=1e-4, record=False)


PARTS = {"dtensor": part_dtensor, "tp": part_tp, "mesh2d": part_mesh2d, "pipeline": part_pipeline}


def main():
    run_parts("torch_mesh", PARTS, {}, list(PARTS))


if __name__ == "__main__":
    main()
