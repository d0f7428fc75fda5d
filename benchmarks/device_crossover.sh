#!/usr/bin/env bash
# Algorithm crossover tables (benchmarks/crossover.py) at n=8 and n=16 on one 16-core machine, for
# gather, scatter, broadcast, reduce, all_to_all and all_reduce, 1 KiB .. 16 MiB in powers of 4.
#
#     OUT=/tmp/out bash benchmarks/device_crossover.sh
#
# Run from anywhere in the repository, with commlib built in place (python setup.py build_ext --inplace,
# which this script runs if commlib does not import) or installed; commrun is launcher/ when it is not
# installed. Each run's output goes to $OUT/crossover_n<N>.txt (OUT defaults to /tmp/out) and to stdout.
# Each commrun is stopped after $TIMEOUT seconds (120), so the script ends within about 4 minutes
# whatever happens. Median of 3 interleaved repeats, crossover.py's default iterations (8 MiB a timing,
# 5..200). On the 2-core machine, 8 and 16 ranks oversubscribed, n=8 took 19 s and n=16 63 s (REPEATS=5
# under load: 50 s, and n=16 ran past 120 s); on 16 cores expect well under a minute in all.
# Overrides for a quick check: N_LIST="2 4", SIZES="1024 65536", REPEATS=1, KINDS=..., TIMEOUT=..., PYTHON=...
set -u -o pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
PYTHON=${PYTHON:-python}
N_LIST=${N_LIST:-"8 16"}
KINDS=${KINDS:-gather,scatter,broadcast,reduce,all_to_all,all_reduce}
SIZES=${SIZES:-"1024 4096 16384 65536 262144 1048576 4194304 16777216"}
REPEATS=${REPEATS:-3}
TIMEOUT=${TIMEOUT:-120}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"

if ! "$PYTHON" -c "import commlib" 2>/dev/null; then
    echo "# commlib does not import: building its extensions in place" >&2
    "$PYTHON" setup.py build_ext --inplace >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
if ! "$PYTHON" -c "import commrun" 2>/dev/null; then  # not installed: the launcher/ directory is commrun
    shim=$(mktemp -d)
    ln -s "$PWD/launcher" "$shim/commrun"
    export PYTHONPATH=$shim:$PYTHONPATH
fi
echo "# $(nproc) cores; $("$PYTHON" --version 2>&1); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

status=0
for n in $N_LIST; do
    f="$OUT/crossover_n$n.txt"
    start=$(date +%s%N)
    # shellcheck disable=SC2086  # SIZES is a list
    "$PYTHON" -m commrun -n "$n" --timeout "$TIMEOUT" benchmarks/crossover.py \
        --kinds "$KINDS" --sizes $SIZES --repeats "$REPEATS" 2>&1 | tee "$f"
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    echo "# n=$n: exit $rc, $((ms / 1000)).$(printf %03d $((ms % 1000))) s" | tee -a "$f"
    [ "$rc" -eq 0 ] || status=$rc
done
exit "$status"
