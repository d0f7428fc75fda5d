#!/usr/bin/env bash
# usage: bash benchmarks/torch_backend.sh [ROUNDS] [-- extra torch_backend.py options]
#
# commlib as a torch.distributed backend against torch's "gloo", and against
# commlib's own API (what the torch layer costs), at n = 2 and 4:
# benchmarks/torch_backend.py runs as
#   commlib      python3 -m commrun -n N torch_backend.py --backend commlib      (import commlib.torch)
#   gloo         python3 -m commrun -n N torch_backend.py --backend gloo
#   commlib-api  python3 -m commrun -n N torch_backend.py --backend commlib-api  (commlib's calls; no DDP)
# ROUNDS rounds (default 3), each running every (n, backend) once, the order of
# the backends rotating from round to round so that machine noise spreads over
# all of them (the shared structure is in benchmarks/_bench.sh). The
# interpreter is the main python3 (PYTHON=... to change it; it needs torch, CPU
# build is enough); commlib is the source tree this script lives in, built in
# place (PYTHONPATH points at it); COMMLIB_SRC=/path/to/repo (built in
# place) measures that tree instead. The runs start in /tmp. A run that fails or
# outlives its timeout (RUN_TIMEOUT, default 240 s) is reported and the rest goes on.
# Smoke test: bash benchmarks/torch_backend.sh 1 -- --quick
#
# Output: $OUT (default benchmarks/results/torch_backend-DATE.jsonl; stderr of the
# runs in the same name with .log), then the table of benchmarks/torch_backend_table.py.
# About 8-11 minutes with the default 3 rounds on the 2-core machine (a full n=4 run takes 35-45 s,
# an n=2 run less; commlib-api runs have no DDP); --quick with 1 round: about 1-2 minutes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/_bench.sh"
py=${PYTHON:-python3}
bench_init torch_backend 240 "$@"
command -v "$py" >/dev/null || { echo "no $py on PATH (PYTHON=... names the interpreter)" >&2; exit 1; }
# COMMLIB_SRC=DIR measures the commlib of another source tree (built in place) instead of this one
export PYTHONPATH=$(cd "${COMMLIB_SRC:-$here/..}" && pwd)
cd /tmp
if ! "$py" -c "import torch, commlib.torch, commrun" 2>>"$log"; then
    echo "torch, commlib.torch or commrun cannot be imported by $py with PYTHONPATH=$PYTHONPATH (see $log):" \
         "build commlib in place there (python setup.py build_ext --inplace) or set COMMLIB_SRC=<source tree>" >&2
    exit 1
fi

run_one() {  # backend n round
    local backend=$1 n=$2 round=$3
    bench_run "$backend" "$n" "$round" "$py" -m commrun -n "$n" --no-tag-output \
        "$here/torch_backend.py" --backend "$backend" --round "$round" --out "$out" "${extra[@]}"
}

bench_note "rounds=$rounds out=$out PYTHONPATH=$PYTHONPATH"
bench_rounds commlib gloo commlib-api
bench_note "done (load $(cut -d' ' -f1-3 /proc/loadavg))"
"$py" "$here/torch_backend_table.py" "$out"
