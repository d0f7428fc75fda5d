"""commlib's collective schedules at thousands of ranks, without a socket: every rank's plan
(`commlib._plan`, the rows the executor runs) is played against an alpha-beta model of a
cluster whose ranks sit `per_host` to a host.

What it reports for one collective, algorithm, job size and payload:

  steps     the longest chain of dependent steps (a row waits for its own previous row and
            for the row of the rank that sends to it): the latency term
  time      the modelled time of that chain: a transfer costs alpha + bytes * beta of its link
            (shared memory within a host, the network between hosts), starts when both ranks
            have reached its row, and a relayed row (the chains) forwards each chunk as it
            arrives; copies cost bytes * COPY_BETA
  nic       the most bytes one host sends to other hosts, and the time that takes at the
            network's beta: a bound the time cannot beat, whatever the schedule's latency
  mesh      the most distinct peers one rank exchanges with (the connections it opens)

The model has no contention inside a host, no congestion in the network and no
computation cost for reductions: it ranks schedules by their structure, it does not predict
a cluster's seconds. `play()` is exact for the plans it is given; the cost is one Python step
per row of every rank (a ring all-reduce at 1,024 ranks: 2 million rows, about 10 s).

usage: python benchmarks/schedule_model.py [--ranks 64,256,1024] [--per-host 16]
                                           [--sizes 8,65536,16777216] [--kinds all_reduce,...]
"""
import argparse
import collections
import functools
import sys
import time

from commlib import _plan
from commlib._algorithms import HostLayout, decide, doubling, hier, logstep, pairwise, ring, tree

# (kind, algorithm) -> plan of rank r of n (root 0 where there is one)
PLANS = {
    ("all_reduce", "doubling"): doubling.all_reduce,
    ("all_reduce", "rabenseifner"): logstep.all_reduce,
    ("all_reduce", "ring"): ring.all_reduce,
    ("all_gather", "ring"): ring.all_gather,
    ("all_gather", "bruck"): logstep.all_gather,
    ("all_gather", "pairwise"): pairwise.all_gather,
    ("reduce_scatter", "ring"): ring.reduce_scatter,
    ("reduce_scatter", "doubling"): doubling.all_reduce,  # (then this rank's block: no more steps)
    ("reduce_scatter", "halving"): logstep.reduce_scatter,
    ("reduce_scatter", "pairwise"): pairwise.reduce_scatter,
    ("broadcast", "tree"): lambda n, r: tree.broadcast_tree(n, r, 0),
    ("broadcast", "chain"): lambda n, r: tree.broadcast_chain(n, r, 0),
    ("broadcast", "linear"): lambda n, r: tree.broadcast_linear(n, r, 0),
    ("broadcast", "scatter_gather"): lambda n, r: tree.broadcast_scatter_gather(n, r, 0),
    ("reduce", "tree"): lambda n, r: tree.reduce_tree(n, r, 0),
    ("reduce", "chain"): lambda n, r: tree.reduce_chain(n, r, 0),
    ("gather", "linear"): lambda n, r: tree.gather_linear(n, r, 0),
    ("scatter", "linear"): lambda n, r: tree.scatter_linear(n, r, 0),
    ("gather", "tree"): lambda n, r: tree.gather_tree(n, r, 0),
    ("scatter", "tree"): lambda n, r: tree.scatter_tree(n, r, 0),
    ("all_to_all", "pairwise"): pairwise.all_to_all,
    ("all_to_all", "bruck"): logstep.all_to_all,
    ("barrier", "doubling"): doubling.barrier,  # (the dissemination barrier, in doubling.py)
}
POW2_ONLY = {("reduce_scatter", "halving")}  # algorithms that exist only for power-of-two n
# (kind, algorithm) -> plan of rank r given the host of every rank (a tuple)
HOSTED = {
    ("all_reduce", "leaders"): hier.all_reduce,
    ("all_reduce", "rails"): hier.all_reduce_rails,
    ("broadcast", "leaders"): lambda hosts, r: hier.broadcast(hosts, r, 0),
    ("broadcast", "scatter_gather by host"): lambda hosts, r: hier.broadcast_large(hosts, r, 0),
    ("reduce", "leaders"): lambda hosts, r: hier.reduce(hosts, r, 0),
    ("reduce", "rails"): lambda hosts, r: hier.reduce_rails(hosts, r, 0),
    ("barrier", "leaders"): hier.barrier,
    ("all_gather", "leaders"): hier.all_gather,
    ("all_to_all", "rails"): hier.all_to_all_rails,
}


def hosted(kind_algo, links, n):
    """plan_of(n, r) of a host-aware algorithm on the model's host map."""
    hosts = tuple(links.host(r) for r in range(n))
    return lambda _n, r: HOSTED[kind_algo](hosts, r)


class Links:
    """Alpha (s) and beta (s/byte) within a host and between hosts; `chunk`: a relay's unit."""

    def __init__(self, per_host, alpha_local=2e-6, beta_local=1 / 10e9, alpha_net=10e-6, beta_net=1 / 12.5e9,
                 chunk=256 << 10, copy_beta=1 / 10e9, hosts=None):
        self.per_host = per_host
        self.hosts = hosts  # the host of each rank; None: `per_host` consecutive ranks a host
        self.alpha_local, self.beta_local, self.alpha_net, self.beta_net = alpha_local, beta_local, alpha_net, beta_net
        self.chunk, self.copy_beta = chunk, copy_beta

    def host(self, r):
        return r // self.per_host if self.hosts is None else self.hosts[r]

    def cost(self, a, b):
        """(alpha, beta) of the link from rank a to rank b."""
        if self.host(a) == self.host(b):
            return self.alpha_local, self.beta_local
        return self.alpha_net, self.beta_net


class _Transfer:
    __slots__ = ("src", "dst", "nbytes", "relay", "src_row", "dst_row", "src_start", "dst_start", "end", "start",
                 "depth", "waiting")

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.nbytes, self.relay = 0, None  # relay: the incoming transfer whose bytes this one forwards
        self.src_row = self.dst_row = None  # (rank's row index) once each side has posted it
        self.src_start = self.dst_start = None
        self.end = self.start = None
        self.depth = 0
        self.waiting = []  # relayed transfers that forward this one's bytes


Result = collections.namedtuple("Result", "steps time nic_bytes nic_time mesh rows")


def play(n, plan_of, nbytes, links):
    """Play every rank's plan of one collective on n ranks moving `nbytes` (the bytes the plan's
    units cover: the buffer of an all-reduce or broadcast, the gathered result of an all-gather).
    Returns Result(steps, time, nic_bytes, nic_time, mesh, rows)."""
    plans = [plan_of(n, r) for r in range(n)]
    rows = [[tuple(int(v) for v in row) for row in p.rows] for p in plans]
    bounds = {}

    def span(parts, lo, hi):
        b = bounds.get(parts)
        if b is None:
            b = bounds[parts] = _plan.bounds(nbytes, 1, parts)
        return int(b[hi] - b[lo])

    transfers = {}  # (src, dst, k) -> _Transfer: the k-th message from src to dst
    sent, got = collections.Counter(), collections.Counter()
    at = [0] * n  # each rank's current row
    clock = [0.0] * n  # when its current row started
    depth = [0] * n
    posted = [None] * n  # (out transfer, in transfer) of the current row once posted
    peers = [set() for _ in range(n)]
    out_bytes = collections.Counter()  # host -> bytes sent to other hosts
    ready = collections.deque(range(n))

    def resolve(first):
        """Compute the end of transfer `first` where it can be known now, then of the relayed
        transfers that waited on it (a worklist: a chain of 10,000 relays is no recursion)."""
        work = [first]
        while work:
            t = work.pop()
            if t.end is not None or t.src_start is None or t.dst_start is None:
                continue
            alpha, beta = links.cost(t.src, t.dst)
            start = max(t.src_start, t.dst_start)
            if t.relay is not None:  # forwards what arrives: waits for the first chunk of the incoming transfer
                inc = t.relay
                if inc.end is None:
                    if t not in inc.waiting:
                        inc.waiting.append(t)
                    continue
                in_alpha, in_beta = links.cost(inc.src, inc.dst)
                first_chunk = min(links.chunk, t.nbytes)
                start = max(start, inc.start + in_alpha + first_chunk * in_beta)
                t.end = max(start + alpha + t.nbytes * beta, inc.end + first_chunk * beta)
                t.depth = max(t.depth, inc.depth) + 1
            else:
                t.end = start + alpha + t.nbytes * beta
                t.depth += 1
            t.start = start
            work.extend(t.waiting)
            ready.append(t.src)
            ready.append(t.dst)

    while ready:
        r = ready.popleft()
        while at[r] < len(rows[r]):
            row = rows[r][at[r]]
            kind, dst, src, s_slot, s_lo, s_hi, r_slot, r_lo, r_hi, _init, flags = row
            parts = plans[r].parts
            if kind == _plan.COPY:
                clock[r] += span(parts, s_lo, s_hi) * links.copy_beta
                at[r] += 1
                continue
            if posted[r] is None:  # post this row's send and receive
                out = inc = None
                if src >= 0:
                    key = (src, r, got[(src, r)])
                    got[(src, r)] += 1
                    inc = transfers.setdefault(key, _Transfer(src, r))
                    inc.dst_row, inc.dst_start = at[r], clock[r]
                    inc.depth = max(inc.depth, depth[r])
                    peers[r].add(src)
                if dst >= 0:
                    key = (r, dst, sent[(r, dst)])
                    sent[(r, dst)] += 1
                    out = transfers.setdefault(key, _Transfer(r, dst))
                    out.nbytes = span(parts, s_lo, s_hi) if s_slot >= 0 else 0
                    out.relay = inc if flags & (_plan.RELAY_RECEIVED | _plan.RELAY_REDUCED) else None
                    out.src_row, out.src_start = at[r], clock[r]
                    out.depth = max(out.depth, depth[r])
                    peers[r].add(dst)
                    if links.host(r) != links.host(dst):
                        out_bytes[links.host(r)] += out.nbytes
                posted[r] = (out, inc)
                for t in (out, inc):
                    if t is not None:
                        resolve(t)
            out, inc = posted[r]
            if (out is not None and out.end is None) or (inc is not None and inc.end is None):
                break  # waits for a partner: resumed when one of its transfers resolves
            ends = [t.end for t in (out, inc) if t is not None]
            clock[r] = max([clock[r]] + ends)
            depth[r] = max([depth[r]] + [t.depth for t in (out, inc) if t is not None])
            posted[r] = None
            at[r] += 1
    stuck = [r for r in range(n) if at[r] < len(rows[r])]
    if stuck:
        raise RuntimeError(f"the schedule deadlocks: ranks {stuck[:8]} never finish")
    nic = max(out_bytes.values(), default=0)
    return Result(steps=max(depth), time=max(clock), nic_bytes=nic, nic_time=nic * links.beta_net,
                  mesh=max(len(p) for p in peers), rows=sum(len(x) for x in rows))


@functools.lru_cache(maxsize=None)
def _size_text(nbytes):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def _parse_size(text):
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="64,256,1024")
    ap.add_argument("--per-host", type=int, default=16)
    ap.add_argument("--sizes", default="8,64K,16M")
    ap.add_argument("--kinds", default="all_reduce,all_gather,reduce_scatter,broadcast,reduce,barrier")
    ap.add_argument("--placement", default="block",
                    help="block (per-host consecutive ranks a host), round-robin (rank r on host r mod hosts), "
                         "or both, comma-separated")
    ap.add_argument("--max-rows", type=int, default=3_000_000, help="skip a job whose plans have more rows")
    args = ap.parse_args(argv)
    kinds = args.kinds.split(",")
    links = Links(args.per_host)
    print(f"# alpha-beta model, {args.per_host} ranks a host: within a host alpha {links.alpha_local * 1e6:g} us, "
          f"{1 / links.beta_local / 1e9:g} GB/s; between hosts alpha {links.alpha_net * 1e6:g} us, "
          f"{1 / links.beta_net / 1e9:g} GB/s a NIC; relay chunk {_size_text(links.chunk)}")
    print("| kind | placement | n | bytes | algorithm | chosen | steps | time | NIC bytes | NIC time | peers a rank |")
    print("|---|---|---:|---:|---|:-:|---:|---:|---:|---:|---:|")
    for n, placement in ((int(x), p) for x in args.ranks.split(",") for p in args.placement.split(",")):
        nhosts = max(1, n // args.per_host)
        links = Links(args.per_host, hosts=tuple(r % nhosts for r in range(n)) if placement == "round-robin" else None)
        for kind in kinds:
            for nbytes in (_parse_size(s) for s in args.sizes.split(",")):
                try:
                    chosen = decide(kind, nbytes, n, HostLayout.of([links.host(r) for r in range(n)]))
                except ValueError:
                    chosen = None
                candidates = list(PLANS.items()) + [(ka, hosted(ka, links, n)) for ka in HOSTED]
                for (k, algo), plan_of in candidates:
                    if k != kind or ((k, algo) in POW2_ONLY and n & (n - 1)):
                        continue
                    try:
                        rows_one = len(plan_of(n, n // 2).rows)
                    except ValueError as exc:  # a host-aware schedule that does not fit this placement
                        print(f"| {kind} | {placement} | {n:,} | {_size_text(nbytes)} | {algo} | | ({exc}) "
                              "| | | | |", flush=True)
                        continue
                    if rows_one * n > args.max_rows:
                        print(f"| {kind} | {placement} | {n:,} | {_size_text(nbytes)} | {algo} | {'*' if algo == chosen else ''} "
                              f"| (skipped: ~{rows_one * n:,} rows) | | | | |", flush=True)
                        continue
                    t0 = time.monotonic()
                    res = play(n, plan_of, nbytes, links)
                    print(f"| {kind} | {placement} | {n:,} | {_size_text(nbytes)} | {algo} "
                          f"| {'*' if algo == chosen else ''} | {res.steps:,} | {res.time * 1e3:.3f} ms | {res.nic_bytes / 1e6:.1f} MB "
                          f"| {res.nic_time * 1e3:.3f} ms | {res.mesh:,} |", flush=True)
                    if time.monotonic() - t0 > 60:
                        print(f"#   ({kind} {algo} at {n}: {time.monotonic() - t0:.0f} s to play)", file=sys.stderr)


if __name__ == "__main__":
    main()
