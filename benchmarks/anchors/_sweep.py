"""The sweep every anchor runs: the same sizes, ops, iteration policy and JSON output.

Each anchor script (mpi_sweep.py, gloo_sweep.py, mlx_sweep.py) wraps its library
in a small backend object and hands it to ``run_sweep``. commlib's own sweep
(``commlib/bench.py``) follows the same rules so that numbers compare.

Statistic: for every timed iteration each rank measures its own time for the
operation (a barrier before each iteration lines the ranks up); the iteration's
time is the maximum over ranks; the reported ``us`` is the median over
iterations. Ping-pong reports rank 0's round trip / 2 (rank 0 ↔ rank 1, the
other ranks only join the barriers).

busbw factors are nccl-tests': all_reduce 2(n-1)/n, all_gather and
reduce_scatter (n-1)/n, broadcast and ping-pong 1. ``nbytes`` is the size of the
all_reduce/broadcast buffer, the full gathered array for all_gather, the input
of reduce_scatter, and the message for ping-pong. GB/s are 1e9 B/s.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

# The sweep's rules (sizes, options, busbw factors, element counts) live in
# commlib.bench, so commlib and every anchor measure exactly the same points.
# commlib is installed in the bench venv (setup_env.sh), as every comparison needs it.
from commlib.bench import (  # noqa: E402,F401  (re-exported for the anchor scripts)
    OPS, MiB, add_sweep_arguments as add_arguments, busbw_factor, default_sizes, element_count,
    parse_size, sizes_from,
)


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Backend:
    """What an anchor provides. ``prepare`` allocates buffers and returns a
    zero-argument callable that performs the operation once, synchronously
    (its result must be complete when it returns), plus a check callable run
    once after the first warm-up iteration (returns None if fine, else a message)."""

    impl = "?"
    rank = 0
    size = 1
    ops: tuple = OPS

    def barrier(self) -> None:
        raise NotImplementedError

    def gather_f64(self, values: np.ndarray) -> np.ndarray:
        """all_gather of a small float64 vector: returns shape (size, len(values)) on every rank."""
        raise NotImplementedError

    def prepare(self, op: str, count: int):
        raise NotImplementedError


def _agree_max(backend: Backend, value: float) -> float:
    return float(backend.gather_f64(np.array([value], dtype=np.float64)).max())


def run_point(backend: Backend, op: str, nbytes_req: int, args) -> dict | None:
    n = backend.size
    count = element_count(op, nbytes_req, n)
    nbytes = count * 4
    run, check = backend.prepare(op, count)
    warm = args.warmup if nbytes < 16 * MiB else min(2, args.warmup)
    last = 0.0
    problem = None
    for i in range(max(1, warm)):
        backend.barrier()
        t0 = time.perf_counter()
        run()
        last = time.perf_counter() - t0
        if i == 0 and args.check and check is not None:
            problem = check()
    # Every rank must agree on the iteration count: derive it from the same gathered numbers.
    t_est = _agree_max(backend, last)
    bad = _agree_max(backend, 1.0 if problem else 0.0)
    iters = int(min(args.max_iters, max(args.min_iters, args.budget / max(t_est, 1e-6))))
    times = np.empty(iters, dtype=np.float64)
    for i in range(iters):
        backend.barrier()
        t0 = time.perf_counter()
        run()
        times[i] = time.perf_counter() - t0
    allt = backend.gather_f64(times)          # (n, iters)
    del run, check
    gc.collect()
    if op == "pingpong":
        per_iter = allt[0] / 2.0
        stat = "median of rank 0 round trip / 2"
    else:
        per_iter = allt.max(axis=0)
        stat = "median of max over ranks"
    sec = float(np.median(per_iter))
    algbw = nbytes / sec / 1e9
    rec = {
        "impl": backend.impl, "op": op, "n": n, "nbytes": nbytes, "us": round(sec * 1e6, 3),
        "algbw": round(algbw, 6), "busbw": round(algbw * busbw_factor(op, n), 6),
        "iters": iters, "min_us": round(float(per_iter.min()) * 1e6, 3), "stat": stat,
    }
    if bad:
        rec["check_failed"] = problem or "on another rank"
    return rec


def run_sweep(backend: Backend, args) -> int:
    n = backend.size
    failed = 0
    for op in args.ops:
        if op not in backend.ops:
            if backend.rank == 0:
                reason = getattr(backend, "skip_reasons", {}).get(op, f"{backend.impl} has no {op}")
                emit({"impl": backend.impl, "op": op, "n": n, "skipped": reason})
            continue
        if op == "pingpong" and n < 2:
            continue
        for nbytes in sizes_from(args):
            rec = run_point(backend, op, nbytes, args)
            if backend.rank == 0:
                emit(rec)
                if "check_failed" in rec:
                    failed += 1
    return 1 if failed else 0


def expected_sum(n: int) -> float:
    """Inputs are filled with (rank + 1); the sum over ranks is n(n+1)/2."""
    return n * (n + 1) / 2.0
