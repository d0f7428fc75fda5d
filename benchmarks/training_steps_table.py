"""The table of benchmarks/training_steps.sh's runs: per n, thread setting and model, the step without
communication (the bare model's, median over both backends' runs and rounds) and, for DDP and FSDP2,
each backend's step and overhead (step minus that floor), medians over rounds, and commlib's overhead
over gloo's.

usage: python benchmarks/training_steps_table.py RUNS.jsonl
"""
import collections
import json
import statistics
import sys


def main(path):
    steps = collections.defaultdict(list)
    bad = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            steps[r["n"], r["threads"], r["params"], r["mode"], r["backend"]].append(r["step_ms"])
            if not r["agree"]:
                bad.append(r)
    keys = sorted({k[:3] for k in steps}, key=lambda k: (k[0], k[1], float(k[2].rstrip("M"))))
    print("| n | threads | params | no communication | DDP commlib (overhead) | DDP gloo (overhead) | DDP overhead "
          "ratio | FSDP2 commlib (overhead) | FSDP2 gloo (overhead) | FSDP2 overhead ratio |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, threads, params in keys:
        plain = statistics.median(steps[n, threads, params, "plain", "commlib"] +
                                  steps[n, threads, params, "plain", "gloo"])
        cells = []
        for mode in ("ddp", "fsdp2"):
            over = {}
            for backend in ("commlib", "gloo"):
                got = steps.get((n, threads, params, mode, backend))
                if not got:
                    cells.append("–")
                    continue
                step = statistics.median(got)
                over[backend] = step - plain
                cells.append(f"{step:.1f} ({over[backend]:+.1f})")
            ratio = (over["commlib"] / over["gloo"]) if len(over) == 2 and over["gloo"] > 0 else None
            cells.append(f"**{ratio:.2f}**" if ratio is not None else "–")
        print(f"| {n} | {threads} | {params} | {plain:.1f} | " + " | ".join(cells) + " |")
    rounds = {len(v) for v in steps.values()}
    print(f"\nms; medians of {'/'.join(map(str, sorted(rounds)))} rounds; ranks disagreeing on the parameters "
          f"after the steps: {len(bad)} rows" + (f" ({bad[:3]})" if bad else ""))


if __name__ == "__main__":
    main(sys.argv[1])
