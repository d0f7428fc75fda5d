"""Pairwise schedules: all-to-all and ppermute.

All-to-all (pairwise exchange): in step k = 1 .. size-1 rank r sends its
block for rank r+k while it receives rank r-k's block for it, full duplex,
so every link carries one block per step and no rank waits on a rank that
is itself waiting (each step's sends and receives pair up exactly). The
block for itself is copied locally.

ppermute: each rank sends to at most one rank and receives from at most one
(the permutation is checked by the caller), all in a single full-duplex step.

Plans (`_plan`): units are the n blocks of X (to send) and RES (received).
"""


import functools

from .._plan import RES, X, Builder


@functools.lru_cache(maxsize=1024)
def all_to_all(n, r):
    """Unit j of X goes to rank j; rank j's block lands in unit j of RES."""
    b = Builder("pairwise", n)
    b.copy((RES, r, r + 1), (X, r, r + 1))
    for k in range(1, n):
        dst, src = (r + k) % n, (r - k) % n
        b.step(dst, (X, dst, dst + 1), src, (RES, src, src + 1))
    return b.plan()


def ppermute(me, dst, src):
    """Send X to dst and receive RES from src (either may be None) in one step (one unit each)."""
    b = Builder("ppermute", 1)
    if dst == me and src == me:
        b.copy(b.whole(RES), b.whole(X))
    elif dst is not None or src is not None:
        b.step(dst, b.whole(X) if dst is not None else None, src, b.whole(RES) if src is not None else None)
    return b.plan()
