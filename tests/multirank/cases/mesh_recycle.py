"""Large mesh results live on recycled buffers (as cl.all_gather's do): never one still held.

usage: mesh_recycle.py SEED

Replicated ShardedArrays, mesh.all_gather results (tiled and stacked) and views of them, each
over 1 MiB, are kept while many more of the same size are made; every kept one must still hold
its own values at the end.
"""
import numpy as np

import commlib as cl
from commlib.mesh import Mesh, shard
from _common import Checker

c = Checker("mesh_recycle")
n, me = c.size, c.rank
mesh = Mesh((n,), ("x",))
rows, cols = 64 * n, 4096  # float32: 1 MiB per rank block at least, the gathered result n times that


def glob(k):
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + k


kept = []
for k in range(6):
    a = shard(glob(k), mesh, ("x", None))
    full = shard(a, mesh, (None, None))  # one all_gather
    tiled = mesh.all_gather(a.local, "x", axis=0, tiled=True)
    stacked = mesh.all_gather(a.local, "x", axis=1)  # moveaxis: a view of the gathered buffer
    if k % 2 == 0:
        kept.append((k, full, tiled, stacked[:, -1]))  # the last rank's block, a view
for k, full, tiled, col in kept:
    want = glob(k)
    c.equal(full.local, want, f"replicated ShardedArray #{k} kept")
    c.equal(tiled, want, f"tiled all_gather #{k} kept")
    c.equal(col, want.reshape(n, rows // n, cols)[-1], f"view of a stacked all_gather #{k} kept")
c.finish()
