"""Markdown table of benchmarks/mpi_layer.py records: the MPI layer against commlib's API and mpi4py.

usage: python benchmarks/mpi_layer_table.py RESULTS.jsonl [MORE.jsonl ...]

For every (n, op, size): the median over rounds of each impl's median time,
then two time ratios: commlib-mpi / commlib (the layer's overhead over the API
it is built on; above 1.2 is flagged **bold**) and commlib-mpi / mpi4py
(above 1: the layer is slower than mpi4py on Open MPI). busbw is commlib-mpi's.
A summary per op follows: geometric mean and worst of both ratios.
"""
import collections
import json
import math
import statistics
import sys

IMPLS = ("commlib", "commlib-mpi", "mpi4py")
OP_ORDER = ("allreduce", "bcast", "allgather", "pingpong_buf", "pingpong_obj:dict", "pingpong_obj:bytes_1MiB")
FLAG = 1.2


def size_name(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def us(v):
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.1f}"


def ratio(a, b, flag=False):
    if a is None or b is None:
        return "–", None
    r = a / b
    text = f"{r:.2f}"
    return (f"**{text}**" if flag and r > FLAG else text), r


def load(paths):
    recs, skipped, failed = [], [], []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                if "skipped" in r:
                    skipped.append(r)
                    continue
                if "check_failed" in r:
                    failed.append(r)
                recs.append(r)
    return recs, skipped, failed


def main(paths):
    recs, _, failed = load(paths)
    cell = collections.defaultdict(list)  # (impl, n, op, bytes) -> [median_us per round]
    bw = collections.defaultdict(list)
    for r in recs:
        key = (r["impl"], r["n"], r["op"], r["bytes"])
        cell[key].append(r["median_us"])
        bw[key].append(r["busbw"])
    rounds = collections.Counter(k[:2] for k in cell)
    ns = sorted({k[1] for k in cell})
    ops = [o for o in OP_ORDER if any(k[2] == o for k in cell)] + sorted({k[2] for k in cell} - set(OP_ORDER))
    per_round = {impl: max((len(v) for k, v in cell.items() if k[0] == impl), default=0) for impl in IMPLS}
    print(f"Median over rounds (rounds per impl: "
          + ", ".join(f"{i} {per_round[i]}" for i in IMPLS) + ") of each run's median time per call, µs; "
          "ping-pong: one-way (round trip / 2). Ratios are time ratios (>1: commlib-mpi slower); "
          f"commlib-mpi/commlib above {FLAG} in bold.\n")
    summary = collections.defaultdict(lambda: ([], []))
    for n in ns:
        print(f"### n = {n}\n")
        print("| op | size | commlib µs | commlib-mpi µs | mpi4py µs | commlib-mpi / commlib | commlib-mpi / mpi4py "
              "| commlib-mpi busbw GB/s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for op in ops:
            sizes = sorted({k[3] for k in cell if k[1] == n and k[2] == op})
            for b in sizes:
                med = {i: (statistics.median(cell[(i, n, op, b)]) if cell.get((i, n, op, b)) else None)
                       for i in IMPLS}
                bwm = statistics.median(bw[("commlib-mpi", n, op, b)]) if bw.get(("commlib-mpi", n, op, b)) else None
                t1, r1 = ratio(med["commlib-mpi"], med["commlib"], flag=True)
                t2, r2 = ratio(med["commlib-mpi"], med["mpi4py"])
                if r1 is not None:
                    summary[(n, op)][0].append(r1)
                if r2 is not None:
                    summary[(n, op)][1].append(r2)
                print(f"| {op} | {size_name(b)} | {us(med['commlib'])} | {us(med['commlib-mpi'])} | "
                      f"{us(med['mpi4py'])} | {t1} | {t2} | {'–' if bwm is None else f'{bwm:.3g}'} |")
        print()
    if summary:
        print("### Summary: commlib-mpi time ratios per op (geometric mean over sizes, worst size)\n")
        print("| n | op | vs commlib: geo-mean | worst | vs mpi4py: geo-mean | worst |")
        print("|---|---|---:|---:|---:|---:|")
        for (n, op), (a, m) in sorted(summary.items(), key=lambda kv: (kv[0][0], ops.index(kv[0][1]))):
            def gm(v):
                return f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}" if v else "–"
            print(f"| {n} | {op} | {gm(a)} | {max(a):.2f} | {gm(m)} | {max(m):.2f} |" if a and m else
                  f"| {n} | {op} | {gm(a)} | {max(a) if a else '–'} | {gm(m)} | {max(m) if m else '–'} |")
        print()
    if failed:
        print(f"**{len(failed)} point(s) returned wrong results:**\n")
        for r in failed:
            print(f"- {r['impl']} n={r['n']} {r['op']} {size_name(r['bytes'])} round {r.get('round')}: "
                  f"{r['check_failed']}")
    missing = [(i, n) for i in IMPLS for n in ns if rounds.get((i, n), 0) == 0]
    if missing:
        print("No records for: " + ", ".join(f"{i} n={n}" for i, n in missing))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
