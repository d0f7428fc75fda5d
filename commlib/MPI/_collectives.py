"""Bodies of commlib.MPI's collectives, each run on its communicator's ordered stream.

Buffer collectives with predefined ops call `_api.within`, the collectives for code already on a
stream (a public function there would wait for the stream it holds); the blocking forms the
public functions cover call those from `_comm.py` instead. Vector collectives, scans and user ops run over the point-to-point
engine with tags below zero, which no user receive (ANY_TAG included) can match.
"""
import numpy as np

from .._api import within as _within
from .._dtypes import DT_BYTES
from .._engine import wait_all as _wait_all
from ._constants import ERR_TRUNCATE, MPIException
from ._p2p import dumps, exchange, loads, recv_into, recv_obj, send

# Tags of the collectives that run over point-to-point (negative: never a user's).
(TAG_SCAN, TAG_GATHERV, TAG_SCATTERV, TAG_ALLGATHERV, TAG_ALLTOALLV, TAG_ALLTOALL_OBJ,
 TAG_ALLTOALLW) = range(-101, -108, -1)


def _p2p_send(g, arr, dest, tag, block=True):
    u8 = arr.view(np.uint8)
    return send(g, u8, DT_BYTES, u8.nbytes, dest, tag, block=block, what="collective")


def _p2p_recv(g, arr, source, tag, block=True):
    return recv_into(g, arr.view(np.uint8), DT_BYTES, source, tag, block, "collective")


def fold_buffers(blocks, op, dt, out):
    """out = blocks[0] op blocks[1] op ... (MPI order: acc = lower op acc, from the top rank down)."""
    acc = np.array(blocks[-1], copy=True)
    for b in reversed(blocks[:-1]):
        op.combine(b, acc, dt)
    out[...] = acc


def fold(values, op):
    acc = values[0]
    for v in values[1:]:
        acc = op(acc, v)
    return acc


def allreduce_body(g, s, out, op, dt):
    if op._kernel is not None:
        _within.all_reduce(g, s, op._kernel, out)
        return
    gathered = _within.all_gather(g, s)
    fold_buffers(gathered.reshape(g.size(), s.size), op, dt, out)


def reduce_body(g, s, out, op, dt, root):
    if op._kernel is not None:
        _within.reduce(g, s, op._kernel, root, out)
        return
    gathered = _within.gather(g, s, root)
    if g.rank() == root:
        fold_buffers(gathered.reshape(g.size(), s.size), op, dt, out)


def scan_body(g, s, out, op, dt, exclusive):
    n, me = g.size(), g.rank()
    mine = np.array(s, copy=True)  # s may be out itself (IN_PLACE)
    prev = None
    if me > 0:
        prev = np.empty_like(mine)
        _p2p_recv(g, prev, me - 1, TAG_SCAN)
        op.combine(prev, mine, dt)  # mine = prefix op mine
    if exclusive:
        if prev is not None:
            out[...] = prev
    else:
        out[...] = mine
    if me < n - 1:
        _p2p_send(g, mine, me + 1, TAG_SCAN)


def gatherv_body(g, s, R, root):
    me, n = g.rank(), g.size()
    if me != root:
        _p2p_send(g, s, root, TAG_GATHERV)
        return
    for i in range(n):  # in turn, each blocking: senders only send, so none waits on another
        if i != root:
            _p2p_recv(g, R.block(i), i, TAG_GATHERV)
    if s is not None:
        R.block(root)[...] = s


def scatterv_body(g, S, r, root):
    me, n = g.rank(), g.size()
    if me != root:
        _p2p_recv(g, r, root, TAG_SCATTERV)
        return
    for i in range(n):  # in turn, each blocking: receivers only receive, so none waits on another
        if i != root:
            _p2p_send(g, S.block(i), i, TAG_SCATTERV)
    if r is not None:
        r[...] = S.block(root)


def exchange_body(g, send_block, recv_block, tag):
    """Every rank sends send_block(j) to j and receives recv_block(i) from i (all-to-all pattern)."""
    me, n = g.rank(), g.size()
    exchange(g, [(i, tag, recv_block(i).view(np.uint8)) for i in range(n) if i != me],
             [(j, tag, send_block(j).view(np.uint8)) for j in range(n) if j != me], "collective")
    mine = send_block(me)
    if mine is not None:
        recv_block(me)[...] = mine


# An Allgatherv whose blocks are small runs as one all_gather of equal slots, each this header (the
# byte count of the block it carries) and the block padded to the widest: one collective call (the
# one-call path, ~2-10 us) instead of a message to and from every rank (~40 us at n = 2, ~90 at n = 4).
SLOT_HEADER = 8
PADDED_MAX = 64 << 10  # the slots of all ranks together, at most (the one-call path's eager size)


def slot_width(blocks):
    """The slot of an Allgatherv into `blocks` (every rank's) run as one all_gather of equal slots, in bytes;
    0 where it does not run so. Each rank decides alike: the receive counts, and their sizes in bytes, are
    the same on every rank."""
    width = SLOT_HEADER + max(b.nbytes for b in blocks)
    return width if len(blocks) * width <= PADDED_MAX else 0


def allgatherv_padded(g, s, blocks, width, all_gather):
    """Allgatherv of this rank's array `s` into `blocks` (rank i's: a flat view of the receive buffer) as
    `all_gather(slot, out)` of slots of `width` bytes (slot_width). A block longer than its receive is
    ERR_TRUNCATE on the ranks that receive it, as a message that long would be, raised after the collective
    (every rank took part: none waits) and after the other blocks are in."""
    n = len(blocks)
    data = np.ascontiguousarray(s).reshape(-1).view(np.uint8)
    slot = np.zeros(width, np.uint8)
    slot[:SLOT_HEADER].view(np.int64)[0] = data.size
    fits = min(data.size, width - SLOT_HEADER)  # (a longer block is refused by its receivers, below)
    slot[SLOT_HEADER:SLOT_HEADER + fits] = data[:fits]
    out = np.empty((n, width), np.uint8)
    all_gather(slot, out.reshape(-1))
    sizes = out[:, :SLOT_HEADER].copy().view(np.int64).reshape(-1).tolist()
    refused = None
    for i, (block, nbytes) in enumerate(zip(blocks, sizes)):
        into = block.view(np.uint8)
        if nbytes > into.size:  # (the other blocks are still delivered)
            refused = refused or MPIException(ERR_TRUNCATE, f"rank {g.rank()}: collective: message of {nbytes} bytes "
                                                            f"from rank {i} is longer than the {into.size}-byte "
                                                            f"receive buffer")
            continue
        into[:nbytes] = out[i, SLOT_HEADER:SLOT_HEADER + nbytes]
    if refused is not None:
        raise refused


def allgatherv_body(g, s, blocks):
    """The non-blocking Allgatherv, on the communicator's stream."""
    width = slot_width(blocks)
    if width:
        allgatherv_padded(g, s, blocks, width, lambda x, out: _within.all_gather(g, x, out))
    else:
        exchange_body(g, lambda j: s, blocks.__getitem__, TAG_ALLGATHERV)


def alltoall_obj_body(g, objs):
    me, n = g.rank(), g.size()
    recvs = {i: recv_obj(g, i, TAG_ALLTOALL_OBJ, False, "alltoall") for i in range(n) if i != me}
    sends = [_p2p_send(g, dumps(objs[j]), j, TAG_ALLTOALL_OBJ, block=False) for j in range(n) if j != me]
    _wait_all([q for q in sends if q is not None])
    out = []
    for i in range(n):
        _, payload = recvs[i].wait() if i != me else (None, dumps(objs[i]))  # its own: a copy, as the others get
        out.append(loads(payload))
    return out


def reduce_scatter_body(g, s, out, op, dt, lo):
    n = g.size()
    if lo is None and op._kernel is not None and s.size == out.size * n:
        out[...] = _within.reduce_scatter(g, s, op._kernel)  # out may lie inside s (IN_PLACE)
        return
    full = np.empty_like(s)
    allreduce_body(g, s, full, op, dt)
    start = g.rank() * out.size if lo is None else lo
    out[...] = full[start:start + out.size]


def alltoall_body(g, s, out):
    res = _within.all_to_all(g, s)
    out[...] = res
