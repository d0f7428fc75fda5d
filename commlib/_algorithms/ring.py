"""Ring reduce-scatter and all-gather: the bandwidth-optimal schedules.

The flat buffer of `count` elements is cut into `size` blocks of near-equal
length. In the reduce-scatter, at step s rank r sends block (r-s-1) to its
right neighbour and receives block (r-s-2) from its left neighbour, reducing
it into its own copy as the bytes arrive (the step loop in `_io.pyx` does this through a
small scratch ring, so received data is touched once, in cache). After size-1
steps rank r owns the fully reduced block r. Every block is reduced along the
ring in one fixed order and then copied verbatim, so all ranks finish with
bit-identical results whatever the dtype.

The all-gather then circulates the finished blocks: at step s rank r sends
block (r-s) and receives block (r-s-1) straight into the output, no copy.

Pipelining: within a step, sending and receiving overlap (full duplex) and
the reduction runs chunk by chunk behind the receive, so a step takes about
as long as moving one block. Each rank moves 2(size-1)/size of the buffer in
each direction: the minimum for an all-reduce.

Plans (`_plan`): units are the size blocks. The all-reduce reduces X's blocks
into RES (where X and RES are one buffer the init copy is skipped); the
reduce-scatter alone keeps only block r in RES (a one-block buffer) and
reduces the blocks in transit into two one-block temporaries T0/T1,
alternating (a block reduced at step s is sent at step s+1 while the next one
arrives). The all-gather circulates RES's blocks in place.
"""

import functools

from .._plan import LOCAL, RES, T0, T1, X, Builder


def blocks(count, size):
    """(offsets, lengths) in elements of `size` near-equal blocks."""
    base, extra = divmod(count, size)
    lengths = [base + (i < extra) for i in range(size)]
    offsets = [0] * size
    for i in range(1, size):
        offsets[i] = offsets[i - 1] + lengths[i - 1]
    return offsets, lengths


def _reduce_scatter(b, n, r, dst_of):
    """The reduce-scatter's steps; dst_of[blk]: the region block blk is reduced into when it arrives."""
    right, left = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):
        sb, rb = (r - s - 1) % n, (r - s - 2) % n
        b.step(right, (X, sb, sb + 1) if s == 0 else dst_of[sb], left, dst_of[rb], reduce=True, init=(X, rb, rb + 1))


def _all_gather(b, n, r):
    right, left = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):
        sb, rb = (r - s) % n, (r - s - 1) % n
        b.step(right, (RES, sb, sb + 1), left, (RES, rb, rb + 1))


@functools.lru_cache(maxsize=1024)
def all_gather(n, r):
    """Circulate RES's blocks so every rank holds all of them; block r is already in place."""
    b = Builder("ring", n)
    _all_gather(b, n, r)
    return b.plan()


def host_order(hosts):
    """The group ranks in host order (each host's ranks together, in rank order; hosts in order of
    first appearance), where a ring in rank order crosses between hosts more often than once a
    host (ranks placed round-robin: every step of it would cross); else None."""
    n = len(hosts)
    crossings = sum(hosts[k] != hosts[(k + 1) % n] for k in range(n))
    first = {}
    for h in hosts:
        first.setdefault(h, len(first))
    if len(first) < 2 or crossings <= len(first):
        return None
    return tuple(sorted(range(n), key=lambda k: (first[hosts[k]], k)))


@functools.lru_cache(maxsize=256)
def all_gather_in(order, r):
    """all_gather on the ring `order` (a permutation of the group ranks: host_order's), this rank's
    block at unit r as in all_gather: each host's ranks pass blocks among themselves, and the ring
    crosses to the next host once, so each host's links carry one block a step, not one a rank."""
    n, i = len(order), order.index(r)
    right, left = order[(i + 1) % n], order[(i - 1) % n]
    b = Builder("ring", n)
    for s in range(n - 1):
        sb, rb = order[(i - s) % n], order[(i - s - 1) % n]
        b.step(right, (RES, sb, sb + 1), left, (RES, rb, rb + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def all_reduce(n, r):
    """Reduce-scatter X into RES, then all-gather RES."""
    b = Builder("ring", n)
    if n == 1:
        b.copy(b.whole(RES), b.whole(X))
    _reduce_scatter(b, n, r, [(RES, i, i + 1) for i in range(n)])
    _all_gather(b, n, r)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def reduce_scatter(n, r):
    """Reduce X over the ring; block r ends in RES (one block); T0/T1 hold blocks in transit."""
    b = Builder("ring", n)
    if n == 1:
        b.copy((RES, 0, 1, LOCAL), (X, 0, 1))
    dst_of = [None] * n
    for s in range(n - 1):
        blk = (r - s - 2) % n
        dst_of[blk] = (RES if s == n - 2 else (T0, T1)[s % 2], blk, blk + 1, LOCAL)
    _reduce_scatter(b, n, r, dst_of)
    return b.plan()
