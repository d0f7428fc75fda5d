#!/bin/bash
# Collectives across hosts on shaped links: network namespaces as hosts, one rank per host.
#
#   sudo bash benchmarks/shaped_links.sh [--hosts "2 4"] [--rates "1gbit 10gbit"] [--reps 3] [--impls "commlib mpi"]
#   (impls: commlib, commlib-enc = commlib under `commrun --encrypt`, all_reduce and chain broadcast; mpi)
#
# Topology: one namespace per host (h1..hN) and a switch namespace holding a Linux bridge; each
# host is joined to the bridge by a veth pair, 10.236.S.0/24 (S random), so all traffic stays in
# namespaces this script makes. Every link is shaped in both directions with tbf (host side:
# egress of the host; switch side: egress towards the host), as a full-duplex NIC of that rate.
# netem is used for nothing (this kernel may not have it; the script says so).
# For each rate and host count it runs, one rank per host:
#   commlib: commrun --hosts h1:1,... --rsh "ip netns exec {host}": ring all_reduce of 64 MiB,
#            broadcast of 64 MiB as a binomial tree and as a pipelined chain (COMMLIB_ALGO_BROADCAST)
#   mpi:     the same through mpi4py under Open MPI's mpirun (btl tcp, orted started in each
#            namespace through a two-line `ip netns exec` agent), with the venv's python that has mpi4py
# Output: RESULT lines collected in $OUT (default /tmp/shaped_links.jsonl) and a table.
# The namespaces are removed on any exit (trap), including Ctrl-C and errors.
set -u
HOSTS_LIST="2 4"; RATES="1gbit 10gbit"; REPS=3; IMPLS="commlib mpi"
OUT=${OUT:-/tmp/shaped_links.jsonl}
PY=${PY:-python3}
MPIPY=${MPIPY:-/work/main/benchmarks/.env/bin/python}
while [ $# -gt 0 ]; do
  case $1 in
    --hosts) HOSTS_LIST=$2; shift 2;; --rates) RATES=$2; shift 2;; --reps) REPS=$2; shift 2;;
    --impls) IMPLS=$2; shift 2;; *) echo "unknown option $1" >&2; exit 2;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
RANK_PY=$HERE/shaped_links_rank.py
TAG=$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
SUB=10.236.$((RANDOM % 200 + 20))
MAXH=$(echo $HOSTS_LIST | tr ' ' '\n' | sort -n | tail -1)
SW=sw$TAG
NSS=()

AGENT=$(mktemp /tmp/nsrsh.XXXXXX)
cleanup() {
  for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null; done  # removes their veth pairs too
  rm -f "$AGENT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

burst_for() {  # tbf bucket: >= rate/HZ and >= a 64 KiB GSO packet; 1 ms of traffic at the rate
  case $1 in 1gbit) echo 256kb;; 10gbit) echo 2mb;; *) echo 1mb;; esac
}

shape() {  # shape RATE: (re)set tbf on both ends of every host link
  local b; b=$(burst_for "$1")
  for i in $(seq "$MAXH"); do
    ip -n "h$i$TAG" link set dev "e$i$TAG" up
    ip netns exec "h$i$TAG" tc qdisc replace dev "e$i$TAG" root tbf rate "$1" burst "$b" latency 20ms
    ip netns exec "$SW" tc qdisc replace dev "p$i$TAG" root tbf rate "$1" burst "$b" latency 20ms
  done
}

# Open MPI's rsh launcher hands the remote command over as one string, as to ssh: run it in a shell.
printf '#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" sh -c "$*"\n' > "$AGENT"; chmod +x "$AGENT"
ip netns add "$SW" || { echo "cannot create network namespaces (root and iproute2 needed)" >&2; exit 1; }
NSS+=("$SW")
ip -n "$SW" link add br0 type bridge && ip -n "$SW" link set br0 up && ip -n "$SW" link set lo up
for i in $(seq "$MAXH"); do
  ns=h$i$TAG
  ip netns add "$ns"; NSS+=("$ns")
  ip link add "e$i$TAG" type veth peer name "p$i$TAG"
  ip link set "e$i$TAG" netns "$ns"; ip link set "p$i$TAG" netns "$SW"
  ip -n "$SW" link set "p$i$TAG" master br0 up
  ip -n "$ns" addr add "$SUB.$i/24" dev "e$i$TAG"
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "e$i$TAG" up
done
if ip netns exec "$SW" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
  ip netns exec "$SW" tc qdisc del dev lo root; echo "netem: available (not used)"
else
  echo "netem: not available in this kernel (tbf only)"
fi
ip netns exec "h1$TAG" "$PY" -c "import socket, sys; s = socket.socket(); s.settimeout(2)
try: s.connect(('$SUB.2', 9))
except ConnectionRefusedError: sys.exit(0)  # the host answered
sys.exit(1)" || { echo "hosts cannot reach each other" >&2; exit 1; }

export COMMLIB_TIMEOUT=120 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
: > "$OUT"
run_one() {  # run_one RATE N IMPL [ALGO]
  local rate=$1 n=$2 impl=$3 algo=${4:-} hosts="" i
  for i in $(seq "$n"); do hosts="$hosts${hosts:+,}h$i$TAG:1"; done
  local tagjson="\"rate\": \"$rate\", \"impl\": \"$impl\""
  if [ "$impl" != mpi ]; then
    local enc=""; [ "$impl" = commlib-enc ] && enc=--encrypt
    ops="all_reduce broadcast"; [ "$algo" = tree ] && ops=broadcast
    COMMLIB_ALGO_BROADCAST=$algo timeout 300 ip netns exec "h1$TAG" "$PY" -m commrun --no-tag-output $enc \
      --hosts "$hosts" --rsh "ip netns exec {host}" --coordinator-host "$SUB.1" "$RANK_PY" commlib $ops
  else
    local mhosts; mhosts=$(echo "$hosts" | tr -d ' ')
    timeout 300 ip netns exec "h1$TAG" mpirun --host "$mhosts" -n "$n" --mca plm_rsh_agent "$AGENT" --mca routed direct \
      --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$SUB.0/24" --mca oob_tcp_if_include "$SUB.0/24" \
      "$MPIPY" "$RANK_PY" mpi all_reduce broadcast
  fi 2>&1 | while IFS= read -r line; do
    case $line in
      RESULT*) echo "{$tagjson, ${line#RESULT \{}" >> "$OUT"; echo "  $rate n=$n $impl ${line#RESULT }";;
      *) echo "  | $line";;
    esac
  done
}
for rep in $(seq "$REPS"); do
  for rate in $RATES; do
    shape "$rate"
    for n in $HOSTS_LIST; do
      for impl in $IMPLS; do
        if [ "$impl" = commlib ]; then run_one "$rate" "$n" commlib chain; run_one "$rate" "$n" commlib tree
        elif [ "$impl" = commlib-enc ]; then run_one "$rate" "$n" commlib-enc chain
        else run_one "$rate" "$n" mpi; fi
      done
    done
  done
done
"$PY" - "$OUT" <<'EOF'
import collections, json, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows[(r["rate"], r["n"], r["op"], r["impl"], r["algo"])].append(r)
print("| rate | n | op | impl (algorithm) | time (ms) | busbw (Gbit/s) | of the shaped rate | runs |")
print("|---|---:|---|---|---:|---:|---:|---:|")
for (rate, n, op, impl, algo), rs in sorted(rows.items()):
    link = float(rate.rstrip("gbit")) * 1e9
    t = statistics.median(r["time_s"] for r in rs)
    bws = sorted(r["busbw"] * 8 / 1e9 for r in rs)
    med = statistics.median(bws)
    print(f"| {rate} | {n} | {op} | {impl} ({algo}) | {t * 1e3:,.0f} | {med:.2f} ({bws[0]:.2f}-{bws[-1]:.2f}) | "
          f"{med * 1e9 / link:.0%} | {len(rs)} |")
EOF
