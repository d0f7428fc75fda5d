#!/usr/bin/env bash
# usage: VARIANTS="VAR=a;VAR=b" benchmarks/ab_env.sh OUT OPS N SIZES...
#
# The same build under environment variants (';'-separated, each a space-separated
# list of VAR=value), interleaved run by run so every variant sees the same load:
# three repeats of `commrun -n N -m commlib.bench --ops OPS --sizes SIZES` per
# variant. Appends "VARIANT {json}" lines to OUT; `python benchmarks/ab_env_table.py
# OUT` prints the medians and each variant's ratio to the first.
#   VARIANTS="COMMLIB_SPIN_YIELD_US=0;COMMLIB_SPIN_YIELD_US=50" \
#       benchmarks/ab_env.sh /tmp/yield.txt "broadcast all_reduce" 4 8 1K 16K
set -euo pipefail
out=${1:?usage: VARIANTS=... $0 OUT OPS N SIZES...}; ops=$2; n=$3; shift 3
IFS=';' read -ra variants <<< "${VARIANTS:?set VARIANTS}"
for rep in 1 2 3; do
    for v in "${variants[@]}"; do
        # shellcheck disable=SC2086
        env $v timeout 300 python -m commrun -n "$n" --no-tag-output -m commlib.bench --sizes "$@" --ops $ops \
            2>&1 | grep '^{' | sed "s/^/$(echo "$v" | tr ' ' ',') /" >> "$out"
    done
done
