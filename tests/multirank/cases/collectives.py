"""all_gather, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all and barrier.

A batched case file (_batch.py): each check is a test item of tests/multirank/test_collectives.py.
The checks with an algorithm forced (COMMLIB_ALGO_<KIND>) run on a group made under that variable
and check that the algorithm ran; those marked ns=[10] run in the 10-rank job only.
"""
import array
import time

import numpy as np

from _batch import check, script
from _common import DTYPES, OPS, dname, every_rank, expected_reduce, gen, kind_for, legal
from commlib import _algorithms  # its `note` hook: which algorithm each call chose

I32, F32, U8 = np.dtype(np.int32), np.dtype(np.float32), np.dtype(np.uint8)


def inputs(c, label, dt, shape, kind="any"):
    return every_rank(c.seed, c.size, label, dt, shape, kind)


def all_gather_checks(c):
    n, me, cl = c.size, c.rank, c.cl
    for dt in DTYPES:
        xs = [v.reshape(()) for v in inputs(c, ("ag0d", dname(dt)), dt, (1,))]
        c.equal(cl.all_gather(xs[me]), np.stack(xs), f"all_gather 0-d {dname(dt)}")
        for size in (0, 1, 13, 1021):
            xs = inputs(c, ("ag", dname(dt), size), dt, (size,))
            c.equal(cl.all_gather(xs[me]), np.concatenate(xs), f"all_gather {dname(dt)} size={size}")
    for dt, size in ((U8, 65537), (F32, 300001), (np.dtype(np.complex128), 40000)):
        xs = inputs(c, ("agbig", dname(dt), size), dt, (size,))
        c.equal(cl.all_gather(xs[me]), np.concatenate(xs), f"all_gather large {dname(dt)} size={size}")
    for shape in ((3, 4, 5), (0, 3), (2, 0), (1, 1, 1, 7)):
        xs = inputs(c, ("agnd", shape), np.dtype(np.int16), shape)
        c.equal(cl.all_gather(xs[me]), np.concatenate(xs), f"all_gather shape {shape}")
    xs = inputs(c, ("agT",), np.dtype(np.float64), (5, 8))
    c.equal(cl.all_gather(xs[me].T), np.concatenate([x.T for x in xs]), "all_gather transposed")
    c.equal(cl.all_gather(xs[me][::2, 1::3]), np.concatenate([x[::2, 1::3] for x in xs]), "all_gather strided")
    # Buffer-protocol inputs.
    got = cl.all_gather(bytearray([me, 7, 255]))
    c.equal(got, np.array([[r, 7, 255] for r in range(n)], np.uint8).reshape(-1), "all_gather bytearray")
    got = cl.all_gather(array.array("d", [me + 0.5, -1.0]))
    c.equal(got, np.array([[r + 0.5, -1.0] for r in range(n)]).reshape(-1), "all_gather array.array")
    got = cl.all_gather(memoryview(np.arange(4, dtype=np.int64) * (me + 1)))
    c.equal(got, np.concatenate([np.arange(4, dtype=np.int64) * (r + 1) for r in range(n)]), "all_gather memoryview")


def reduce_scatter_checks(c):
    n, me, cl = c.size, c.rank, c.cl
    def one(dt, op, shape_rest, k, label, strided=False):
        shape = (n * k,) + shape_rest
        xs = inputs(c, ("rs", dname(dt), op, shape, strided), dt, shape, kind_for(op))
        x = xs[me]
        if strided:
            big = np.zeros((2 * shape[0],) + shape_rest, dt)
            big[::2] = x
            x = big[::2]
        if not legal(op, dt):
            c.raises(ValueError, label + " (illegal pair)", cl.reduce_scatter, x, op)
            return
        c.equal(cl.reduce_scatter(x, op), expected_reduce(xs, op)[me * k:(me + 1) * k], label,
                record=False)  # blocks differ by rank

    for dt in (I32, F32, np.dtype(bool), np.dtype(np.uint64)):
        for op in OPS:
            for k in (0, 1, 3, 1021):
                if n == 1 and op in ("land", "lor") and dt.kind != "b":
                    continue  # logical_ops_give_0_1 (all_reduce.py) covers land/lor on a single rank
                one(dt, op, (), k, f"reduce_scatter {op} {dname(dt)} k={k}")
    for dt in DTYPES:
        one(dt, "sum", (), 5, f"reduce_scatter sum {dname(dt)} k=5")
        one(dt, "max", (3, 2), 2, f"reduce_scatter max {dname(dt)} 3-D", strided=True)
    one(F32, "sum", (), 300001, "reduce_scatter large float32")
    one(np.dtype(np.int64), "bxor", (7,), 9000, "reduce_scatter large int64 2-D bxor")
    one(np.dtype(np.complex64), "prod", (2, 2), 3, "reduce_scatter prod complex64 3-D")
    # out=: written in place and returned, small (the one-call path) and large (the plan path)
    for k, rest in ((3, ()), (2, (2, 3)), (70001, ())):
        xs = inputs(c, ("rs-out", k, rest), F32, (n * k,) + rest, kind_for("sum"))
        out = np.full(k * int(np.prod(rest, dtype=np.int64)), -1.0, np.float32)
        got = cl.reduce_scatter(xs[me], "sum", out=out)
        c.equal(got is out, True, f"reduce_scatter out= k={k} returns out", record=False)
        c.equal(out, expected_reduce(xs, "sum")[me * k:(me + 1) * k].reshape(-1), f"reduce_scatter out= k={k}",
                record=False)
    x = np.ones(4 * n, np.float32)
    c.raises(ValueError, "reduce_scatter out of another dtype", cl.reduce_scatter, x, out=np.empty(4, np.float64))
    c.raises(ValueError, "reduce_scatter out of another size", cl.reduce_scatter, x, out=np.empty(5, np.float32))
    ro = np.empty(4, np.float32)
    ro.flags.writeable = False
    c.raises(ValueError, "reduce_scatter read-only out", cl.reduce_scatter, x, out=ro)
    if n > 1:
        c.raises(ValueError, "reduce_scatter out overlapping x", cl.reduce_scatter, x, out=x[:4], match="overlaps")
    # Not divisible by the group size: ValueError on every rank, nothing sent.
    if n > 1:
        c.raises(ValueError, "reduce_scatter not divisible", cl.reduce_scatter, np.ones(n * 3 + 1, np.float32))
        c.raises(ValueError, "reduce_scatter not divisible 2-D", cl.reduce_scatter, np.ones((n + 1, 4), np.int8))
    c.raises(ValueError, "reduce_scatter 0-d", cl.reduce_scatter, np.float64(1.0))
    c.equal(cl.reduce_scatter(np.full(n, me, np.int64)), np.array([n * (n - 1) // 2], np.int64),
            "reduce_scatter after the errors", record=False)


def broadcast_checks(c, large_only=False):
    n, me, cl = c.size, c.rank, c.cl
    shapes = [] if large_only else [(13,), (), (0,), (3, 4, 2)]
    for root in range(n):
        for dt in ([] if large_only else DTYPES):
            for shape in shapes:
                label = f"broadcast root={root} {dname(dt)} shape={shape}"
                src = gen(c.rng("bc", root, dname(dt), shape), dt, shape)
                if me == root:
                    x = src.copy()
                    res = cl.broadcast(x, root)
                    c.ok(res is x, label, "root did not get x back")
                    c.equal(x, src, label + " root unchanged")
                else:
                    x = np.zeros(shape, dt)
                    res = cl.broadcast(x, root)
                    c.ok(res is x, label, "a writable x was not returned")
                    c.equal(x, src, label)
        src = gen(c.rng("bcro", root), np.dtype(np.int64), (9,))
        # Read-only x on non-roots: a new array comes back, x is untouched.
        if not large_only:
            x = src.copy() if me == root else np.full(9, -5, np.int64)
            if me != root:
                x.setflags(write=False)
            res = cl.broadcast(x, root)
            if me != root:
                c.ok(res is not x, f"broadcast read-only root={root}", "returned the read-only x")
                c.ok(np.all(x == -5), f"broadcast read-only root={root} untouched", "wrote into read-only x")
            c.equal(res, src, f"broadcast read-only root={root}")
            # Non-contiguous x: written through the view, gaps untouched.
            big = np.full((6, 9), -7, np.int64)
            view = big[::2, ::2]
            if me == root:
                view[...] = src[:5]
            res = cl.broadcast(view, root)
            c.ok(res is view, f"broadcast strided root={root}", "did not return the strided x")
            c.equal(view, np.tile(src[:5], (3, 1)), f"broadcast strided root={root}")
            mask = np.ones(big.shape, bool)
            mask[::2, ::2] = False
            c.ok(np.all(big[mask] == -7), f"broadcast strided root={root} gaps", "wrote between the strides")
            # bytearray: writable buffer, filled in place.
            ba = bytearray(b"root%d" % root) if me == root else bytearray(5)
            res = cl.broadcast(ba, root)
            c.ok(res is ba and bytes(ba) == b"root%d" % root, f"broadcast bytearray root={root}", f"got {bytes(ba)!r}")
        # Large: beyond a chunk, odd byte counts (beyond 4 ranks 3 MiB is a chain, 1,000,003 B and
        # 200,003 B a tree: BROADCAST_CHAIN_BYTES).
        for dt, size in ((np.dtype(np.float64), 3 << 17), (U8, 1000003), (U8, 200003)):
            src = gen(c.rng("bcbig", root, dname(dt)), dt, (size,))
            x = src.copy() if me == root else np.empty(size, dt)
            c.equal(cl.broadcast(x, root), src, f"broadcast large root={root} {dname(dt)} size={size}")


def large_reduce_checks(c):
    """reduce of large and odd sizes to every root, integer-valued so any order sums exactly."""
    n, me, cl = c.size, c.rank, c.cl
    for root in range(n):
        for size in (600_000, 37000):  # 4.8 MB and 296,000 B of float64: at 10 ranks a chain and a tree
            xs = [gen(c.rng("rdbig", r, size), np.dtype(np.float64), (size,), "small") for r in range(n)]
            got = cl.reduce(xs[me], "sum", root)
            if me == root:
                c.equal(got, np.sum(xs, axis=0), f"reduce large root={root} size={size}")
            else:
                c.ok(got is None, f"reduce large root={root}: None off the root", f"got {type(got)}")


def reduce_checks(c):
    """reduce to every root: every op on two dtypes, empty to multi-block sizes (fewer elements than
    ranks included), a 2-D and a strided input, out= (x itself among them)."""
    n, me, cl = c.size, c.rank, c.cl
    for root in range(n):
        for dt in (I32, np.dtype(np.float64)):
            for op in OPS:
                if not legal(op, dt) or op in ("land", "lor"):
                    continue
                for count in (0, 1, n + 1, 40_001):
                    xs = inputs(c, ("red", root, dname(dt), op, count), dt, (count,), kind_for(op))
                    got = cl.reduce(xs[me], op, root)
                    if me == root:
                        c.equal(got, expected_reduce(xs, op), f"reduce {op} {dname(dt)} count={count} root={root}",
                                record=False)
                    else:
                        c.ok(got is None, f"reduce {op} root={root}: None off the root", f"got {type(got)}")
        xs = inputs(c, ("red2", root), F32, (300, 7), kind_for("sum"))
        x = np.zeros((600, 7), np.float32)
        x[::2] = xs[me]
        got = cl.reduce(x[::2], "max", root)
        if me == root:
            c.equal(got, expected_reduce(xs, "max"), f"reduce max strided 2-D root={root}", record=False)
        mine = xs[me].copy()
        got = cl.reduce(mine, "sum", root, out=mine if me == root else None)
        if me == root:
            c.ok(got is mine, f"reduce out=x root={root} returns it", f"got {type(got)}")
            c.equal(mine, expected_reduce(xs, "sum"), f"reduce out=x root={root}", record=False)
        else:
            c.equal(mine, xs[me], f"reduce root={root}: x untouched off the root", record=False)


def gather_scatter_checks(c):
    """gather and scatter with every root, every dtype, empty to multi-chunk blocks, 0-d and 2-d."""
    n, me, cl = c.size, c.rank, c.cl
    for root in range(n):
        for dt in DTYPES:
            for shape in ((0,), (1,), (7, 3), (5000,)):
                xs = inputs(c, ("gs", root, dname(dt), shape), dt, shape)
                got = cl.gather(xs[me], root)
                if me == root:
                    c.equal(got, np.concatenate(xs), f"gather root={root} {dname(dt)} {shape}", record=False)
                else:
                    c.ok(got is None, f"gather root={root} {dname(dt)} {shape}: None off the root", repr(got))
                full = np.concatenate(xs) if me == root else None
                c.equal(cl.scatter(full, root), xs[me], f"scatter root={root} {dname(dt)} {shape}", record=False)
        zero_d = [v.reshape(()) for v in inputs(c, ("gs0", root), I32, (1,))]
        got = cl.gather(zero_d[me], root)
        if me == root:
            c.equal(got, np.stack(zero_d), f"gather 0-d root={root}", record=False)


def all_to_all_checks(c):
    """all_to_all of every dtype, empty to multi-chunk blocks, other axes, and the i-variant."""
    n, me, cl = c.size, c.rank, c.cl
    for dt in DTYPES:
        for per in (0, 1, 3, 20000):  # rows of a block (2 columns)
            xs = inputs(c, ("a2a", dname(dt), per), dt, (n * per, 2))
            want = np.concatenate([xs[j][me * per:(me + 1) * per] for j in range(n)])
            c.equal(cl.all_to_all(xs[me]), want, f"all_to_all {dname(dt)} {per} rows a block", record=False)
    xs = inputs(c, ("a2a-axes",), F32, (3, 2 * n))
    want = np.concatenate([np.split(xs[j], n, axis=1)[me] for j in range(n)], axis=1)
    c.equal(cl.all_to_all(xs[me], split_axis=1, concat_axis=1), want, "all_to_all axes 1, 1", record=False)
    xs = inputs(c, ("a2a-i",), I32, (4 * n,))
    want = np.concatenate([xs[j][4 * me:4 * me + 4] for j in range(n)])
    c.equal(cl.iall_to_all(xs[me]).wait(), want, "iall_to_all", record=False)


def barrier_checks(c):
    n, me, cl = c.size, c.rank, c.cl
    for order in ("rank", "reversed"):
        k = me if order == "rank" else n - 1 - me
        time.sleep(0.1 * k)  # staggered entry, what is tested: every rank leaves after the last entered
        entered = time.time()
        cl.barrier()
        left = time.time()
        t = cl.all_gather(np.array([entered, left]))
        t = t.reshape(n, 2)
        c.ok(t[:, 1].min() >= t[:, 0].max(), f"barrier ({order} entry order)",
             f"a rank left at {t[:, 1].min():.4f} before the last entered at {t[:, 0].max():.4f}")
    for i in range(20):
        cl.barrier()
    c.ok(True, "20 back-to-back barriers")



def forced(c, kind, algo, body, *args):
    """body(c, *args) with COMMLIB_ALGO_<KIND>=algo (set by the runner); a check that it ran."""
    chosen = []
    _algorithms.note = chosen.append
    try:
        body(c, *args)
    finally:
        _algorithms.note = None
    c.ok(algo in chosen, f"{kind} ran {algo}", f"algorithms chosen: {sorted(set(chosen))}")


def _env(kind):
    return lambda algo: {f"COMMLIB_ALGO_{kind.upper()}": algo}


@check(max_n=4)
def all_gather(c):
    """Every dtype, 0-d to large, N-D, transposed and strided, buffer-protocol inputs."""
    all_gather_checks(c)


@check(max_n=4)
def reduce_scatter(c):
    """Every op on four dtypes, every dtype, large, 3-D and strided, out=, errors that send nothing."""
    reduce_scatter_checks(c)


@check(params=["ring", "doubling", "halving", "pairwise"], min_n=2, max_n=4, env=_env("reduce_scatter"))
def reduce_scatter_forced(c, algo):
    """reduce_scatter with the algorithm forced (by default recursive halving at power-of-two n up to
    2 MiB, doubling up to 16 KiB at other n, the direct schedule above, the ring beyond 8 ranks)."""
    forced(c, "reduce_scatter", algo, reduce_scatter_checks)


@check(max_n=4)
def broadcast(c):
    """Every root, every dtype and shape, read-only, strided and bytearray x, large and odd sizes."""
    broadcast_checks(c)


@check(params=["tree", "chain", "linear"], min_n=2, max_n=4, env=_env("broadcast"))
def broadcast_forced(c, algo):
    forced(c, "broadcast", algo, broadcast_checks)


@check(max_n=4)
def barrier(c):
    """Nobody leaves before the last rank enters, in either entry order; back-to-back barriers."""
    barrier_checks(c)


@check(max_n=4)
def reduce(c):
    """Every root, op and size with the algorithm chosen by default."""
    reduce_checks(c)


@check(params=["rails", "chain", "tree"], min_n=2, max_n=4, env=_env("reduce"))
def reduce_forced(c, algo):
    """Every root, op and size with the reduce algorithm forced: rails on one host is its reduce-scatter
    within the host and root's gather (across hosts: tests/multihost, the 8-host job)."""
    forced(c, "reduce", algo, reduce_checks)


@check(params=["linear", "tree"], min_n=2, max_n=4,
       env=lambda algo: {"COMMLIB_ALGO_GATHER": algo, "COMMLIB_ALGO_SCATTER": algo})
def gather_scatter_forced(c, algo):
    """Every root and dtype, empty to multi-chunk blocks (by default the binomial tree beyond 8 ranks:
    gather_scatter_ten_ranks)."""
    forced(c, "gather", algo, gather_scatter_checks)


@check(params=["pairwise", "bruck"], min_n=2, env=_env("all_to_all"))
def all_to_all_forced(c, algo):
    """Every dtype, empty to multi-chunk blocks, other axes and iall_to_all (by default Bruck's, which
    needs no full mesh, beyond 64 ranks for blocks up to 1 KiB and beyond 512 at any size)."""
    forced(c, "all_to_all", algo, all_to_all_checks)


@check(ns=[10], timeout=200)
def broadcast_and_reduce_ten_ranks(c):
    """Below BROADCAST_CHAIN_BYTES / REDUCE_CHAIN_BYTES the tree, above it the chain, to every root."""
    broadcast_checks(c, large_only=True)
    large_reduce_checks(c)


@check(ns=[10], timeout=200)
def gather_scatter_ten_ranks(c):
    """gather and scatter take the binomial tree beyond 8 ranks, to and from every root."""
    gather_scatter_checks(c)


# Rank programs run whole as checks: out= of reduce, reduce_scatter, gather and scatter (written into and
# returned; a wrong one a ValueError on every rank, and the group goes on), and groups sharing the
# collective connections (one each way per peer for every group; another group's message read first
# parked for it, crossed orders up to 2.4 MB; two groups' collectives at once in two threads).
script("out_args.py", max_n=4)
script("shared_connections.py", min_n=2, max_n=4, timeout=200)
