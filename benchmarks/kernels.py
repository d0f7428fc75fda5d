"""commlib reduction kernels vs numpy ufuncs with out=, in one process.

    python benchmarks/kernels.py [--mib 64] [--repeats 7]

For each (dtype, op) it times `_kernels.reduce_into(a, b, op)` and the
numpy ufunc `f(a, b, out=a)` on arrays of --mib MiB each, interleaved, and
reports the median. GB/s counts 3 x the array bytes per call (read dst, read
src, write dst). A plain np.copyto line (2 x bytes: read + write) is the
memory-bandwidth reference.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from commlib import _kernels as K  # noqa: E402

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

UFUNC = {"sum": np.add, "max": np.maximum, "bxor": np.bitwise_xor, "land": np.logical_and}
CASES = [
    ("float32", "sum"), ("float32", "max"), ("float32", "land"),
    ("float64", "sum"), ("float64", "max"),
    ("int32", "sum"), ("int32", "max"), ("int32", "bxor"),
    ("float16", "sum"), ("float16", "max"),
    ("bfloat16", "sum"), ("bfloat16", "max"),
]


def timed(fn, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return ts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=64, help="size of each array (MiB)")
    ap.add_argument("--repeats", type=int, default=7, help="timed calls per contestant (median)")
    args = ap.parse_args()
    nbytes = int(args.mib * 2**20)
    rng = np.random.default_rng(0)

    print(f"# arrays of {args.mib:g} MiB, median of {args.repeats} interleaved calls; "
          f"GB/s = 3 x array bytes / time (read dst + read src + write dst)")
    print(f"# commlib simd level: {K.simd_level()} ({K.SIMD_NAMES[K.simd_level()]})")

    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    ts = timed(lambda: np.copyto(dst, src), args.repeats)
    print(f"# memcpy reference (np.copyto, 2 x bytes): {2 * nbytes / statistics.median(ts) / 1e9:.2f} GB/s")
    del src, dst

    print(f"| {'dtype':9} | {'op':5} | {'commlib GB/s':>12} | {'numpy GB/s':>10} | {'ratio':>6} |")
    print(f"|{'-' * 11}|{'-' * 7}|{'-' * 14}|{'-' * 12}|{'-' * 8}|")
    for dtname, op in CASES:
        if dtname == "bfloat16":
            if ml_dtypes is None:
                print(f"| {dtname:9} | {op:5} | skipped: ml_dtypes not installed |")
                continue
            dt = np.dtype(ml_dtypes.bfloat16)
        else:
            dt = np.dtype(dtname)
        n = nbytes // dt.itemsize
        if dt.kind == "i":
            a = rng.integers(-1000, 1000, n, dtype=dt)
            b = rng.integers(-1000, 1000, n, dtype=dt)
        else:
            # small values so repeated sums stay finite and ordinary
            a = rng.random(n, dtype=np.float32).astype(dt)
            b = (rng.random(n, dtype=np.float32) * 1e-3).astype(dt)
        f = UFUNC[op]
        run_np = lambda: f(a, b, out=a)  # noqa: E731  (land: numpy casts its bool result)
        run_cl = lambda: K.reduce_into(a, b, op)  # noqa: E731
        run_np()
        run_cl()  # warm up, fault pages in
        t_cl, t_np = [], []
        for _ in range(args.repeats):
            t_cl += timed(run_cl, 1)
            t_np += timed(run_np, 1)
        gb_cl = 3 * a.nbytes / statistics.median(t_cl) / 1e9
        gb_np = 3 * a.nbytes / statistics.median(t_np) / 1e9
        print(f"| {dtname:9} | {op:5} | {gb_cl:12.2f} | {gb_np:10.3f} | {gb_cl / gb_np:5.2f}x |", flush=True)
        del a, b


if __name__ == "__main__":
    main()
