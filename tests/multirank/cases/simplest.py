"""The two programs every user writes first: hello (init, print the rank, exit) and a ring whose
receives are posted before the sends. Prints `hello R of N` and each rank's checks line.

usage: simplest.py SEED
"""
import sys

import numpy as np

import commlib as cl

g = cl.init()
r, n = g.rank(), g.size()
print(f"hello {r} of {n}", flush=True)

right, left = (r + 1) % n, (r - 1) % n
for nbytes in (8, 1 << 20):  # one small message, one of many rings' worth
    count = nbytes // 8
    inbox = cl.irecv((count,), np.float64, left, tag=7)
    out = cl.isend(np.full(count, r, np.float64), right, tag=7)
    got = inbox.wait()
    out.wait()
    if not np.all(got == left):
        sys.exit(f"rank {r}: {nbytes} B from rank {left}: got {got[:3]}")
print(f"rank {r}: 2 checks ok", flush=True)
