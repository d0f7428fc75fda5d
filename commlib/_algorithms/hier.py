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

from .._plan import RES, SCRATCH, X, Builder
from .logstep import disseminate, scatter_gather


def _tree_reduce(b, members, v, whole_x, whole_res):
    """Binomial reduce of X over `members` (this rank is members[v]) into members[0]'s RES
    (whole_x == whole_res: of every member's RES, in place)."""
    have = whole_x
    mask = 1
    while mask < len(members):
        if v & mask:
            b.step(members[v - mask], have)
            return
        child = v + mask
        if child < len(members):
            b.step(src=members[child], recv=whole_res, reduce=True,
                   init=whole_x if have == whole_x != whole_res else None)
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


def _binomial_gather(b, members, v, base):
    """Binomial gather of RES's units base + i (member i's) into members[0]'s RES: member v holds
    units v .. v + lowbit(v) once its subtree has sent, then sends them to its parent."""
    n, mask = len(members), 1
    while mask < n:
        if v & mask:
            b.step(members[v - mask], (RES, base + v, base + min(v + mask, n)))
            break
        if v + mask < n:
            b.step(src=members[v + mask], recv=(RES, base + v + mask, base + min(v + 2 * mask, n)))
        mask <<= 1


def _ring_reduce_scatter(b, ring, i, base=0):
    """Ring reduce-scatter of RES's len(ring) blocks from unit `base` in place among the ranks of
    `ring` (this one is ring[i]): ring[i] ends owning block i."""
    n = len(ring)
    right, left = ring[(i + 1) % n], ring[(i - 1) % n]
    for s in range(n - 1):
        sb, rb = base + (i - s - 1) % n, base + (i - s - 2) % n
        b.step(right, (RES, sb, sb + 1), left, (RES, rb, rb + 1), reduce=True)


def _ring_in_place(b, ring, i, base=0):
    """Ring all-reduce of RES's len(ring) blocks from unit `base` among the ranks of `ring`
    (this one is ring[i])."""
    n = len(ring)
    right, left = ring[(i + 1) % n], ring[(i - 1) % n]
    _ring_reduce_scatter(b, ring, i, base)
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


def _rails(hosts, r, what):
    """(the hosts' ranks, this rank's host's ranks, its index there, its host's index) where every
    host has as many ranks; ValueError naming `what` otherwise."""
    groups = list(_by_host(hosts).values())
    if any(len(g) != len(groups[0]) for g in groups):
        raise ValueError(f"{what} needs the same number of ranks on every host, not {[len(g) for g in groups]}")
    members = next(g for g in groups if r in g)
    return groups, members, members.index(r), groups.index(members)


def _super(slot, i, nhosts):
    """Super-block i (local rank i's: nhosts units from unit i * nhosts) of `slot`, in the rails' plans."""
    return (slot, i * nhosts, (i + 1) * nhosts)


def _host_reduce_scatter(b, members, v, nhosts):
    """Ring reduce-scatter of X's super-blocks (nhosts units each) among the host's ranks into RES:
    local rank v ends with super-block v reduced over its host (one rank: X copied)."""
    k = len(members)
    if k == 1:
        b.copy(b.whole(RES), b.whole(X))
        return
    right, left = members[(v + 1) % k], members[(v - 1) % k]
    for s in range(k - 1):
        sb, rb = (v - s - 1) % k, (v - s - 2) % k
        b.step(right, _super(X if s == 0 else RES, sb, nhosts), left, _super(RES, rb, nhosts), reduce=True,
               init=_super(X, rb, nhosts))


@functools.lru_cache(maxsize=256)
def all_reduce_rails(hosts, r):
    """The plan of group rank r when every host has the same number k of ranks. Units: k
    super-blocks (one a local rank) of L sub-blocks (one a host): unit v * L + j."""
    groups, members, v, h = _rails(hosts, r, "all_reduce_rails")
    k, nhosts = len(members), len(groups)
    b = Builder("rails", k * nhosts)
    _host_reduce_scatter(b, members, v, nhosts)
    if nhosts > 1:
        _ring_in_place(b, [g[v] for g in groups], h, base=v * nhosts)
    if k > 1:  # ring all-gather of the super-blocks
        right, left = members[(v + 1) % k], members[(v - 1) % k]
        for s in range(k - 1):
            sb, rb = (v - s) % k, (v - s - 1) % k
            b.step(right, _super(RES, sb, nhosts), left, _super(RES, rb, nhosts))
    return b.plan()


# ------------------------------------------------ rooted collectives, barrier, all-gather by host
# The same three stages for the latency-bound collectives: within each host (shared memory
# once a host's ranks share it), among one leader a host across the network, within each host
# again. A flat binomial tree or dissemination round crosses between hosts wherever a rank's
# partner sits on another host: every round where ranks alternate hosts (round-robin placement,
# a split's reordering), and from every rank of a host at once in the network rounds of block
# placement. Here only leaders talk across hosts, ceil(log2 L) network rounds for L hosts, and a
# host's other ranks never open a network connection (RESULTS.md, "Node-aware collectives").


def _rooted(hosts, root):
    """(leaders, {host: its ranks, leader first}) for a rooted collective: root leads its own host
    (its host's other ranks after it in rank order), every other host's lowest rank leads it;
    leaders[0] is root, the other leaders in host order."""
    by_host = _by_host(hosts)
    mine = by_host[hosts[root]]
    by_host[hosts[root]] = [root] + [k for k in mine if k != root]
    leaders = [root] + [m[0] for h, m in by_host.items() if h != hosts[root]]
    return leaders, by_host


@functools.lru_cache(maxsize=1024)
def broadcast(hosts, r, root):
    """Binomial broadcast of RES among the hosts' leaders from root, then within every host."""
    leaders, by_host = _rooted(hosts, root)
    members = by_host[hosts[r]]
    b = Builder("leaders", 1)
    buf = b.whole(RES)
    if members[0] == r:
        _tree_broadcast(b, leaders, leaders.index(r), buf)
    _tree_broadcast(b, members, members.index(r), buf)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def broadcast_large(hosts, r, root):
    """Large broadcasts over hosts: a scatter + all-gather (logstep.scatter_gather) among the
    hosts' leaders from root, then one within every host from its leader. The network carries
    about twice the payload a host in 2 ceil(log2 L) rounds for L hosts, where the chain takes
    n - 1 hops and a flat scatter + all-gather sends from every rank of a host. Units: L * K
    (K: the most ranks a host has): leader i's piece is units i*K .. (i+1)*K, a host's member
    i's about (i/k) of the whole."""
    leaders, by_host = _rooted(hosts, root)
    members = by_host[hosts[r]]
    most = max(len(m) for m in by_host.values())
    units = len(leaders) * most
    b = Builder("leaders", units)
    if members[0] == r and len(leaders) > 1:
        scatter_gather(b, leaders, leaders.index(r), lambda i: (i * most, (i + 1) * most))
    k = len(members)
    if k > 1:
        scatter_gather(b, members, members.index(r), lambda i: (i * units // k, (i + 1) * units // k))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def reduce(hosts, r, root):
    """Binomial reduce of X within every host into its leader's RES, then among the leaders into
    root's RES. A rank whose host has others and that leads no subtree sends X and holds no RES."""
    leaders, by_host = _rooted(hosts, root)
    members = by_host[hosts[r]]
    b = Builder("leaders", 1)
    whole_x, whole_res = b.whole(X), b.whole(RES)
    _tree_reduce(b, members, members.index(r), whole_x, whole_res)
    if members[0] == r:  # the leaders' tree, each starting from its host's RES
        _tree_reduce(b, leaders, leaders.index(r), whole_res, whole_res)
    return b.plan()


@functools.lru_cache(maxsize=256)
def reduce_rails(hosts, r, root):
    """Large reduce where every host has k ranks: all_reduce_rails' first stage (a ring
    reduce-scatter within each host: local rank v ends with super-block v reduced over its
    host), then along each rail v a ring reduce-scatter of super-block v's L sub-blocks, ordered
    from root's host, and a binomial gather of them to the rail's rank on root's host; last, root
    gathers the super-blocks from its host's ranks. Each NIC carries about the payload once, in
    L - 1 + ceil(log2 L) network steps, where the chain by host takes n - 1 hops (each a
    whole-block latency) and the binomial tree log2 n whole payloads. Units: as all_reduce_rails'
    (unit v * L + j)."""
    groups, members, v, h = _rails(hosts, r, "reduce_rails")
    k, nhosts = len(members), len(groups)
    hr = next(j for j, g in enumerate(groups) if root in g)
    b = Builder("rails", k * nhosts)
    _host_reduce_scatter(b, members, v, nhosts)
    if nhosts > 1:  # rail v, from root's host: its i-th rank ends owning sub-block i, then gathers
        rail = [groups[(hr + i) % nhosts][v] for i in range(nhosts)]
        i, base = (h - hr) % nhosts, v * nhosts
        _ring_reduce_scatter(b, rail, i, base)
        _binomial_gather(b, rail, i, base)
    if h == hr and k > 1:  # root gathers its host's super-blocks
        u = members.index(root)
        if v == u:
            for s in range(1, k):
                w = (u + s) % k
                b.step(src=members[w], recv=_super(RES, w, nhosts))
        else:
            b.step(root, _super(RES, v, nhosts))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def barrier(hosts, r):
    """Every host's ranks report to its leader up a binomial tree, the leaders run a dissemination
    barrier, each leader releases its host down the same tree. Header-only steps."""
    by_host = _by_host(hosts)
    members = by_host[hosts[r]]
    leaders = [m[0] for m in by_host.values()]
    v = members.index(r)
    b = Builder("leaders", 1)
    mask = 1
    while mask < len(members):  # up: a rank reports once its subtree has
        if v & mask:
            b.step(members[v - mask], None)
            break
        if v + mask < len(members):
            b.step(src=members[v + mask], recv=None)
        mask <<= 1
    if v == 0:
        i, n = leaders.index(r), len(leaders)
        d = 1
        while d < n:
            b.step(leaders[(i + d) % n], None, leaders[(i - d) % n], None)
            d <<= 1
    _tree_broadcast(b, members, v, None)  # down: the release, header-only
    return b.plan()


def contiguous(hosts):
    """Whether every host's ranks are one run of consecutive ranks (block placement)."""
    seen, last = set(), None
    for h in hosts:
        if h != last:
            if h in seen:
                return False
            seen.add(h)
            last = h
    return True


@functools.lru_cache(maxsize=256)
def all_gather(hosts, r):
    """All-gather of RES (one unit a rank, this rank's already in place) where every host's ranks
    are consecutive: binomial gather of the host's blocks into its leader's RES, a dissemination
    all-gather of whole host blocks among the leaders (round d: the d hosts' blocks a leader holds
    go to the leader d before it, a wrapped range as two messages: no rotation, no scratch), then
    a binomial broadcast of RES within every host."""
    if not contiguous(hosts):
        raise ValueError("the host-aggregated all_gather needs every host's ranks consecutive")
    by_host = _by_host(hosts)
    groups = list(by_host.values())
    members = by_host[hosts[r]]
    v = members.index(r)
    first = members[0]
    b = Builder("leaders", len(hosts))
    _binomial_gather(b, members, v, first)
    if v == 0 and len(groups) > 1:
        def runs(lo, count):  # the rank units of hosts lo .. lo + count (mod hosts): one or two runs
            out = []
            while count:
                take = min(count, len(groups) - lo)
                out.append((RES, groups[lo][0], groups[lo + take - 1][-1] + 1))
                lo, count = 0, count - take
            return out

        disseminate(b, len(groups), groups.index(members), lambda j: groups[j][0], runs)
    _tree_broadcast(b, members, v, b.whole(RES))
    return b.plan()


@functools.lru_cache(maxsize=64)
def all_to_all_rails(hosts, r):
    """All-to-all in two exchanges where every host has k ranks and each host's ranks are
    consecutive: within the host, local rank u hands local rank v everything its X holds for
    local rank v of every host (L blocks, packed through SCRATCH); then along the rails, local
    rank u of every host swaps with local rank u of every other host the k blocks meant there.
    k - 1 + L - 1 peers a rank and as many steps, instead of the pairwise exchange's n - 1 (a
    network message per pair of ranks on different hosts becomes one per pair of rails), each
    block moved twice plus two packing copies. Units: the n blocks of X, of RES and of SCRATCH
    (RES holds the first exchange's blocks until the second packs them)."""
    if not contiguous(hosts):
        raise ValueError("the all_to_all by rails needs every host's ranks consecutive")
    groups = list(_by_host(hosts).values())
    k, nh = len(groups[0]), len(groups)
    if any(len(g) != k for g in groups):
        raise ValueError(f"the all_to_all by rails needs the same number of ranks on every host, "
                         f"not {[len(g) for g in groups]}")
    h = next(i for i, g in enumerate(groups) if r in g)
    u, members = groups[h].index(r), groups[h]
    b = Builder("rails", k * nh)
    for v in range(k):  # SCRATCH[v * L + j] = X[block for local rank v of host j]
        for j in range(nh):
            b.copy((SCRATCH, v * nh + j, v * nh + j + 1), (X, groups[j][v], groups[j][v] + 1))
    b.copy((RES, u * nh, (u + 1) * nh), (SCRATCH, u * nh, (u + 1) * nh))
    for s in range(1, k):  # RES[v * L + j]: local rank v's block for local rank u of host j
        to, frm = (u + s) % k, (u - s) % k
        b.step(members[to], (SCRATCH, to * nh, (to + 1) * nh), members[frm], (RES, frm * nh, (frm + 1) * nh))
    for j in range(nh):  # SCRATCH[j * k + v] = RES[v * L + j]: what goes to host j, by local source
        for v in range(k):
            b.copy((SCRATCH, j * k + v, j * k + v + 1), (RES, v * nh + j, v * nh + j + 1))
    b.copy((RES, groups[h][0], groups[h][0] + k), (SCRATCH, h * k, (h + 1) * k))
    for s in range(1, nh):  # host j's k blocks for this rank land at its ranks' places in RES
        to, frm = (h + s) % nh, (h - s) % nh
        b.step(groups[to][u], (SCRATCH, to * k, (to + 1) * k), groups[frm][u],
               (RES, groups[frm][0], groups[frm][0] + k))
    return b.plan()
