"""A size-1 group: every collective is the identity (under `commrun -n 1` or with no launcher at all).

usage: single.py SEED
"""
import os

import numpy as np

import commlib as cl

launched = "COMMLIB_RANK" in os.environ
if not launched:
    try:
        cl.init(strict=True)
    except cl.CommError as err:
        print(f"init(strict=True) outside a launcher: CommError: {err}")
    else:
        raise SystemExit("init(strict=True) without a launcher did not raise CommError")

from _common import DTYPES, OPS, Checker, dname, expected_reduce, gen, kind_for, legal  # noqa: E402

c = Checker("single")
c.ok(c.size == 1 and c.rank == 0, "size-1 group", f"rank {c.rank} of {c.size}")
c.ok(cl.init() is c.g, "init() is idempotent", "a second init() returned another group")
c.ok(cl.is_available() is True, "is_available()")
for dt in DTYPES:
    for shape in ((), (0,), (7,), (3, 4)):
        label = f"{dname(dt)} shape={shape}"
        x = gen(c.rng("x", dname(dt), shape), dt, shape)
        keep = x.copy()
        for op in OPS:
            if not legal(op, dt):
                c.raises(ValueError, f"all_reduce {op} {label} (illegal pair)", cl.all_reduce, x, op)
                continue
            if op in ("land", "lor") and dt.kind != "b":
                continue  # logical_ops_give_0_1 (all_reduce.py) covers land/lor on a single rank
            xo = gen(c.rng("x", dname(dt), shape, op), dt, shape, kind_for(op))
            c.equal(cl.all_reduce(xo, op), expected_reduce([xo], op), f"all_reduce {op} {label}")
            y = xo.copy()
            c.ok(cl.all_reduce(y, op, out=y) is y, f"all_reduce {op} {label} out=x", "did not return x")
            c.equal(y, expected_reduce([xo], op), f"all_reduce {op} {label} in place")
        c.equal(cl.all_sum(x), x, f"all_sum {label}")
        c.equal(cl.all_gather(x), x.reshape(1) if x.ndim == 0 else x, f"all_gather {label}")
        if x.ndim:
            c.equal(cl.reduce_scatter(x), x, f"reduce_scatter {label}")
        b = x.copy()
        c.ok(cl.broadcast(b) is b, f"broadcast {label}", "did not return x")
        c.equal(b, x, f"broadcast {label} value")
        c.equal(cl.sendrecv(x, 0, 0), x, f"sendrecv to self {label}")
        c.equal(x, keep, f"{label} input untouched")
cl.barrier()
c.ok(cl.iprobe() is None, "iprobe on an idle size-1 group", "returned a Status")
cl.send(np.arange(3), 0, tag=2)
st = cl.probe()
c.ok((st.source, st.tag, st.nbytes) == (0, 2, 24), "probe after send to self", repr(st))
c.equal(cl.recv((3,), np.int64, 0, 2), np.arange(3), "recv from self")
c.finish()
