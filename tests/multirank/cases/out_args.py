"""The out= arguments of reduce, reduce_scatter, gather, scatter (and their i variants): results land in
the caller's array, which is returned; a wrong out raises ValueError on the rank that passed it.

usage: out_args.py SEED
"""
import numpy as np

import commlib as cl
from _common import Checker

c = Checker("out_args")
n, me = c.size, c.rank
xs = [np.arange(6 * n, dtype=np.float64) * (r + 1) for r in range(n)]
total = sum(xs)
for root in range(n):
    o = np.full(6 * n, np.nan)
    got = cl.reduce(xs[me], "sum", root, out=o if me == root else None)
    if me == root:
        c.ok(got is o, f"reduce root={root} returns out")
        c.equal(o, total, f"reduce out= root={root}", record=False)
    else:
        c.ok(got is None, f"reduce root={root} gives None off the root")
    o = np.full(6 * n, np.nan)
    got = cl.ireduce(xs[me], "sum", root, out=o).wait()
    if me == root:
        c.equal(o, total, f"ireduce out= root={root}", record=False)
    o = np.full(6 * n, np.nan)
    got = cl.gather(xs[me][:6], root, out=o)
    if me == root:
        c.ok(got is o, f"gather root={root} returns out")
        c.equal(o, np.concatenate([x[:6] for x in xs]), f"gather out= root={root}", record=False)
    mine = np.full(6, np.nan)
    got = cl.scatter(xs[root] if me == root else None, root, out=mine)
    c.ok(got is mine, f"scatter root={root} returns out")
    c.equal(mine, xs[root][6 * me:6 * (me + 1)], f"scatter out= root={root}", record=False)
    mine = np.full(6, np.nan)
    cl.iscatter(xs[root] if me == root else None, root, out=mine).wait()
    c.equal(mine, xs[root][6 * me:6 * (me + 1)], f"iscatter out= root={root}", record=False)
o = np.full(6, np.nan)
c.ok(cl.reduce_scatter(xs[me], out=o) is o, "reduce_scatter returns out")
c.equal(o, total[6 * me:6 * (me + 1)], "reduce_scatter out=", record=False)
o = np.full(6, np.nan)
cl.ireduce_scatter(xs[me], out=o).wait()
c.equal(o, total[6 * me:6 * (me + 1)], "ireduce_scatter out=", record=False)
# a bad out raises ValueError before anything is sent (every rank passes the same kind of bad out)
for label, call in (("reduce_scatter out of another dtype", lambda: cl.reduce_scatter(xs[me], out=np.empty(6, np.float32))),
                    ("reduce_scatter out overlapping x", lambda: cl.reduce_scatter(xs[me], out=xs[me][:6])),
                    ("scatter out not contiguous", lambda: cl.scatter(xs[0] if me == 0 else None, 0,
                                                                   out=np.empty(12)[::2]))):
    try:
        call()
    except ValueError:
        c.ok(True, label)
    else:
        c.ok(False, label, "no ValueError")
cl.barrier()
c.finish()
