"""all_gather (out=, recycled results) and all_reduce with an algorithm forced.

A batched case file (_batch.py): each check runs once for each pair of COMMLIB_ALGO_ALL_GATHER /
COMMLIB_ALGO_ALL_REDUCE in FORCED (all_gather's default choice in the last), on a group made
under them. Every dtype at sizes 0, 1, 13, 1021 (and 0-d), a few large odd sizes, all_gather's
out= (into a new array, in place from this rank's block, every bad out raising ValueError on
every rank), and results that must survive later calls.
"""
import numpy as np

from _batch import check
from _common import DTYPES, dname, every_rank, expected_reduce, kind_for, legal

SIZES = (0, 1, 13, 1021)
FORCED = ["pairwise-ring", "bruck-rabenseifner", "default-doubling"]  # all_gather-all_reduce


def forced_env(pair):
    ag, ar = pair.split("-")
    return {"COMMLIB_ALGO_ALL_REDUCE": ar, **({"COMMLIB_ALGO_ALL_GATHER": ag} if ag != "default" else {})}


def inputs(c, label, dt, shape, kind="any"):
    return every_rank(c.seed, c.size, label, dt, shape, kind)


@check(params=FORCED, env=forced_env)
def all_gather(c, pair):
    n, me, cl = c.size, c.rank, c.cl
    for dt in DTYPES:
        xs = [v.reshape(()) for v in inputs(c, ("ag0d", dname(dt)), dt, (1,))]
        c.equal(cl.all_gather(xs[me]), np.stack(xs), f"all_gather 0-d {dname(dt)}")
        for size in SIZES:
            xs = inputs(c, ("ag", dname(dt), size), dt, (size,))
            want = np.concatenate(xs)
            c.equal(cl.all_gather(xs[me]), want, f"all_gather {dname(dt)} size={size}")
            y = np.full(n * size, 1, dt)
            got = cl.all_gather(xs[me], out=y)
            c.ok(got is y, f"all_gather out= {dname(dt)}", "did not return out")
            c.equal(y, want, f"all_gather out= {dname(dt)} size={size}")
            z = np.zeros(n * size, dt)
            z[me * size:(me + 1) * size] = xs[me]
            got = cl.all_gather(z[me * size:(me + 1) * size], out=z)
            c.ok(got is z, f"all_gather in place {dname(dt)}", "did not return out")
            c.equal(z, want, f"all_gather in place {dname(dt)} size={size}")
    for dt, size in ((np.dtype(np.uint8), 65537), (np.dtype(np.float32), 30001), (np.dtype(np.complex128), 4099)):
        xs = inputs(c, ("agbig", dname(dt), size), dt, (size,))
        c.equal(cl.all_gather(xs[me]), np.concatenate(xs), f"all_gather large {dname(dt)} size={size}")
    xs = inputs(c, ("agnd",), np.dtype(np.int16), (3, 4, 5))
    y = np.empty((3 * n, 4, 5), np.int16)
    c.ok(cl.all_gather(xs[me], out=y) is y, "all_gather out= 3-d", "did not return out")
    c.equal(y, np.concatenate(xs), "all_gather out= 3-d")


@check(params=FORCED, env=forced_env)
def bad_out(c, pair):
    n, me, cl = c.size, c.rank, c.cl
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + me
    bad = {"wrong shape": np.empty((2 * n, 2), np.float32), "flat": np.empty(6 * n, np.float32),
           "wrong dtype": np.empty((2 * n, 3), np.float64),
           "non-contiguous": np.empty((2 * n, 6), np.float32)[:, ::2],
           "read-only": np.empty((2 * n, 3), np.float32), "a list": [0.0] * (6 * n)}
    bad["read-only"].flags.writeable = False
    for what, out in bad.items():
        c.raises(ValueError, f"all_gather out= {what}", cl.all_gather, x, out=out)
    if n > 1:  # x overlapping out other than as this rank's own block
        y = np.zeros((2 * n, 3), np.float32)
        other = (me + 1) % n
        c.raises(ValueError, "all_gather out= overlapping x", cl.all_gather, y[2 * other:2 * other + 2], out=y)
    c.equal(cl.all_gather(x), np.concatenate([np.arange(6, dtype=np.float32).reshape(2, 3) + r
                                              for r in range(n)]), "all_gather after the errors")


@check(params=FORCED, env=forced_env)
def recycled_result(c, pair):
    """Results from 1 MiB up come from recycled buffers: one the caller holds is never reused."""
    n, me, cl = c.size, c.rank, c.cl
    size = (1 << 20) // n + 5
    first = [np.full(size, r + 1, np.uint8) for r in range(n)]
    a = cl.all_gather(first[me])
    view = cl.all_gather(first[me] + 1)[size:]
    mv = memoryview(cl.all_gather(first[me] + 2))
    for i in range(5):  # each drops its result at once: the pool's buffers go round
        cl.all_gather(np.full(size, 100 + i, np.uint8))
        y = cl.all_gather(np.full(size, 200 + i, np.uint8))
        c.equal(y, np.full(n * size, 200 + i, np.uint8), f"recycled all_gather round {i}", record=False)
    c.equal(a, np.concatenate(first), "held result unchanged by later calls")
    c.equal(view, np.concatenate(first)[size:] + 1, "held view unchanged by later calls")
    c.equal(np.frombuffer(mv, np.uint8), np.concatenate(first) + 2, "held memoryview unchanged by later calls")


@check(params=FORCED, env=forced_env)
def all_reduce(c, pair):
    n, me, cl = c.size, c.rank, c.cl
    for dt in DTYPES:
        for op in ("sum", "max", "bxor"):
            if not legal(op, dt):
                continue
            for size in SIZES + ((65537,) if op == "sum" else ()):
                xs = inputs(c, ("ar", dname(dt), op, size), dt, (size,), kind_for(op))
                want = expected_reduce(xs, op)
                c.equal(cl.all_reduce(xs[me], op), want, f"all_reduce {op} {dname(dt)} size={size}")
                x = xs[me].copy()
                cl.all_reduce(x, op, out=x)
                c.equal(x, want, f"all_reduce {op} {dname(dt)} size={size} in place")


@check(params=FORCED, env=forced_env)
def split_and_object(c, pair):
    """split's (color, key) gather and all_gather_obj's frames take the all-gather's schedule."""
    n, me, cl = c.size, c.rank, c.cl
    g = c.g
    for trial in range(3):
        rng = np.random.default_rng(1000 + trial)  # the same draw on every rank
        colors = rng.integers(-1, 3, n)
        keys = rng.integers(-5, 5, n)
        sub = g.split(int(colors[me]), key=int(keys[me]))
        if colors[me] < 0:
            c.ok(sub is None, f"split trial {trial}: negative color", "got a group")
            continue
        members = sorted((int(keys[r]), r) for r in range(n) if colors[r] == colors[me])
        want = [r for _, r in members]
        c.ok(sub.size() == len(want) and sub.rank() == want.index(me), f"split trial {trial}",
             f"rank {sub.rank()} of {sub.size()}, expected {want.index(me)} of {len(want)}")
        got = cl.all_gather(np.array([me], np.int64), group=sub)
        c.equal(got, np.array(want, np.int64), f"split trial {trial}: members in (key, rank) order", record=False)
    for what, size_of in (("near-equal", lambda r: 1000 + 7 * r), ("uneven", lambda r: 300 + 5000 * (r == n - 1)),
                          ("one large", lambda r: 20 if r else 3000)):
        objs = [{"rank": r, "blob": bytes([r % 251]) * size_of(r)} for r in range(n)]
        c.ok(cl.all_gather_obj(objs[me]) == objs, f"all_gather_obj {what} frames", "wrong objects")

