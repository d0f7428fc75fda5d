"""Rank 1 exits with code 7 after some all-reduces; the others loop in all_reduce until they fail.

usage: rank_exits.py MARKER   (MARKER only tags the command line, for the leftover check)
Every other rank prints `rank R: caught TYPE: FIRST LINE | ...` and exits 3.
"""
import sys

import numpy as np

import commlib as cl

g = cl.init(strict=True)
r = g.rank()
x = np.ones(1000)
try:
    for i in range(100_000):  # bounded: the failure comes after 50
        cl.all_reduce(x)
        if r == 1 and i == 50:
            sys.exit(7)
except cl.CommError as exc:
    print(f"rank {r}: caught {type(exc).__name__}: {' | '.join(str(exc).splitlines())}", flush=True)
    sys.exit(3)
print(f"rank {r}: no failure seen", flush=True)
sys.exit(4)
