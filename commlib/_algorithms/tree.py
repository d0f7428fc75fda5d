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

Gather and scatter are linear: the root exchanges one block with each rank
in turn; every other rank makes exactly one transfer. With the group sizes
sockets serve well (tens of ranks) this is what Open MPI's tuned component
picks too, and the root's link is the bottleneck either way.
"""


def _real(v, root, n):
    return (v + root) % n


def broadcast_tree(op, buf, nbytes, root):
    n = op.size
    v = (op.rank - root) % n
    mask = 1
    while mask < n:
        if v & mask:
            op.exchange(None, 0, 0, _real(v - mask, root, n), buf, nbytes)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if v + mask < n:
            op.exchange(_real(v + mask, root, n), buf, nbytes, None, 0, 0)
        mask >>= 1


def broadcast_chain(op, buf, nbytes, root):
    n = op.size
    v = (op.rank - root) % n
    nxt = _real(v + 1, root, n) if v + 1 < n else None
    if v == 0:
        op.exchange(nxt, buf, nbytes, None, 0, 0)
    else:
        op.exchange(nxt, buf, nbytes, _real(v - 1, root, n), buf, nbytes,
                    relay="received" if nxt is not None else None)


def reduce_tree(op, src, acc, nbytes, root):
    """Binomial reduce of address src; acc (nbytes) ends with the result on the root.

    acc is this rank's partial result; children's data is reduced into it.
    Returns without touching acc on a leaf (it sends src directly).
    """
    n = op.size
    v = (op.rank - root) % n
    mask = 1
    have = src  # where this rank's partial result currently lives
    while mask < n:
        if v & mask:
            op.exchange(_real(v - mask, root, n), have, nbytes, None, 0, 0)
            return
        child = v + mask
        if child < n:
            op.exchange(None, 0, 0, _real(child, root, n), 0, nbytes, reduce_dst=acc,
                        init=src if have == src and src != acc else 0)
            have = acc
        mask <<= 1
    if have != acc:  # a root with no children (size 1)
        op.copy(acc, src, nbytes)


def reduce_chain(op, src, acc, nbytes, root):
    """Pipelined chain reduce: v = size-1 starts, each rank adds its part and passes it on."""
    n = op.size
    v = (op.rank - root) % n
    if n == 1:
        if src != acc:
            op.copy(acc, src, nbytes)
        return
    if v == n - 1:
        op.exchange(_real(v - 1, root, n), src, nbytes, None, 0, 0)
        return
    prev = _real(v - 1, root, n) if v > 0 else None
    op.exchange(prev, acc, nbytes, _real(v + 1, root, n), 0, nbytes, reduce_dst=acc,
                init=src if src != acc else 0, relay="reduced" if prev is not None else None)


def gather_linear(op, src, out, nbytes, root):
    """Root receives rank j's nbytes at out + j*nbytes; src is this rank's block."""
    n, r = op.size, op.rank
    if r != root:
        op.exchange(root, src, nbytes, None, 0, 0)
        return
    for j in range(n):
        if j == root:
            if src != out + j * nbytes:
                op.copy(out + j * nbytes, src, nbytes)
        else:
            op.exchange(None, 0, 0, j, out + j * nbytes, nbytes)


def scatter_linear(op, src, out, nbytes, root):
    """Root sends src + j*nbytes to rank j; every rank's block lands at out."""
    n, r = op.size, op.rank
    if r != root:
        op.exchange(None, 0, 0, root, out, nbytes)
        return
    for j in range(n):
        if j == root:
            op.copy(out, src + j * nbytes, nbytes)
        else:
            op.exchange(j, src + j * nbytes, nbytes, None, 0, 0)


def reduce_needs_accumulator(rank, root, size, chain):
    """Whether this rank needs a partial-result buffer in reduce_tree / reduce_chain.

    A binomial-tree leaf (odd relative rank) sends its own data straight up,
    as does the chain's first rank (relative rank size-1); every other rank
    accumulates its children's data.
    """
    v = (rank - root) % size
    if chain:
        return v != size - 1
    return v % 2 == 0
