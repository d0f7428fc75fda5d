"""commlib's collective benchmark: an nccl-tests-style sweep.

    commrun -n 4 -m commlib.bench [--sizes 8 1M 64M] [--ops all_reduce pingpong] [--max-mib 64]
    python -m commlib.bench            # outside a launcher: a group of size 1

For float32 all_reduce (sum, in place), all_gather, reduce_scatter, broadcast
(root 0) and ping-pong (rank 0 <-> rank 1; one-way latency = round trip / 2;
other ranks only join the barriers), over 8 B and 16 B ... 256 MiB in x4
steps. Each (op, size) point runs warm-up iterations, then at least
``--min-iters`` timed iterations with a barrier before each, as many as fit in
``--budget`` seconds (capped by ``--max-iters``). Reported: the median over
iterations of the maximum over ranks of each rank's time (ping-pong: rank 0's
round trip / 2). Rank 0 prints one JSON line per point:

    {"impl": "commlib", "op": ..., "n": ..., "nbytes": ..., "us": ..., "algbw": ..., "busbw": ...}

GB/s are 1e9 B/s; busbw uses nccl-tests' factors (all_reduce 2(n-1)/n,
all_gather and reduce_scatter (n-1)/n with nbytes the gathered array / the
reduce_scatter input, broadcast and ping-pong 1). The anchors in the
repository's ``benchmarks/anchors/`` run this same code (``run_sweep`` with
their own ``Backend``) for Open MPI, gloo and MLX;
``benchmarks/collectives.py`` runs them all and compares.
Every point checks its result once (``--no-check`` skips that).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "pingpong")
MiB = 1 << 20


def default_sizes(max_mib: float = 256) -> list[int]:
    """8 B, then powers of 4 from 16 B up to ``max_mib`` MiB."""
    sizes, s = [8], 16
    while s <= max_mib * MiB:
        sizes.append(s)
        s *= 4
    return sizes


def parse_size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


def busbw_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def element_count(op: str, nbytes: int, n: int) -> int:
    """float32 elements for a requested size; gathered/scattered arrays round up to a multiple of n."""
    count = max(1, nbytes // 4)
    if op in ("all_gather", "reduce_scatter"):
        count = max(n, -(-count // n) * n)
    return count


def _mismatch(a, value):
    a = np.asarray(a)
    if a.size and not np.all(a == value):
        bad = np.flatnonzero(a != value)
        return f"expected {value}, got {a.flat[bad[0]]} at element {bad[0]} ({bad.size} wrong)"
    return None


def _prepare(cl, g, op, count):
    """Buffers for one point; returns (run, check) where run() does the operation once."""
    n, r = g.size(), g.rank()
    x = np.full(count, r + 1, dtype=np.float32)
    total = n * (n + 1) / 2.0
    res = {}
    if op == "all_reduce":
        def run():
            cl.all_reduce(x, out=x)

        def check():
            bad = _mismatch(x, total)
            x.fill(0)  # keep later iterations finite
            return bad
        return run, check
    if op == "all_gather":
        blk = x[: count // n].copy()

        def run():
            res["y"] = cl.all_gather(blk)

        def check():
            y = res["y"]
            if y.shape != (count,):
                return f"all_gather returned shape {y.shape}, expected {(count,)}"
            for q in range(n):
                bad = _mismatch(y[q * (count // n):(q + 1) * (count // n)], q + 1)
                if bad:
                    return bad
            return None
        return run, check
    if op == "reduce_scatter":
        def run():
            res["y"] = cl.reduce_scatter(x)
        return run, lambda: _mismatch(res["y"], total)
    if op == "broadcast":
        def run():
            cl.broadcast(x, root=0)
        return run, lambda: _mismatch(x, 1)
    if op == "pingpong":
        buf = np.empty_like(x)
        if r == 0:
            def run():
                cl.send(x, 1, tag=7)
                cl.recv_into(buf, 1, tag=7)
        elif r == 1:
            def run():
                cl.recv_into(buf, 0, tag=7)
                cl.send(buf, 0, tag=7)
        else:
            def run():
                return None  # ranks other than 0 and 1 only join the barriers
        return run, (lambda: _mismatch(buf, 1)) if r < 2 else None
    raise ValueError(op)


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Backend:
    """What a sweep needs from a library; commlib and every anchor provide one.

    ``prepare`` allocates buffers and returns a zero-argument callable that
    performs the operation once, synchronously (its result must be complete
    when it returns), plus a check callable run once after the first warm-up
    iteration (None if fine, else a message), or None for no check.
    """

    impl = "?"
    rank = 0
    size = 1
    ops: tuple = OPS
    skip_reasons: dict = {}

    def barrier(self) -> None:
        raise NotImplementedError

    def gather_f64(self, values: np.ndarray) -> np.ndarray:
        """all_gather of a small float64 vector: shape (size, len(values)) on every rank."""
        raise NotImplementedError

    def prepare(self, op: str, count: int):
        raise NotImplementedError


def run_point(backend: Backend, op: str, nbytes_req: int, args) -> dict:
    """Time one (op, size) point; the JSON record (rank 0's is the one to print)."""
    n = backend.size
    count = element_count(op, nbytes_req, n)
    nbytes = count * 4
    run, check = backend.prepare(op, count)
    warm = args.warmup if nbytes < 16 * MiB else min(2, args.warmup)
    last, problem = 0.0, None
    for i in range(max(1, warm)):
        backend.barrier()
        t0 = time.perf_counter()
        run()
        last = time.perf_counter() - t0
        if i == 0 and args.check and check is not None:
            problem = check()
    # every rank derives the iteration count from the same gathered numbers
    agreed = backend.gather_f64(np.array([last, 1.0 if problem else 0.0]))
    t_est, bad = float(agreed[:, 0].max()), bool(agreed[:, 1].max())
    iters = int(min(args.max_iters, max(args.min_iters, args.budget / max(t_est, 1e-6))))
    times = np.empty(iters, dtype=np.float64)
    for i in range(iters):
        backend.barrier()
        t0 = time.perf_counter()
        run()
        times[i] = time.perf_counter() - t0
    allt = backend.gather_f64(times)  # (n, iters)
    del run, check
    gc.collect()
    if op == "pingpong":
        per_iter, stat = allt[0] / 2.0, "median of rank 0 round trip / 2"
    else:
        per_iter, stat = allt.max(axis=0), "median of max over ranks"
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
    """Every requested (op, size) point; rank 0 emits one JSON line each. Exit status."""
    failed = 0
    for op in args.ops:
        reason = None
        if op not in backend.ops:
            reason = backend.skip_reasons.get(op, f"{backend.impl} has no {op}")
        elif op == "pingpong" and backend.size < 2:
            reason = "ping-pong needs 2 ranks"
        if reason is not None:
            if backend.rank == 0:
                emit({"impl": backend.impl, "op": op, "n": backend.size, "skipped": reason})
            continue
        for nbytes in sizes_from(args):
            rec = run_point(backend, op, nbytes, args)
            if backend.rank == 0:
                emit(rec)
                failed += "check_failed" in rec
    backend.barrier()
    if failed and backend.rank == 0:
        print(f"{backend.impl}: {failed} point(s) returned wrong results", file=sys.stderr)
    return 1 if failed else 0


class _CommlibBackend(Backend):
    def __init__(self, cl, impl):
        self.cl, self.g, self.impl = cl, cl.init(), impl
        self.rank, self.size = self.g.rank(), self.g.size()

    def barrier(self):
        self.cl.barrier()

    def gather_f64(self, values):
        values = np.ascontiguousarray(values, dtype=np.float64)
        return np.asarray(self.cl.all_gather(values)).reshape(-1, len(values))

    def prepare(self, op, count):
        return _prepare(self.cl, self.g, op, count)


def add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The sweep's options; the anchors in benchmarks/anchors/ take the same ones."""
    p.add_argument("--sizes", nargs="+", type=parse_size, default=None,
                   help="message sizes in bytes (K, M, G suffixes allowed); default 8 B and 16 B..256 MiB x4")
    p.add_argument("--max-mib", type=float, default=256, help="largest default size in MiB (default 256)")
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--budget", type=float, default=0.3, help="seconds of timed iterations per point (default 0.3)")
    p.add_argument("--min-iters", type=int, default=5, help="timed iterations at least (default 5)")
    p.add_argument("--max-iters", type=int, default=200, help="timed iterations at most (default 200)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations below 16 MiB (at most 2 above)")
    p.add_argument("--check", action="store_true", default=True, help="verify each point's result once (default)")
    p.add_argument("--no-check", dest="check", action="store_false")


def sizes_from(args) -> list[int]:
    return sorted(set(args.sizes)) if args.sizes else default_sizes(args.max_mib)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m commlib.bench", description=__doc__.split("\n\n")[0])
    add_sweep_arguments(p)
    p.add_argument("--impl", default="commlib", help="name written into the JSON lines")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import commlib as cl

    return run_sweep(_CommlibBackend(cl, args.impl), args)


if __name__ == "__main__":
    sys.exit(main())
