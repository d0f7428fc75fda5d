"""Table of an ab_before_after.sh run: median and range over the runs, before vs after.

usage: python benchmarks/ab_table.py RESULTS.jsonl
"""
import json, sys, statistics, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = collections.defaultdict(list)
for r in rows:
    d[(r["impl"], r["op"], r["n"], r["nbytes"])].append(r)
names = {8: "8 B", 1024: "1 KiB", 16384: "16 KiB", 65536: "64 KiB", 262144: "256 KiB", 1 << 20: "1 MiB",
         4 << 20: "4 MiB", 16 << 20: "16 MiB", 64 << 20: "64 MiB"}
runs = max(len(v) for v in d.values())
print(f"| op | n | size | before: median (min–max of {runs} runs) | after: median (min–max) | after/before |")
print("|---|---|---|---|---|---|")
ops = sorted({k[1] for k in d}, key=lambda o: ("all_reduce", "all_gather", "pingpong").index(o)
             if o in ("all_reduce", "all_gather", "pingpong") else 9)
for op in ops:
    for n in sorted({k[2] for k in d}):
        for size in sorted({k[3] for k in d}):
            b, a = d[("before", op, n, size)], d[("after", op, n, size)]
            if not a or not b:
                continue
            small = size <= 65536
            f = (lambda r: r["us"]) if small else (lambda r: r["busbw"])
            unit = "µs" if small else "GB/s"
            bv, av = [f(r) for r in b], [f(r) for r in a]
            mb, ma = statistics.median(bv), statistics.median(av)
            ratio = ma / mb if small else mb / ma
            label = names.get(size, f"{size} B")
            print(f"| {op} | {n} | {label} | {mb:.2f} {unit} ({min(bv):.2f}–{max(bv):.2f}) | {ma:.2f} {unit} "
                  f"({min(av):.2f}–{max(av):.2f}) | {ratio:.2f}× time |")
