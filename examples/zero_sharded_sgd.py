"""ZeRO-3 / FSDP-style training with torch tensors: each rank stores only its shard of the weights.

    commrun -n 4 examples/zero_sharded_sgd.py

A linear model y = X w fitted by SGD. The weights live sharded over the
("dp",) mesh (like DTensor's Shard(0)); each step gathers them for the forward
pass (`all_gather`), computes the gradient of its own slice of the batch with
autograd (a partial sum over "dp"), and `reduce_scatter` hands each rank the
summed gradient of just its shard, which it updates in place. Rank 0 checks
the loss curve against one process training on the whole batch.
"""
import sys

import numpy as np
import torch

import commlib as cl
from commlib.mesh import Mesh, ShardedArray, all_gather, reduce_scatter, shard

BATCH, DIM, STEPS, LR = 24, 12, 25, 0.05


def problem():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, DIM, generator=g, dtype=torch.float64)
    w_true = torch.randn(DIM, generator=g, dtype=torch.float64)
    return x, x @ w_true, torch.zeros(DIM, dtype=torch.float64)


def serial():
    x, y, w = problem()
    losses = []
    for _ in range(STEPS):
        w = w.detach().requires_grad_()
        loss = ((x @ w - y) ** 2).sum() / BATCH
        loss.backward()
        losses.append(float(loss.detach()))
        w = w - LR * w.grad
    return losses


def parallel(mesh):
    x, y, w0 = problem()
    xs, ys = shard(x, mesh, ("dp", None)).local, shard(y, mesh, ("dp",)).local  # this rank's batch slice
    w = shard(w0, mesh, ("dp",))                                                 # this rank's weight shard
    losses = []
    for _ in range(STEPS):
        full_w = all_gather(w).local.clone().requires_grad_()    # the whole weight, for this step only
        loss = ((xs @ full_w - ys) ** 2).sum() / BATCH            # this rank's part of the loss
        loss.backward()
        grad = ShardedArray.from_local(full_w.grad, mesh, (None,), partial=("dp",))
        mine = reduce_scatter(grad, 0)                            # the summed gradient of my shard only
        w.local.sub_(LR * mine.local)                             # in place: .local is a view of the shard
        losses.append(float(mesh.psum(loss.detach(), "dp")))
    return losses


def main():
    world = cl.init()
    mesh = Mesh((world.size(),), ("dp",))
    losses = parallel(mesh)
    if world.rank() == 0:
        print(f"{world.size()} ranks, {DIM // world.size()} weights each: loss {losses[0]:.6f} -> {losses[-1]:.6f}")
        print("RESULT losses " + " ".join(f"{v:.12g}" for v in losses))
        same = np.allclose(losses, serial(), rtol=1e-9, atol=1e-12)
        print(f"RESULT matches_one_process {same}")
        if not same:
            sys.exit("the sharded loss curve differs from one process training on the whole batch")


if __name__ == "__main__":
    main()
