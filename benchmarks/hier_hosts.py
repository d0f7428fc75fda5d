"""Host-aware collectives against flat schedules, across namespace hosts on shaped links.

    sudo python benchmarks/hier_hosts.py [--layouts 2,2 2,1 robin:2x3] [--rates 1gbit 10gbit] [--reps 3]
        [--sizes 262144,1048576,4194304,16777216] [--algos ring rabenseifner rails leaders]
        [--kind all_reduce|broadcast|reduce|barrier|all_to_all]

A layout "robin:HxN" places N ranks round-robin on H hosts (--hosts a:1,b:1 -n N: rank k on host
k mod H).

Hosts are network namespaces on one bridge (tests/multihost/_netns.Fabric: a subnet that exists
only there, every namespace removed on exit). Each host's link is shaped in both directions with
tbf at the rate (a full-duplex NIC); ranks of one host talk over shared memory. A layout "2,1"
puts 2 ranks on the first host and 1 on the second. For each repeat, rate and layout, the
algorithms run one after the other (interleaved), each a commrun job forcing it with
COMMLIB_ALGO_ALL_REDUCE; a job times every size (shaped_links_rank.py: the median over 5
iterations of the slowest rank's time). Prints a table of median times and each algorithm's
time against the flat ring's.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "multihost"))
from _netns import Fabric, base_env, sh  # noqa: E402


def burst(rate):  # tbf bucket: >= rate/HZ and >= a 64 KiB GSO packet
    return {"1gbit": "256kb", "10gbit": "2mb"}.get(rate, "1mb")


def shape(fab, rate):
    for i, ns in enumerate(fab.hosts):
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", "fab0", "root", "tbf", "rate", rate,
           "burst", burst(rate), "latency", "20ms")
        sh("ip", "netns", "exec", fab.switch, "tc", "qdisc", "replace", "dev", f"s{i}{fab.tag}", "root", "tbf",
           "rate", rate, "burst", burst(rate), "latency", "20ms")


def hosts_of(fab, layout):
    """commrun's placement arguments for a layout: (2, 1) or ("robin", hosts, ranks)."""
    if layout[0] == "robin":
        return ["--hosts", ",".join(f"{h}:1" for h in fab.hosts[:layout[1]]), "-n", str(layout[2]), "--oversubscribe"]
    return ["--hosts", ",".join(f"{fab.hosts[i]}:{k}" for i, k in enumerate(layout))]


def run(fab, layout, algo, sizes, kind="all_reduce"):
    argv = fab.commrun("--no-tag-output", *hosts_of(fab, layout), "--ifname", "fab0",
                       os.path.join(HERE, "shaped_links_rank.py"), "commlib", kind)
    env = base_env(COMMLIB_TIMEOUT=120, SHAPED_NBYTES=sizes, **{f"COMMLIB_ALGO_{kind.upper()}": algo})
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line[len("RESULT "):]) for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    if p.returncode != 0 or not rows:
        print(f"  {layout} {algo}: exit {p.returncode}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}", file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layouts", nargs="+", default=["2,2", "2,1"])
    ap.add_argument("--rates", nargs="+", default=["1gbit", "10gbit"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(str(s) for s in (256 << 10, 1 << 20, 4 << 20, 16 << 20)))
    ap.add_argument("--algos", nargs="+", default=["ring", "rabenseifner", "rails", "leaders"])
    ap.add_argument("--kind", default="all_reduce", choices=["all_reduce", "broadcast", "reduce", "barrier", "all_to_all"])
    args = ap.parse_args()
    layouts = [("robin",) + tuple(int(k) for k in lay[len("robin:"):].split("x")) if lay.startswith("robin:")
               else tuple(int(k) for k in lay.split(",")) for lay in args.layouts]
    base = args.algos[0]  # the ratio column's reference
    times = collections.defaultdict(list)
    nhosts = max(lay[1] if lay[0] == "robin" else len(lay) for lay in layouts)
    with Fabric(nhosts, f"10.236.{200 + os.getpid() % 50}") as fab:
        for rep in range(args.reps):
            for rate in args.rates:
                shape(fab, rate)
                for layout in layouts:
                    equal = layout[0] == "robin" or len(set(layout)) == 1
                    for algo in args.algos:
                        if algo == "rails" and not equal or algo == "rails" and layout[0] == "robin" and args.kind == "all_to_all":
                            continue
                        for row in run(fab, layout, algo, args.sizes, args.kind):
                            times[rate, layout, row["nbytes"], algo].append(row["time_s"])
                            print(f"rep {rep} {rate} {layout} {algo} {row['nbytes']} B: "
                                  f"{row['time_s'] * 1e3:.2f} ms", flush=True)
    print(f"\n{args.kind}: median of {args.reps} interleaved jobs (ms)")
    print("\n| rate | ranks a host | size | " + " | ".join(args.algos) + f" | best / {base} |")
    print("|---|---|---:|" + "---:|" * (len(args.algos) + 1))
    for rate in args.rates:
        for layout in layouts:
            for nbytes in sorted({k[2] for k in times if k[:2] == (rate, layout)}):
                med = {a: statistics.median(times[rate, layout, nbytes, a]) for a in args.algos
                       if times.get((rate, layout, nbytes, a))}
                cells = [f"{med[a] * 1e3:.2f}" if a in med else "-" for a in args.algos]
                best = min((a for a in med if a != base), key=med.get, default=None)
                ratio = f"{best} {med[best] / med[base]:.2f}" if best and base in med else "-"
                where = (f"round-robin, {layout[2]} ranks on {layout[1]}" if layout[0] == "robin"
                         else "+".join(map(str, layout)))
                size = f"{nbytes >> 10} KiB" if nbytes >= 1024 else f"{nbytes} B"
                print(f"| {rate} | {where} | {size} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main()
