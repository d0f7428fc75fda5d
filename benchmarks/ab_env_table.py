"""Table of an ab_env.sh run: median per (op, n, size) and variant, and each variant's ratio to the first.

usage: python benchmarks/ab_env_table.py OUT
"""
import collections
import json
import statistics
import sys

times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    variant, record = line.split(" ", 1)
    r = json.loads(record)
    times[(r["op"], r["n"], r["nbytes"], variant)].append(r["us"])
points = sorted({k[:3] for k in times})
variants = list(dict.fromkeys(k[3] for k in times))
print("| op | n | bytes | " + " | ".join(f"{v} (µs)" for v in variants) + " | ratio to the first |")
print("|---|---:|---:|" + "---:|" * len(variants) + "---:|")
for p in points:
    meds = [statistics.median(times[p + (v,)]) if times[p + (v,)] else float("nan") for v in variants]
    ratios = " ".join(f"{m / meds[0]:.2f}" for m in meds[1:])
    print(f"| {p[0]} | {p[1]} | {p[2]} | " + " | ".join(f"{m:.1f}" for m in meds) + f" | {ratios} |")
