"""Every rank ends with bit-identical results, also when ranks hold NaNs with different sign bits
(e.g. np.nan on one rank, the result of 0.0/0.0 or -np.nan on another).

usage: nan_bits.py SEED
"""
import numpy as np

import commlib as cl
from _common import FLOATS, Checker, digest, dname

c = Checker("nan_bits")
n, me = c.size, c.rank
for dt in FLOATS:
    for op in ("sum", "prod", "min", "max"):
        for size in (4, 70001):
            v = np.full(size, np.nan, np.float32)
            if me % 2:
                v = -v  # odd ranks: NaN with the sign bit set
            res = cl.all_reduce(v.astype(dt), op)
            c.ok(np.all(np.isnan(res.astype(np.float32))), f"signed NaN {op} {dname(dt)} size={size}",
                 "NaN did not propagate")
            c.digests.append((f"signed NaN {op} {dname(dt)} size={size} (bytes must agree)", digest(res)))
c.finish()
