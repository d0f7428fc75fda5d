"""Data-parallel linear regression with MLX arrays: each rank computes the gradient of its own
shard of the data, commlib.mlx averages the gradients, every rank applies the same step.

    commrun -n 4 python examples/mlx/data_parallel.py
"""
import mlx.core as mx

from commlib import mlx as dist

world = dist.init()
rank, size = world.rank(), world.size()

mx.random.seed(0)  # the same true weights on every rank ...
w_true = mx.random.normal((8,))
mx.random.seed(1 + rank)  # ... and this rank's own samples
x = mx.random.normal((256, 8))
y = x @ w_true


def loss(w):
    return mx.mean((x @ w - y) ** 2)


w = mx.zeros((8,))
step = mx.grad(loss)
for it in range(200):
    g = dist.all_sum(step(w)) / size  # the gradient averaged over every rank's data
    w = w - 0.1 * g
final = dist.all_sum(loss(w)) / size
if rank == 0:
    print(f"{size} ranks: mean loss {final.item():.2e}, weight error {mx.abs(w - w_true).max().item():.2e}")
