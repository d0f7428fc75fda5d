"""Check a job's set-up: every pair connects and authenticates; addresses, transports, speed per pair.

    commrun --doctor --hosts a:2,b:2            (or -n, --hostfile, --rsh, --ifname, as for a job)
    srun -N 2 -n 4 python -m commlib.doctor     (any launcher commlib.init() detects)

Three phases, each bounded, none needing a collective (a collective would
fail on the first broken pair and hide the others):

1. Connect: every rank opens an authenticated point-to-point connection to
   every peer at once (one thread per peer), each bounded by --pair-timeout.
   A failure is that pair's, not the job's. The outcomes travel through the
   coordinator, so every rank learns which pairs failed.
2. Measure: the pairs that connected both ways, in rounds of a round-robin
   tournament (each rank in at most one pair per round, every rank going
   through the rounds in the same order, so no pair waits on another):
   a ping-pong of 8 bytes (latency: half the median round trip) and
   --bytes one way then the other (bandwidth), over the public send/recv.
3. Report: rank 0 prints a table of each rank's host, address and transport
   per peer, the latency and bandwidth matrices, and each failed pair with its
   reason; it exits 1 if any pair failed. The other ranks print nothing.
"""
import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

import commlib as cl

PAIR_TIMEOUT_S = 5.0
MEASURE_BYTES = 1 << 20
PINGS = 20
TAG = 0x0D0C  # the doctor's point-to-point tag


def schedule(n):
    """Round-robin tournament (circle method): rounds of disjoint pairs covering every pair once."""
    ranks = list(range(n)) + ([None] if n % 2 else [])
    m = len(ranks)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ranks[i], ranks[m - 1 - i]) for i in range(m // 2)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        ranks = [ranks[0], ranks[-1]] + ranks[1:-1]
    return rounds


def _connect_all(transport, me, n, timeout):
    """{peer: (route words, seconds, error or None)}, every peer tried at once."""
    results = {}

    def one(peer):
        results[peer] = transport.probe(0, peer, timeout)

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in range(n) if p != me]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5.0)
    for p in range(n):  # a thread stuck past its bound (it cannot be, but never hang on it)
        if p != me and p not in results:
            results[p] = ("?", timeout, f"no answer within {timeout:g} s")
    return results


def _measure(me, peer, nbytes):
    """(latency seconds, bandwidth bytes/s me -> peer, bandwidth peer -> me); the lower rank leads."""
    lead = me < peer
    ping, big = np.zeros(1, np.float64), np.zeros(max(1, nbytes), np.uint8)
    times = []
    for i in range(PINGS + 2):
        start = time.perf_counter()
        if lead:
            cl.send(ping, peer, TAG)
            cl.recv_into(ping, peer, TAG)
        else:
            cl.recv_into(ping, peer, TAG)
            cl.send(ping, peer, TAG)
        if i >= 2:  # the first exchanges set up buffers
            times.append(time.perf_counter() - start)
    latency = statistics.median(times) / 2
    rates = []
    for sender in ((me, peer) if lead else (peer, me)):
        start = time.perf_counter()
        if sender == me:
            cl.send(big, peer, TAG)
            cl.recv_into(ping, peer, TAG)  # the receiver's acknowledgement: all bytes are there
        else:
            cl.recv_into(big, peer, TAG)
            cl.send(ping, peer, TAG)
        rates.append(big.nbytes / (time.perf_counter() - start))
    out, back = (rates[0], rates[1]) if lead else (rates[1], rates[0])
    return latency, out, back


def run(pair_timeout=PAIR_TIMEOUT_S, nbytes=MEASURE_BYTES, out=sys.stdout):
    """Run the check on this rank; rank 0 prints the report. Returns the exit code (1: a pair failed)."""
    g = cl.init(strict=True, timeout=None if os.environ.get("COMMLIB_TIMEOUT") else 60.0)
    me, n = g.rank(), g.size()
    transport = g.transport
    notices = transport.notices
    table = transport.ep.table
    others = [r for r in range(n) if r != me]

    # 1. connect to every peer; everyone learns every rank's failures
    conns = _connect_all(transport, me, n, pair_timeout)
    failed = {p: err for p, (_, _, err) in conns.items() if err}
    notices.send({"kind": "report", "to": "all", "topic": "doctor/connect", "rank": me,
                  "failed": {str(p): e for p, e in failed.items()},
                  "routes": {str(p): route for p, (route, _, _) in conns.items()}})
    got = notices.gather_reports("doctor/connect", others, time.monotonic() + pair_timeout + 10.0)
    reports = {r: got[r] for r in got}
    reports[me] = {"failed": {str(p): e for p, e in failed.items()},
                   "routes": {str(p): route for p, (route, _, _) in conns.items()}}
    silent = [r for r in others if r not in reports]
    broken = set()  # unordered pairs that did not connect both ways
    for r, rep in reports.items():
        broken |= {tuple(sorted((r, int(p)))) for p in rep["failed"]}
    for r in silent:
        broken |= {tuple(sorted((r, p))) for p in range(n) if p != r}

    # 2. measure the pairs that work, round by round (a failure here fails the job: the others
    # hear of it at once and stop measuring too)
    mine, measure_error = {}, None
    try:
        for pairs in schedule(n):
            for a, b in pairs:
                if me in (a, b) and (a, b) not in broken:
                    peer = b if me == a else a
                    mine[peer] = _measure(me, peer, nbytes)
    except cl.CommError as exc:
        measure_error = str(exc).splitlines()[0]
    notices.send({"kind": "report", "to": [0], "topic": "doctor/measure", "rank": me,
                  "speed": {str(p): v for p, v in mine.items()}, "error": measure_error})
    if me != 0:
        return 0
    got = notices.gather_reports("doctor/measure", others, time.monotonic() + pair_timeout + 10.0)
    speed = {me: {str(p): v for p, v in mine.items()}}
    speed.update({r: m["speed"] for r, m in got.items()})
    _print_report(out, n, table, reports, speed, nbytes)
    problems = _failures(reports, silent)
    errors = {me: measure_error, **{r: m.get("error") for r, m in got.items()}}
    problems += [f"FAILED rank {r} while measuring: {e}" for r, e in sorted(errors.items()) if e]
    for line in problems:
        print(line, file=out)
    if problems:
        print(f"commlib doctor: {len(problems)} problem(s); see README 'Multiple hosts' for what to check",
              file=out, flush=True)
        return 1
    print(f"commlib doctor: all {n * (n - 1)} connections between {n} ranks work", file=out, flush=True)
    return 0


def _cell(rep, peer):
    if rep is None:
        return "?"
    if str(peer) in rep["failed"]:
        return "FAIL"
    route = rep["routes"].get(str(peer), "?")
    return ("shm" if route.startswith("shared") else "unix" if route.startswith("unix") else
            "tcp" if route.startswith("tcp") else route)


def _print_report(out, n, table, reports, speed, nbytes):
    hosts = {info["host_id"] for info in table}
    print(f"commlib doctor: {n} ranks on {len(hosts)} host(s) (network namespaces count as hosts)\n", file=out)
    lead = f"{'rank':>4}  {'host':<16} {'address':<22}"
    print(f"{'':<{len(lead)}}  transport to rank", file=out)
    print(lead + "".join(f"{p:>6}" for p in range(n)), file=out)
    for r, info in enumerate(table):
        host, port = info["tcp"][:2]
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        cells = "".join(f"{'-' if p == r else _cell(reports.get(r), p):>6}" for p in range(n))
        print(f"{r:>4}  {info['host'][:16]:<16} {address:<22}{cells}", file=out)
    for title, index, scale in (("latency (microseconds, half a round trip of 8 bytes)", 0, 1e6),
                                (f"bandwidth (MB/s, {nbytes / 2**20:g} MiB from row to column)", 1, 1e-6)):
        print(f"\n{title}", file=out)
        print(f"{'':>4}" + "".join(f"{p:>9}" for p in range(n)), file=out)
        for r in range(n):
            row = []
            for p in range(n):
                v = _speed(speed, r, p, index)
                row.append("-" if p == r else "x" if v is None else f"{v * scale:.0f}" if v * scale >= 100
                           else f"{v * scale:.1f}")
            print(f"{r:>4}" + "".join(f"{c:>9}" for c in row), file=out)
    print(file=out, flush=True)


def _speed(speed, r, p, index):
    """Latency (index 0) or bandwidth r -> p (index 1) from whichever side measured it."""
    mine = speed.get(r, {}).get(str(p))
    if mine is not None:
        return mine[index]
    theirs = speed.get(p, {}).get(str(r))
    if theirs is None:
        return None
    return theirs[0] if index == 0 else theirs[2]


def _failures(reports, silent):
    lines = []
    for r in silent:
        lines.append(f"FAILED rank {r}: sent no report (it died, or cannot reach the coordinator)")
    for r in sorted(reports):
        for p, error in sorted(reports[r]["failed"].items(), key=lambda kv: int(kv[0])):
            route = reports[r]["routes"].get(p, "?")
            lines.append(f"FAILED rank {r} -> rank {p} ({route}): {error}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m commlib.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair-timeout", type=float, default=PAIR_TIMEOUT_S, metavar="SECONDS",
                        help="how long one pair may take to connect and authenticate [%(default)s]")
    parser.add_argument("--bytes", type=int, default=MEASURE_BYTES, metavar="N",
                        help="bytes sent each way per pair for the bandwidth figure [%(default)s]")
    args = parser.parse_args(argv)
    if args.pair_timeout <= 0 or args.bytes < 1:
        parser.error("--pair-timeout and --bytes must be positive")
    return run(args.pair_timeout, args.bytes)


if __name__ == "__main__":
    sys.exit(main())
