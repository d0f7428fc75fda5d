"""commlib.mlx (mlx.core.distributed's API over commlib) against MLX's own arithmetic.

usage: mlx_dist.py SEED

Each rank makes its inputs as MLX arrays from a seed shared by all ranks, so every rank knows
every rank's input; the expected result is computed by MLX itself in this process (mx.add /
mx.maximum / mx.minimum folded over the ranks' inputs, mx.concatenate, slices), and each result
must be an mlx.core.array of MLX's dtype and shape with those values.
"""
import functools

import mlx.core as mx
import numpy as np

from commlib import mlx as dist
from _common import Checker

c = Checker("mlx")
n, me = c.size, c.rank
world = dist.init()
FLOATS = (mx.float32, mx.float16, mx.bfloat16, mx.float64)
DTYPES = FLOATS + (mx.int8, mx.uint8, mx.int32, mx.int64, mx.uint32, mx.complex64)
SHAPES = ((7,), (3, 4), (2, 3, 5), (0,), (1000,))


def host(a):
    """An MLX array's values as NumPy (bfloat16 as float32), for comparing."""
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def inputs(label, dtype, shape):
    """Every rank's input for `label`, the same on every rank."""
    out = []
    for r in range(n):
        rng = c.rng(r, *label)
        if dtype in (mx.int8, mx.uint8):
            v = rng.integers(0, 40, size=shape)
        elif dtype in (mx.int32, mx.int64, mx.uint32):
            v = rng.integers(0, 1 << 20, size=shape)
        elif dtype == mx.complex64:
            v = (rng.integers(-8, 8, size=shape) + 1j * rng.integers(-8, 8, size=shape)) / 4
        else:
            v = rng.integers(-8, 8, size=shape) / 4  # exact in every float type: sums are exact too
        out.append(mx.array(v).astype(dtype))
    return out


def expect(got, want, label, common=True):
    """got must be MLX's `want`; common: the same result on every rank (compared across ranks too)."""
    c.checks += 1
    if not isinstance(got, mx.array):
        c.fail(label, f"got a {type(got).__name__}, not an mlx.core.array")
    elif got.dtype != want.dtype or got.shape != want.shape:
        c.fail(label, f"got {got.dtype}{tuple(got.shape)}, expected {want.dtype}{tuple(want.shape)}")
    else:
        c.equal(host(got), host(want), label, record=common)


def reductions():
    folds = {"all_sum": (dist.all_sum, mx.add), "all_max": (dist.all_max, mx.maximum),
             "all_min": (dist.all_min, mx.minimum)}
    for name, (fn, fold) in folds.items():
        for dtype in DTYPES:
            if dtype == mx.complex64 and name != "all_sum":
                continue
            for shape in SHAPES:
                xs = inputs((name, str(dtype), shape), dtype, shape)
                expect(fn(xs[me]), functools.reduce(fold, xs), f"{name} {dtype} {shape}")
    xs = inputs(("lazy",), mx.float32, (5, 6))
    expect(dist.all_sum(xs[me] * 2 + 1), functools.reduce(mx.add, [x * 2 + 1 for x in xs]), "all_sum of a lazy array")
    expect(dist.all_sum(xs[me].T), functools.reduce(mx.add, xs).T, "all_sum of a transposed array")
    expect(dist.all_sum(mx.array(me + 0.5)), mx.array(sum(r + 0.5 for r in range(n))), "all_sum of a scalar")


def gathers():
    for dtype in DTYPES + (mx.bool_,):
        for shape in ((3,), (2, 4), (0, 3)):
            xs = inputs(("gather", str(dtype), shape), dtype, shape)
            want = xs[me] if n == 1 else mx.concatenate(xs, axis=0)
            expect(dist.all_gather(xs[me]), want, f"all_gather {dtype} {shape}")
    for dtype in FLOATS + (mx.int32,):
        for shape in ((n * 3,), (n, 4), (2 * n, 3, 2)):
            xs = inputs(("scatter", str(dtype), shape), dtype, shape)
            total = functools.reduce(mx.add, xs)
            k = shape[0] // n
            expect(dist.sum_scatter(xs[me]), total[me * k:(me + 1) * k], f"sum_scatter {dtype} {shape}", common=False)
    if n > 1:
        c.raises(ValueError, "sum_scatter of a first axis not divisible by the size", dist.sum_scatter,
                 mx.ones((n + 1, 2)), match="multiple of the group's size")


def point_to_point():
    if n == 1:
        return
    right, left = (me + 1) % n, (me - 1) % n
    for dtype in (mx.float32, mx.bfloat16, mx.int64, mx.float64):
        xs = inputs(("p2p", str(dtype)), dtype, (4, 3))
        if me % 2 == 0:
            sent = dist.send(xs[me], right)
            got = dist.recv((4, 3), dtype, left)
        else:
            got = dist.recv_like(xs[me], left)
            sent = dist.send(xs[me], right)
        c.ok(sent is xs[me], f"send returns its array ({dtype})")
        expect(got, xs[left], f"send/recv around the ring {dtype}", common=False)
    c.raises(TypeError, "recv with a NumPy dtype", dist.recv, (2,), np.float32, left, match="mlx.core.Dtype")


def groups():
    again = dist.init()
    c.ok(again == world and again.rank() == me and again.size() == n, "init() twice: the same group")
    half = world.split(me % 2)
    members = [r for r in range(n) if r % 2 == me % 2]
    c.ok(half.size() == len(members) and half.rank() == members.index(me), "split by parity",
         f"got rank {half.rank()} of {half.size()}")
    xs = inputs(("group",), mx.float32, (6,))
    expect(dist.all_sum(xs[me], group=half), functools.reduce(mx.add, [xs[r] for r in members]), "all_sum on a split",
           common=False)
    backwards = world.split(0, key=n - me)
    c.ok(backwards.rank() == n - 1 - me, "split with keys reversing the order", f"got rank {backwards.rank()}")
    got = dist.all_gather(mx.array([me]), group=backwards)
    want = mx.array([me]) if n == 1 else mx.array(list(range(n - 1, -1, -1)))
    expect(got, want.astype(got.dtype), "all_gather in key order")
    c.raises(ValueError, "split with a negative color", world.split, -1, match="color")
    c.raises(TypeError, "a group that is not a commlib.mlx.Group", dist.all_sum, mx.ones(2), group=object())
    c.ok(dist.is_available() and dist.is_available("ring"), "is_available")
    c.raises(ValueError, "an unknown backend", dist.init, backend="carrier-pigeon", match="carrier-pigeon")


for part in (reductions, gathers, point_to_point, groups):
    c.guard(part.__name__, part)
c.finish()
