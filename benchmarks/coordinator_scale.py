"""The coordinator against 1,000 to 10,000 fake ranks: each phase's cost per n, and how it grows.

    python benchmarks/coordinator_scale.py [--ranks 1000,2000,4000,8000,10000] [--repeats 1] [--agents]

Each job is tests/scale/fakeranks.py's (the real coordinator in its own process; the fake ranks,
coroutines speaking its real protocol, in this one): start-up, one rank lost without a goodbye,
every rank stalled at once (one census), finalize. Per phase and n it prints the coordinator's
CPU seconds, the messages and bytes the ranks received, its threads, and the wall time; then, per
phase, the growth exponent k of each figure (the least-squares slope of log figure on log n: 1 is
linear, 2 quadratic), from the median of the repeats. With --agents each host's 64 ranks sit behind
one fake agent's link, as commrun's agents carry them: the figures are then what crosses the
links (a frame counts as a message).

As root, the jobs run in a network namespace of their own (unshare -n, its loopback only) whose
listen backlog (net.core.somaxconn) is raised to the job's size: beyond the backlog, connects that
arrive together wait for TCP's retransmissions (1 s, 3 s...), which would measure the kernel's
setting, not the coordinator. Elsewhere the host's backlog stands, and the output says so.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "scale"))
sys.path.insert(0, os.path.join(HERE, ".."))

PHASES = ("start", "lost", "stall", "finalize")
FIGURES = ("cpu_s", "messages", "bytes", "seconds")


def _in_own_namespace(argv, biggest):
    """Re-run this script in a network namespace with the backlog raised (root only); False where not."""
    if os.environ.get("COMMLIB_SCALE_NETNS") or os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    backlog = max(4096, 1 << (biggest + 64).bit_length())
    script = (f"ip link set lo up && sysctl -qw net.core.somaxconn={backlog} && "
              f"exec {sys.executable} {' '.join(map(repr, [os.path.abspath(__file__)] + argv))}")
    env = dict(os.environ, COMMLIB_SCALE_NETNS=str(backlog))
    return subprocess.call(["unshare", "-n", "sh", "-c", script], env=env)


def slope(ns, values):
    """Least-squares slope of log(value) on log(n); None where a value is not positive."""
    if len(ns) < 2 or min(values) <= 0:
        return None
    xs, ys = [math.log(n) for n in ns], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="1000,2000,4000,8000,10000")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--agents", action="store_true", help="64 ranks a host behind one agent's link")
    args = ap.parse_args()
    sizes = [int(s) for s in args.ranks.split(",")]
    rc = _in_own_namespace(sys.argv[1:], max(sizes))
    if rc is not False:
        sys.exit(rc)
    import fakeranks

    with open("/proc/sys/net/core/somaxconn") as f:
        backlog = int(f.read())
    where = (f"own network namespace, somaxconn {backlog}" if os.environ.get("COMMLIB_SCALE_NETNS")
             else f"the host's network, somaxconn {backlog}")
    print(f"# {where}; {os.cpu_count()} cores; " + ("ranks behind an agent a host of 64" if args.agents
                                                       else "a connection a rank"), flush=True)
    results = {}
    for n in sizes:
        runs = [fakeranks.run(n, timeout=args.timeout, agents=args.agents) for _ in range(args.repeats)]
        results[n] = {p: {f: sorted(r[p][f] for r in runs)[len(runs) // 2] for f in FIGURES + ("threads",)}
                      for p in PHASES}
        row = "; ".join(f"{p} {results[n][p]['seconds']:.2f} s, {results[n][p]['cpu_s']:.2f} CPU-s, "
                        f"{results[n][p]['messages']} msgs, {results[n][p]['bytes'] / 1e6:.2f} MB, "
                        f"{results[n][p]['threads']} threads" for p in PHASES)
        print(f"n={n}: {row}", flush=True)
    print("# growth exponent k (figure ~ n^k), least squares over n =", ", ".join(map(str, sizes)))
    print(f"{'phase':9s} " + " ".join(f"{f:>9s}" for f in FIGURES))
    for p in PHASES:
        ks = [slope(sizes, [results[n][p][f] for n in sizes]) for f in FIGURES]
        print(f"{p:9s} " + " ".join(f"{k:9.2f}" if k is not None else f"{'-':>9s}" for k in ks))
    print(json.dumps({str(n): r for n, r in results.items()}))


if __name__ == "__main__":
    main()
