"""all_sum of MLX arrays: MLX's own ring backend against commlib.mlx (and commlib's API on NumPy).

usage: bash benchmarks/mlx_ring.sh [ROUNDS]            (interleaves the engines, prints the table)
   or: python benchmarks/mlx_ring.py --engine ENGINE [--label L]
       ENGINE ring:         mx.distributed over MLX's ring backend (ranks started with MLX_RANK and
                            MLX_HOSTFILE by mlx_ring.sh)
              commlib-mlx:  commlib.mlx under commrun, the same MLX arrays
              commlib-api:  commlib.all_sum on NumPy arrays under commrun (no MLX conversion)

For each size (float32), every rank runs 3 untimed calls, then 5 batches of K calls (K from
the size, for ~20 ms a batch), evaluating each result; a batch's time is the slowest rank's mean
per call; rank 0 prints one JSON line per size with the median over batches (µs).
"""
import argparse
import json
import time

import numpy as np

SIZES = (8, 1 << 10, 64 << 10, 1 << 20, 16 << 20)


def calls_for(nbytes):
    return max(3, min(2000, int(20e-3 / (5e-6 + nbytes / 1e9))))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", required=True, choices=("ring", "commlib-mlx", "commlib-api"))
    p.add_argument("--label", default="")
    args = p.parse_args()
    if args.engine == "commlib-api":
        import commlib as cl
        g = cl.init()

        def make(n):
            return np.ones(n, np.float32)

        def one(x):
            return cl.all_sum(x)

        def slowest(t):
            return float(cl.all_max(np.array([t]))[0])
    else:
        import mlx.core as mx
        if args.engine == "ring":
            dist = mx.distributed
            g = dist.init(strict=True, backend="ring")
        else:
            from commlib import mlx as dist
            g = dist.init(strict=True)

        def make(n):
            x = mx.ones(n, dtype=mx.float32)
            mx.eval(x)
            return x

        def one(x):
            y = dist.all_sum(x)
            mx.eval(y)
            return y

        def slowest(t):
            m = dist.all_max(mx.array([t], dtype=mx.float32))
            mx.eval(m)
            return float(m.item())
    for nbytes in SIZES:
        x = make(nbytes // 4)
        for _ in range(3):
            one(x)
        k = calls_for(nbytes)
        batches = []
        for _ in range(5):
            slowest(0.0)  # every rank starts the batch together
            t0 = time.perf_counter()
            for _ in range(k):
                one(x)
            batches.append(slowest((time.perf_counter() - t0) / k))
        if g.rank() == 0:
            print(json.dumps({"label": args.label, "engine": args.engine, "n": g.size(), "bytes": nbytes,
                              "us": round(float(np.median(batches)) * 1e6, 3)}), flush=True)


if __name__ == "__main__":
    main()
