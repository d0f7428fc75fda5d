"""One-sided communication's round trips, and what an open window costs point-to-point.

    commrun -n 2 python benchmarks/rma_epochs.py [--epochs 300] [--repeats 5]

Prints, as medians of the repeats (µs):
  epoch      a Lock / Get_accumulate / Unlock epoch on each rank in turn, from rank 0 alone
  epoch-both the same from every rank at once (each target serves while it is an origin too)
  flushes    an epoch of mpi4py's test_rma loop: Lock, Put, Flush, Get_accumulate, Flush, Get, Flush,
             Unlock, from every rank at once on each rank in turn
  pingpong   one way of a blocking 8-byte Send/Recv between ranks 0 and 1, no window open
  pingpong-w the same while a window is open (its service keeps a receive posted)
Runs under mpiexec with mpi4py too (`from mpi4py import MPI` when COMMLIB_BENCH_MPI4PY=1), for reference.
"""
import argparse
import os
import statistics
import time

import numpy as np

if os.environ.get("COMMLIB_BENCH_MPI4PY") == "1":
    from mpi4py import MPI
else:
    from commlib import MPI


def epochs(win, n, rounds, everyone, flushes):
    comm = MPI.COMM_WORLD
    one = np.ones(4, "i")
    res, back = np.empty(4, "i"), np.empty(4, "i")
    comm.Barrier()
    t = time.perf_counter()
    if everyone or comm.Get_rank() == 0:
        for _ in range(rounds):
            for target in range(n):
                win.Lock(target)
                if flushes:
                    win.Put(one, target)
                    win.Flush(target)
                win.Get_accumulate(one, res, target, op=MPI.SUM)
                if flushes:
                    win.Flush(target)
                    win.Get(back, target)
                    win.Flush(target)
                win.Unlock(target)
    comm.Barrier()
    return (time.perf_counter() - t) / (rounds * n) * 1e6


def pingpong(rounds):
    comm = MPI.COMM_WORLD
    me, a = comm.Get_rank(), np.zeros(1, "i8")
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(rounds):
        if me == 0:
            comm.Send(a, 1, 5)
            comm.Recv(a, 1, 5)
        elif me == 1:
            comm.Recv(a, 0, 5)
            comm.Send(a, 0, 5)
    comm.Barrier()
    return (time.perf_counter() - t) / rounds / 2 * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--pings", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    if n < 2:
        raise SystemExit("rma_epochs.py needs 2 ranks or more")
    memory = np.zeros(4, "i")
    got = {k: [] for k in ("epoch", "epoch-both", "flushes", "pingpong", "pingpong-w")}
    for _ in range(a.repeats):  # interleaved: each repeat measures every row once
        got["pingpong"].append(pingpong(a.pings))
        win = MPI.Win.Create(memory, memory.itemsize, comm=comm)
        got["pingpong-w"].append(pingpong(a.pings))
        got["epoch"].append(epochs(win, n, a.epochs, False, False))
        got["epoch-both"].append(epochs(win, n, a.epochs, True, False))
        got["flushes"].append(epochs(win, n, a.epochs // 3, True, True))
        win.Free()
    if comm.Get_rank() == 0:
        for k, v in got.items():
            print(f"{k:11s} {statistics.median(v):8.1f} us  (min {min(v):.1f}, max {max(v):.1f})", flush=True)


if __name__ == "__main__":
    main()
