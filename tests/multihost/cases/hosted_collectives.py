"""Collectives across hosts at the sizes where a host-aware schedule runs, checked against NumPy.

Inputs are integers held in floats (exact in any order of summation), so each rank computes
the expected result itself; every rank must also hold the same bits (a CRC of each result is
gathered). all_reduce: sum/max/prod, in place, a strided input, an i-variant, MPI's Allreduce and
a sub-group from split (its own host layout); then broadcast, reduce and barrier (by host too).
A reduce of 1.28 MB runs by rails where the hosts are equal and the blocks small enough (16 ranks).
Prints `rank R: K checks ok (host H)`.
"""
import socket
import zlib

import numpy as np

import commlib as cl
from commlib import MPI

g = cl.init(strict=True)
r, n = g.rank(), g.size()
ok = 0


PERIOD = 13  # x_of(k, count)[i] depends on i only through i % 13


def x_of(k, count, dtype=np.float64):
    return ((np.arange(count) * 7 + 3 * k) % PERIOD).astype(dtype)


def expected(reduce, count, ranks=None, cast=None):
    """reduce(axis=0) over the inputs of `ranks` (every rank's by default), each first through `cast`,
    as NumPy gives it for whole arrays, but worked out on one period and repeated: O(ranks + count)
    per rank, not O(ranks x count) (16 ranks x 16 MB each on 2 cores was most of the job's CPU)."""
    period = np.stack([x_of(k, PERIOD) for k in (range(n) if ranks is None else ranks)])
    return np.resize(reduce(period if cast is None else cast(period), axis=0), count)


def check(got, want, what, group=g):
    global ok
    got = np.asarray(got)
    assert np.array_equal(got, want), f"rank {r}: {what}: {got[:8]!r}... != {want[:8]!r}..."
    crcs = cl.all_gather(np.array([zlib.crc32(np.ascontiguousarray(got).tobytes())], np.int64), group=group)
    assert len(set(crcs.tolist())) == 1, f"rank {r}: {what}: ranks hold different bits {crcs}"
    ok += 1


for count in (50_000, 300_001, 2_000_000):  # 400 KB, 2.4 MB, 16 MB of float64
    x = x_of(r, count)
    want = expected(np.sum, count)
    check(cl.all_reduce(x), want, f"all_reduce sum {count}")
    check(cl.all_reduce(x.astype(np.int64), op="max"), expected(np.max, count).astype(np.int64), f"max {count}")
    mine = x.copy()
    assert cl.all_reduce(mine, out=mine) is mine
    check(mine, want, f"in place {count}")
    strided = np.stack([x, x], axis=1)[:, 0]
    check(cl.all_reduce(strided), want, f"strided {count}")
    check(cl.iall_reduce(x).wait(), want, f"iall_reduce {count}")
    small = (x % 3 + 1).astype(np.float32)
    check(cl.all_reduce(small, op="prod"), expected(np.prod, count, cast=lambda p: (p % 3 + 1).astype(np.float32)),
          f"prod float32 {count}")

for root in (0, n - 1):  # broadcast (1 MiB: over hosts at 16 ranks, scatter + all-gather by host), reduce
    big = x_of(root, 1 << 17)
    check(cl.broadcast(big if r == root else np.zeros(1 << 17), root=root), big, f"broadcast from {root}")
    for count in (20_000, 160_000):  # 160 KB: by host; 1.28 MB: by rails at 16 ranks on equal hosts
        red = cl.reduce(x_of(r, count), root=root)
        assert (red is None) == (r != root), f"rank {r}: reduce to {root}"
        if r == root:
            assert np.array_equal(red, expected(np.sum, count)), f"rank {r}: reduce of {count} to {root}"
        ok += 1
    cl.barrier()

comm = MPI.COMM_WORLD
x = x_of(r, 300_000)
got = np.empty(300_000)
comm.Allreduce(x, got, op=MPI.SUM)
check(got, expected(np.sum, 300_000), "MPI Allreduce")

sub = g.split(0 if r != 1 else -1)  # every rank but 1: another host layout
if sub is not None:
    members = [k for k in range(n) if k != 1]
    check(cl.all_reduce(x, group=sub), expected(np.sum, 300_000, members), "sub-group", group=sub)

print(f"rank {r}: {ok} checks ok (host {socket.gethostname()})", flush=True)
cl.finalize()
