"""Pairwise schedules: all-to-all, all-gather, reduce-scatter and ppermute.

All-to-all (pairwise exchange): in step k = 1 .. size-1 rank r sends its
block for rank r+k while it receives rank r-k's block for it, full duplex,
so every link carries one block per step and no rank waits on a rank that
is itself waiting (each step's sends and receives pair up exactly). The
block for itself is copied locally.

All-gather and reduce-scatter (direct): the same pairing, each rank's own
block straight to every other rank, or rank r's slice of every peer's input
straight to rank r, reduced there as it arrives. No block is relayed, so no
step waits for the one before it on another rank (the ring's relay makes
step s+1 wait for step s's bytes); over a shared-memory link with single
copy, rank r copies (or reduces) its slice of each peer's buffer straight
from that peer's memory.

ppermute: each rank sends to at most one rank and receives from at most one
(the permutation is checked by the caller), all in a single full-duplex step.

Plans (`_plan`): units are the n blocks of X (to send) and RES (received);
the all-gather's blocks are RES's (block r in place), the reduce-scatter's
result is one block (RES, LOCAL).
"""


import functools

from .._plan import LOCAL, RES, X, Builder


def _pairs(n, r):
    """(rank sent to, rank received from) of each step k = 1 .. n-1: the pairs match up exactly."""
    return [((r + k) % n, (r - k) % n) for k in range(1, n)]


@functools.lru_cache(maxsize=1024)
def all_to_all(n, r):
    """Unit j of X goes to rank j; rank j's block lands in unit j of RES."""
    b = Builder("pairwise", n)
    b.copy((RES, r, r + 1), (X, r, r + 1))
    for dst, src in _pairs(n, r):
        b.step(dst, (X, dst, dst + 1), src, (RES, src, src + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def all_gather(n, r):
    """RES's block r to every rank, every rank's block into RES."""
    b = Builder("pairwise", n)
    for dst, src in _pairs(n, r):
        b.step(dst, (RES, r, r + 1), src, (RES, src, src + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def reduce_scatter(n, r):
    """X's block j to rank j; block r of every rank reduced into RES (one block), onto X's block r."""
    b = Builder("pairwise", n)
    mine = (RES, r, r + 1, LOCAL)
    if n == 1:
        b.copy(mine, (X, r, r + 1))
    for k, (dst, src) in enumerate(_pairs(n, r)):
        b.step(dst, (X, dst, dst + 1), src, mine, reduce=True, init=(X, r, r + 1) if k == 0 else None)
    return b.plan()


def ppermute(me, dst, src):
    """Send X to dst and receive RES from src (either may be None) in one step (one unit each)."""
    b = Builder("ppermute", 1)
    if dst == me and src == me:
        b.copy(b.whole(RES), b.whole(X))
    elif dst is not None or src is not None:
        b.step(dst, b.whole(X) if dst is not None else None, src, b.whole(RES) if src is not None else None)
    return b.plan()
