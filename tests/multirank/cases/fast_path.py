"""The one-call small-message path (_transport/_fast.pxi): taken, right, and interoperable.

usage: fast_path.py SEED

Every small collective with an ndarray argument must run without the
group's Python path (counted by wrapping the stream's `run`), give what
numpy computes, and agree bit for bit with a rank that takes the Python path
for the same collective (a list or a strided view there), in both directions.
A blocking collective behind a queued i-collective must wait its turn.
"""
import numpy as np

import commlib as cl
from _common import DTYPES, OPS, Checker, dname, expected_reduce, gen, kind_for, legal

c = Checker("fast_path")
n, me, g = c.size, c.rank, c.g
slow = []
_run = g.stream.run
g.stream.run = lambda fn, *a: (slow.append(fn.__name__), _run(fn, *a))[1]
cl.barrier()  # arms the one-call path
# A first collective with a peer opens that connection on the Python path: open them all.
for root in range(n):
    cl.broadcast(np.zeros(2), root)
    cl.reduce(np.zeros(2), "sum", root)
cl.all_reduce(np.zeros(2))
cl.all_gather(np.zeros(2))
if n > 1:
    c.ok(g.fast is not None, "armed", "no one-call path after a first collective")


def variant(x, who):
    """x as rank `who` passes it this round: a strided copy (the Python path) on that rank only."""
    if me != who or x.ndim == 0:
        return x
    wide = np.empty((x.shape[0] * 2,) + x.shape[1:], x.dtype)
    wide[::2] = x
    return wide[::2]


rounds = [-1] + list(range(min(n, 2)))  # -1: every rank on the one-call path
for who in rounds:
    del slow[:]
    for dt in DTYPES:
        for shape in [(), (1,), (5,), (3, 4), (256,)]:  # up to 4 KiB: under every limit
            for op in OPS:
                if not legal(op, dt):
                    continue
                xs = [gen(c.rng(r, "ar", op, dname(dt), shape), dt, shape, kind_for(op)) for r in range(n)]
                want = expected_reduce(xs, op)
                label = f"who={who} {op} {dname(dt)} {shape}"
                c.equal(cl.all_reduce(variant(xs[me], who), op), want, f"all_reduce {label}")
                y = xs[me].copy()
                c.ok(cl.all_reduce(y, op, out=y) is y, f"all_reduce out=x returns x {label}")
                c.equal(y, want, f"all_reduce in place {label}")
                o = np.full_like(xs[me], 0)
                c.ok(cl.all_reduce(variant(xs[me], who), op, out=o) is o, f"all_reduce out=o returns o {label}")
                c.equal(o, want, f"all_reduce into a separate out {label}")
                root = (len(shape) + 1) % n
                got = cl.reduce(variant(xs[me], who), op, root)
                if me == root:
                    c.equal(got, want, f"reduce {label} root={root}", record=False)
                else:
                    c.ok(got is None, f"reduce {label}", "a non-root got a result")
            xs = [gen(c.rng(r, "bc", dname(dt), shape), dt, shape) for r in range(n)]
            root = (len(shape) + 2) % n
            b = variant(xs[me].copy(), who)
            got = cl.broadcast(b, root)
            c.equal(np.array(got), xs[root], f"broadcast who={who} {dname(dt)} {shape} root={root}")
            c.ok(got is b, f"broadcast returns x {dname(dt)} {shape}")
            want = np.stack(xs) if shape == () else np.concatenate(xs)
            got = cl.all_gather(variant(xs[me], who))
            c.equal(got, want, f"all_gather who={who} {dname(dt)} {shape}")
            o = np.full_like(want, 0)
            c.ok(cl.all_gather(variant(xs[me], who), out=o) is o, f"all_gather out= returns out {dname(dt)} {shape}")
            c.equal(o, want, f"all_gather out= who={who} {dname(dt)} {shape}")
            if shape != ():  # in place: x is this rank's block of out
                o = np.full_like(want, 0)
                mine = o[me * shape[0]:(me + 1) * shape[0]]
                mine[...] = xs[me]
                cl.all_gather(mine, out=o)
                c.equal(o, want, f"all_gather in place who={who} {dname(dt)} {shape}")
            cl.barrier()
        for op in ("sum", "max", "bxor"):  # reduce_scatter: one call by recursive halving at n = 2, 4, 8
            if not legal(op, dt) or n == 1:
                continue
            xs = [gen(c.rng(r, "rs", op, dname(dt)), dt, (n * 3, 2), kind_for(op)) for r in range(n)]
            got = cl.reduce_scatter(variant(xs[me], who), op)
            c.equal(got, expected_reduce(xs, op)[me * 3:(me + 1) * 3], f"reduce_scatter who={who} {op} {dname(dt)}",
                    record=False)
    if who == -1 and n > 1:
        python_only = set() if n in (2, 4, 8) else {"_reduce_scatter"}  # doubling (n=3)
        c.ok(set(slow) <= python_only, "all on the one-call path",
             f"took the Python path for {sorted(set(slow) - python_only)}")

# Program order: a blocking collective behind a queued i-collective of the same group.
x = np.full(3, me + 1.0)
reqs = [cl.iall_reduce(x * k) for k in range(1, 6)]
last = cl.all_reduce(x * 10)
total = sum(r + 1.0 for r in range(n))
for k, r in enumerate(reqs, 1):
    c.equal(r.wait(), np.full(3, k * total), f"queued iall_reduce #{k}")
c.equal(last, np.full(3, 10 * total), "blocking all_reduce after queued ones")
c.finish()
