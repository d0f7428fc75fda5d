"""all_reduce correctness: every op x dtype x size, layouts, out=, errors, NaN, cross-rank identity.

usage: all_reduce.py SEED MODE
  MODE full  - the whole matrix with the default algorithm choice, plus the extra layouts
  MODE algo  - the whole op x dtype x size matrix, for a job run with COMMLIB_ALGO_ALL_REDUCE forced
  MODE tiny  - a subset for a job run with a tiny COMMLIB_CHUNK_BYTES
"""
import os

import numpy as np

import commlib as cl
from _common import (BF16, COMPLEX, DTYPES, FLOATS, LOW_PRECISION, OPS, Checker, dname, digest,
                     expected_reduce, gen, kind_for, legal)

c = Checker("all_reduce")
mode = c.args[0] if c.args else "full"
n, me = c.size, c.rank
chunk = int(os.environ.get("COMMLIB_CHUNK_BYTES") or 256 << 10)
SIZES = [0, 1, 2, 3, 7, 13, 127, 1021]
BIG_DTYPES = {np.dtype(np.uint8), np.dtype(np.int64), np.dtype(np.float64), np.dtype(bool)}


def beyond_chunk(dt):
    """Elements such that each rank's ring block is more than one chunk."""
    return (n * chunk) // dt.itemsize + 3


def sizes(op, dt):
    """Small sizes for every pair; 65537 elements and one beyond a chunk for sum on every dtype
    and for every op on a few dtypes (large inputs cost the most to build on every rank)."""
    if op == "sum" or dt in BIG_DTYPES:
        return SIZES + [65537, beyond_chunk(dt)]
    return SIZES


def inputs(label, dt, shape, kind):
    """Every rank's input (a pure function of rank, seed and label)."""
    return [gen(c.rng(r, *label), dt, shape, kind) for r in range(n)]


def run_layout(variant, x_all, op, label):
    """all_reduce(x_all[me], op) in one of five call layouts; check value, identity and input."""
    x = x_all[me]
    expected = expected_reduce(x_all, op)
    if variant == 0:  # plain: a new array, input untouched
        keep = x.copy()
        res = cl.all_reduce(x, op)
        c.equal(x, keep, label + " input unchanged", record=False)
    elif variant == 1:  # in place
        x = x.copy()
        res = cl.all_reduce(x, op, out=x)
        c.ok(res is x, label, "all_reduce(x, out=x) did not return x")
        res = x
    elif variant == 2:  # into another array
        y = np.zeros_like(x)
        res = cl.all_reduce(x, op, out=y)
        c.ok(res is y, label, "all_reduce(x, out=y) did not return y")
        res = y
    elif variant == 3:  # strided input
        big = np.zeros((2 * x.size,), x.dtype)
        big[::2] = x.reshape(-1)
        view = big[::2]
        keep = big.copy()
        res = cl.all_reduce(view, op)
        c.equal(big, keep, label + " strided input unchanged", record=False)
    else:  # ReduceOp member, 3-D shape
        shape3 = (1,) + x.shape + (1,)
        res = cl.all_reduce(x.reshape(shape3), cl.ReduceOp(op))
        expected = expected.reshape(shape3)
    c.equal(res, expected, label)


def matrix(dtypes, ops, sizes_for):
    for di, dt in enumerate(dtypes):
        for oi, op in enumerate(ops):
            for si, size in enumerate(sizes_for(op, dt)):
                if n == 1 and op in ("land", "lor") and dt.kind != "b":
                    continue  # logical.py covers land/lor on a single rank
                label = f"all_reduce {op} {dname(dt)} size={size}"
                x_all = inputs((op, dname(dt), size), dt, (size,), kind_for(op))
                if not legal(op, dt):
                    if si == 0 or si == len(sizes_for(op, dt)) - 1:
                        c.raises(ValueError, label + " (illegal pair)", cl.all_reduce, x_all[me], op)
                        c.raises(ValueError, label + " (illegal pair, out=x)", cl.all_reduce, x_all[me], op,
                                 out=x_all[me])
                    continue
                variant = (di + oi + si) % 5  # every pair meets every layout across its sizes
                run_layout(variant, x_all, op, f"{label} variant {variant}")


def extras():
    # Non-contiguous 2-D (transposed) input, and N-D shapes.
    for dt in (np.dtype(np.int32), np.dtype(np.float64), np.dtype(np.complex64)):
        base = inputs(("T", dname(dt)), dt, (6, 10), "small")
        xs = [b.T for b in base]
        c.equal(cl.all_reduce(xs[me], "sum"), expected_reduce(xs, "sum"), f"transposed 2-D {dname(dt)}")
        nd = inputs(("nd", dname(dt)), dt, (2, 3, 4, 5), "small")
        c.equal(cl.all_reduce(nd[me]), expected_reduce(nd, "sum"), f"4-D {dname(dt)}")
        c.equal(cl.all_reduce(nd[me][:, ::2, :, 1:4], "sum"), expected_reduce([a[:, ::2, :, 1:4] for a in nd], "sum"),
                f"strided 4-D {dname(dt)}")
    # out= a non-contiguous array: written in place, gaps untouched.
    x_all = inputs(("outstrided",), np.dtype(np.int64), (7, 5), "any")
    z = np.full((14, 5), -1, np.int64)
    res = cl.all_reduce(x_all[me], "bxor", out=z[::2])
    c.ok(res.base is z or res is z[::2] or np.shares_memory(res, z), "out=strided", "did not return the out view")
    c.equal(z[::2], expected_reduce(x_all, "bxor"), "out=strided value")
    c.ok(np.all(z[1::2] == -1), "out=strided gaps", "wrote between the strides of out")
    # In place on a strided view.
    z = np.zeros((2, 9), np.float32)
    x_all = inputs(("inplace-strided",), np.dtype(np.float32), (9,), "small")
    z[0] = x_all[me]
    view = z.T[:, 0]  # stride 2 elements
    res = cl.all_reduce(view, "max", out=view)
    c.ok(res is view, "in place strided", "did not return x")
    c.equal(z[0], expected_reduce(x_all, "max"), "in place strided value")
    c.ok(np.all(z[1] == 0), "in place strided gaps", "wrote outside the view")
    # 0-d arrays, every dtype and op.
    for dt in DTYPES:
        for op in OPS:
            if n == 1 and op in ("land", "lor") and dt.kind != "b":
                continue  # logical.py
            xs = [v.reshape(()) for v in inputs(("0d", op, dname(dt)), dt, (1,), kind_for(op))]
            if not legal(op, dt):
                c.raises(ValueError, f"0-d {op} {dname(dt)} (illegal pair)", cl.all_reduce, xs[me], op)
                continue
            res = cl.all_reduce(xs[me], op)
            c.equal(res, expected_reduce(xs, op), f"0-d {op} {dname(dt)}")
    # Shorthands.
    for dt in (np.dtype(np.int16), np.dtype(np.float32), np.dtype(bool)) + ((BF16,) if BF16 is not None else ()):
        for fn, op in ((cl.all_sum, "sum"), (cl.all_prod, "prod"), (cl.all_min, "min"), (cl.all_max, "max")):
            xs = inputs(("short", op, dname(dt)), dt, (33,), kind_for(op))
            c.equal(fn(xs[me]), expected_reduce(xs, op), f"{fn.__name__} {dname(dt)}")
    # Ops by name are case-insensitive strings or ReduceOp members.
    xs = inputs(("opnames",), np.dtype(np.uint16), (17,), "any")
    for op in (cl.ReduceOp.BOR, "bor", "BOR"):
        c.equal(cl.all_reduce(xs[me], op), expected_reduce(xs, "bor"), f"op spelled {op!r}")
    # Integer overflow wraps like numpy.
    for dt, v in ((np.int8, 100), (np.uint8, 200), (np.int64, 2 ** 62), (np.uint32, 2 ** 31)):
        x = np.full(5, v, dt)
        c.equal(cl.all_sum(x), expected_reduce([x] * n, "sum"), f"wrap-around sum {np.dtype(dt).name}")
    # NaN propagates through min/max (like np.minimum / np.maximum), at every position.
    for dt in FLOATS:
        xs = []
        for r in range(n):
            v = np.arange(n + 3, dtype=np.float32)
            v[r] = np.nan  # each rank poisons its own element
            v[n] = np.nan  # every rank has NaN here
            v[n + 1] = np.nan if r == n - 1 else r  # only the last rank
            xs.append(v.astype(dt))
        for op in ("min", "max", "sum"):
            res = cl.all_reduce(xs[me], op)
            want = expected_reduce(xs, op)
            c.ok(np.all(np.isnan(res.astype(np.float32)[: n + 2])), f"NaN {op} {dname(dt)}",
                 f"NaN did not propagate: {res!r}")
            c.equal(res, want, f"NaN {op} {dname(dt)} value")
    # Random floats: order-dependent, so compare with a tolerance; bytes must still agree across ranks.
    for dt in FLOATS + COMPLEX:
        for size in (1021, 65537):
            xs = [gen(c.rng(r, "tol", dname(dt), size), dt, (size,), "any") / 100 for r in range(n)]
            xs = [x.astype(dt) for x in xs]
            exact = sum(x.astype(np.complex128 if dt.kind == "c" else np.float64) for x in xs)
            mag = sum(np.abs(x.astype(np.complex128 if dt.kind == "c" else np.float64)) for x in xs)
            eps = float(np.finfo(np.float32 if dt in LOW_PRECISION else dt).eps)
            if dt == np.dtype(np.float16):
                eps = 2.0 ** -10
            elif BF16 is not None and dt == BF16:
                eps = 2.0 ** -7
            got = cl.all_reduce(xs[me], "sum")
            c.ok(got.dtype == dt, f"random sum {dname(dt)} dtype", f"got {got.dtype}")
            err = np.abs(got.astype(exact.dtype) - exact)
            bound = n * eps * mag + 1e-30
            c.ok(np.all(err <= bound), f"random sum {dname(dt)} size={size}",
                 f"error {float((err / (bound)).max()):.3g}x the bound n*eps*sum|x|")
            c.digests.append((f"random sum {dname(dt)} size={size}", digest(got)))


if mode == "full":
    matrix(DTYPES, OPS, sizes)
    extras()
elif mode == "algo":
    matrix(DTYPES, OPS, lambda op, dt: SIZES + [65537, beyond_chunk(dt)]
           if op == "sum" or dt in (np.dtype(np.uint8), np.dtype(np.float64)) else SIZES)
elif mode == "tiny":
    # Tiny chunks: every op on a few dtypes, every dtype on sum; sizes span several chunks per block.
    small = [0, 1, 7, 13, 127, 1021, 4099]
    matrix([np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.float64), np.dtype(bool)], OPS, lambda op, dt: small)
    matrix(DTYPES, ["sum", "max"], lambda op, dt: small)
else:
    raise SystemExit(f"unknown mode {mode!r}")
c.finish()
