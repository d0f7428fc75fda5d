"""Rooted collectives: binomial trees for small payloads, a pipelined chain for large.

Ranks are renumbered relative to the root (v = (r - root) mod size) so the
root is always 0.

Binomial broadcast: rank v receives from v minus its lowest set bit, then
sends to v + 2^k for every 2^k below that bit: ceil(log2 size) rounds, the
fewest possible, each carrying the whole payload.

Chain broadcast: v receives from v-1 and forwards to v+1 *while* receiving
(`relay=True`: `_io.step` sends each byte as soon as it has arrived), so the
payload streams down the chain and the time is about one transfer plus
size-1 chunks, instead of log2(size) full transfers.
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
        op.exchange(nxt, buf, nbytes, _real(v - 1, root, n), buf, nbytes, relay=nxt is not None)
