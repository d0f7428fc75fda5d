"""Measure where each latency algorithm stops beating its bandwidth twin.

    commrun -n 2 benchmarks/crossover.py [--repeats 5]
    commrun -n 4 benchmarks/crossover.py
    commrun -n 4 benchmarks/crossover.py --kinds all_gather,rabenseifner
    commrun -n 8 benchmarks/crossover.py --kinds gather,scatter,all_to_all

For each size, times all_reduce with doubling vs ring, and broadcast and
reduce with tree vs chain, all_gather with Bruck vs ring and all_reduce with
Rabenseifner vs ring (the size is the gathered result), gather and scatter
with the binomial tree vs linear (the size is the gathered / scattered
buffer: each rank gives or gets size / n) and all_to_all with Bruck vs
pairwise (the size is each rank's whole send buffer, n blocks), interleaved
in one job (the algorithm is forced through commlib._algorithms' override
table, as COMMLIB_ALGO_* would), median over iterations and repeats. Rank 0
prints one line per size with the faster algorithm; the thresholds in
commlib/_algorithms/__init__.py come from these tables (benchmarks/RESULTS.md,
"Algorithm crossover").

Each timing runs max(5, min(--max-iters, --budget / size)) iterations
(default 200 and 8 MiB).
"""
import argparse
import time

import numpy as np

import commlib as cl
from commlib import _algorithms

PAIRS = {"all_reduce": ("doubling", "ring"), "broadcast": ("tree", "chain"), "reduce": ("tree", "chain"),
         "all_gather": ("bruck", "ring"), "rabenseifner": ("rabenseifner", "ring"),
         "halving": ("rabenseifner", "doubling"), "gather": ("tree", "linear"), "scatter": ("tree", "linear"),
         "all_to_all": ("bruck", "pairwise")}
KIND = {"rabenseifner": "all_reduce", "halving": "all_reduce"}  # a pair that forces another collective's choice


def _rearm():
    """The one-call path (blocking collectives up to 64 KiB in one call) takes the plans chosen when it
    was armed, at the group's first collective: arm it again, so that small sizes run the algorithm
    forced now (it takes none of a kind whose forced algorithm is not its own, and the Python path
    runs that one)."""
    from commlib._api import collectives

    collectives._arm(collectives._g(None))


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
        elif kind == "gather":  # x: the gathered result on root; each rank gives its block of it
            k = x.size // g.size()
            r = g.rank()
            cl.gather(x[r * k:(r + 1) * k], root=0, out=x if r == 0 else None)
        elif kind == "scatter":  # x: root's whole buffer; each rank gets its block of it (out: no metadata first)
            k = x.size // g.size()
            r = g.rank()
            cl.scatter(x, root=0, out=x[r * k:(r + 1) * k])
        elif kind == "all_to_all":  # x: this rank's whole send buffer, n blocks
            cl.all_to_all(x)
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
    ap.add_argument("--max-iters", type=int, default=200, help="iterations per timing at most (at least 5)")
    ap.add_argument("--budget", type=int, default=8 << 20,
                    help="bytes per timing: size * iterations, within [5, --max-iters] iterations")
    args = ap.parse_args()
    g = cl.init()
    sizes = args.sizes
    for kind in args.kinds.split(","):
        a, b = PAIRS[kind]
        if g.rank() == 0:
            print(f"# {kind}, n={g.size()}: median us ({a} vs {b})")
        for nbytes in sizes:
            x = np.ones(max(1, nbytes // 4 // g.size()) * g.size(), np.float32)
            iters = max(5, min(args.max_iters, args.budget // nbytes))
            res = {a: [], b: []}
            for _ in range(args.repeats):
                for algo in (a, b):
                    _algorithms._forced[KIND.get(kind, kind)] = algo
                    _rearm()
                    res[algo].append(timed(kind, x, iters, g))
            _algorithms._forced.pop(KIND.get(kind, kind))
            _rearm()
            ta, tb = np.median(res[a]) * 1e6, np.median(res[b]) * 1e6
            if g.rank() == 0:
                print(f"{kind:11s} {nbytes:>9d} B  {a} {ta:9.1f}  {b} {tb:9.1f}  -> {a if ta <= tb else b}",
                      flush=True)


if __name__ == "__main__":
    main()
