"""Log-step schedules for mid-size messages: Bruck / recursive-doubling all-gather, the
recursive-halving reduce-scatter, and Rabenseifner's all-reduce (recursive-halving
reduce-scatter + recursive-doubling all-gather).

A ring takes n-1 (all-gather) or 2(n-1) (all-reduce) dependent steps, each a
wake-up of one rank by another; these take ceil(log2 n) and 2 log2 p (+2 for
the ranks above a power of two), for the same bytes per rank in the
all-gather and in the power-of-two all-reduce, so they win where a step's
latency, not the bytes, dominates: small messages at n >= 8, and on
oversubscribed cores, where every step waits for a descheduled rank.

All-gather, n a power of two (recursive doubling): in round k rank r swaps
its aligned group of 2^k blocks with rank r XOR 2^k; both groups are
contiguous in the output, so every byte lands in place, no copy.
Any other n (Bruck, Lück & Ho): rank r keeps blocks in the order r, r+1, ...
in scratch; in round k it sends its first min(2^k, n-2^k) blocks to r-2^k
and appends those of r+2^k, so after ceil(log2 n) rounds it holds all n,
rotated by r: one copy puts them in place.

All-reduce (Rabenseifner), p the largest power of two <= n: the ranks above p
first fold their data into rank r-p and sit out. The p ranks halve: in round k
(mask p/2, p/4, ... 1) rank r keeps the upper half of its current block range
if r & mask, else the lower, sends the other half to r XOR mask and reduces
the partner's copy of its kept half into its own, so it ends with block r
fully reduced; a recursive-doubling all-gather of those blocks follows, and
the folded ranks get the result back. Each block is reduced at one rank and
then copied verbatim, so every rank holds the same bits.

Plans (`_plan`): the all-gather's units are the n blocks of RES (Bruck's
rotated copy lives in SCRATCH); Rabenseifner's are the p near-equal blocks of
the buffer, reduced in RES after X is copied there; recursive halving runs on
a copy of X in SCRATCH and puts block r into RES (a one-block buffer).
"""
import functools

from .._plan import LOCAL, RES, SCRATCH, X, Builder
from .doubling import _pow2_below


def disseminate(b, n, i, peer, runs):
    """Rows of a dissemination all-gather without rotation: member i of n (peer(j): member j's rank)
    starts with piece i in place and, in round d = 1, 2, 4, ..., sends pieces i .. i + d (mod n) to
    member i - d while receiving i + d .. i + 2d from member i + d; runs(lo, count): the regions of
    pieces lo .. lo + count (mod n), a wrapped range as two (then two messages that round: no
    copy, no scratch). ceil(log2 n) rounds, n - 1 pieces received."""
    d = 1
    while d < n:
        count = min(d, n - d)
        sends, recvs = runs(i, count), runs((i + d) % n, count)
        to, frm = peer((i - d) % n), peer((i + d) % n)
        for j in range(max(len(sends), len(recvs))):
            b.step(to if j < len(sends) else None, sends[j] if j < len(sends) else None,
                   frm if j < len(recvs) else None, recvs[j] if j < len(recvs) else None)
        d <<= 1


def scatter_gather(b, members, v, piece, slot=RES):
    """Rows of a broadcast from members[0] as a binomial scatter of `slot`'s pieces (member v ends
    with piece v: units piece(v) = (lo, hi), consecutive and increasing in v), then their
    dissemination all-gather (disseminate()): 2 ceil(log2 n) rounds, about twice the payload into
    each member (van de Geijn's broadcast)."""
    n = len(members)

    def span(lo, hi):  # pieces lo .. hi (no wrap) as one region
        return (slot, piece(lo)[0], piece(hi - 1)[1])

    mask = 1
    while mask < n:  # v receives the pieces of its subtree, v .. v + lowbit(v), from its parent
        if v & mask:
            b.step(src=members[v - mask], recv=span(v, min(v + mask, n)))
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < n:
            b.step(members[v + mask], span(v + mask, min(v + 2 * mask, n)))
        mask >>= 1

    def runs(lo, count):
        first = min(count, n - lo)
        return [span(lo, lo + first)] + ([span(0, count - first)] if count > first else [])

    disseminate(b, n, v, lambda j: members[j], runs)


@functools.lru_cache(maxsize=1024)
def all_gather(n, r):
    """Gather RES's n blocks (block r already there); Bruck's rotation in SCRATCH (n blocks) at other n."""
    b = Builder("bruck" if n & (n - 1) else "doubling", n)
    if n & (n - 1) == 0:
        mask = 1
        while mask < n:
            partner = r ^ mask
            mine, theirs = r & ~(mask - 1), partner & ~(mask - 1)
            b.step(partner, (RES, mine, mine + mask), partner, (RES, theirs, theirs + mask))
            mask <<= 1
        return b.plan()
    b.copy((SCRATCH, 0, 1), (RES, r, r + 1))
    d = 1
    while d < n:
        cnt = min(d, n - d)
        b.step((r - d) % n, (SCRATCH, 0, cnt), (r + d) % n, (SCRATCH, d, d + cnt))
        d <<= 1
    b.copy((RES, r, n), (SCRATCH, 0, n - r))  # blocks r .. n-1
    if r:
        b.copy((RES, 0, r), (SCRATCH, n - r, n))  # blocks 0 .. r-1
    return b.plan()


def _halving(b, n, r, buf):
    """Recursive halving on slot `buf` (n units, n a power of two) until unit r holds r's reduced block."""
    lo, width, mask = 0, n, n >> 1
    while mask:
        half = width >> 1
        keep, give = (lo + half, lo) if r & mask else (lo, lo + half)
        b.step(r ^ mask, (buf, give, give + half), r ^ mask, (buf, keep, keep + half), reduce=True)
        lo, width = keep, half
        mask >>= 1


@functools.lru_cache(maxsize=1024)
def reduce_scatter(n, r):
    """Recursive halving, n a power of two: X copied to SCRATCH, halved there, block r into RES.
    log2 n steps, (n-1)/n of the buffer sent."""
    b = Builder("halving", n)
    b.copy(b.whole(SCRATCH), b.whole(X))
    _halving(b, n, r, SCRATCH)
    b.copy((RES, r, r + 1, LOCAL), (SCRATCH, r, r + 1))
    return b.plan()


@functools.lru_cache(maxsize=1024)
def all_reduce(n, r):
    """Rabenseifner: X into RES, the folds, recursive halving and doubling on p near-equal blocks."""
    p = _pow2_below(n)
    b = Builder("rabenseifner", p)
    buf = b.whole(RES)
    b.copy(buf, b.whole(X))
    if r >= p:  # fold into r-p, then wait for the result
        b.step(r - p, buf)
        b.step(src=r - p, recv=buf)
        return b.plan()
    if r < n - p:
        b.step(src=r + p, recv=buf, reduce=True)
    _halving(b, p, r, RES)
    mask = 1
    while mask < p:
        partner = r ^ mask
        mine, theirs = r & ~(mask - 1), partner & ~(mask - 1)
        b.step(partner, (RES, mine, mine + mask), partner, (RES, theirs, theirs + mask))
        mask <<= 1
    if r < n - p:
        b.step(r + p, buf)
    return b.plan()


@functools.lru_cache(maxsize=1024)
def all_to_all(n, r):
    """Bruck's all-to-all: 2 ceil(log2 n) peers a rank instead of the pairwise exchange's n - 1
    (a full mesh of connections at n ranks). Units: the n blocks of X and of RES.

    SCRATCH holds the blocks rotated by r (B[i] = X[(r + i) % n]: B[i] is for rank r + i). Round k
    sends the blocks whose index has bit k set to rank r + 2^k, receiving the same indices from
    r - 2^k (through RES: a region is never sent and received at once), so each block moves
    2^k further in the rounds of its index's bits and B[i] ends as rank r - i's block for this
    rank: RES[j] = B[(r - j) % n]. Contiguous runs of 2^k blocks make one step each: about n
    steps in all, between 2 ceil(log2 n) peers, every block moved once per set bit of its index.
    """
    b = Builder("bruck", n)
    b.copy((SCRATCH, 0, n - r), (X, r, n))
    if r:
        b.copy((SCRATCH, n - r, n), (X, 0, r))
    k = 1
    while k < n:
        dst, src = (r + k) % n, (r - k) % n
        for i in range(k, n, 2 * k):
            hi = min(i + k, n)
            b.step(dst, (SCRATCH, i, hi), src, (RES, i, hi))
            b.copy((SCRATCH, i, hi), (RES, i, hi))
        k <<= 1
    for j in range(n):
        i = (r - j) % n
        b.copy((RES, j, j + 1), (SCRATCH, i, i + 1))
    return b.plan()
