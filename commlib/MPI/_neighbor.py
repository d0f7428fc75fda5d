"""Neighbourhood collectives of topology communicators (mpi4py's Topocomm methods), and the private
context they and partitioned messages travel on.

Each neighbourhood collective is one exchange: this rank receives block i from its i-th source and
sends block j to its j-th destination, in the order and with the tags its topology gives
(`Topology.neighbors` in `_topology.py`). A PROC_NULL neighbour sends nothing and leaves its receive
block as it was. The messages are commlib point-to-point on the communicator's private context: a
sub-group of the same ranks that each rank makes alone on first use, so no receive of the
program's can match them, nor they a message of the program's. The exchange runs on the
communicator's ordered collective stream, so blocking, non-blocking and persistent forms keep
program order with each other and with the other collectives. Arguments are parsed in the caller's
thread, as mpi4py parses them; Python loops once per neighbour, never per element.
"""
import threading
import weakref

import numpy as np

from .._dtypes import DT_BYTES
from .._engine import wait_all
from ._bufspec import blocks, parse_recv, parse_send, parse_vector, parse_vectorw
from ._constants import ERR_TOPOLOGY, PROC_NULL, MPIException
from ._p2p import dumps, exchange, loads, recv_obj, send

_PRIVATE = weakref.WeakKeyDictionary()  # a communicator's commlib Group -> its private sub-group
_PRIVATE_LOCK = threading.Lock()


def private(g):
    """The private sub-group of group g: the same ranks in the same order, a matching context of its own."""
    with _PRIVATE_LOCK:
        sub = _PRIVATE.get(g)
        if sub is None:
            sub = _PRIVATE[g] = g.subgroup(list(range(g.size())), ("MPI.private",))
        return sub


def exchange_body(g, nb, recv_blocks, send_blocks, what):
    """Receive recv_blocks[i] from nb.sources[i] and send send_blocks[j] to nb.destinations[j]."""
    recvs = zip(nb.sources, nb.rtags, recv_blocks)
    sends = zip(nb.destinations, nb.stags, send_blocks)
    exchange(private(g), [(src, tag, b.view(np.uint8)) for src, tag, b in recvs if src != PROC_NULL],
             [(dst, tag, b.view(np.uint8)) for dst, tag, b in sends if dst != PROC_NULL], what)


def exchange_obj_body(g, nb, payloads, what):
    """The object exchange: payloads[j] (pickled bytes) to destination j; the objects from each source
    (None from PROC_NULL, as mpi4py's zero-length message unpickles)."""
    pg = private(g)
    recvs = [None if src == PROC_NULL else recv_obj(pg, src, tag, False, what)
             for src, tag in zip(nb.sources, nb.rtags)]
    sends = [send(pg, data, DT_BYTES, data.size, dst, tag, block=False, what=what)
             for dst, tag, data in zip(nb.destinations, nb.stags, payloads) if dst != PROC_NULL]
    wait_all([r for r in sends if r is not None])
    return [None if r is None else loads(r.wait()[1]) for r in recvs]


def _blocks(msg, n, what):
    """n equal blocks of a parsed one-block-per-neighbour buffer (an explicit count is per block)."""
    if n == 0:
        return []
    flat, per = blocks(msg, n, what)
    return [flat[i * per:(i + 1) * per] for i in range(n)]


def _vector(spec, n, writable):
    if n == 0:
        return []
    v = parse_vector(spec, n, writable)
    return [v.block(i) for i in range(n)]


def _same_base(send_blocks, recv_blocks, what):
    """Typed blocks on both sides agree on the element type (bytes are reinterpreted only where the
    program said so with a datatype, as in the other collectives)."""
    if send_blocks and recv_blocks and send_blocks[0].dtype != recv_blocks[0].dtype:
        raise ValueError(f"{what}: mismatch in send and receive element types ({send_blocks[0].dtype} and "
                         f"{recv_blocks[0].dtype})")


class Neighborhood:
    """The neighbourhood collectives; `_comm.py` installs these functions on Topocomm itself (so that
    receives into derived datatypes are unpacked as for every other buffer method)."""

    def _exchange_neighbors(self, what):
        """This rank's Neighbors, for a collective: refused on a graph whose ranks disagree on its edges
        (every rank knows it, so every rank raises and none waits)."""
        nb = self._neighbors()
        problem = getattr(self._c.topo, "problem", None)
        if problem:
            raise MPIException(ERR_TOPOLOGY, f"rank {self.Get_rank()}: {what}: the distributed graph's ranks "
                                             f"disagree on its edges: {problem}")
        return nb

    def _neighbor_allgather_args(self, sendbuf, recvbuf, what, vector):
        nb = self._exchange_neighbors(what)
        s = parse_send(sendbuf)
        n = len(nb.sources)
        rb = _vector(recvbuf, n, True) if vector else _blocks(parse_recv(recvbuf), n, what)
        sb = [s.array] * len(nb.destinations)
        _same_base(sb, rb, what)
        return nb, rb, sb, what

    def _neighbor_alltoall_args(self, sendbuf, recvbuf, what, vector):
        nb = self._exchange_neighbors(what)
        if vector:
            sb, rb = _vector(sendbuf, len(nb.destinations), False), _vector(recvbuf, len(nb.sources), True)
        else:
            sb = _blocks(parse_send(sendbuf), len(nb.destinations), what)
            rb = _blocks(parse_recv(recvbuf), len(nb.sources), what)
        _same_base(sb, rb, what)
        return nb, rb, sb, what

    def _neighbor_alltoallw_args(self, sendbuf, recvbuf, what):
        nb = self._exchange_neighbors(what)
        rb = parse_vectorw(recvbuf, len(nb.sources), True, what) if nb.sources else []
        sb = parse_vectorw(sendbuf, len(nb.destinations), False, what) if nb.destinations else []
        return nb, rb, sb, what

    def Neighbor_allgather(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._neighbor_allgather_args(sendbuf, recvbuf, "Neighbor_allgather", False))

    def Neighbor_allgatherv(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._neighbor_allgather_args(sendbuf, recvbuf, "Neighbor_allgatherv", True))

    def Neighbor_alltoall(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._neighbor_alltoall_args(sendbuf, recvbuf, "Neighbor_alltoall", False))

    def Neighbor_alltoallv(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._neighbor_alltoall_args(sendbuf, recvbuf, "Neighbor_alltoallv", True))

    def Neighbor_alltoallw(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._neighbor_alltoallw_args(sendbuf, recvbuf, "Neighbor_alltoallw"))

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        return self._start("Ineighbor_allgather", exchange_body,
                           *self._neighbor_allgather_args(sendbuf, recvbuf, "Ineighbor_allgather", False))

    def Ineighbor_allgatherv(self, sendbuf, recvbuf):
        return self._start("Ineighbor_allgatherv", exchange_body,
                           *self._neighbor_allgather_args(sendbuf, recvbuf, "Ineighbor_allgatherv", True))

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        return self._start("Ineighbor_alltoall", exchange_body,
                           *self._neighbor_alltoall_args(sendbuf, recvbuf, "Ineighbor_alltoall", False))

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        return self._start("Ineighbor_alltoallv", exchange_body,
                           *self._neighbor_alltoall_args(sendbuf, recvbuf, "Ineighbor_alltoallv", True))

    def Ineighbor_alltoallw(self, sendbuf, recvbuf):
        return self._start("Ineighbor_alltoallw", exchange_body,
                           *self._neighbor_alltoallw_args(sendbuf, recvbuf, "Ineighbor_alltoallw"))

    def neighbor_allgather(self, sendobj):
        nb = self._exchange_neighbors("neighbor_allgather")
        data = dumps(sendobj)
        return self._run(exchange_obj_body, nb, [data] * len(nb.destinations), "neighbor_allgather")

    def neighbor_alltoall(self, sendobj):
        nb = self._exchange_neighbors("neighbor_alltoall")
        n = len(nb.destinations)
        objs = [None] * n if sendobj is None else list(sendobj)
        if len(objs) != n:
            raise ValueError(f"neighbor_alltoall: needs a sequence of {n} objects (one per destination), "
                             f"got {len(objs)}")
        return self._run(exchange_obj_body, nb, [dumps(o) for o in objs], "neighbor_alltoall")


NEIGHBOR_COLLECTIVES = ("Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
                        "Neighbor_alltoallw")
