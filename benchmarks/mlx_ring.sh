#!/usr/bin/env bash
# usage: bash benchmarks/mlx_ring.sh [ROUNDS] [N...]
#
# all_sum of float32 MLX arrays (8 B - 16 MiB): MLX's ring backend, commlib.mlx and commlib's API on
# NumPy (benchmarks/mlx_ring.py), at each N (default 2 and 4), ROUNDS rounds (default 3), the order
# of the engines rotating from round to round. MLX's ranks are started the way its docs say,
# MLX_RANK and a host file of loopback addresses (ports picked free here). Prints each run's JSON
# lines, then per (n, size) the median over rounds and commlib.mlx's time over the ring's.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
shift || true
ns=${*:-2 4}
source "$here/_bench.sh"
bench_scratch
ring() {  # ring N: one MLX ring job of N ranks on loopback
    local n=$1 hosts=$scratch/hosts.json pids=()
    "$py" - "$n" > "$hosts" <<'PY'
import json, socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(json.dumps([[f"127.0.0.1:{s.getsockname()[1]}"] for s in socks]))
PY
    for r in $(seq 0 $((n - 1))); do
        MLX_RANK=$r MLX_HOSTFILE=$hosts timeout 300 "$py" "$here/mlx_ring.py" --engine ring &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}
engines=(ring commlib-mlx commlib-api)
for round in $(seq "$rounds"); do
    for n in $ns; do
        for i in 0 1 2; do
            e=${engines[$(( (i + round) % 3 ))]}
            if [ "$e" = ring ]; then
                ring "$n" | tee -a "$out"
            else
                timeout 300 "$py" -m commrun -n "$n" --no-tag-output "$here/mlx_ring.py" --engine "$e" | tee -a "$out"
            fi
        done
    done
done
"$py" - "$out" <<'PY'
import json, sys, statistics
runs = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
print("\n| n | size | MLX ring µs | commlib.mlx µs | commlib API µs | commlib.mlx / ring |")
print("|---|---:|---:|---:|---:|---:|")
for n in sorted({r["n"] for r in runs}):
    for b in sorted({r["bytes"] for r in runs}):
        med = {}
        for e in ("ring", "commlib-mlx", "commlib-api"):
            v = [r["us"] for r in runs if r["n"] == n and r["bytes"] == b and r["engine"] == e]
            med[e] = statistics.median(v) if v else float("nan")
        size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
        print(f"| {n} | {size} | {med['ring']:.1f} | {med['commlib-mlx']:.1f} | {med['commlib-api']:.1f} "
              f"| {med['commlib-mlx'] / med['ring']:.2f} |")
PY
