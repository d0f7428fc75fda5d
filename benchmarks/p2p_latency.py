"""Point-to-point latency between ranks 0 and 1: half a ping-pong's round trip, median of 31 batches.

usage: commrun -n 2 python benchmarks/p2p_latency.py

Blocking send/recv of 8 B, 64 KiB and 1 MiB on the world, then the same on a copy of the world
(its frames share the world's connection: the receiver matches each in the group its header
names). Rank 0 prints microseconds. To compare two versions, alternate runs of each
(PYTHONPATH=<tree>).
"""
import time

import numpy as np

import commlib as cl

w = cl.init()
me = w.rank()
copy = w.split(0)
out = []
for name, g in (("world", w), ("copy", copy)):
    for nbytes, batch in ((8, 200), (65536, 40), (1 << 20, 6)):
        x = np.ones(nbytes // 8)
        ts = []
        for b in range(41):
            cl.barrier()
            t = time.perf_counter()
            for _ in range(batch):
                if me == 0:
                    cl.send(x, 1, group=g)
                    cl.recv(x.shape, x.dtype, 1, group=g)
                elif me == 1:
                    cl.recv(x.shape, x.dtype, 0, group=g)
                    cl.send(x, 0, group=g)
            if b >= 10:  # the first ten: warm-up
                ts.append((time.perf_counter() - t) / batch / 2)
        out.append(f"{name}{nbytes}:{np.median(ts) * 1e6:.1f}")
if me == 0:
    print(" ".join(out))
