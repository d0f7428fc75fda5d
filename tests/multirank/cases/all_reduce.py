"""all_reduce correctness: every op x dtype x size, layouts, out=, errors, NaN, cross-rank identity.

A batched case file (_batch.py): each check below is a test item of tests/multirank/test_all_reduce.py.
The matrix runs per dtype with the default algorithm choice, with each algorithm forced
(COMMLIB_ALGO_ALL_REDUCE) and with 64-byte chunks (COMMLIB_CHUNK_BYTES), on a group made after
those variables are set.
"""
import os

import numpy as np

import commlib as cl
from commlib import _algorithms  # its `note` hook: which algorithm each call chose
from _batch import check
from _common import (BF16, COMPLEX, DTYPES, FLOATS, LOW_PRECISION, OPS, dname, digest, every_rank, expected_reduce,
                     gen, kind_for, legal)

SIZES = [0, 1, 2, 3, 7, 13, 127, 1021]
BIG_DTYPES = {np.dtype(np.uint8), np.dtype(np.int64), np.dtype(np.float64), np.dtype(bool)}
ALGOS = ["ring", "doubling", "rabenseifner"]
BY_NAME = {dname(dt): dt for dt in DTYPES}


def beyond_chunk(c, dt):
    """Elements such that each rank's ring block is more than one chunk."""
    chunk = int(os.environ.get("COMMLIB_CHUNK_BYTES") or 256 << 10)
    return (c.size * chunk) // dt.itemsize + 3


def sizes(c, op, dt):
    """Small sizes for every pair; 65537 elements and one beyond a chunk for sum on every dtype
    and for every op on a few dtypes (large inputs cost the most to build on every rank)."""
    if op == "sum" or dt in BIG_DTYPES:
        return SIZES + [65537, beyond_chunk(c, dt)]
    return SIZES


def inputs(c, label, dt, shape, kind="any"):
    """Every rank's input (a pure function of rank, seed and label)."""
    return every_rank(c.seed, c.size, label, dt, shape, kind)


def run_layout(c, variant, x_all, op, label):
    """all_reduce(x_all[me], op) in one of five call layouts; check value, identity and input."""
    g = c.g
    x = x_all[c.rank]
    expected = expected_reduce(x_all, op)
    if variant == 0:  # plain: a new array, input untouched
        keep = x.copy()
        res = cl.all_reduce(x, op, group=g)
        c.equal(x, keep, label + " input unchanged", record=False)
    elif variant == 1:  # in place
        x = x.copy()
        res = cl.all_reduce(x, op, out=x, group=g)
        c.ok(res is x, label, "all_reduce(x, out=x) did not return x")
        res = x
    elif variant == 2:  # into another array
        y = np.zeros_like(x)
        res = cl.all_reduce(x, op, out=y, group=g)
        c.ok(res is y, label, "all_reduce(x, out=y) did not return y")
        res = y
    elif variant == 3:  # strided input
        big = np.zeros((2 * x.size,), x.dtype)
        big[::2] = x.reshape(-1)
        view = big[::2]
        keep = big.copy()
        res = cl.all_reduce(view, op, group=g)
        c.equal(big, keep, label + " strided input unchanged", record=False)
    else:  # ReduceOp member, 3-D shape
        shape3 = (1,) + x.shape + (1,)
        res = cl.all_reduce(x.reshape(shape3), cl.ReduceOp(op), group=g)
        expected = expected.reshape(shape3)
    c.equal(res, expected, label)


def matrix(c, dtypes, ops, sizes_for):
    """Every op x size of `dtypes` (pairs of (index in DTYPES, dtype)), each in one of five layouts."""
    n, me, g = c.size, c.rank, c.g
    for di, dt in dtypes:
        for oi, op in enumerate(ops):
            for si, size in enumerate(sizes_for(op, dt)):
                if n == 1 and op in ("land", "lor") and dt.kind != "b":
                    continue  # logical_ops_give_0_1 (all_reduce.py) covers land/lor on a single rank
                label = f"all_reduce {op} {dname(dt)} size={size}"
                x_all = inputs(c, (op, dname(dt), size), dt, (size,), kind_for(op))
                if not legal(op, dt):
                    if si == 0 or si == len(sizes_for(op, dt)) - 1:
                        c.raises(ValueError, label + " (illegal pair)", cl.all_reduce, x_all[me], op, group=g)
                        c.raises(ValueError, label + " (illegal pair, out=x)", cl.all_reduce, x_all[me], op,
                                 out=x_all[me], group=g)
                    continue
                variant = (di + oi + si) % 5  # every pair meets every layout across its sizes
                run_layout(c, variant, x_all, op, f"{label} variant {variant}")


@check
def layouts(c):
    """Transposed and N-D inputs, out= a strided array, in place on a strided view."""
    n, me = c.size, c.rank
    # Non-contiguous 2-D (transposed) input, and N-D shapes.
    for dt in (np.dtype(np.int32), np.dtype(np.float64), np.dtype(np.complex64)):
        base = inputs(c, ("T", dname(dt)), dt, (6, 10), "small")
        xs = [b.T for b in base]
        c.equal(cl.all_reduce(xs[me], "sum"), expected_reduce(xs, "sum"), f"transposed 2-D {dname(dt)}")
        nd = inputs(c, ("nd", dname(dt)), dt, (2, 3, 4, 5), "small")
        c.equal(cl.all_reduce(nd[me]), expected_reduce(nd, "sum"), f"4-D {dname(dt)}")
        c.equal(cl.all_reduce(nd[me][:, ::2, :, 1:4], "sum"), expected_reduce([a[:, ::2, :, 1:4] for a in nd], "sum"),
                f"strided 4-D {dname(dt)}")
    # out= a non-contiguous array: written in place, gaps untouched.
    x_all = inputs(c, ("outstrided",), np.dtype(np.int64), (7, 5), "any")
    z = np.full((14, 5), -1, np.int64)
    res = cl.all_reduce(x_all[me], "bxor", out=z[::2])
    c.ok(res.base is z or res is z[::2] or np.shares_memory(res, z), "out=strided", "did not return the out view")
    c.equal(z[::2], expected_reduce(x_all, "bxor"), "out=strided value")
    c.ok(np.all(z[1::2] == -1), "out=strided gaps", "wrote between the strides of out")
    # In place on a strided view.
    z = np.zeros((2, 9), np.float32)
    x_all = inputs(c, ("inplace-strided",), np.dtype(np.float32), (9,), "small")
    z[0] = x_all[me]
    view = z.T[:, 0]  # stride 2 elements
    res = cl.all_reduce(view, "max", out=view)
    c.ok(res is view, "in place strided", "did not return x")
    c.equal(z[0], expected_reduce(x_all, "max"), "in place strided value")
    c.ok(np.all(z[1] == 0), "in place strided gaps", "wrote outside the view")


@check
def zero_d_every_dtype_and_op(c):
    n, me = c.size, c.rank
    for dt in DTYPES:
        for op in OPS:
            if n == 1 and op in ("land", "lor") and dt.kind != "b":
                continue  # logical_ops_give_0_1 covers it
            xs = [v.reshape(()) for v in inputs(c, ("0d", op, dname(dt)), dt, (1,), kind_for(op))]
            if not legal(op, dt):
                c.raises(ValueError, f"0-d {op} {dname(dt)} (illegal pair)", cl.all_reduce, xs[me], op)
                continue
            res = cl.all_reduce(xs[me], op)
            c.equal(res, expected_reduce(xs, op), f"0-d {op} {dname(dt)}")


@check
def shorthands_op_names_and_wraparound(c):
    n, me = c.size, c.rank
    # Shorthands.
    for dt in (np.dtype(np.int16), np.dtype(np.float32), np.dtype(bool)) + ((BF16,) if BF16 is not None else ()):
        for fn, op in ((cl.all_sum, "sum"), (cl.all_prod, "prod"), (cl.all_min, "min"), (cl.all_max, "max")):
            xs = inputs(c, ("short", op, dname(dt)), dt, (33,), kind_for(op))
            c.equal(fn(xs[me]), expected_reduce(xs, op), f"{fn.__name__} {dname(dt)}")
    # Ops by name are case-insensitive strings or ReduceOp members.
    xs = inputs(c, ("opnames",), np.dtype(np.uint16), (17,), "any")
    for op in (cl.ReduceOp.BOR, "bor", "BOR"):
        c.equal(cl.all_reduce(xs[me], op), expected_reduce(xs, "bor"), f"op spelled {op!r}")
    # Integer overflow wraps like numpy.
    for dt, v in ((np.int8, 100), (np.uint8, 200), (np.int64, 2 ** 62), (np.uint32, 2 ** 31)):
        x = np.full(5, v, dt)
        c.equal(cl.all_sum(x), expected_reduce([x] * n, "sum"), f"wrap-around sum {np.dtype(dt).name}")


@check
def nan_propagates_and_random_sums_within_bounds(c):
    n, me = c.size, c.rank
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



@check(params=list(BY_NAME))
def matrix_default_algorithm(c, dt):
    """Every op x size (0 .. beyond a chunk) of one dtype, in five call layouts, illegal pairs raising."""
    matrix(c, [(DTYPES.index(BY_NAME[dt]), BY_NAME[dt])], OPS, lambda op, d: sizes(c, op, d))


def _algo_sizes(c):
    return lambda op, dt: (SIZES + [65537, beyond_chunk(c, dt)]
                           if op == "sum" or dt in (np.dtype(np.uint8), np.dtype(np.float64)) else SIZES)


@check(params=[f"{a}-{d}" for a in ALGOS for d in BY_NAME], min_n=2,
       env=lambda p: {"COMMLIB_ALGO_ALL_REDUCE": p.split("-")[0]})
def matrix_forced_algorithm(c, param):
    """The op x size matrix of one dtype with COMMLIB_ALGO_ALL_REDUCE forced: right and rank-identical."""
    algo, name = param.split("-", 1)
    dt = BY_NAME[name]
    chosen = []
    _algorithms.note = chosen.append
    try:
        matrix(c, [(DTYPES.index(dt), dt)], OPS, _algo_sizes(c))
    finally:
        _algorithms.note = None
    c.ok(chosen and set(chosen) == {algo}, "the forced algorithm ran", f"algorithms chosen: {sorted(set(chosen))}")


TINY = [0, 1, 7, 13, 127, 1021, 4099]


@check(params=ALGOS, min_n=2, env=lambda algo: {"COMMLIB_CHUNK_BYTES": "64", "COMMLIB_ALGO_ALL_REDUCE": algo})
def tiny_chunks(c, algo):
    """COMMLIB_CHUNK_BYTES=64: many chunks per step, chunk edges inside elements of every size."""
    few = [np.dtype(np.uint8), np.dtype(np.int32), np.dtype(np.float64), np.dtype(bool)]
    matrix(c, list(enumerate(few)), OPS, lambda op, dt: TINY)
    matrix(c, list(enumerate(DTYPES)), ["sum", "max"], lambda op, dt: TINY)


@check
def logical_ops_give_0_1(c):
    """land/lor return 0/1 in the input's dtype (API.md), whatever the group size, including 1."""
    n, me = c.size, c.rank
    for dt in DTYPES:
        for op in ("land", "lor"):
            big = [(70001,)] if dt.itemsize in (1, 8) and dt.kind != "c" else []  # one large size per width class
            for shape in [(), (1,), (13,), (2, 3)] + big:
                xs = [gen(c.rng(r, op, dname(dt), shape), dt, shape, "logical") for r in range(n)]
                want = expected_reduce(xs, op)
                c.equal(cl.all_reduce(xs[me], op), want, f"all_reduce {op} {dname(dt)} shape={shape}")
                y = xs[me].copy()
                cl.all_reduce(y, cl.ReduceOp(op), out=y)
                c.equal(y, want, f"all_reduce {op} {dname(dt)} shape={shape} in place")
                if len(shape) == 1:
                    k = shape[0]
                    xs = [gen(c.rng(r, "rs", op, dname(dt), shape), dt, (n * k,), "logical") for r in range(n)]
                    c.equal(cl.reduce_scatter(xs[me], op), expected_reduce(xs, op)[me * k:(me + 1) * k],
                            f"reduce_scatter {op} {dname(dt)} k={k}", record=False)


@check(min_n=2)
def nan_sign_bits_identical_on_every_rank(c):
    """NaNs of different signs on different ranks (np.nan here, -np.nan there) still give bit-identical
    results everywhere."""
    for dt in FLOATS:
        for op in ("sum", "prod", "min", "max"):
            for size in (4, 70001):
                v = np.full(size, np.nan, np.float32)
                if c.rank % 2:
                    v = -v  # odd ranks: NaN with the sign bit set
                res = cl.all_reduce(v.astype(dt), op)
                c.ok(np.all(np.isnan(res.astype(np.float32))), f"signed NaN {op} {dname(dt)} size={size}",
                     "NaN did not propagate")
                c.digests.append((f"signed NaN {op} {dname(dt)} size={size} (bytes must agree)", digest(res)))
