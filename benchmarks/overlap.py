"""Does iall_reduce overlap with computation? (issue 5)

    commrun -n 2 benchmarks/overlap.py [--mib 16] [--repeats 7]

Times, on every rank: (a) the all-reduce alone, (b) a numpy computation alone
(matrix products, which release the GIL), and (c) both together: start
iall_reduce, compute, wait. With perfect overlap (c) = max(a, b); with none,
(c) = a + b. Prints the medians and the fraction of the shorter one hidden:
overlap = (a + b - c) / min(a, b).
"""
import argparse
import time

import numpy as np

import commlib as cl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--matrix", type=int, default=420, help="side of the matrices multiplied in the compute part")
    args = ap.parse_args()
    g = cl.init()
    x = np.ones(int(args.mib * (1 << 20)) // 4, np.float32)
    m = np.random.default_rng(g.rank()).standard_normal((args.matrix, args.matrix))

    def compute():
        y = m
        for _ in range(4):
            y = np.tanh(y @ m)
        return y

    def alone_comm():
        cl.all_reduce(x, out=x)

    def both():
        req = cl.iall_reduce(x, out=x)
        compute()
        req.wait()

    res = {"comm": [], "compute": [], "both": []}
    for _ in range(args.repeats):
        for name, fn in (("comm", alone_comm), ("compute", compute), ("both", both)):
            cl.barrier()
            t = time.perf_counter()
            fn()
            res[name].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) * 1e3 for k, v in res.items()}
    worst = cl.all_reduce(np.array([med["comm"], med["compute"], med["both"]]), op="max")
    if g.rank() == 0:
        a, b, c = worst
        print(f"n={g.size()} all_reduce {args.mib:g} MiB float32 vs compute (4 x {args.matrix}^2 matmul+tanh), "
              f"medians of {args.repeats}, slowest rank:")
        print(f"  comm alone {a:8.2f} ms\n  compute    {b:8.2f} ms\n  both       {c:8.2f} ms   "
              f"(sum {a + b:.2f}, perfect overlap {max(a, b):.2f})")
        print(f"  overlap: {(a + b - c) / min(a, b) * 100:5.1f} % of the shorter part hidden")


if __name__ == "__main__":
    main()
