"""A mixed job meant for many ranks on few cores (n=8 on 2): every core collective, small and large.

usage: mixed.py SEED
"""
import time

import numpy as np

import commlib as cl
from _common import Checker, every_rank, expected_reduce, gen

c = Checker("mixed")
n, me = c.size, c.rank
F32, I64, U8 = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.uint8)


def inputs(label, dt, shape, kind="any"):
    return every_rank(c.seed, n, label, dt, shape, kind)


for rnd in range(3):
    for op, dt, size in (("sum", I64, 3), ("max", F32, 1000), ("sum", F32, 1 << 20), ("bxor", U8, 300001),
                         ("min", np.dtype(np.float16), 70000), ("prod", np.dtype(np.complex64), 17)):
        xs = inputs(("ar", rnd, op, size), dt, (size,), {"sum": "small", "prod": "prod"}.get(op, "any"))
        c.equal(cl.all_reduce(xs[me], op), expected_reduce(xs, op), f"round {rnd} all_reduce {op} {dt} {size}")
    for size in (1, 5000, 200001):
        xs = inputs(("ag", rnd, size), F32, (size,))
        c.equal(cl.all_gather(xs[me]), np.concatenate(xs), f"round {rnd} all_gather {size}")
    xs = inputs(("rs", rnd), I64, (n * 4001,))
    c.equal(cl.reduce_scatter(xs[me]), expected_reduce(xs, "sum")[me * 4001:(me + 1) * 4001],
            f"round {rnd} reduce_scatter", record=False)
    for root in {0, n - 1, (3 + rnd) % n}:
        for size in (7, 1 << 20):
            src = gen(c.rng("bc", rnd, root, size), F32, (size,))
            x = src.copy() if me == root else np.zeros(size, F32)
            c.equal(cl.broadcast(x, root), src, f"round {rnd} broadcast root={root} size={size}")
    time.sleep(0.02 * ((me + rnd) % n))  # staggered entry, what is tested: no rank leaves before the last enters
    entered = time.time()
    cl.barrier()
    left = time.time()
    t = cl.all_gather(np.array([entered, left])).reshape(n, 2)
    c.ok(t[:, 1].min() >= t[:, 0].max(), f"round {rnd} barrier", "a rank left before the last entered")
    for k in (1, n // 2 or 1):
        for size in (100, 1 << 19):
            x = gen(c.rng("sr", rnd, k, me, size), F32, (size,))
            got = cl.sendrecv(x, (me + k) % n, (me - k) % n, tag=k)
            c.equal(got, gen(c.rng("sr", rnd, k, (me - k) % n, size), F32, (size,)),
                    f"round {rnd} sendrecv shift {k} size={size}", record=False)
c.finish()
