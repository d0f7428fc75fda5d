"""Data-parallel training of a linear model in plain numpy.

Each rank holds a shard of the data. The gradient is computed layer by layer
(here: in two halves of the weight vector) and each half's all-reduce is
started with iall_reduce as soon as it is ready, so communication of the
first half overlaps computation of the second. Every rank ends with the same
weights, and the loss falls as on one process with all the data.

    commrun -n 4 examples/data_parallel.py
"""
import numpy as np

import commlib as cl

g = cl.init()
rank, size = g.rank(), g.size()
rng = np.random.default_rng(0)
features, samples = 512, 4096
true_w = rng.standard_normal(features)
X_all = rng.standard_normal((samples, features))
y_all = X_all @ true_w + 0.01 * rng.standard_normal(samples)
X, y = X_all[rank::size], y_all[rank::size]  # this rank's shard

w = np.zeros(features)
cl.broadcast(w, root=0)  # start from identical weights
half = features // 2
lr = 0.1
for step in range(60):
    residual = X @ w - y
    g1 = X[:, :half].T @ residual / samples  # first half of the gradient ...
    req = cl.iall_reduce(g1)  # ... goes on the wire while we compute the second
    g2 = X[:, half:].T @ residual / samples
    g2 = cl.all_reduce(g2)  # queued behind req: program order is kept
    w[:half] -= lr * 2 * req.wait()
    w[half:] -= lr * 2 * g2
    if step % 20 == 0 or step == 59:
        loss = cl.all_reduce(np.array([residual @ residual]))[0] / samples
        if rank == 0:
            print(f"step {step:2d}  loss {loss:.5f}")

# Every rank holds bit-identical weights.
assert np.array_equal(cl.broadcast(w.copy(), root=0), w)
if rank == 0:
    print(f"distance to the true weights: {np.linalg.norm(w - true_w):.4f}")
