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
"""
from .ring import blocks


def _pow2_below(n):
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def all_gather(op, out, bs, scratch):
    """Gather blocks of bs bytes into `out` (block op.rank already there); scratch: n*bs bytes
    (used only when n is not a power of two)."""
    n, r = op.size, op.rank
    if n & (n - 1) == 0:
        mask = 1
        while mask < n:
            partner = r ^ mask
            mine, theirs = (r & ~(mask - 1)), (partner & ~(mask - 1))
            op.exchange(partner, out + mine * bs, mask * bs, partner, out + theirs * bs, mask * bs)
            mask <<= 1
        return
    op.copy(scratch, out + r * bs, bs)
    d = 1
    while d < n:
        cnt = min(d, n - d)
        op.exchange((r - d) % n, scratch, cnt * bs, (r + d) % n, scratch + d * bs, cnt * bs)
        d <<= 1
    op.copy(out + r * bs, scratch, (n - r) * bs)  # blocks r .. n-1
    op.copy(out, scratch + (n - r) * bs, r * bs)  # blocks 0 .. r-1


def reduce_scatter(op, buf, count, item):
    """Recursive halving, n a power of two: reduce the `count` elements at address `buf` in place
    until block r (the r-th of n equal blocks) holds this rank's fully reduced block. Round k swaps
    half of the current range with rank r XOR n/2^(k+1): log2 n steps, (n-1)/n of the buffer sent."""
    n, r = op.size, op.rank
    bs = count // n * item
    lo, width, mask = 0, n, n >> 1
    while mask:
        half = width >> 1
        keep, give = (lo + half, lo) if r & mask else (lo, lo + half)
        op.exchange(r ^ mask, buf + give * bs, half * bs, r ^ mask, 0, half * bs, reduce_dst=buf + keep * bs)
        lo, width = keep, half
        mask >>= 1


def all_reduce(op, src, out, count, item):
    """All-reduce `count` elements of `item` bytes from address `src` into `out` (may be equal)."""
    n, r = op.size, op.rank
    nbytes = count * item
    if src != out:
        op.copy(out, src, nbytes)
    p = _pow2_below(n)
    if r >= p:  # fold into r-p, then wait for the result
        op.exchange(r - p, out, nbytes, None, 0, 0)
        op.exchange(None, 0, 0, r - p, out, nbytes)
        return
    if r < n - p:
        op.exchange(None, 0, 0, r + p, 0, nbytes, reduce_dst=out)
    offsets, lengths = blocks(count, p)

    def span(lo, hi):  # (address, bytes) of blocks lo .. hi-1
        return out + offsets[lo] * item, (offsets[hi - 1] + lengths[hi - 1] - offsets[lo]) * item

    lo, width = 0, p
    mask = p >> 1
    while mask:
        partner, half = r ^ mask, width >> 1
        if r & mask:
            keep, give = (lo + half, lo + width), (lo, lo + half)
        else:
            keep, give = (lo, lo + half), (lo + half, lo + width)
        send_ptr, send_len = span(*give)
        keep_ptr, keep_len = span(*keep)
        op.exchange(partner, send_ptr, send_len, partner, 0, keep_len, reduce_dst=keep_ptr)
        lo, width = keep[0], half
        mask >>= 1
    mask = 1
    while mask < p:
        partner = r ^ mask
        mine, theirs = r & ~(mask - 1), partner & ~(mask - 1)
        op.exchange(partner, *span(mine, mine + mask), partner, *span(theirs, theirs + mask))
        mask <<= 1
    if r < n - p:
        op.exchange(r + p, out, nbytes, None, 0, 0)
