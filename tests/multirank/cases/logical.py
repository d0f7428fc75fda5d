"""land/lor give 0/1 in the input's dtype (API.md), whatever the group size, including 1.

usage: logical.py SEED
"""
import commlib as cl
from _common import DTYPES, Checker, dname, expected_reduce, gen

c = Checker("logical")
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
c.finish()
