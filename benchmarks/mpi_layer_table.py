"""Markdown table of benchmarks/mpi_layer.py records: the MPI layer against commlib's API and mpi4py.

usage: python benchmarks/mpi_layer_table.py RESULTS.jsonl [MORE.jsonl ...]

For every (n, op, size): the median over rounds of each impl's median time,
then two time ratios: commlib-mpi / commlib (the layer's overhead over the API
it is built on; above 1.2 is flagged **bold**) and commlib-mpi / mpi4py
(above 1: the layer is slower than mpi4py on Open MPI). busbw is commlib-mpi's.
A summary per op follows: geometric mean and worst of both ratios.
"""
import collections
import math
import sys

from _benchlib import cells, load, med, missing_line, op_order, print_failed, rounds_per_impl, size_name, us

IMPLS = ("commlib", "commlib-mpi", "mpi4py")
OP_ORDER = ("allreduce", "bcast", "allgather", "pingpong_buf", "pingpong_obj:dict", "pingpong_obj:bytes_1MiB")
FLAG = 1.2


def ratio(a, b, flag=False):
    if a is None or b is None:
        return "–", None
    r = a / b
    text = f"{r:.2f}"
    return (f"**{text}**" if flag and r > FLAG else text), r


def main(paths):
    recs, failed, _, _ = load(paths)
    cell, bw = cells(recs)  # (impl, n, op, bytes) -> [median_us per round], [busbw per round]
    ns = sorted({k[1] for k in cell})
    ops = op_order(cell, OP_ORDER)
    per_round = rounds_per_impl(cell, IMPLS)
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
                t = {i: med(cell, (i, n, op, b)) for i in IMPLS}
                bwm = med(bw, ("commlib-mpi", n, op, b))
                t1, r1 = ratio(t["commlib-mpi"], t["commlib"], flag=True)
                t2, r2 = ratio(t["commlib-mpi"], t["mpi4py"])
                if r1 is not None:
                    summary[(n, op)][0].append(r1)
                if r2 is not None:
                    summary[(n, op)][1].append(r2)
                print(f"| {op} | {size_name(b)} | {us(t['commlib'])} | {us(t['commlib-mpi'])} | "
                      f"{us(t['mpi4py'])} | {t1} | {t2} | {'–' if bwm is None else f'{bwm:.3g}'} |")
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
        print_failed(failed)
    line = missing_line(cell, IMPLS, ns)
    if line:
        print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
