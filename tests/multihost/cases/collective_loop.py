"""All-reduces in a loop (bounded: 150 s) until the job fails; prints how this rank saw the failure.

usage: collective_loop.py MARKER   (MARKER only tags the command line, for the leftover check)
Prints `rank R: looping` once the loop runs, then `rank R: caught TYPE: FIRST LINE` (and the full
message) when a collective fails, and exits 3.
"""
import sys
import time

import numpy as np

import commlib as cl

g = cl.init(strict=True)
r, n = g.rank(), g.size()
x = np.arange(20_000, dtype=np.float64) + r
want = np.arange(20_000, dtype=np.float64) * n + n * (n - 1) / 2
end = time.monotonic() + 150
i = 0
try:
    while time.monotonic() < end:
        assert np.array_equal(cl.all_reduce(x), want)
        i += 1
        if i == 20:
            print(f"rank {r}: looping", flush=True)
except cl.CommError as exc:
    text = str(exc)
    print(f"rank {r}: caught {type(exc).__name__}: {' | '.join(text.splitlines())}", flush=True)
    sys.exit(3)
print(f"rank {r}: the loop ended without a failure after {i} all-reduces", flush=True)
sys.exit(4)
