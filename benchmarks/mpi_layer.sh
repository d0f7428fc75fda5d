#!/usr/bin/env bash
# usage: bash benchmarks/mpi_layer.sh [ROUNDS] [-- extra mpi_layer.py options]
#
# The mpi4py-compatible layer against commlib's own API and real mpi4py, at
# n = 2 and 4: benchmarks/mpi_layer.py runs as
#   commlib-mpi  .env/bin/python -m commrun -n N mpi_layer.py --impl commlib-mpi
#   commlib      .env/bin/python -m commrun -n N mpi_layer.py --impl commlib
#   mpi4py       mpirun (Open MPI, ob1 + tcp over loopback) .env/bin/python mpi_layer.py --impl mpi4py
# ROUNDS rounds (default 3), each running every (n, impl) once, the order of the
# impls rotating from round to round so that machine noise spreads over all of
# them (the shared structure is in benchmarks/_bench.sh). commlib is the copy
# installed in benchmarks/.env (bash benchmarks/setup_env.sh --commlib-only
# after changing it); the runs start in /tmp so that the source tree is not
# imported instead; COMMLIB_SRC=/path/to/repo (built in place) measures that
# tree instead. A run that fails or outlives its
# timeout (RUN_TIMEOUT, default 180 s) is reported and the rest goes on.
#
# Output: $OUT (default benchmarks/results/mpi_layer-DATE.jsonl; stderr of the
# runs in the same name with .log), then the table of benchmarks/mpi_layer_table.py.
# About 5-8 minutes with the default 3 rounds on the 2-core machine.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/_bench.sh"
py=$here/.env/bin/python
bench_init mpi_layer 180 "$@"
[ -x "$py" ] || { echo "no $py: run bash benchmarks/setup_env.sh first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# COMMLIB_SRC=DIR measures the commlib of a source tree (built in place) instead of the installed one
if [ -n "${COMMLIB_SRC:-}" ]; then export PYTHONPATH=$(cd "$COMMLIB_SRC" && pwd); else unset PYTHONPATH; fi
cd /tmp
if ! "$py" -c "from commlib import MPI" 2>>"$log"; then
    echo "commlib.MPI cannot be imported by $py (see $log): re-install commlib (bash benchmarks/setup_env.sh" \
         "--commlib-only; pyproject.toml must list the commlib.MPI package) or set COMMLIB_SRC=<source tree>" >&2
    exit 1
fi

run_one() {  # impl n round
    local impl=$1 n=$2 round=$3
    local args=("$here/mpi_layer.py" --impl "$impl" --round "$round" --out "$out" "${extra[@]}")
    if [ "$impl" = mpi4py ]; then
        bench_run "$impl" "$n" "$round" mpirun --allow-run-as-root --oversubscribe -n "$n" --mca pml ob1 \
            --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$py" "${args[@]}"
    else
        bench_run "$impl" "$n" "$round" "$py" -m commrun -n "$n" --no-tag-output "${args[@]}"
    fi
}

bench_note "rounds=$rounds out=$out"
bench_rounds commlib-mpi commlib mpi4py
bench_note "done (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$py" "$here/mpi_layer_table.py" "$out"
