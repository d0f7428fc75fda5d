"""One rank of benchmarks/shaped_links.sh and hier_hosts.py: all_reduce, broadcast (commlib: also reduce,
all_to_all and barrier) across namespace hosts
(64 MiB, or each of the sizes SHAPED_NBYTES lists, comma-separated).

    commrun --hosts h1:1,h2:1 --rsh "ip netns exec {host}" shaped_links_rank.py commlib all_reduce
    mpirun ... python shaped_links_rank.py mpi all_reduce        (mpi4py: Open MPI's TCP transport)

Rank 0 prints one `RESULT {json}` line per operation: the median over the timed iterations
(each starts after a barrier) of the slowest rank's time, algbw = bytes / time, and busbw as
nccl-tests defines it (all_reduce: algbw * 2(n-1)/n; broadcast: algbw).
"""
import json
import os
import statistics
import sys
import time

import numpy as np

SIZES = [int(v) for v in os.environ.get("SHAPED_NBYTES", str(64 << 20)).split(",")]  # one RESULT line each
ITERS = int(os.environ.get("SHAPED_ITERS", 5))


def bench(run, barrier, slowest, n, rank, op, algo):
    for nbytes in SIZES:
        bench_one(run, barrier, slowest, n, rank, op, algo, nbytes)


def bench_one(run, barrier, slowest, n, rank, op, algo, nbytes):
    x = np.ones(nbytes // 4, np.float32)
    out = np.empty_like(x)
    run(x, out)  # warm-up: connections, buffers
    times = np.empty(ITERS)
    for i in range(ITERS):
        barrier()
        t = time.perf_counter()
        run(x, out)
        times[i] = time.perf_counter() - t
    # Each iteration's time is its slowest rank's: a root's sends may end in socket buffers
    # long before the last receiver has the data.
    times = slowest(times)
    t = statistics.median(times)
    algbw = nbytes / t
    busbw = algbw * (2 * (n - 1) / n if op == "all_reduce" else 1.0)
    if rank == 0:
        print("RESULT " + json.dumps({"op": op, "algo": algo, "n": n, "nbytes": nbytes, "time_s": t,
                                      "min_s": float(times.min()), "max_s": float(times.max()), "algbw": algbw, "busbw": busbw}),
              flush=True)


def main():
    impl, ops = sys.argv[1], sys.argv[2:]
    if impl == "commlib":
        import commlib as cl

        g = cl.init(strict=True)
        n, rank = g.size(), g.rank()
        slowest = lambda t: cl.all_reduce(t, op="max")  # noqa: E731
        for op in ops:
            if op == "all_reduce":
                bench(lambda x, out: cl.all_reduce(x, out=out), cl.barrier, slowest, n, rank, op,
                      os.environ.get("COMMLIB_ALGO_ALL_REDUCE", "auto"))
            elif op == "broadcast":
                bench(lambda x, out: cl.broadcast(x, root=0), cl.barrier, slowest, n, rank, op,
                      os.environ.get("COMMLIB_ALGO_BROADCAST", "auto"))
            elif op == "reduce":
                bench(lambda x, out: cl.reduce(x, root=0), cl.barrier, slowest, n, rank, op,
                      os.environ.get("COMMLIB_ALGO_REDUCE", "auto"))
            elif op == "all_to_all":  # (the size: what each rank sends in all)
                bench(lambda x, out: cl.all_to_all(x), cl.barrier, slowest, n, rank, op,
                      os.environ.get("COMMLIB_ALGO_ALL_TO_ALL", "auto"))
            elif op == "barrier":  # (the size is only a label: timed barriers, each after a barrier)
                bench(lambda x, out: cl.barrier(), cl.barrier, slowest, n, rank, op,
                      os.environ.get("COMMLIB_ALGO_BARRIER", "auto"))
    elif impl == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        n, rank = comm.Get_size(), comm.Get_rank()

        def slowest(t):
            out = np.empty_like(t)
            comm.Allreduce(t, out, op=MPI.MAX)
            return out
        for op in ops:
            if op == "all_reduce":
                bench(lambda x, out: comm.Allreduce(x, out, op=MPI.SUM), comm.Barrier, slowest, n, rank, op, "ompi")
            elif op == "broadcast":
                bench(lambda x, out: comm.Bcast(x, root=0), comm.Barrier, slowest, n, rank, op, "ompi")
    else:
        raise SystemExit(f"unknown implementation {impl!r}: commlib or mpi")


if __name__ == "__main__":
    main()
