"""commlib.MPI's calls into the point-to-point engine: sends, raw receives (any dtype; a longer
message is MPI's ERR_TRUNCATE), object messages through MPI.pickle, and the done() functions that
turn an engine result into what an MPI Request reports."""
import pickle
from operator import itemgetter

import numpy as np

from .._dtypes import DT_BYTES
from .._engine import EAGER_BYTES, wait_all
from .._wire import HEADER_NBYTES
from ._constants import ANY_SOURCE, ANY_TAG, ERR_TRUNCATE, PROC_NULL, MPIException

_UNBOUNDED = 1 << 62
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_TAG = itemgetter(1)  # a (rank, tag, block) part's tag


def proc_null(status):
    if status is not None:
        status._fill(PROC_NULL, ANY_TAG, 0)


def fill(status, msg):
    if status is not None:
        status._fill(msg.source, msg.tag, msg.nbytes)


def send(g, m_u8, wire, count, dest, tag, *, sync=False, block=True, what="Send"):
    return g.engine.send(g.p2p, dest, [m_u8], tag=tag, dtype=wire, count=count, sync=sync, what=what, block=block)


def truncating(capacity, what, me):
    def finish(msg, payload):
        if msg.nbytes > capacity:
            raise MPIException(ERR_TRUNCATE, f"rank {me}: {what}: message of {msg.nbytes} bytes from rank "
                                             f"{msg.source} (tag {msg.tag}) is longer than the {capacity}-byte "
                                             f"receive buffer")
        return msg
    return finish


def recv_into(g, u8, wire, source, tag, block, what, msg=None):
    """A raw receive into the bytes u8 (the fast path expects a frame of dtype `wire` filling them);
    with `msg`, of that message, taken by a matched probe (source and tag are then its own)."""
    finish, check = truncating(u8.nbytes, what, g.rank()), (wire, u8.nbytes)
    if msg is not None:
        return g.engine.mrecv(g.p2p, msg, u8, finish, what=what, block=block, check=check, raw=True)
    return g.engine.recv(g.p2p, source, tag, u8, finish, what=what, block=block, check=check, raw=True)


def exchange(g, recvs, sends, what):
    """This rank's part of an exchange every rank of g takes part in (all-to-all, neighbourhood
    collectives): receive each (source, tag, uint8 block) of recvs, send each (dest, tag, block) of sends.

    At most EAGER_BYTES of frames to each destination: the sends go first, each a blocking send that
    completes into its connection's buffer, then the receives, each blocking: the one-call paths,
    with no request and no progress loop (~5x less time a message than posting each). A send that
    finds its connection full hands itself to the engine, which reads what arrives while it waits, so
    ranks that all send first still all go on. More than that: every receive is posted first, so the
    data lands in place, then the sends, and all are waited on. Each rank decides alone; either way
    meets the other. A block this rank sends itself is copied straight into the receive that takes it
    (the first of its tag, as matching would; of another size, the engine's matching says why).
    """
    me = g.rank()
    if any(dst == me for dst, _, _ in sends):
        recvs, sends = _copy_to_self(me, recvs, sends)
    load = {}
    for dst, _, u8 in sends:
        load[dst] = load.get(dst, 0) + u8.nbytes + HEADER_NBYTES
    if all(b <= EAGER_BYTES for b in load.values()):
        # In tag order on both sides (stable: a tag's messages keep theirs), so each receive finds its
        # own frame first where one rank sends another several blocks (a periodic dimension of 2, a
        # graph's repeated edge): a frame of another tag first hands the receive over to the engine's
        # matching, ~20x the time of the one-call path. Eager sends complete alone, so any order of
        # them and of the receives after them meets the other side's.
        for dst, tag, u8 in sorted(sends, key=_TAG):
            send(g, u8, DT_BYTES, u8.nbytes, dst, tag, block=True, what=what)
        for src, tag, u8 in sorted(recvs, key=_TAG):
            recv_into(g, u8, DT_BYTES, src, tag, True, what)
        return
    reqs = [recv_into(g, u8, DT_BYTES, src, tag, False, what) for src, tag, u8 in recvs]
    reqs += [send(g, u8, DT_BYTES, u8.nbytes, dst, tag, block=False, what=what) for dst, tag, u8 in sends]
    wait_all([r for r in reqs if r is not None])


def _copy_to_self(me, recvs, sends):
    """(recvs, sends) left once each receive from this rank took the first send to it of its tag by a
    copy; from a pair of two sizes on, the engine matches the rest (and says what is wrong)."""
    mine = [i for i, (dst, _, _) in enumerate(sends) if dst == me]
    taken, left, copying = set(), [], True
    for src, tag, u8 in recvs:
        j = next((i for i in mine if i not in taken and sends[i][1] == tag), None) if copying and src == me else None
        if j is None or sends[j][2].nbytes != u8.nbytes:
            copying = copying and j is None
            left.append((src, tag, u8))
            continue
        taken.add(j)
        u8[...] = sends[j][2]
    return left, [s for i, s in enumerate(sends) if i not in taken]


def recv_buf(g, m, source, tag, block, what):
    return recv_into(g, m.u8, m.datatype._wire, source, tag, block, what)


def _unpickle(msg, payload):
    return msg, payload


def recv_obj(g, source, tag, block, what, msg=None):
    """An object receive (its pickled bytes); with `msg`, of that message, taken by a matched probe."""
    if msg is not None:
        return g.engine.mrecv(g.p2p, msg, None, _unpickle, what=what, block=block, check=(DT_BYTES, _UNBOUNDED),
                              raw=True)
    return g.engine.recv(g.p2p, source, tag, None, _unpickle, what=what, block=block, check=(DT_BYTES, _UNBOUNDED),
                         raw=True)


def loads(payload):
    return PICKLE.loads(payload) if len(payload) else None


def dumps(obj):
    data = PICKLE.dumps(obj)
    return np.frombuffer(data, dtype=np.uint8)


class Pickle:
    """MPI.pickle: how object messages are serialised (pickle's highest protocol by default)."""

    def __init__(self, dumps=pickle.dumps, loads=pickle.loads, protocol=None):
        self._dumps, self._loads = dumps, loads
        self.PROTOCOL = _PROTOCOL if protocol is None and dumps is pickle.dumps else protocol

    def dumps(self, obj):
        return self._dumps(obj) if self.PROTOCOL is None else self._dumps(obj, self.PROTOCOL)

    def loads(self, data):
        return self._loads(data)


PICKLE = Pickle()


def done_buf(msg, status):
    fill(status, msg)
    return None


def done_obj(result, status):
    msg, payload = result
    fill(status, msg)
    return loads(payload)


def done_proc_null(result, status):
    proc_null(status)
    return None


def done_empty(result, status):
    """A send or a collective completed: its status carries nothing."""
    if status is not None:
        status._fill(ANY_SOURCE, ANY_TAG, 0)
    return None
