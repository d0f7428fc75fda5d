"""A two-layer MLP trained with NumPy on a ("dp", "tp") mesh: data and tensor parallel at once.

    commrun -n 4 examples/tensor_parallel_mlp.py      # a 2 x 2 mesh: 2-way data, 2-way tensor parallel

Layer 1 is column-parallel (each "tp" rank holds a slice of W1's columns, so of
the hidden units), layer 2 row-parallel (the matching rows of W2): the partial
outputs are summed with one `psum` over "tp". Each "dp" row of the mesh trains
on its slice of the batch, and the gradients are summed with `psum` over "dp".
Rank 0 prints the loss curve and checks it against one process training the
whole model on the whole batch.
"""
import sys

import numpy as np

import commlib as cl
from commlib.mesh import Mesh, shard

BATCH, D_IN, HIDDEN, STEPS, LR = 24, 8, 16, 30, 0.1


def problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, D_IN))
    target = np.sin(x[:, :3].sum(axis=1, keepdims=True))
    w1 = rng.standard_normal((D_IN, HIDDEN)) / np.sqrt(D_IN)
    w2 = rng.standard_normal((HIDDEN, 1)) / np.sqrt(HIDDEN)
    return x, target, w1, w2


def serial():
    """The reference: one process, the whole model, the whole batch."""
    x, target, w1, w2 = problem()
    losses = []
    for _ in range(STEPS):
        h = np.tanh(x @ w1)
        y = h @ w2
        losses.append(float(np.mean((y - target) ** 2)))
        dy = 2 * (y - target) / BATCH
        dw2 = h.T @ dy
        dw1 = x.T @ ((dy @ w2.T) * (1 - h ** 2))
        w1, w2 = w1 - LR * dw1, w2 - LR * dw2
    return losses


def parallel(mesh):
    x, target, w1, w2 = problem()
    # the layout: batch split over "dp"; W1's columns and W2's rows split over "tp"
    xs = shard(x, mesh, ("dp", None)).local
    ts = shard(target, mesh, ("dp", None)).local
    w1s = shard(w1, mesh, (None, "tp")).local
    w2s = shard(w2, mesh, ("tp", None)).local
    losses = []
    for _ in range(STEPS):
        h = np.tanh(xs @ w1s)                         # this rank's hidden units
        y = mesh.psum(h @ w2s, "tp")                  # row-parallel layer 2: sum the partial outputs
        losses.append(float(mesh.psum(np.sum((y - ts) ** 2), "dp")) / BATCH)
        dy = 2 * (y - ts) / BATCH
        dw2 = mesh.psum(h.T @ dy, "dp")               # gradients: summed over the data-parallel ranks
        dw1 = mesh.psum(xs.T @ ((dy @ w2s.T) * (1 - h ** 2)), "dp")
        w1s, w2s = w1s - LR * dw1, w2s - LR * dw2
    return losses


def main():
    n = cl.init().size()
    tp = 2 if n % 2 == 0 and HIDDEN % 2 == 0 else 1
    mesh = Mesh((n // tp, tp), ("dp", "tp"))
    losses = parallel(mesh)
    if cl.init().rank() == 0:
        reference = serial()
        print(f"mesh {dict(zip(mesh.axis_names, mesh.shape))}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")
        print("RESULT losses " + " ".join(f"{v:.12g}" for v in losses))
        same = np.allclose(losses, reference, rtol=1e-9, atol=1e-12)
        print(f"RESULT matches_one_process {same}")
        if not same:
            sys.exit("the loss curve differs from one process training the whole model on the whole batch")


if __name__ == "__main__":
    main()
