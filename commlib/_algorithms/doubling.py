"""Recursive doubling: the latency-optimal all-reduce, and the dissemination barrier.

All-reduce: in round k rank r swaps its whole (partially reduced) buffer
with rank r XOR 2^k and reduces what it receives, so after log2(size)
rounds every rank holds the full reduction. Both partners of a round
compute op(lower rank's data, higher rank's data) (`swap` on the higher
one), so they agree to the bit even where op(a, b) and op(b, a) differ,
as they do in which NaN payload or sign survives. When size is not a power of two, the `extra` ranks above the
largest power of two p first hand their data to rank r-p, sit out the
rounds, and get the result back at the end (2 extra steps for them only).

The buffer being sent must not change while it is reduced into, so each
round first snapshots it into scratch; this path is only chosen for small
messages, where the copy is free next to the latency.

Plans (`_plan`): the input X is copied into the result RES first (a no-op
when they are one buffer), RES is reduced in place, SCRATCH holds the
snapshot; one unit, the whole buffer.

Barrier: dissemination (Hensgen, Finkel, Manber): in round k rank r
signals r+2^k and waits for r-2^k; after ceil(log2 size) rounds everyone
has transitively heard from everyone. Header-only messages.
"""

import functools

from .._plan import RES, SCRATCH, X, Builder


def _pow2_below(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


@functools.lru_cache(maxsize=1024)
def all_reduce(n, r):
    """Recursive doubling all-reduce of X into RES (snapshots in SCRATCH)."""
    b = Builder("doubling", 1)
    buf, snap = b.whole(RES), b.whole(SCRATCH)
    b.copy(buf, b.whole(X))
    p = _pow2_below(n)
    extra = n - p
    if r >= p:  # hand over, then wait for the result
        b.step(r - p, buf)
        b.step(src=r - p, recv=buf)
        return b.plan()
    if r < extra:
        b.step(src=r + p, recv=buf, reduce=True)
    mask = 1
    while mask < p:
        partner = r ^ mask
        b.copy(snap, buf)
        b.step(partner, snap, partner, buf, reduce=True, swap=partner < r)
        mask <<= 1
    if r < extra:
        b.step(r + p, buf)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def barrier(n, r):
    """Dissemination: header-only steps."""
    b = Builder("dissemination", 1)
    k = 1
    while k < n:
        b.step((r + k) % n, None, (r - k) % n, None)
        k <<= 1
    return b.plan()
