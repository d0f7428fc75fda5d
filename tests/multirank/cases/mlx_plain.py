"""commlib.mlx with no launcher: a group of one whose collectives are MLX's identity, strict refused."""
import mlx.core as mx

from commlib import mlx as dist

try:
    dist.init(strict=True)
except RuntimeError as e:
    assert "no launcher environment" in str(e), e
else:
    raise AssertionError("init(strict=True) outside a launcher did not raise")
g = dist.init()
assert (g.rank(), g.size()) == (0, 1)
x = mx.arange(6, dtype=mx.bfloat16).reshape(2, 3)
for fn in (dist.all_sum, dist.all_max, dist.all_min, dist.all_gather, dist.sum_scatter):
    y = fn(x)
    assert isinstance(y, mx.array) and y.dtype == x.dtype and mx.array_equal(y, x).item(), (fn, y)
print("plain ok", flush=True)
