"""Latency of one group's collectives: the median of 31 batches, the slowest rank's.

usage: commrun -n N python benchmarks/group_latency.py

8 B and 64 KiB all_reduce, 1 MiB broadcast from rank 0, 4 MiB all_reduce; rank 0 prints
microseconds per call. To compare two versions, alternate runs of each (PYTHONPATH=<tree>).
"""
import time, numpy as np, commlib as cl
w = cl.init(); me, n = w.rank(), w.size()
out = []
for nbytes, batch, kind in ((8, 100, "ar"), (65536, 20, "ar"), (1 << 20, 5, "bc"), (4 << 20, 2, "ar")):
    x = np.ones(nbytes // 8)
    f = (lambda: cl.all_reduce(x)) if kind == "ar" else (lambda: cl.broadcast(x, root=0))
    for _ in range(10): f()
    ts = []
    for b in range(31):
        cl.barrier(); t = time.perf_counter()
        for _ in range(batch): f()
        ts.append((time.perf_counter() - t) / batch)
    dt = cl.all_reduce(np.array([np.median(ts)]), op="max")[0]
    out.append(f"{kind}{nbytes}:{dt*1e6:.1f}")
if me == 0: print(" ".join(out))
