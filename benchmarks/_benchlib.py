"""What benchmarks/mpi_layer*.py and benchmarks/torch_backend*.py share: sizes, busbw factors,
result checks, the measuring loop, the JSON-line output, and the helpers of their tables.

The scripts import it as a sibling (`import _benchlib as bl`): run as
`python benchmarks/X.py`, `commrun -n N /path/to/benchmarks/X.py` or `mpirun ... python
/path/to/benchmarks/X.py`, a script's own directory is sys.path[0]. numpy is imported
only by the measuring helpers, so the table scripts need nothing beyond the standard library.

A "bench" below is an object with `rank`, `size`, `name`, `barrier()` and
`gather_f64(values)` (every rank's 1-d float64 values, stacked: shape (size, len)).
"""
import collections
import json
import statistics
import sys
import time

MiB = 1 << 20
COLL_SIZES = sorted([8 * 8 ** k for k in range(8)] + [64 << 10, 64 * MiB])  # 8 B, 64 B, ..., 64 KiB, ..., 64 MiB
P2P_SIZES = sorted([8 * 8 ** k for k in range(8)] + [64 << 10])             # 8 B ... 16 MiB, and 64 KiB
BIG = 16 * MiB  # from here up: 1 warm-up iteration and at least 3 timed ones


# ------------------------------------------------------------------ measuring
def busbw_factor(op, n):
    """nccl-tests' bus-bandwidth factor: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, else 1."""
    if op in ("all_reduce", "allreduce"):
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "allgather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def parse_size(text):
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)


def mismatch(a, value):
    """None if every element of a (an array or a CPU tensor) equals value, else what differs."""
    import numpy as np
    a = np.asarray(a)
    if a.size and not np.all(a == value):
        bad = np.flatnonzero(a != value)
        return f"expected {value}, got {a.flat[bad[0]]} at element {bad[0]} ({bad.size} wrong)"
    return None


def gathered(out, count, n):
    """None if out (count elements) holds n blocks filled with 1, 2, ..., n, else what differs."""
    blk = count // n
    for q in range(n):
        bad = mismatch(out[q * blk:(q + 1) * blk], q + 1)
        if bad:
            return f"block {q}: {bad}"
    return None


def timed(bench, run, iters, reset=None):
    """iters timed calls of run(), each after reset() (untimed) and a barrier: this rank's seconds per call."""
    import numpy as np
    times = np.empty(iters, dtype=np.float64)
    for i in range(iters):
        if reset is not None:
            reset()
        bench.barrier()
        t0 = time.perf_counter()
        run()
        times[i] = time.perf_counter() - t0
    return times


def measure(bench, run, check, nbytes, args, reset=None):
    """One point: warm-up calls (args.warmup; 1 from 16 MiB up; check() after the first one), then
    as many timed calls as fit in args.budget seconds (at least args.min_iters, 3 from 16 MiB up; at
    most args.max_iters), the same number on every rank. Returns (this rank's times, iters, bad, problem):
    bad is true when the check failed on any rank, problem is this rank's complaint or None."""
    import numpy as np
    big = nbytes >= BIG
    last, problem = 0.0, None
    for i in range(1 if big else args.warmup):
        if reset is not None:
            reset()
        bench.barrier()
        t0 = time.perf_counter()
        run()
        last = time.perf_counter() - t0
        if i == 0 and check is not None:
            problem = check()
    # every rank derives the same iteration count from the gathered warm-up times
    agreed = bench.gather_f64(np.array([last, 1.0 if problem else 0.0]))
    t_est, bad = float(agreed[:, 0].max()), bool(agreed[:, 1].max())
    lo = 3 if big else args.min_iters
    iters = int(min(args.max_iters, max(lo, args.budget / max(t_est, 1e-7))))
    return timed(bench, run, iters, reset), iters, bad, problem


def record(name, n, op, nbytes, per_iter, iters, bad, problem, round_, factor):
    """The JSON record of one point from its per-iteration seconds (already reduced over ranks)."""
    import numpy as np
    sec = float(np.median(per_iter))
    algbw = nbytes / sec / 1e9
    rec = {"impl": name, "n": n, "op": op, "bytes": nbytes,
           "median_us": round(sec * 1e6, 3), "busbw": round(algbw * factor, 6),
           "algbw": round(algbw, 6), "iters": iters, "min_us": round(float(per_iter.min()) * 1e6, 3),
           "round": round_}
    if bad:
        rec["check_failed"] = problem or "on another rank"
    return rec


class Sink:
    """Rank 0 writes one JSON line per record to stdout, or appends it to path; counts the records
    with a failed check and those with an error."""

    def __init__(self, path, rank):
        self.rank, self.failed, self.errors = rank, 0, 0
        self.file = open(path, "a") if (path and rank == 0) else sys.stdout

    def emit(self, rec):
        if self.rank == 0:
            self.file.write(json.dumps(rec) + "\n")
            self.file.flush()
            self.failed += "check_failed" in rec
            self.errors += "error" in rec

    def close(self):
        if self.file is not sys.stdout:
            self.file.close()


def add_timing_args(p):
    p.add_argument("--max-mib", type=float, default=64, help="drop sizes above this many MiB (default 64)")
    p.add_argument("--budget", type=float, default=0.2, help="seconds of timed iterations per point (default 0.2)")
    p.add_argument("--min-iters", type=int, default=5, help="timed iterations at least below 16 MiB (default 5)")
    p.add_argument("--max-iters", type=int, default=5000, help="timed iterations at most (default 5000)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up iterations below 16 MiB (default 3)")


def add_output_args(p):
    p.add_argument("--round", type=int, default=0, help="round number written into the records")
    p.add_argument("--out", default=None, help="append the JSON lines to this file (rank 0) instead of stdout")


# ------------------------------------------------------------------ tables
def size_name(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def us(v):
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"


def spread(vals):
    """' ±P%': (max - min) / median of vals, '' for fewer than 2 values."""
    if not vals or len(vals) < 2:
        return ""
    m = statistics.median(vals)
    return f" ±{(max(vals) - min(vals)) / m * 100:.0f}%" if m else ""


def med(d, key):
    return statistics.median(d[key]) if d.get(key) else None


def load(paths):
    """(records, failed, errors, skipped) of JSON-lines files: records are the measured points (those
    with a failed check included, which are also in failed); errors and skipped are left out of them."""
    recs, failed, errors, skipped = [], [], [], []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if "error" in r:
                    errors.append(r)
                    continue
                if "skipped" in r:
                    skipped.append(r)
                    continue
                if "check_failed" in r:
                    failed.append(r)
                recs.append(r)
    return recs, failed, errors, skipped


def cells(recs):
    """(time, busbw): (impl, n, op, bytes) -> [median_us per round], [busbw per round]."""
    cell, bw = collections.defaultdict(list), collections.defaultdict(list)
    for r in recs:
        key = (r["impl"], r["n"], r["op"], r["bytes"])
        cell[key].append(r["median_us"])
        bw[key].append(r["busbw"])
    return cell, bw


def op_order(cell, known):
    """The ops present in cell: those of known in its order, then the others sorted."""
    present = {k[2] for k in cell}
    return [o for o in known if o in present] + sorted(present - set(known))


def rounds_per_impl(cell, impls):
    return {i: max((len(v) for k, v in cell.items() if k[0] == i), default=0) for i in impls}


def missing_line(cell, impls, ns):
    """'No records for: ...' naming each (impl, n) without a record, or None."""
    present = {k[:2] for k in cell}
    gone = [(i, n) for i in impls for n in ns if (i, n) not in present]
    return ("No records for: " + ", ".join(f"{i} n={n}" for i, n in gone)) if gone else None


def print_failed(failed):
    print(f"**{len(failed)} point(s) returned wrong results:**\n")
    for r in failed:
        print(f"- {r['impl']} n={r['n']} {r['op']} {size_name(r['bytes'])} round {r.get('round')}: "
              f"{r['check_failed']}")
