"""Table of an ab_before_after.sh run: median and range over the runs, before vs after.

usage: python benchmarks/ab_table.py RESULTS.jsonl
"""
import json, sys, statistics, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = collections.defaultdict(list)
for r in rows:
    d[(r["impl"], r["op"], r["n"], r["nbytes"])].append(r)
names = {8: "8 B", 65536: "64 KiB", 1 << 20: "1 MiB", 16 << 20: "16 MiB"}
runs = max(len(v) for v in d.values())
print(f"| op | n | size | before: median (min–max of {runs} runs) | after: median (min–max) | after/before |")
print("|---|---|---|---|---|---|")
for op in ("all_reduce", "pingpong"):
    for n in (2, 4):
        for size in names:
            b, a = d[("before", op, n, size)], d[("after", op, n, size)]
            if not a or not b:
                continue
            small = size <= 65536
            f = (lambda r: r["us"]) if small else (lambda r: r["busbw"])
            unit = "µs" if small else "GB/s"
            bv, av = [f(r) for r in b], [f(r) for r in a]
            mb, ma = statistics.median(bv), statistics.median(av)
            ratio = ma / mb if small else mb / ma
            print(f"| {op} | {n} | {names[size]} | {mb:.2f} {unit} ({min(bv):.2f}–{max(bv):.2f}) | {ma:.2f} {unit} ({min(av):.2f}–{max(av):.2f}) | {ratio:.2f}× time |")
