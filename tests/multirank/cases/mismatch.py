"""Mismatched collectives: MismatchError on every rank, fast, naming both sides; the group then stays failed.

usage: mismatch.py SEED SCENARIO
The last rank deviates from the others. Each rank prints one line
    MISMATCH-OK rank R after T s: <message>
and exits 0 when it got a MismatchError; any other outcome exits non-zero.
"""
import sys
import time

import numpy as np

import commlib as cl

g = cl.init()
n, me = g.size(), g.rank()
scenario = sys.argv[2]
odd = me == n - 1  # the deviating rank


def call():
    if scenario == "collective":  # rank 0 all_reduce float32 1024 vs broadcast int64 8
        if odd:
            return cl.broadcast(np.zeros(8, np.int64), 0)
        return cl.all_reduce(np.ones(1024, np.float32))
    if scenario == "dtype":
        return cl.all_reduce(np.ones(1024, np.int32 if odd else np.float32))
    if scenario == "count":
        return cl.all_reduce(np.ones(1000 if odd else 1024, np.float32))
    if scenario == "op":
        return cl.all_reduce(np.ones(1024, np.float32), "max" if odd else "sum")
    if scenario == "root":
        return cl.broadcast(np.ones(16, np.float64), 1 if odd else 0)
    if scenario == "shape":  # same element count, different shape
        return cl.all_gather(np.ones((3, 4) if odd else (4, 3), np.int16))
    if scenario == "large":  # mismatch on a large ring all_reduce
        return cl.all_reduce(np.ones(1 << 20, np.float64 if odd else np.float32))
    raise SystemExit(f"unknown scenario {scenario!r}")


t0 = None
try:
    # Everyone is connected and in step before the bad call. A rank may leave the barrier while
    # another is still finishing it: that one can hear of the mismatch the others found inside
    # its barrier, and raises it there (the group has failed; the message names the bad call).
    cl.barrier()
    t0 = time.monotonic()
    call()
except cl.MismatchError as err:
    took = time.monotonic() - t0 if t0 is not None else 0.0
    print(f"MISMATCH-OK rank {me} after {took:.2f} s: {err}", flush=True)
except cl.CommError as err:
    print(f"WRONG-CLASS rank {me}: {type(err).__name__}: {err}", flush=True)
    sys.exit(3)
else:
    print(f"NO-ERROR rank {me}: the mismatched call returned", flush=True)
    sys.exit(4)
# The failure is sticky: the next call raises at once instead of hanging or returning data.
t1 = time.monotonic()
try:
    cl.all_reduce(np.ones(4, np.float32))
except cl.CommError as err:
    print(f"STICKY-OK rank {me} after {time.monotonic() - t1:.2f} s: {type(err).__name__}", flush=True)
else:
    print(f"NOT-STICKY rank {me}: a collective after the mismatch returned", flush=True)
    sys.exit(5)
