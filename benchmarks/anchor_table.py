"""commlib against its anchors, one row per point, from a collectives.py results file.

usage: python benchmarks/anchor_table.py benchmarks/results/DATE.json [REFERENCE [OTHER...]]

Prints the markdown table of RESULTS.md ("On one host: against the MPICH wheel ..."): µs per call
for commlib and each anchor (median of the run's repeats), then commlib's time over each anchor's;
a ratio more than 5 % above 1 against REFERENCE (default mpich) is bold. Then the count of points at
or below REFERENCE.
"""
import json
import sys


def size_name(b):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def main():
    data = json.load(open(sys.argv[1]))
    anchors = sys.argv[2:] or ["mpich", "mpi-shm"]
    ref = anchors[0]
    us = {(m["impl"], m["op"], m["n"], m["nbytes"]): m["us"] for m in data["medians"]}
    points = sorted({k[1:] for k in us if k[0] == "commlib"}, key=lambda p: (p[1], p[0], p[2]))
    print("| op | n | size | commlib | " + " | ".join(anchors) + " | " +
          " | ".join(f"commlib / {a}" for a in anchors) + " |")
    print("|---|---|---|" + "---:|" * (1 + 2 * len(anchors)))
    level = total = 0
    for op, n, nbytes in points:
        mine = us[("commlib", op, n, nbytes)]
        times, ratios = [], []
        for a in anchors:
            t = us.get((a, op, n, nbytes))
            times.append(f"{t:,.1f}" if t else "—")
            r = mine / t if t else None
            ratios.append("—" if r is None else f"**{r:.2f}**" if r > 1.05 and a == ref else f"{r:.2f}")
            if a == ref and r is not None:
                total += 1
                level += r <= 1.05
        print(f"| {op} | {n} | {size_name(nbytes)} | {mine:,.1f} | " + " | ".join(times) + " | " +
              " | ".join(ratios) + " |")
    print(f"\ncommlib at or below {ref} (within 5 %) at {level} of {total} points")


if __name__ == "__main__":
    main()
