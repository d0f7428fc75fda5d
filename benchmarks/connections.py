"""Connections and descriptors a rank holds after collectives on several groups.

usage: commrun -n N python benchmarks/connections.py [ROWS]

The world, a 2-D mesh's two axes (ROWS x N/ROWS: split by row and by column) and two copies of
the world each run an all_reduce of 8 B and of 4 MiB, an all_gather and a broadcast of 1 MiB
from their last rank, and a ring exchange (sendrecv with both neighbours in the group). Rank 0
prints the collective and the point-to-point connections (outgoing + incoming) each rank holds,
the most and the mean over ranks, and the descriptors its process has open. Run it on two
versions to compare: the same program, only the transport differs.
"""
import os
import sys

import numpy as np

import commlib as cl

w = cl.init()
me, n = w.rank(), w.size()
rows = int(sys.argv[1]) if len(sys.argv) > 1 else 2
if n % rows:
    raise SystemExit(f"{n} ranks do not make {rows} rows")
groups = [w, w.split(me // (n // rows)), w.split(me % (n // rows)), w.split(0), w.split(0)]
for g in groups:
    cl.all_reduce(np.ones(1), group=g)
    cl.all_reduce(np.ones(1 << 19), group=g)
    cl.all_gather(np.full(1000, float(me)), group=g)
    cl.broadcast(np.zeros(1 << 17), root=g.size() - 1, group=g)
    if g.size() > 1:
        cl.sendrecv(np.ones(4), (g.rank() + 1) % g.size(), (g.rank() - 1) % g.size(), group=g)
cl.barrier()

ep = w.channel.ep
keys = list(ep._out) + list(ep._in)
coll = sum(1 for k in keys if k[1] != 1)  # CH_P2P is 1
p2p = sum(1 for k in keys if k[1] == 1)
fds = len(os.listdir("/proc/self/fd"))
every = cl.all_gather(np.array([coll, p2p, fds], np.int64)).reshape(n, 3)
if me == 0:
    print(f"{n} ranks, {len(groups)} groups (world, {rows} rows, {n // rows} columns, 2 copies): collective "
          f"connections a rank: max {every[:, 0].max()}, mean {every[:, 0].mean():.1f} "
          f"(one each way per peer: {2 * (n - 1)}); point-to-point: max {every[:, 1].max()}, "
          f"mean {every[:, 1].mean():.1f}; open descriptors a rank: max {every[:, 2].max()}, "
          f"mean {every[:, 2].mean():.1f}")
