"""CPU burnt while a rank waits in a collective (or a receive) for a late peer, and the latency that buys.

    commrun -n 2 benchmarks/idle_wait.py [--gaps-ms 0 0.1 1 10] [--seconds 1] [--op all_reduce|recv|irecv]
    COMMLIB_SPIN_US=50 commrun -n 2 benchmarks/idle_wait.py     # the fixed spin, for comparison

For each gap, every rank loops over an 8 B all_reduce while the last rank
sleeps `gap` before each call, so the others wait about that long inside the
collective. With --op recv (irecv: posted, then waited on) the last rank instead
sends each of the others an 8 B message after its sleep, and they wait for it in
a blocking receive. Per waiting rank: CPU seconds (time.process_time, all threads)
over wall seconds of the loop, i.e. the cores it burnt while doing nothing
but wait. Gap 0 is the back-to-back latency (median µs per call) with its CPU.
Rank 0 prints one line per gap: median latency, and the worst waiting rank's cores.
"""
import argparse
import time

import numpy as np

import commlib as cl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gaps-ms", nargs="+", type=float, default=[0, 0.1, 1, 10])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--op", choices=("all_reduce", "recv", "irecv"), default="all_reduce")
    args = ap.parse_args()
    g = cl.init()
    n, r = g.size(), g.rank()
    x = np.ones(2, np.float32)
    late = n - 1

    def call():
        if args.op == "all_reduce":
            cl.all_reduce(x, out=x)
        elif r == late:
            for dst in range(n - 1):
                cl.send(x, dst, tag=5)
        elif args.op == "recv":
            cl.recv_into(x, late, tag=5)
        else:
            cl.irecv(x.shape, x.dtype, late, tag=5).wait()
    if r == 0:
        print(f"# n={n} {args.op}: gap_ms  median_us_per_call  worst_waiting_rank_cores")
    for gap in args.gaps_ms:
        gap_s = gap * 1e-3
        iters = max(20, min(20000, int(args.seconds / max(gap_s, 20e-6))))
        for _ in range(20):
            call()
        cl.barrier()
        ts = np.empty(iters)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for i in range(iters):
            if r == late and gap_s > 0:
                time.sleep(gap_s)
            t = time.perf_counter()
            call()
            ts[i] = time.perf_counter() - t
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        waiting = r != late or gap_s == 0
        cores = cl.all_gather(np.array([cpu / wall if waiting else 0.0]))
        med = cl.all_reduce(np.array([np.median(ts) * 1e6 if r != late or gap_s == 0 else 0.0]), op="max")
        if r == 0:
            print(f"{gap:8.2f}  {float(med[0]):10.1f}  {float(cores.max()):8.3f}", flush=True)
    cl.finalize()


if __name__ == "__main__":
    main()
