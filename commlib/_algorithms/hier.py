"""Host-aware all-reduces: only some ranks of a host talk across hosts.

A flat ring at 1,024 ranks, 16 a host, is 2,046 steps, each paying a network latency where
its neighbours sit on different hosts; Rabenseifner's log-step schedule sends from all 16
ranks of a host across the network at once (benchmarks/RESULTS.md, "Schedules at 1,024 and
10,000 ranks"). Two schedules keep the network's part small.

`all_reduce` (leaders): only the host's leader (its lowest rank) talks across hosts. This
suits small payloads and hosts of any sizes.

1. within each host, a binomial tree reduces X into the leader's RES (the ranks' own order
   in the host, so every host reduces the same way);
2. the leaders run a ring all-reduce of RES in place over L blocks (L the number of hosts):
   2(L - 1) steps, the ring's bytes on each NIC;
3. within each host, a binomial tree broadcasts RES from the leader.

`all_reduce_rails` (hosts of k ranks each): the bandwidth schedule.

1. Within each host, a ring reduce-scatter over k super-blocks leaves local rank v with
   super-block v reduced over its host.
2. The k "rails", one per local index v (local rank v of every host), each run a ring
   all-reduce of super-block v over L sub-blocks. The k rails run side by side, so each NIC
   carries the flat ring's bytes in 2(L - 1) steps.
3. Within each host, a ring all-gather of the super-blocks.

Every block is reduced along one fixed order and then copied verbatim, so every rank ends
with the same bits. `hosts` is the host of each group rank (any hashable values; ranks of one
host need not be contiguous), part of the plan's cache key.
"""
import functools

from .._plan import RES, X, Builder


def _tree_reduce(b, members, v, whole_x, whole_res):
    """Binomial reduce of X over `members` (this rank is members[v]) into members[0]'s RES."""
    have = whole_x
    mask = 1
    while mask < len(members):
        if v & mask:
            b.step(members[v - mask], have)
            return
        child = v + mask
        if child < len(members):
            b.step(src=members[child], recv=whole_res, reduce=True, init=whole_x if have == whole_x else None)
            have = whole_res
        mask <<= 1
    if have != whole_res:  # a leader with no children (one rank on its host)
        b.copy(whole_res, whole_x)


def _tree_broadcast(b, members, v, whole_res):
    """Binomial broadcast of members[0]'s RES over `members`."""
    mask = 1
    while mask < len(members):
        if v & mask:
            b.step(src=members[v - mask], recv=whole_res)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < len(members):
            b.step(members[v + mask], whole_res)
        mask >>= 1


def _ring_in_place(b, ring, i, base=0):
    """Ring all-reduce of RES's len(ring) blocks from unit `base` among the ranks of `ring`
    (this one is ring[i])."""
    n = len(ring)
    right, left = ring[(i + 1) % n], ring[(i - 1) % n]
    for s in range(n - 1):  # reduce-scatter: ring[i] ends owning block i
        sb, rb = base + (i - s - 1) % n, base + (i - s - 2) % n
        b.step(right, (RES, sb, sb + 1), left, (RES, rb, rb + 1), reduce=True)
    for s in range(n - 1):  # all-gather
        sb, rb = base + (i - s) % n, base + (i - s - 1) % n
        b.step(right, (RES, sb, sb + 1), left, (RES, rb, rb + 1))


def _by_host(hosts):
    """{host: its group ranks in order}, in the order hosts first appear."""
    by_host = {}
    for k, h in enumerate(hosts):
        by_host.setdefault(h, []).append(k)
    return by_host


@functools.lru_cache(maxsize=256)
def all_reduce(hosts, r):
    """The plan of group rank r; hosts[k]: the host of group rank k. Units: one block a host."""
    by_host = _by_host(hosts)
    leaders = sorted(members[0] for members in by_host.values())
    members = by_host[hosts[r]]
    v = members.index(r)
    b = Builder("hier", len(leaders))
    whole_x, whole_res = b.whole(X), b.whole(RES)
    _tree_reduce(b, members, v, whole_x, whole_res)
    if v == 0 and len(leaders) > 1:
        _ring_in_place(b, leaders, leaders.index(r))
    _tree_broadcast(b, members, v, whole_res)
    return b.plan()


@functools.lru_cache(maxsize=256)
def all_reduce_rails(hosts, r):
    """The plan of group rank r when every host has the same number k of ranks. Units: k
    super-blocks (one a local rank) of L sub-blocks (one a host): unit v * L + j."""
    groups = list(_by_host(hosts).values())
    k, nhosts = len(groups[0]), len(groups)
    if any(len(g) != k for g in groups):
        raise ValueError(f"all_reduce_rails needs the same number of ranks on every host, not {[len(g) for g in groups]}")
    members = next(g for g in groups if r in g)
    v, h = members.index(r), groups.index(members)
    b = Builder("rails", k * nhosts)

    def sup(slot, i):
        return (slot, i * nhosts, (i + 1) * nhosts)

    if k == 1:
        b.copy(b.whole(RES), b.whole(X))
    else:  # ring reduce-scatter of the host's super-blocks: local rank v ends with super-block v
        right, left = members[(v + 1) % k], members[(v - 1) % k]
        for s in range(k - 1):
            sb, rb = (v - s - 1) % k, (v - s - 2) % k
            b.step(right, sup(X, sb) if s == 0 else sup(RES, sb), left, sup(RES, rb), reduce=True, init=sup(X, rb))
    if nhosts > 1:
        _ring_in_place(b, [g[v] for g in groups], h, base=v * nhosts)
    if k > 1:  # ring all-gather of the super-blocks
        right, left = members[(v + 1) % k], members[(v - 1) % k]
        for s in range(k - 1):
            sb, rb = (v - s) % k, (v - s - 1) % k
            b.step(right, sup(RES, sb), left, sup(RES, rb))
    return b.plan()
