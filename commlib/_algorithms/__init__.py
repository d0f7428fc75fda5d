"""Algorithm choice: the only place that holds size thresholds.

Each algorithm is a function of (group size, rank[, root]) that returns its
schedule as data, a `commlib._plan.Plan`, built once and cached: rows of
full-duplex steps (send a region to one rank while receiving one from
another, reducing or relaying it) and local copies. One executor runs every
plan on any transport; the unit tests run the same plans on an in-memory fake.

Thresholds were measured on the project's 2-core machine (benchmarks/RESULTS.md,
"Algorithm crossover"); each can be overridden for benchmarking with
COMMLIB_ALGO_<KIND>=<name> (e.g. COMMLIB_ALGO_ALL_REDUCE=ring).
"""
import os

from .. import _debug
from . import hier

# At or below these payload sizes the latency-bound algorithm wins
# (benchmarks/crossover.py; 2 cores, so n=4 is oversubscribed, which favours
# fewer steps: the ring's 2(n-1) steps each cost a wake-up).
ALL_REDUCE_SMALL_BYTES_PAIR = 32 << 10  # n=2: doubling 17 us vs ring 24 at 32 KiB; ring wins from 64 KiB
ALL_REDUCE_SMALL_BYTES = 128 << 10  # n=3,4 (quiet machine, interleaved, median of 3, n=4): doubling 298 vs
                                    # Rabenseifner 365 us at 128 KiB, 781 vs 447 at 256 KiB
ALL_REDUCE_SMALL_BYTES_MANY = 64 << 10  # n>4: doubling moves log2(n) whole buffers (n=8, 256 KiB: 19 ms vs
                                        # Rabenseifner 4.5)
BROADCAST_SMALL_BYTES = 64 << 10  # n=4, quiet machine, interleaved, median of 3, tree / chain time: 8-64 KiB
                                  # 0.49-0.70 (the tree runs in one call), 128 KiB 1.17; 4 MiB 1.7
# ... and up to this many ranks (above 2) the small broadcast is linear: the root writes every rank's
# copy itself, one hop for all, instead of the tree's log2 n rounds, each waiting for a forwarding rank to
# run. Interleaved, median of 3, linear / tree time, 8 B-64 KiB: shared memory n=4 0.36-0.63, n=8 0.78;
# Unix sockets n=4 0.50-0.92 (at n=3 the two are one schedule)
BROADCAST_LINEAR_RANKS = 8
REDUCE_SMALL_BYTES = 256 << 10  # n=4: chain wins from 512 KiB; below, within noise
# Beyond 8 ranks a large broadcast or reduce is a chain only from this many bytes per rank: a chain of
# n - 1 hops pays a latency and a chunk's transfer per hop before the last rank has its first chunk, the
# binomial tree log2 n whole transfers. In the alpha-beta model (benchmarks/schedule_model.py, 16 ranks a
# host, 10 us and 12.5 GB/s between hosts) the two cross near 55 KiB a rank at 16 MiB and 32 KiB at 256 MiB;
# 16 MiB at 1,024 ranks: tree 14.8 ms, chain 30.7; at 10,000: 20.2 and 285 (RESULTS.md, "Schedules at 1,024
# and 10,000 ranks").
CHAIN_BLOCK_BYTES = 32 << 10
# ... and beyond 4 ranks, only from these sizes: on one host with a core a rank (16 cores, shared memory,
# crossover.py, interleaved, median of 5-7) the tree's log2 n hops beat the chain's n - 1 up to about
# 1 MiB for broadcast (tree / chain time at n=8 and 16: 256-512 KiB 0.44-0.66, 1 MiB 0.95-1.16, 2 MiB 1.25-1.35,
# 4 MiB 1.42-1.62) and 2 MiB for reduce (512 KiB-2 MiB 0.39-0.95; 4 MiB 0.88-1.15 at n=8, 1.11-1.15 at n=16).
# Up to 4 ranks the chain starts above BROADCAST_SMALL_BYTES / REDUCE_SMALL_BYTES, as measured there.
BROADCAST_CHAIN_BYTES = 1 << 20
REDUCE_CHAIN_BYTES = 4 << 20
# gather and scatter (nbytes: the whole gathered / scattered buffer) beyond this many ranks: the binomial tree
# (log2 n rounds, a subtree's blocks in one message) instead of the root's n - 1 exchanges, where each
# rank's block is at most GATHER_TREE_BLOCK bytes: measured on one host with a core a rank (16 cores, shared
# memory, crossover.py, median of 5), tree / linear time at n=12 and 16 is 0.75-0.92 for blocks up to 4 KiB,
# 0.95-1.02 at 8 KiB and 1.1-1.6 from 16 KiB: the root takes the same bytes either way, and the tree adds
# a copy at every inner rank. Beyond GATHER_TREE_MODEL_RANKS (more ranks than one host holds) the root's n - 1
# latencies dominate: there the tree runs up to GATHER_TREE_BYTES in all (inner ranks hold their subtree's
# blocks: up to half of it). Alpha-beta model (benchmarks/schedule_model.py --kinds gather,scatter):
# 64 ranks 8 KiB-64 MiB tree 0.06-0.92x the linear time, 1,024 ranks 0.007-0.35x (not measured there).
GATHER_LINEAR_RANKS = 8
GATHER_TREE_BLOCK = 4 << 10
GATHER_TREE_MODEL_RANKS = 64
GATHER_TREE_BYTES = 64 << 20
# all_to_all (nbytes: what one rank sends in all): the pairwise exchange talks to every other rank, a full
# mesh of connections; Bruck's (logstep.all_to_all) to 2 ceil(log2 n), moving each block once per set bit
# of its distance. Beyond ALL_TO_ALL_MESH_RANKS it runs where blocks are at most ALL_TO_ALL_BRUCK_BLOCK
# bytes, and at any size beyond ALL_TO_ALL_MESH_MAX ranks (a mesh of more than half the common 1,024-descriptor
# limit). Alpha-beta model (schedule_model.py --kinds all_to_all), Bruck / pairwise time at 256 ranks:
# 4 B-256 B blocks 1.00-1.02 with 15 peers instead of 255; 4 KiB 1.33; 64 KiB 4.6.
ALL_TO_ALL_MESH_RANKS = 64
ALL_TO_ALL_BRUCK_BLOCK = 1 << 10
ALL_TO_ALL_MESH_MAX = 512
# Log-step schedules (logstep.py), n >= 3 (benchmarks/crossover.py --kinds all_gather,rabenseifner,halving,
# 2 cores, load 30-47 from other jobs, so only differences beyond 1.3x are read as real):
# Rabenseifner beats doubling from 256 KiB (n=4: 1 MiB 3.1 vs 9.3 ms; n=8: 256 KiB 4.5 vs 19 ms) and
# ties or beats the ring up to 4 MiB at power-of-two n with 2 log2 n steps instead of 2(n-1) for the
# same bytes; at other n its fold moves the whole buffer twice more, so it stops at 1 MiB there.
ALL_REDUCE_RABENSEIFNER_BYTES = 4 << 20  # power-of-two n >= 4: above the doubling size, up to this
ALL_REDUCE_RABENSEIFNER_BYTES_ODD = 1 << 20  # other n >= 3
# From 8 ranks, with a core a rank (16 cores, one host, crossover.py --kinds rabenseifner, median of 5),
# Rabenseifner / ring time is 0.57-0.93 up to 256 KiB, 1.02 (n=8) and 1.24 (n=16) at 1 MiB, 1.15-1.26 at
# 4-16 MiB: the ring's steps overlap on real cores. So from 8 ranks it stops here.
ALL_REDUCE_RABENSEIFNER_BYTES_MANY = 512 << 10
# all_gather (nbytes: the gathered result), n >= 4: Bruck / recursive doubling up to this
# (n=8: 1-16 KiB 1.6 vs 5.8-7.3 ms, 64-256 KiB 1.5-2.0 vs 2.4-3.2 ms; n=4: 16-256 KiB 1.15-1.2x;
# from 1 MiB within noise). At n=3 both take 2 steps and Bruck adds a copy: ring.
ALL_GATHER_LOG_BYTES = 256 << 10
# (The direct all-gather, pairwise.py, is there for COMMLIB_ALGO_ALL_GATHER=pairwise only: against the ring,
# shared memory, interleaved, median of 3, n=3 256 KiB-64 MiB 0.68-0.97x the time but n=4 1-4 MiB 1.3-1.7x.)

# reduce_scatter (nbytes: the whole input), n >= 3, at or below this: recursive-doubling all-reduce,
# then this rank's block: log2 n latency-bound steps instead of the ring's n-1 (n=4, quiet machine,
# interleaved, median of 3: 16 B-1 KiB 0.77x the ring's time, 16 KiB 0.91, 32 KiB 0.99, 64 KiB 1.16: it
# moves log2 n whole buffers). At n=2 both take one step and the ring sends half: 16-32 KiB 1.5-1.8x.
REDUCE_SCATTER_SMALL_BYTES = 16 << 10
REDUCE_SCATTER_SMALL_BYTES_MANY = 8 << 10  # n > 8
# power-of-two n >= 4, up to this: recursive halving (log2 n steps, the ring's bytes; logstep.py). n=4,
# quiet machine, interleaved, median of 3, halving / ring time: 16 B 0.82, 1 KiB 0.90, 64 KiB 0.87,
# 256 KiB 0.71, 1 MiB 0.42, 4 MiB 0.60, 16 MiB 0.85; 64 MiB 1.18 (the ring wins). Above it the direct
# (pairwise) reduce-scatter, shared memory, n=4, pairwise / halving time: 256 KiB 1.13, 1 MiB 1.11,
# 4 MiB 0.84, 16 MiB 0.59
REDUCE_SCATTER_HALVING_BYTES = 2 << 20
# n >= 3 above the latency-bound sizes, up to this many ranks: the direct reduce-scatter (pairwise.py), no
# block relayed, instead of the ring. Interleaved, median of 3, pairwise / ring time: shared memory n=3
# 256 KiB-64 MiB 0.33-0.89, n=4 0.62-0.87, n=8 (four ranks a core) 1 MiB 0.67, 16 MiB 1.09; Unix
# sockets n=3 1-64 MiB 0.62-0.83, n=4 0.55-0.86. Beyond it the ring: the direct schedule connects every
# pair of ranks. (As the first half of an all-reduce it lost to the ring's pipeline: n=4 1-64 MiB
# 1.03-1.62x.)
REDUCE_SCATTER_PAIRWISE_RANKS = 8
# n=2 (one step either way, the same bytes): halving up to 64 KiB runs in one call (16 B: 5.6 vs 16.1 us);
# above, the ring, which receives straight into the result (256 KiB: 72 vs 160 us)
REDUCE_SCATTER_HALVING_BYTES_PAIR = 64 << 10

CHOICES = {
    "all_reduce": ("doubling", "ring", "rabenseifner", "rails", "leaders"),
    "all_gather": ("ring", "bruck", "pairwise", "leaders"),
    "broadcast": ("tree", "chain", "linear", "leaders", "scatter_gather"),
    "reduce": ("tree", "chain", "leaders", "rails"),
    "barrier": ("doubling", "leaders"),
    "gather": ("linear", "tree"),
    "all_to_all": ("pairwise", "bruck", "rails"),
    "scatter": ("linear", "tree"),
    "reduce_scatter": ("ring", "doubling", "halving", "pairwise"),
}


# all_reduce over ranks on several hosts (HostLayout): above the latency-bound size, a host-aware
# schedule (hier.py) puts only one ring's bytes on each host's network link instead of a flat schedule's,
# in 2(hosts - 1) network steps: 'rails' where every host has as many of the group's ranks, else
# 'leaders' from ALL_REDUCE_LEADERS_BYTES (its trees move whole buffers within a host). Namespace hosts,
# links shaped to 1 Gbit/s, 3 repeats interleaved, median, host-aware / ring time (benchmarks/hier_hosts.py;
# RESULTS.md, "Host-aware all-reduce"): rails (2+2 ranks) 256 KiB-16 MiB 0.65-0.73; leaders (2+1, 1+3)
# 0.65-0.82. At 10 Gbit/s the 2-core machine, not the link, is the limit: rails 0.58-0.98, leaders 256 KiB
# 1.85-2.02, 1 MiB 1.02-1.10, 4-16 MiB 0.89-1.38.
ALL_REDUCE_LEADERS_BYTES = 1 << 20
# Over several hosts, the host-aware schedules ('leaders', hier.py: within each host, among one leader a
# host, within each host again; only leaders talk across hosts) for broadcast and reduce where the flat
# choice is the binomial tree, and for the barrier where every host's ranks are consecutive. Alpha-beta
# model (schedule_model.py --placement block,round-robin; RESULTS.md, "Node-aware collectives"), 16 ranks
# a host, 8 B-64 KiB: broadcast and reduce take the tree's time (the same network rounds) with 1/10-1/16 of
# its network bytes where ranks alternate hosts (1,024 ranks, 64 KiB broadcast: 0.4 vs 6.3 MB a NIC); the
# barrier 0.6-0.76x the dissemination's time on consecutive ranks (a round's last rank crosses to the next
# host in every round) but 1.1-1.3x where ranks alternate over a power of two of hosts (the long rounds stay
# on a host). The all-gather by host is chosen only by COMMLIB_ALGO_ALL_GATHER=leaders: Bruck's log2 n rounds
# take 0.45-0.6x its time (its 2 log2 k rounds within a host add to log2 hosts), for 10x its network bytes.
# Large broadcasts over several hosts, from BROADCAST_SCATTER_BYTES up to BROADCAST_SCATTER_BLOCK a rank: a
# scatter + all-gather among the leaders, then within every host (hier.broadcast_large), 2 log2 hosts
# network rounds carrying twice the payload, where the tree sends log2 n whole payloads and the chain pays
# n - 1 hops. Alpha-beta model, 16 ranks a host, block placement, its time / the flat choice's: 64 ranks
# 1-4 MiB 0.79-0.80; 256 ranks 1-16 MiB 0.67-0.89; 1,024 ranks 1-64 MiB 0.56-0.92; 4,096 ranks 16 MiB 0.49
# (256 KiB a rank and more: the chain, 0.5x). A flat scatter + all-gather (every rank of a host sending
# across the network) would put 8-9x the bytes on each NIC; it runs only by COMMLIB_ALGO_BROADCAST.
BROADCAST_SCATTER_BYTES = 1 << 20
BROADCAST_SCATTER_BLOCK = 64 << 10
# all_to_all beyond ALL_TO_ALL_MESH_RANKS on hosts of as many ranks each, each host's consecutive: by rails
# (hier.all_to_all_rails: an exchange within each host, then one along each rail of local ranks), k - 1 +
# L - 1 peers a rank. Alpha-beta model (schedule_model.py --kinds all_to_all, 16 ranks a host), its time /
# pairwise's: 64-1,024 ranks, blocks of 16 B-4 KiB 0.07-0.25; 64 KiB blocks the same NIC-bound time (84.6 ms
# at 1,024 ranks) with 78 peers instead of 1,023; Bruck at 256 ranks is 2.5-14x slower than rails. Not below:
# across namespace hosts at 4-6 ranks (2 cores) it measured 0.7-4.4x pairwise's time, its packing copies and
# two dependent exchanges costing more than the few steps it saves there.

# Large reduces over hosts of as many ranks each, from REDUCE_RAILS_BYTES up to REDUCE_RAILS_BLOCK a rank: by
# rails (hier.reduce_rails: a reduce-scatter within each host, a reduce-scatter and binomial gather along each
# rail of local ranks to root's host, root gathering its host's pieces), about the payload once on each NIC in
# L - 1 + log2 L network steps. Alpha-beta model (schedule_model.py --kinds reduce), its time / the flat
# choice's (the tree by host, or the chain by host): 16 ranks a host, 64-1,024 ranks, 4-16 MiB 0.27-0.43,
# 1 MiB 0.51-0.97, 64 MiB 0.39 at 1,024 ranks; about 1 at 256 KiB a rank (64 ranks 16 MiB 0.98, 256 ranks
# 64 MiB 0.97); 4 ranks a host, 16 ranks 1 MiB 0.63. Beyond 256 KiB a rank the chain's pipeline wins
# (16 ranks 64 MiB 1.7x). Across 2 namespace hosts at 1 Gbit/s (4-6 ranks, 1-4 MiB: not chosen there) every
# schedule runs at the link's rate, rails 1.0-1.14x the chain (RESULTS.md, "Reduce by rails").
REDUCE_RAILS_BYTES = 1 << 20
REDUCE_RAILS_BLOCK = 128 << 10


class HostLayout:
    """Where a group's ranks run: `hosts[k]` numbers group rank k's host (0, 1, ... in order of first
    appearance). `equal`: every host has as many of the group's ranks. Only layouts that host-aware
    schedules can help are made (`of`): more than one host, and more than one rank on some host."""

    __slots__ = ("hosts", "nhosts", "equal", "contiguous")

    def __init__(self, hosts):
        self.hosts = tuple(hosts)
        counts = {}
        for h in self.hosts:
            counts[h] = counts.get(h, 0) + 1
        self.nhosts = len(counts)
        self.equal = len(set(counts.values())) == 1
        self.contiguous = hier.contiguous(self.hosts)  # every host's ranks consecutive

    @classmethod
    def of(cls, host_ids):
        """The layout of ranks on hosts `host_ids` (one per group rank, any hashable values), or None
        where a flat schedule is as good: every rank on one host, or each on its own."""
        return host_layout(host_ids)[1]

    def __repr__(self):
        return f"HostLayout({self.nhosts} hosts, {'equal' if self.equal else 'unequal'}, {len(self.hosts)} ranks)"


def host_layout(host_ids):
    """(numbers, layout) of ranks on hosts `host_ids` (one per group rank, any hashable values): each
    rank's host numbered 0, 1, ... in order of first appearance, and their HostLayout (None where a
    flat schedule is as good: every rank on one host, or each on its own)."""
    number = {}
    numbers = tuple(number.setdefault(h, len(number)) for h in host_ids)
    flat = len(number) < 2 or len(number) == len(numbers)
    return numbers, None if flat else HostLayout(numbers)


_forced = {}  # kind -> COMMLIB_ALGO_<KIND> value, read once per process
note = None  # while calls are traced: told each algorithm chosen (commlib._trace sets it)


def choose(kind, nbytes, size, layout=None):
    """Name of the algorithm for a collective of `kind` moving `nbytes` on `size` ranks (placed on
    hosts as `layout`, a HostLayout, says; None: one host, or one rank a host)."""
    algo = decide(kind, nbytes, size, layout)
    if note is not None:
        note(algo)
    if _debug.LEVEL:
        _debug.once((kind, algo, size, _debug.size_class(nbytes)), lambda: _why(kind, algo, nbytes, size, layout))
    return algo


def _why(kind, algo, nbytes, size, layout=None):
    """Why `algo`: the thresholds that decided it at this size and n (or the variable that forced it)."""
    if _forced.get(kind):
        return f"{kind} of {nbytes} B on {size} ranks: {algo} (COMMLIB_ALGO_{kind.upper()})"
    if algo in ("rails", "leaders") and kind == "all_reduce":
        return (f"{kind} of {nbytes} B on {size} ranks: {algo} ({layout.nhosts} hosts, "
                + ("as many ranks on each)" if layout.equal else
                   f"unequal numbers of ranks, ALL_REDUCE_LEADERS_BYTES={ALL_REDUCE_LEADERS_BYTES})"))
    if algo == "rails" and kind == "reduce":
        return (f"{kind} of {nbytes} B on {size} ranks: rails ({layout.nhosts} hosts of {size // layout.nhosts} ranks, "
                f"REDUCE_RAILS_BYTES={REDUCE_RAILS_BYTES}, REDUCE_RAILS_BLOCK={REDUCE_RAILS_BLOCK})")
    if algo == "rails" and kind == "all_to_all":
        return (f"{kind} of {nbytes} B on {size} ranks: rails ({layout.nhosts} hosts of {size // layout.nhosts} "
                f"consecutive ranks, ALL_TO_ALL_MESH_RANKS={ALL_TO_ALL_MESH_RANKS})")
    if algo in ("leaders", "scatter_gather") and layout is not None:
        extra = (f", BROADCAST_SCATTER_BYTES={BROADCAST_SCATTER_BYTES}, BROADCAST_SCATTER_BLOCK="
                 f"{BROADCAST_SCATTER_BLOCK}" if kind == "broadcast" else "")
        return (f"{kind} of {nbytes} B on {size} ranks: {algo} ({layout.nhosts} hosts; the flat choice: "
                f"{_flat(kind, nbytes, size)}{extra})")
    pow2 = size & (size - 1) == 0
    names = {
        "all_reduce": ["ALL_REDUCE_SMALL_BYTES_PAIR" if size <= 2 else "ALL_REDUCE_SMALL_BYTES" if size <= 4
                       else "ALL_REDUCE_SMALL_BYTES_MANY"]
        + ([] if size <= 2 else ["ALL_REDUCE_RABENSEIFNER_BYTES_MANY" if size >= 8 else
                                 "ALL_REDUCE_RABENSEIFNER_BYTES" if pow2 else "ALL_REDUCE_RABENSEIFNER_BYTES_ODD"]),
        "all_gather": ["ALL_GATHER_LOG_BYTES"] if size > 3 else [],
        "broadcast": (["BROADCAST_SMALL_BYTES", "BROADCAST_LINEAR_RANKS"]
                      + (["BROADCAST_CHAIN_BYTES", "CHAIN_BLOCK_BYTES"] if size > 4 else []) if size > 2 else []),
        "reduce_scatter": (["REDUCE_SCATTER_HALVING_BYTES_PAIR"] if size == 2 else
                           (["REDUCE_SCATTER_HALVING_BYTES"] if pow2 else [])
                           + ["REDUCE_SCATTER_SMALL_BYTES" if size <= 8 else "REDUCE_SCATTER_SMALL_BYTES_MANY",
                              "REDUCE_SCATTER_PAIRWISE_RANKS"]),
        "reduce": (["REDUCE_SMALL_BYTES"] + (["REDUCE_CHAIN_BYTES", "CHAIN_BLOCK_BYTES"] if size > 4 else [])
                   if size > 2 else []),
        "gather": ["GATHER_LINEAR_RANKS", "GATHER_TREE_BLOCK", "GATHER_TREE_MODEL_RANKS", "GATHER_TREE_BYTES"],
        "all_to_all": ["ALL_TO_ALL_MESH_RANKS", "ALL_TO_ALL_BRUCK_BLOCK", "ALL_TO_ALL_MESH_MAX"],
        "scatter": ["GATHER_LINEAR_RANKS", "GATHER_TREE_BLOCK", "GATHER_TREE_MODEL_RANKS", "GATHER_TREE_BYTES"],
    }.get(kind, [])
    g = globals()
    why = ", ".join(f"{name}={g[name]}" for name in names) or f"the only choice at {size} ranks"
    return f"{kind} of {nbytes} B on {size} ranks: {algo} ({why})"


def decide(kind, nbytes, size, layout=None):
    """choose() without its debug line: for the one-call path's sweep of sizes, which is no call."""
    forced = _forced.get(kind)
    if forced is None:
        forced = _forced[kind] = os.environ.get(f"COMMLIB_ALGO_{kind.upper()}", "")
    if forced:
        if forced not in CHOICES[kind]:
            raise ValueError(f"COMMLIB_ALGO_{kind.upper()}={forced!r}: expected one of {', '.join(CHOICES[kind])}")
        if forced == "rails" and kind != "all_to_all" and layout is not None and not layout.equal:
            raise ValueError(f"COMMLIB_ALGO_{kind.upper()}=rails needs as many ranks on every host; this group's "
                             f"{size} ranks are on {layout.nhosts} hosts in unequal numbers (use leaders)")
        if forced == "rails" and kind == "all_to_all" and layout is not None and not (layout.equal and layout.contiguous):
            raise ValueError(f"COMMLIB_ALGO_ALL_TO_ALL=rails needs as many ranks on every host, each host's "
                             f"consecutive; this group's {size} ranks on {layout.nhosts} hosts are not (use bruck)")
        if forced == "leaders" and kind == "all_gather" and layout is not None and not layout.contiguous:
            raise ValueError(f"COMMLIB_ALGO_ALL_GATHER=leaders needs every host's ranks consecutive; this "
                             f"group's {size} ranks alternate between {layout.nhosts} hosts (use ring)")
        return forced
    flat = _flat(kind, nbytes, size, layout)
    if (kind == "all_to_all" and layout is not None and layout.equal and layout.contiguous
            and size > ALL_TO_ALL_MESH_RANKS):
        return "rails"
    if (kind == "reduce" and layout is not None and layout.equal
            and REDUCE_RAILS_BYTES <= nbytes <= REDUCE_RAILS_BLOCK * size):
        return "rails"
    if (layout is not None and kind == "broadcast" and flat in ("tree", "chain")
            and BROADCAST_SCATTER_BYTES <= nbytes <= BROADCAST_SCATTER_BLOCK * size):
        return "scatter_gather"
    if layout is not None and (flat == "tree" and kind in ("broadcast", "reduce")
                               or kind == "barrier" and layout.contiguous):
        return "leaders"
    return flat


def _flat(kind, nbytes, size, layout=None):
    """decide() for ranks on one host (or one a host): no 'leaders' (all_reduce's host-aware
    schedules, which the layout decides among its sizes, aside)."""
    if kind == "barrier":
        return "doubling"
    if kind == "all_reduce":
        small = (ALL_REDUCE_SMALL_BYTES_PAIR if size <= 2 else ALL_REDUCE_SMALL_BYTES if size <= 4
                 else ALL_REDUCE_SMALL_BYTES_MANY)
        if nbytes <= small or nbytes < 64 * size:
            return "doubling"
        if layout is not None and (layout.equal or nbytes >= ALL_REDUCE_LEADERS_BYTES):
            return "rails" if layout.equal else "leaders"
        if size > 2 and nbytes <= (ALL_REDUCE_RABENSEIFNER_BYTES_MANY if size >= 8
                                   else ALL_REDUCE_RABENSEIFNER_BYTES if size & (size - 1) == 0
                                   else ALL_REDUCE_RABENSEIFNER_BYTES_ODD):
            return "rabenseifner"
        return "ring"
    if kind == "all_gather":  # nbytes: the gathered result
        return "bruck" if size > 3 and nbytes <= ALL_GATHER_LOG_BYTES else "ring"
    if kind == "broadcast":
        if size <= 2:
            return "tree"
        if nbytes <= BROADCAST_SMALL_BYTES:
            return "linear" if size <= BROADCAST_LINEAR_RANKS else "tree"
        if size <= 4:
            return "chain"
        return "chain" if nbytes > BROADCAST_CHAIN_BYTES and nbytes >= CHAIN_BLOCK_BYTES * size else "tree"
    if kind == "reduce_scatter":
        if size & (size - 1) == 0 and nbytes <= (REDUCE_SCATTER_HALVING_BYTES_PAIR if size == 2
                                                 else REDUCE_SCATTER_HALVING_BYTES):
            return "halving"
        small = REDUCE_SCATTER_SMALL_BYTES if size <= 8 else REDUCE_SCATTER_SMALL_BYTES_MANY
        if size > 2 and nbytes <= small:
            return "doubling"
        return "pairwise" if 2 < size <= REDUCE_SCATTER_PAIRWISE_RANKS else "ring"
    if kind == "reduce":
        if nbytes <= REDUCE_SMALL_BYTES or size <= 2:
            return "tree"
        if size <= 4:
            return "chain"
        return "chain" if nbytes >= REDUCE_CHAIN_BYTES and nbytes >= CHAIN_BLOCK_BYTES * size else "tree"
    if kind == "all_to_all":
        if size > ALL_TO_ALL_MESH_MAX or size > ALL_TO_ALL_MESH_RANKS and nbytes <= ALL_TO_ALL_BRUCK_BLOCK * size:
            return "bruck"
        return "pairwise"
    if kind in ("gather", "scatter"):
        if size <= GATHER_LINEAR_RANKS or nbytes <= 0:
            return "linear"
        limit = GATHER_TREE_BYTES if size > GATHER_TREE_MODEL_RANKS else GATHER_TREE_BLOCK * size
        return "tree" if nbytes <= limit else "linear"
    raise ValueError(f"no algorithm choice for {kind!r}")
