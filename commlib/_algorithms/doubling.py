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

Barrier: dissemination (Hensgen, Finkel, Manber): in round k rank r
signals r+2^k and waits for r-2^k; after ceil(log2 size) rounds everyone
has transitively heard from everyone. Header-only messages.
"""


def all_reduce(op, buf, nbytes, snapshot):
    """Reduce in place at address `buf`; `snapshot` is scratch of nbytes."""
    n, r = op.size, op.rank
    p = 1
    while p * 2 <= n:
        p *= 2
    extra = n - p
    if r >= p:  # hand over, then wait for the result
        op.exchange(r - p, buf, nbytes, None, 0, 0)
        op.exchange(None, 0, 0, r - p, buf, nbytes)
        return
    if r < extra:
        op.exchange(None, 0, 0, r + p, 0, nbytes, reduce_dst=buf)
    mask = 1
    while mask < p:
        partner = r ^ mask
        op.copy(snapshot, buf, nbytes)
        op.exchange(partner, snapshot, nbytes, partner, 0, nbytes, reduce_dst=buf, swap=partner < r)
        mask <<= 1
    if r < extra:
        op.exchange(r + p, buf, nbytes, None, 0, 0)


def barrier(op):
    n, r = op.size, op.rank
    k = 1
    while k < n:
        op.exchange((r + k) % n, 0, 0, (r - k) % n, 0, 0)
        k <<= 1
