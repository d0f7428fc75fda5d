#!/usr/bin/env bash
# usage: benchmarks/ab_before_after.sh COMMIT [REPEATS]
#
# commlib at COMMIT ("before") against the working tree ("after"), interleaved run
# by run so both see the same load: the fair way to check a change for a
# regression on a shared 2-core machine, where one sweep can be 20x slower than
# the next. Each run is `commrun -n N -m commlib.bench` (all_reduce and pingpong,
# 8 B to 16 MiB, n = 2 and 4) with PYTHONPATH pointing at one of the two builds;
# the launcher is the installed one. OPS and SIZES (space-separated) override the ops and sizes. Output: benchmarks/results/ab-DATE.jsonl (gitignored),
# then the table (benchmarks/ab_table.py).
set -euo pipefail
commit=${1:?usage: $0 COMMIT [REPEATS]}
repeats=${2:-5}
ops=${OPS:-all_reduce pingpong}
sizes=${SIZES:-8 64K 1M 16M}
repo=$(cd "$(dirname "$0")/.." && pwd)
before=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$before" >/dev/null 2>&1 || true' EXIT
git -C "$repo" worktree add -f "$before" "$commit" -q
(cd "$before" && python setup.py build_ext --inplace -q >/dev/null)
(cd "$repo" && python setup.py build_ext --inplace -q >/dev/null)
out="$repo/benchmarks/results/ab-$(date +%Y%m%d-%H%M%S).jsonl"
mkdir -p "$(dirname "$out")"  # benchmarks/results/ is gitignored: raw output stays out of the repository
echo "# $(date -Is) load $(cat /proc/loadavg); before=$commit after=working tree" >&2
cd /tmp
for rep in $(seq "$repeats"); do
  for impl in before after; do
    if [ "$impl" = before ]; then pp=$before; else pp=$repo; fi
    for n in 2 4; do
      PYTHONPATH=$pp timeout 200 python -m commrun -n "$n" -m commlib.bench --sizes $sizes \
        --ops $ops --impl "$impl" --budget 0.3 --max-iters 2000 2>/dev/null \
        | grep '^\[0\]' | cut -d' ' -f2- >> "$out"
    done
  done
done
echo "# $(date -Is) load $(cat /proc/loadavg)" >&2
python "$repo/benchmarks/ab_table.py" "$out"
