"""Rooted collectives: binomial trees for small payloads, pipelined chains for large.

Ranks are renumbered relative to the root (v = (r - root) mod size) so the
root is always 0.

Binomial broadcast: rank v receives from v minus its lowest set bit, then
sends to v + 2^k for every 2^k below that bit: ceil(log2 size) rounds, the
fewest possible, each carrying the whole payload. Binomial reduce is the
same tree walked the other way, reducing children's data on the way up.

Chains: v receives from v-1 (broadcast) or v+1 (reduce) and forwards to the
next rank *while* receiving: the step loop (`_io.pyx`) sends each byte as soon as it has
arrived (relay="received") or has been reduced into this rank's partial
result (relay="reduced"). The payload streams along the chain, so a large
broadcast or reduce costs about one transfer plus size-1 chunks instead of
log2(size) whole transfers.

Linear broadcast (small payloads, up to 8 ranks): one writer, many readers:
the root sends to every other rank in turn; each small send completes into
the reader's ring or socket buffer at once, so every rank is one hop from
the root and none waits for a forwarding rank to be scheduled.

Linear gather and scatter: the root exchanges one block with each rank in
turn; every other rank makes exactly one transfer. With tens of ranks this is
what Open MPI's tuned component picks too, and the root's link is the
bottleneck either way. Beyond that the root's n - 1 latencies dominate small
blocks: the binomial gather and scatter move a subtree's blocks in one message
per tree edge, log2 n rounds (each relative rank v holds the blocks of its
subtree, v .. v + lowbit(v), in SCRATCH in relative order; the caller passes
SCRATCH's address less v blocks, so the region (SCRATCH, v, ...) is the
start of the buffer).

Plans (`_plan`): broadcasts move RES in place; reductions read X and
accumulate in RES (`Plan.slots` says whether a rank needs RES at all: a leaf
sends X straight up); gather and scatter have n units, one per rank, X or
RES holding a single one where only this rank's block is there.
"""


import functools

from .._plan import LOCAL, RES, SCRATCH, X, Builder
from .logstep import scatter_gather


def _real(v, root, n):
    return (v + root) % n


@functools.lru_cache(maxsize=1024)
def broadcast_tree(n, r, root):
    b = Builder("tree", 1)
    buf = b.whole(RES)
    v = (r - root) % n
    mask = 1
    while mask < n:
        if v & mask:
            b.step(src=_real(v - mask, root, n), recv=buf)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < n:
            b.step(_real(v + mask, root, n), buf)
        mask >>= 1
    return b.plan()


@functools.lru_cache(maxsize=1024)
def broadcast_scatter_gather(n, r, root):
    """Large broadcasts on many ranks (van de Geijn): a binomial scatter of RES's n blocks (relative
    rank v ends with block v), then a dissemination all-gather of the blocks (logstep.disseminate):
    2 ceil(log2 n) steps and about twice the payload into each rank, where a chain takes n - 1
    hops and the tree log2 n whole payloads. Units: n blocks, in relative rank order."""
    b = Builder("scatter_gather", n)
    scatter_gather(b, [_real(j, root, n) for j in range(n)], (r - root) % n, lambda i: (i, i + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def broadcast_linear(n, r, root):
    """One writer, many readers: the root sends RES to every other rank in turn, each receives once."""
    b = Builder("linear", 1)
    if r == root:
        for v in range(1, n):
            b.step(_real(v, root, n), b.whole(RES))
    else:
        b.step(src=root, recv=b.whole(RES))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def broadcast_chain(n, r, root):
    return _broadcast_chain(n, (r - root) % n, lambda v: _real(v, root, n))


@functools.lru_cache(maxsize=256)
def broadcast_chain_in(order, r, root):
    """broadcast_chain along `order` (ring.host_order's: each host's ranks together) from the root:
    the chain crosses to another host once a host, not at every hop of a round-robin placement."""
    seq = _from_root(order, root)
    return _broadcast_chain(len(seq), seq.index(r), seq.__getitem__)


def _from_root(order, root):
    i = order.index(root)
    return order[i:] + order[:i]


def _broadcast_chain(n, v, real):
    """The pipelined chain of virtual ranks 0 (the root), 1, ..., n - 1; this is v; real(v): its rank."""
    b = Builder("chain", 1)
    buf = b.whole(RES)
    nxt = real(v + 1) if v + 1 < n else None
    if v == 0:
        b.step(nxt, buf)
    else:
        b.step(nxt, buf if nxt is not None else None, real(v - 1), buf,
               relay="received" if nxt is not None else None, from_relay=v > 1)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def reduce_tree(n, r, root):
    """Binomial reduce of X; RES (this rank's partial result) ends with the result on the root.
    Children's data is reduced into RES; a leaf sends X directly and never touches RES."""
    b = Builder("tree", 1)
    x, acc = b.whole(X), b.whole(RES)
    v = (r - root) % n
    mask = 1
    have = x  # where this rank's partial result currently lives
    while mask < n:
        if v & mask:
            b.step(_real(v - mask, root, n), have)
            return b.plan()
        child = v + mask
        if child < n:
            b.step(src=_real(child, root, n), recv=acc, reduce=True, init=x if have == x else None)
            have = acc
        mask <<= 1
    if have != acc:  # a root with no children (size 1)
        b.copy(acc, x)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def reduce_chain(n, r, root):
    """Pipelined chain reduce: v = size-1 starts, each rank adds its part and passes it on."""
    return _reduce_chain(n, (r - root) % n, lambda v: _real(v, root, n))


@functools.lru_cache(maxsize=256)
def reduce_chain_in(order, r, root):
    """reduce_chain along `order` (ring.host_order's) to the root, as broadcast_chain_in."""
    seq = _from_root(order, root)
    return _reduce_chain(len(seq), seq.index(r), seq.__getitem__)


def _reduce_chain(n, v, real):
    b = Builder("chain", 1)
    x, acc = b.whole(X), b.whole(RES)
    if n == 1:
        b.copy(acc, x)
    elif v == n - 1:
        b.step(real(v - 1), x)
    else:
        prev = real(v - 1) if v > 0 else None
        b.step(prev, acc if prev is not None else None, real(v + 1), acc, reduce=True, init=x,
               relay="reduced" if prev is not None else None, from_relay=v + 1 < n - 1)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def gather_linear(n, r, root):
    """Root receives rank j's block into unit j of RES; X holds this rank's block only."""
    b = Builder("linear", n)
    if r != root:
        b.step(root, (X, r, r + 1, LOCAL))
        return b.plan()
    for j in range(n):
        if j == root:
            b.copy((RES, j, j + 1), (X, j, j + 1, LOCAL))
        else:
            b.step(src=j, recv=(RES, j, j + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def scatter_linear(n, r, root):
    """Root sends unit j of X to rank j; every rank's block lands in RES (one block)."""
    b = Builder("linear", n)
    mine = (RES, r, r + 1, LOCAL)
    if r != root:
        b.step(src=root, recv=mine)
        return b.plan()
    for j in range(n):
        if j == root:
            b.copy(mine, (X, j, j + 1))
        else:
            b.step(j, (X, j, j + 1))
    return b.plan()


def subtree(v, n):
    """The relative ranks [lo, hi) of relative rank v's binomial subtree (the root's: all n)."""
    return v, min(v + (v & -v), n) if v else n


def _children(v, n):
    """(child, its subtree's end) of relative rank v, smallest subtree first."""
    hi = subtree(v, n)[1]
    mask, out = 1, []
    while v + mask < hi:
        out.append((v + mask, min(v + 2 * mask, n)))
        mask <<= 1
    return out


@functools.lru_cache(maxsize=1024)
def gather_tree(n, r, root):
    """Binomial gather into root's RES (n units, real order); X holds this rank's block only. A leaf
    sends X up; an inner rank collects its subtree in SCRATCH (see the module docstring) and sends it
    up in one message; the root collects in SCRATCH and puts the blocks in real order (in RES
    directly when it is rank 0)."""
    b = Builder("tree", n)
    v = (r - root) % n
    mine = (X, r, r + 1, LOCAL)
    if v and v & 1:  # a leaf
        b.step(_real(v - 1, root, n), mine)
        return b.plan()
    buf = RES if root == 0 and v == 0 else SCRATCH
    b.copy((buf, v, v + 1), mine)
    for child, end in _children(v, n):
        b.step(src=_real(child, root, n), recv=(buf, child, end))
    if v:
        b.step(_real(v - (v & -v), root, n), (buf, v, subtree(v, n)[1]))
    elif buf == SCRATCH:  # relative order -> real order
        b.copy((RES, root, n), (SCRATCH, 0, n - root))
        b.copy((RES, 0, root), (SCRATCH, n - root, n))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def scatter_tree(n, r, root):
    """Binomial scatter of root's X (n units, real order); each rank's block lands in RES (one
    block). The root puts X in relative order in SCRATCH (reads X directly when it is rank 0) and
    sends each child its subtree's blocks, the largest first; an inner rank receives its subtree in
    SCRATCH and passes the children theirs on."""
    b = Builder("tree", n)
    v = (r - root) % n
    mine = (RES, r, r + 1, LOCAL)
    if v and v & 1:  # a leaf
        b.step(src=_real(v - 1, root, n), recv=mine)
        return b.plan()
    if v:
        buf = SCRATCH
        b.step(src=_real(v - (v & -v), root, n), recv=(buf, v, subtree(v, n)[1]))
    elif root == 0:
        buf = X
    else:
        buf = SCRATCH
        b.copy((SCRATCH, 0, n - root), (X, root, n))
        b.copy((SCRATCH, n - root, n), (X, 0, root))
    for child, end in reversed(_children(v, n)):
        b.step(_real(child, root, n), (buf, child, end))
    b.copy(mine, (buf, v, v + 1))
    return b.plan()


def scratch_blocks(n, r, root):
    """(blocks of SCRATCH, the block its address stands for) that gather_tree and scatter_tree of
    rank r need: its subtree's blocks, addressed from its relative rank; none for a leaf."""
    v = (r - root) % n
    if v and v & 1:
        return 0, 0
    if v == 0:
        return (0 if root == 0 else n), 0
    return subtree(v, n)[1] - v, v
