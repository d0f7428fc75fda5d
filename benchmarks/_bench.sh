# Sourced by benchmarks/mpi_layer.sh, torch_backend.sh, trace_overhead.sh and mlx_ring.sh (after setting here=, the
# benchmarks directory): the rounds / output / log / timeout structure they share.
#
#   bench_init NAME DEFAULT_TIMEOUT "$@"   parses [ROUNDS] [-- extra options]: sets rounds, extra
#                                          (array), out ($OUT or results/NAME-DATE.jsonl, made
#                                          absolute), log (out with .log, emptied), per_run
#                                          ($RUN_TIMEOUT or DEFAULT_TIMEOUT); one thread per rank
#   bench_run LABEL N ROUND CMD...         "== round ..." to the log and stderr, CMD under the
#                                          timeout with its output to the log; a failure or a
#                                          timeout is reported with the log's tail and the rest goes on
#   bench_rounds IMPL...                   ROUNDS rounds of `run_one IMPL N ROUND` (the caller's
#                                          function) for N = 2 and 4 and every IMPL, the order of
#                                          the impls rotating from round to round
#   bench_note TEXT                        "# DATE TEXT" to the log and stderr
#   bench_scratch                          for the small scripts that keep their runs to themselves
#                                          (trace_overhead.sh, mlx_ring.sh): py ($PYTHON or python3),
#                                          PYTHONPATH this tree, one thread per rank, a scratch
#                                          directory removed at exit with out=scratch/runs.jsonl;
#                                          then cd /tmp

bench_init() {  # name default_timeout [ROUNDS] [-- extra options]
    local name=$1
    per_run=${RUN_TIMEOUT:-$2}
    shift 2
    rounds=${1:-3}
    [ $# -gt 0 ] && shift
    [ "${1:-}" = "--" ] && shift
    extra=("$@")
    out=${OUT:-$here/results/$name-$(date +%Y%m%d-%H%M%S).jsonl}
    case $out in /*) ;; *) out=$PWD/$out ;; esac  # the runs start in /tmp
    log=${out%.jsonl}.log
    mkdir -p "$(dirname "$out")"
    : > "$log"
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
}

bench_note() {
    echo "# $(date -Is) $*" | tee -a "$log" >&2
}

bench_run() {  # label n round command...
    local label=$1 n=$2 round=$3 rc
    shift 3
    echo "== round $round n=$n $label  (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$log" >&2
    timeout -k 5 "$per_run" "$@" >>"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "!! $label n=$n round $round failed (exit $rc); the tail of $log:" >&2
        tail -n 15 "$log" >&2
    fi
}

bench_rounds() {  # impl...
    local impls=("$@") m=$# round n k
    for round in $(seq "$rounds"); do
        for n in 2 4; do
            for ((k = 0; k < m; k++)); do
                run_one "${impls[$(( (k + round + n / 2) % m ))]}" "$n" "$round"
            done
        done
    done
}

bench_scratch() {
    py=${PYTHON:-python3}
    export PYTHONPATH=$(cd "$here/.." && pwd) OMP_NUM_THREADS=1
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    out=$scratch/runs.jsonl
    cd /tmp
}
