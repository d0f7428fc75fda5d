#!/usr/bin/env bash
# usage: bash benchmarks/trace_overhead.sh [ROUNDS]
#
# What tracing costs: benchmarks/trace_overhead.py (8 B all_sum) under commrun at n = 1 and 2,
# with COMMLIB_TRACE unset (off) and set to a scratch directory (on), ROUNDS rounds (default 5),
# the order of off/on alternating from round to round. Prints each run's JSON line, then the
# median per (n, off/on) and on - off in µs per call. commlib is this source tree (built in place).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
source "$here/_bench.sh"
bench_scratch
for round in $(seq "$rounds"); do
    for n in 1 2; do
        modes="off on"
        [ $((round % 2)) -eq 0 ] && modes="on off"
        for mode in $modes; do
            if [ "$mode" = on ]; then
                rm -rf "$scratch/t"
                COMMLIB_TRACE=$scratch/t timeout 120 "$py" -m commrun -n "$n" --no-tag-output \
                    "$here/trace_overhead.py" --label "$mode" | tee -a "$out"
            else
                (unset COMMLIB_TRACE; timeout 120 "$py" -m commrun -n "$n" --no-tag-output \
                    "$here/trace_overhead.py" --label "$mode") | tee -a "$out"
            fi
        done
    done
done
"$py" - "$out" <<'PY'
import json, sys, statistics
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("\n| n | off µs/call | on µs/call | on − off |\n|---|---:|---:|---:|")
for n in sorted({r["n"] for r in runs}):
    med = {m: statistics.median(r["us_per_call"] for r in runs if r["n"] == n and r["label"] == m) for m in ("off", "on")}
    print(f"| {n} | {med['off']:.3f} | {med['on']:.3f} | {med['on'] - med['off']:+.3f} |")
print("\ninterleaved in one process (batches of the recorded call and of the function it wraps):")
print("\n| n | off µs/call | on µs/call | on − off |\n|---|---:|---:|---:|")
for n in sorted({r["n"] for r in runs}):
    alt = [r["interleaved_us"] for r in runs if r["n"] == n and "interleaved_us" in r]
    off, on = (statistics.median(a[m] for a in alt) for m in ("off", "on"))
    diffs = sorted(a["on"] - a["off"] for a in alt)
    print(f"| {n} | {off:.3f} | {on:.3f} | {on - off:+.3f} (runs: {diffs[0]:+.3f} … {diffs[-1]:+.3f}) |")
PY
