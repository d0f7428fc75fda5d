#!/usr/bin/env bash
# usage: bash benchmarks/training_steps.sh [ROUNDS] [-- extra training_steps.py options]
#
# DDP and FSDP2 steps of 1 M to 25 M-parameter MLPs with commlib and with torch's gloo, at n = 2
# and 4, under commrun, for each thread setting of THREADS (space-separated, default "commrun
# cores"):
#   commrun  commrun's own rule (the host's cores shared among its ranks: 1 a rank on 2 cores)
#   cores    --threads-per-rank <cores>: torch's default of a thread a core in every rank (commrun
#            then sets OMP_WAIT_POLICY=PASSIVE: the ranks' threads outnumber the cores)
#   active   the same with OMP_WAIT_POLICY=ACTIVE exported: OpenMP's spinning, as before commrun
#            chose the wait policy
# ROUNDS rounds (default 3), the backends' order rotating (benchmarks/_bench.sh); each run measures
# the bare model's step too. Output: $OUT (default results/training_steps-DATE.jsonl, the runs'
# output in .log beside it), then the table of training_steps_table.py.
# About 10 minutes for 3 rounds of the two default settings on the 2-core machine.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/_bench.sh"
py=${PYTHON:-python3}
bench_init training_steps 300 "$@"
unset OMP_NUM_THREADS MKL_NUM_THREADS OPENBLAS_NUM_THREADS OMP_WAIT_POLICY  # commrun's rule, or the setting's
export PYTHONPATH=$(cd "${COMMLIB_SRC:-$here/..}" && pwd)
cores=$(nproc)
cd /tmp

run_one() {  # "backend:threads" n round
    local backend=${1%%:*} threads=${1#*:} n=$2 round=$3 opts=() envs=()
    case $threads in
        cores) opts=(--threads-per-rank "$cores") ;;
        active) opts=(--threads-per-rank "$cores"); envs=(OMP_WAIT_POLICY=ACTIVE) ;;
    esac
    bench_run "$backend $threads" "$n" "$round" env "${envs[@]}" "$py" -m commrun -n "$n" "${opts[@]}" \
        --no-tag-output "$here/training_steps.py" --backend "$backend" --threads "$threads" --round "$round" \
        --out "$out" "${extra[@]}"
}

impls=()
for t in ${THREADS:-commrun cores}; do impls+=("commlib:$t" "gloo:$t"); done
bench_note "rounds=$rounds out=$out PYTHONPATH=$PYTHONPATH threads=${THREADS:-commrun cores}"
bench_rounds "${impls[@]}"
bench_note "done (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$py" "$here/training_steps_table.py" "$out"
