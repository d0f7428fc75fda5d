"""Measure where each latency algorithm stops beating its bandwidth twin.

    commrun -n 2 benchmarks/crossover.py [--repeats 5]
    commrun -n 4 benchmarks/crossover.py
    commrun -n 4 benchmarks/crossover.py --kinds all_gather,rabenseifner

For each size, times all_reduce with doubling vs ring, and broadcast and
reduce with tree vs chain, all_gather with Bruck vs ring and all_reduce with
Rabenseifner vs ring (the size is the gathered result), interleaved in one job (the algorithm is forced
through commlib._algorithms' override table, as COMMLIB_ALGO_* would),
median over iterations and repeats. Rank 0 prints one line per size with the
faster algorithm; the thresholds in commlib/_algorithms/__init__.py come
from these tables (benchmarks/RESULTS.md, "Algorithm crossover").
"""
import argparse
import time

import numpy as np

import commlib as cl
from commlib import _algorithms

PAIRS = {"all_reduce": ("doubling", "ring"), "broadcast": ("tree", "chain"), "reduce": ("tree", "chain"),
         "all_gather": ("bruck", "ring"), "rabenseifner": ("rabenseifner", "ring"),
         "halving": ("rabenseifner", "doubling")}
KIND = {"rabenseifner": "all_reduce", "halving": "all_reduce"}  # a pair that forces another collective's choice


def timed(kind, x, iters, g):
    ts = []
    for _ in range(iters):
        cl.barrier()
        t = time.perf_counter()
        if KIND.get(kind, kind) == "all_reduce":
            cl.all_reduce(x, out=x)
        elif kind == "all_gather":  # x: the gathered result; each rank gives its block of it
            k = x.size // g.size()
            r = g.rank()
            cl.all_gather(x[r * k:(r + 1) * k], out=x)
        elif kind == "broadcast":
            cl.broadcast(x, root=0)
        else:
            cl.reduce(x, root=0)
        ts.append(time.perf_counter() - t)
    # the slowest rank defines the time of a collective
    return float(cl.all_reduce(np.array([np.median(ts)]), op="max")[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", default="all_reduce,broadcast,reduce")
    ap.add_argument("--sizes", nargs="+", type=int, default=[1 << k for k in range(10, 23)],
                    help="bytes (default 1 KiB .. 4 MiB)")
    args = ap.parse_args()
    g = cl.init()
    sizes = args.sizes
    for kind in args.kinds.split(","):
        a, b = PAIRS[kind]
        if g.rank() == 0:
            print(f"# {kind}, n={g.size()}: median us ({a} vs {b})")
        for nbytes in sizes:
            x = np.ones(max(1, nbytes // 4 // g.size()) * g.size(), np.float32)
            iters = max(5, min(200, (8 << 20) // nbytes))
            res = {a: [], b: []}
            for _ in range(args.repeats):
                for algo in (a, b):
                    _algorithms._forced[KIND.get(kind, kind)] = algo
                    res[algo].append(timed(kind, x, iters, g))
            _algorithms._forced.pop(KIND.get(kind, kind))
            ta, tb = np.median(res[a]) * 1e6, np.median(res[b]) * 1e6
            if g.rank() == 0:
                print(f"{kind:11s} {nbytes:>9d} B  {a} {ta:9.1f}  {b} {tb:9.1f}  -> {a if ta <= tb else b}",
                      flush=True)


if __name__ == "__main__":
    main()
