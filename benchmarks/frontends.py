"""Every front-end's blocking call against commlib's own API, side by side in one run.

    commrun -n N benchmarks/frontends.py [--sizes 8 1K 64K 1M 16M 64M] [--rounds 5] [--budget 0.2]

One rank program times the same collective through commlib's API, `commlib.MPI`
(mpi4py's buffer methods) and `commlib.torch` (torch.distributed on the
"commlib" backend), interleaved: each round runs every (op, size) once per
front-end, in an order that rotates from round to round, so machine noise falls
on all of them alike. Each point: a warm-up call (its result checked against
NumPy), then as many calls as fit in --budget seconds (at least 3, at most
--max-iters), timed as one block after a barrier; the figure is the block's
mean, and the table shows the median over rounds of rank 0's figure and each
front-end's ratio to the API's.

Ops (float32; MPI / torch / API):
    all_reduce   Allreduce(x, y, MAX)   dist.all_reduce(t, MAX)         cl.all_reduce(x, "max", out=y)
    all_gather   Allgather(x, y)        dist.all_gather_into_tensor     cl.all_gather(x, out=y)
    broadcast    Bcast(x, root=0)       dist.broadcast(t, 0)            cl.broadcast(x, 0)
    allreduce(obj)  comm.allreduce(int)  -                              (objects: MPI only, vs cl.all_gather_obj)
Sizes are the input per rank (all_gather: the gathered output is n times it).
Rank 0 prints the table; --json PATH appends one line per point.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import commlib as cl
from commlib import MPI

try:
    import torch
    import torch.distributed as dist

    import commlib.torch  # noqa: F401  (registers the backend)
except ImportError:  # torch is optional: its column is left out
    torch = dist = None


def _size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def _label(nbytes):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["8", "1K", "64K", "1M", "16M", "64M"])
    ap.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather", "broadcast", "allreduce_obj"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--json")
    args = ap.parse_args()
    g = cl.init()
    r, n = g.rank(), g.size()
    comm = MPI.COMM_WORLD
    if dist is not None:
        dist.init_process_group("commlib")
    sizes = [_size(s) for s in args.sizes]
    fronts = ["api", "mpi"] + (["torch"] if dist is not None else [])

    def calls(op, nbytes):
        """{front-end: (call, check)} for one point."""
        count = max(1, nbytes // 4)
        x = np.full(count, r + 1, np.float32)
        y = np.empty(count, np.float32)
        gy = np.empty(n * count, np.float32)
        out = {}
        if op == "all_reduce":
            # max: torch reduces in place, and a repeated in-place max stays put (a sum would grow)
            want = np.full(count, n, np.float32)
            out["api"] = (lambda: cl.all_reduce(x, "max", out=y), lambda: np.array_equal(y, want))
            out["mpi"] = (lambda: comm.Allreduce(x, y, op=MPI.MAX), lambda: np.array_equal(y, want))
            if dist is not None:
                z = x.copy()
                t = torch.from_numpy(z)
                out["torch"] = (lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX), lambda: np.array_equal(z, want))
        elif op == "all_gather":
            want = np.repeat(np.arange(1, n + 1, dtype=np.float32), count)
            out["api"] = (lambda: cl.all_gather(x, out=gy), lambda: np.array_equal(gy, want))
            out["mpi"] = (lambda: comm.Allgather(x, gy), lambda: np.array_equal(gy, want))
            if dist is not None:
                tx, ty = torch.from_numpy(x), torch.from_numpy(gy)
                out["torch"] = (lambda: dist.all_gather_into_tensor(ty, tx), lambda: np.array_equal(gy, want))
        elif op == "broadcast":
            want = np.full(count, 1, np.float32)
            out["api"] = (lambda: cl.broadcast(y if r else x, 0), lambda: np.array_equal(y if r else x, want))
            out["mpi"] = (lambda: comm.Bcast(y if r else x, root=0), lambda: np.array_equal(y if r else x, want))
            if dist is not None:
                t = torch.from_numpy(y if r else x)
                out["torch"] = (lambda: dist.broadcast(t, 0), lambda: np.array_equal(y if r else x, want))
        elif op == "allreduce_obj":
            if nbytes != sizes[0]:
                return {}
            want = n * (n - 1) // 2
            box = {}
            out["api"] = (lambda: box.__setitem__("v", sum(cl.all_gather_obj(r))), lambda: box["v"] == want)
            out["mpi"] = (lambda: box.__setitem__("v", comm.allreduce(r)), lambda: box["v"] == want)
        return out

    results = {}  # (op, size, front) -> [per-call seconds, one per round]
    for rnd in range(args.rounds):
        order = fronts[rnd % len(fronts):] + fronts[:rnd % len(fronts)]
        for op in args.ops:
            for nbytes in sizes:
                point = calls(op, nbytes)
                for front in order:
                    if front not in point:
                        continue
                    call, check = point[front]
                    call()
                    if not check():
                        print(f"rank {r}: {front} {op} {nbytes} B gave a wrong result", file=sys.stderr)
                        sys.exit(1)
                    iters, spent, go = 0, 0.0, np.ones(1, np.int32)
                    while go[0]:
                        k = max(1, min(args.max_iters - iters, iters or 1))  # 1, 1, 2, 4, ...
                        cl.barrier()
                        t = time.perf_counter()
                        for _ in range(k):
                            call()
                        spent += time.perf_counter() - t
                        iters += k
                        # every rank runs the same number of calls: rank 0's clock decides
                        go[0] = iters < 3 or (spent < args.budget and iters < args.max_iters)
                        cl.broadcast(go, 0)
                    results.setdefault((op, nbytes, front), []).append(spent / iters)
                    cl.barrier()
    if r != 0:
        cl.finalize()
        return
    print(f"# n={n}, {args.rounds} rounds, machine {os.uname().nodename}, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("| op | size | " + " | ".join(f"{f} us" for f in fronts) + " | " +
          " | ".join(f"{f}/api" for f in fronts[1:]) + " |")
    print("|---|---|" + "---|" * (2 * len(fronts) - 1))
    for op in args.ops:
        for nbytes in sizes:
            med = {f: statistics.median(results[op, nbytes, f]) * 1e6 for f in fronts if (op, nbytes, f) in results}
            if not med:
                continue
            cells = [f"{med[f]:.1f}" if f in med else "-" for f in fronts]
            ratios = [f"{med[f] / med['api']:.2f}" if f in med else "-" for f in fronts[1:]]
            print(f"| {op} | {_label(nbytes)} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps({"n": n, "op": op, "bytes": nbytes, "median_us": med}) + "\n")
    cl.finalize()


if __name__ == "__main__":
    main()
