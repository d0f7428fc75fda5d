"""Communicators: `Comm`, `Intracomm` and the topology communicators (their topologies in `_topology.py`,
their neighbourhood collectives in `_neighbor.py`), over commlib groups.

A communicator handle holds a `_State`: the commlib Group (its matching
context and ordered collective stream), a name and a topology. Handles made
by `Intracomm(comm)` share the state (`==`, not `is`); `Free()` empties the
handle. Point-to-point calls go to the matching engine with raw receives
(any dtype, truncation reported as ERR_TRUNCATE). Collectives run on the
group's stream, so blocking and non-blocking ones keep program order: buffer
collectives with predefined ops call commlib's public collectives on views of
the caller's memory (a blocking one takes the group's one-call path when it
can), or its private bodies where those take no `out=`; vector collectives,
scans and user ops run over the engine with tags below zero, which no user
receive (ANY_TAG included) can match.
"""
import inspect
import math
import socket
import warnings

import numpy as np

from .. import _api
from .._api import collectives as _coll
from .._api import lifecycle as _lifecycle
from .._dtypes import DT_BYTES
from .._kernels import derived_pack, derived_space, derived_unpack, plain, plain_pair
from .._engine import EAGER_BYTES
from ._constants import (
    ANY_SOURCE, ANY_TAG, APPNUM, CART, COMBINER_NAMED, COMM_TYPE_HW_GUIDED, COMM_TYPE_HW_UNGUIDED,
    COMM_TYPE_RESOURCE_GUIDED, COMM_TYPE_SHARED, CONGRUENT, DIST_GRAPH, ERR_ARG, ERR_COMM, ERR_GROUP, ERR_OP,
    ERR_RANK, ERR_ROOT, ERR_TAG, ERR_TYPE, GRAPH, HOST, IDENT, IO, LASTUSEDCODE,
    PROC_NULL, SIMILAR, SUCCESS, TAG_UB, TAG_UB_VALUE, UNDEFINED, UNEQUAL, UNIVERSE_SIZE, WTIME_IS_GLOBAL,
    MPIException)
from ._collectives import (
    TAG_ALLGATHERV, TAG_ALLTOALLV, TAG_ALLTOALLW, allgatherv_body, allgatherv_padded, allreduce_body, alltoall_body,
    alltoall_obj_body, exchange_body, fold, gatherv_body, reduce_body, reduce_scatter_body, scan_body, scatterv_body,
    slot_width)
from ._attributes import _NONE, _RETURN_H, Attributes, ErrorHandling, last_used_code
from ._datatypes import BY_CHAR
from ._groups import Group
from ._message import mprobe, no_proc
from ._buffer import plain_message, raw_message
from ._bufspec import blocks, is_in_place, parse_recv, unpacking, parse_send, parse_vector, parse_vectorw
from ._p2p import (done_buf, done_empty, done_obj, done_proc_null, dumps, fill, proc_null, recv_buf, recv_into,
                   recv_obj, send)
from ._ops import SUM, Op
from ._requests import Prequest, Request
from ._neighbor import NEIGHBOR_COLLECTIVES, Neighborhood
from ._partitioned import precv_init, psend_init
from ._topology import (Cartesian, DistGraph, DistGraphTopo, Graph, GraphTopo, Topology, adjacent_problem,
                        cart_map, cart_topology, dist_graph_edges, graph_args, graph_map, graph_problem,
                        rank_problem, weights_arg)

_ENGINE_ANY_TAG = -1
_WIRE = {dt._base: dt._wire for dt in BY_CHAR.values()}  # numpy dtype -> wire code, for the fast paths


class _State:
    __slots__ = ("g", "name", "topo", "builtin", "attrs", "errh", "neighbors")

    def __init__(self, g, name="", topo=None, builtin=False):
        self.g, self.name, self.topo, self.builtin = g, name, topo, builtin
        self.attrs, self.errh = None, _RETURN_H  # attributes by keyval (made on first use); the error handler
        self.neighbors = None  # this rank's Neighbors in topo, made on first use (both are fixed)


_NULL = _State(None, "MPI_COMM_NULL")
_GROUP_SERIAL = {}  # (parent gid, members, tag) -> Create_group calls so far: each call a new group


# ------------------------------------------------------------------ argument checks
def _group(comm):
    g = comm._c.g
    if g is None:
        raise MPIException(ERR_COMM, "operation on MPI.COMM_NULL (a freed or excluded communicator)")
    return g


def _dest(g, dest, what):
    if isinstance(dest, (int, np.integer)) and not isinstance(dest, bool) and 0 <= dest < g.size():
        return int(dest)
    raise MPIException(ERR_RANK, f"rank {g.rank()}: {what}: {dest!r} is not a rank of this communicator "
                                 f"(size {g.size()}) nor MPI.PROC_NULL")


def _source(g, source, what):
    if source == ANY_SOURCE:
        return ANY_SOURCE
    return _dest(g, source, what)


def _stag(g, tag, what):
    if isinstance(tag, (int, np.integer)) and not isinstance(tag, bool) and 0 <= tag <= TAG_UB_VALUE:
        return int(tag)
    raise MPIException(ERR_TAG, f"rank {g.rank()}: {what}: tag {tag!r} is not in 0..MPI.TAG_UB")


def _rtag(g, tag, what):
    return _ENGINE_ANY_TAG if tag == ANY_TAG else _stag(g, tag, what)


def _derived_triple(buf):
    """(array, count, datatype, its packing plan) of [array, count, datatype]; the plan is None
    unless the datatype is a packed one and count a plain int (the one-call Send/Recv path)."""
    a, count, dt = buf
    plan = getattr(dt, "_plan", None)
    return a, count, dt, plan if type(count) is int else None


def _root(g, root, what):
    if isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < g.size():
        return int(root)
    raise MPIException(ERR_ROOT, f"rank {g.rank()}: {what}: root={root!r} is not a rank of this communicator "
                                 f"(size {g.size()})")


# ------------------------------------------------------------------ communicators
class Comm(Attributes, ErrorHandling):
    """An MPI communicator handle."""

    __slots__ = ("_c", "_buffer", "__weakref__")
    _kind, _null_error = "Comm", ERR_COMM

    def __new__(cls, comm=None):
        if comm is not None and not isinstance(comm, Comm):
            raise TypeError(f"expected an MPI.Comm, got {type(comm).__name__}")
        inter = getattr(comm._c, "handle_class", None) if comm is not None else None  # an Intercomm's state
        if inter is not None and not issubclass(cls, inter):
            if issubclass(cls, Intracomm):
                raise TypeError("expecting an intracommunicator")
            if cls is Comm:
                cls = inter  # Comm(intercomm) is an Intercomm, with an intercommunicator's methods
        self = object.__new__(cls)
        self._c = comm._c if comm is not None else _NULL
        return self

    def __reduce__(self):
        for name in ("COMM_WORLD", "COMM_SELF", "COMM_NULL"):
            h = _builtin(name)
            if self is h:
                return (_builtin, (name,))  # the predefined handle itself
            if self._c is h._c:
                return (_builtin_handle, (name, type(self)))  # a new handle of its class, equal to the predefined one
        raise ValueError(f"cannot pickle {self!r}: only COMM_WORLD, COMM_SELF and COMM_NULL can be pickled")

    def Attach_buffer(self, buf):
        self._buffer = buf

    def Detach_buffer(self):
        buf, self._buffer = getattr(self, "_buffer", None), None
        return buf

    def Flush_buffer(self):
        """Buffered sends on this communicator are done (Bsend completes as Send does)."""

    def Iflush_buffer(self):
        return Request._completed()

    @classmethod
    def Create_from_group(cls, group, stringtag="org.mpi4py", info=None, errhandler=None):
        """A communicator of group's processes, made by them alone (no parent communicator: MPI-4's
        way); every member passes the same stringtag, and each call with it makes a new one."""
        world = _api.init()
        me, members = world.rank(), list(group._ranks or ())
        if me not in members:
            raise MPIException(ERR_GROUP, f"rank {me}: Create_from_group called by a process outside the group")
        serial = ("MPI.Create_from_group", tuple(members), str(stringtag))
        n = _GROUP_SERIAL[serial] = _GROUP_SERIAL.get(serial, 0) + 1
        new = Intracomm._of(_State(world.subgroup(members, serial + (n,))))
        if errhandler is not None:
            new.Set_errhandler(errhandler)
        return new

    @classmethod
    def _of(cls, state):
        self = object.__new__(cls)
        self._c = state
        return self

    # ---------------------------------------------------------------- queries
    def Get_rank(self):
        return _group(self).rank()

    def Get_size(self):
        return _group(self).size()

    rank = property(Get_rank)
    size = property(Get_size)

    def Get_group(self):
        g = _group(self)
        return Group._of(g.world, g.world[g.rank()])

    group = property(Get_group)

    def Get_name(self):
        return self._c.name

    def Set_name(self, name):
        if self._c is _NULL:
            raise MPIException(ERR_COMM, "cannot name MPI.COMM_NULL")
        self._c.name = str(name)

    name = property(Get_name, Set_name)

    def Is_inter(self):
        _group(self)
        return getattr(self._c, "handle_class", None) is not None  # an Intercomm's state (_intercomm.py)

    def Is_intra(self):
        return not self.Is_inter()

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def Get_topology(self):
        _group(self)
        return UNDEFINED if self._c.topo is None else self._c.topo.kind

    topology = property(Get_topology)

    # attributes and error handlers (_attributes.py): kept with the communicator, shared by its handles
    def _attrs(self):
        c = self._c
        if c is _NULL:
            return None
        if c.attrs is None:
            c.attrs = {}
        return c.attrs

    def _errh_get(self):
        _group(self)
        return self._c.errh

    def _errh_set(self, h):
        _group(self)
        self._c.errh = h

    def _builtin_attr(self, keyval):
        """The predefined attributes (TAG_UB ...), or _NONE for a keyval of the program's."""
        g = _group(self)
        if keyval == TAG_UB:
            return TAG_UB_VALUE
        if keyval == WTIME_IS_GLOBAL:
            return False
        if keyval == UNIVERSE_SIZE:
            return len(g.world) if self._c.builtin else None
        if keyval == APPNUM:
            return 0
        if keyval in (HOST, IO):
            return PROC_NULL if keyval == HOST else g.rank()
        if keyval == LASTUSEDCODE:
            return last_used_code()
        return _NONE

    def Compare(self, comm2, comm=None):
        """IDENT, CONGRUENT (a dup), SIMILAR (same ranks, other order) or UNEQUAL.
        Also callable as MPI.Comm.Compare(a, b)."""
        a, b = (self, comm2) if comm is None else (comm2, comm)
        _group(a), _group(b)
        if a._c is b._c:
            return IDENT
        wa, wb = list(a._c.g.world), list(b._c.g.world)
        if wa == wb:
            return CONGRUENT
        return SIMILAR if sorted(wa) == sorted(wb) else UNEQUAL

    def Free(self):
        if self._c.builtin:
            raise MPIException(ERR_COMM, f"cannot free {self._c.name}")
        if self._c is _NULL:
            raise MPIException(ERR_COMM, "cannot free MPI.COMM_NULL")
        try:
            self._delete_attrs()
        finally:
            self._c = _NULL

    def Disconnect(self):
        """Free this communicator once its communication is done (MPI_Comm_disconnect): the way a
        spawned program and its parents let go of each other. Sends already made still reach
        their receivers (the engine finishes them)."""
        self.Free()

    @classmethod
    def Get_parent(cls):
        """In a process started by Spawn: the intercommunicator to its parents; else COMM_NULL."""
        parent = _built_on("get_parent")()
        if parent is None:
            return _built_on("Intercomm")()  # a null intercommunicator, as mpi4py's
        return parent

    def free(self):
        """Free() made safe: nothing for COMM_NULL or a predefined communicator (a copy of one is only
        emptied), Free() otherwise."""
        if self._c is _NULL or any(self is _builtin(n) for n in ("COMM_WORLD", "COMM_SELF")):
            return
        if self._c.builtin:
            self._c = _NULL
            return
        self.Free()

    def Abort(self, errorcode=0):
        """Stop every rank of the job: this process exits with errorcode (1 for 0), and commrun stops the rest."""
        g = self._c.g
        _lifecycle.abort(int(errorcode), f"MPI_Abort was called on rank {g.rank() if g else '?'} "
                                         f"with error code {int(errorcode)}")

    def __eq__(self, other):
        if not isinstance(other, Comm):
            return NotImplemented
        return self._c is other._c

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __bool__(self):
        return self._c is not _NULL

    def __repr__(self):
        return f"<MPI.{type(self).__name__} {self._c.name or hex(id(self._c))}>"

    # ---------------------------------------------------------------- new communicators

    def _derive(self, sub, cls=None, topo=None):
        """A new communicator over group `sub` (None: COMM_NULL), with ERRORS_RETURN as mpi4py gives every
        new communicator."""
        if sub is None:
            return COMM_NULL_HANDLE()
        return (cls or Intracomm)._of(_State(sub, "", topo))

    def Split(self, color=0, key=0):
        g = _group(self)
        if color == UNDEFINED:
            c = -1
        elif isinstance(color, (int, np.integer)) and not isinstance(color, bool) and color >= 0:
            c = int(color)
        else:
            raise MPIException(ERR_ARG, f"rank {g.rank()}: Split: color must be >= 0 or MPI.UNDEFINED, got {color!r}")
        return self._derive(g.split(c, int(key)))

    def Dup(self, info=None):
        """A new communicator over the same ranks, with its own matching context; the same class."""
        g = _group(self)
        return self._dup_attrs(self._derive(g.split(0, g.rank()), type(self), self._c.topo))

    def _dup_attrs(self, new):
        """new, a Dup of this communicator, given this one's attributes as their keyvals say (a copy
        callback that fails leaves new freed and raises)."""
        try:
            self._copy_attrs(new)
        except MPIException:
            new._c = _NULL
            raise
        return new

    Clone = Dup
    Dup_with_info = Dup

    def Idup_with_info(self, info=None):
        return self.Idup(info)

    def Split_type(self, split_type, key=0, info=None):
        """The ranks that share a resource with this one. The one resource commlib knows is the host
        (shared memory): COMM_TYPE_SHARED; COMM_TYPE_HW_GUIDED / RESOURCE_GUIDED when info says
        mpi_hw_resource_type=mpi_shared_memory (COMM_NULL for any other resource); COMM_TYPE_HW_UNGUIDED
        the host when the communicator spans several, else COMM_NULL (nothing finer is known),
        saying mpi_shared_memory in info. UNDEFINED: COMM_NULL."""
        g = _group(self)
        kind = split_type
        if split_type in (COMM_TYPE_HW_GUIDED, COMM_TYPE_RESOURCE_GUIDED):
            asked = info.Get("mpi_hw_resource_type") if info else None
            kind = COMM_TYPE_SHARED if asked == "mpi_shared_memory" else UNDEFINED
        hosts = _api.all_gather_obj(None if kind == UNDEFINED else socket.gethostname(), group=g)
        if split_type == COMM_TYPE_HW_UNGUIDED and len({h for h in hosts if h is not None}) <= 1 \
                and sum(h is not None for h in hosts) == g.size():
            return COMM_NULL_HANDLE()  # every rank on one host: no smaller hardware group is known
        if split_type == COMM_TYPE_HW_UNGUIDED and info:
            info.Set("mpi_hw_resource_type", "mpi_shared_memory")
        color = -1 if kind == UNDEFINED else sorted(h for h in set(hosts) if h is not None).index(hosts[g.rank()])
        return self._derive(g.split(color, int(key)))

    def Create_group(self, group, tag=0):
        """A communicator of group's processes, called by those processes only (no other rank takes part)."""
        g = _group(self)
        me = g.world[g.rank()]
        members = list(group._ranks or ())  # world ranks
        if me not in members:
            raise MPIException(ERR_GROUP, f"rank {g.rank()}: Create_group called by a process outside the group")
        if not set(members) <= set(g.world):
            raise MPIException(ERR_GROUP, f"rank {g.rank()}: Create_group: the group's processes "
                                          f"{sorted(set(members) - set(g.world))} are not in this communicator")
        serial = (g.gid, tuple(members), int(tag))
        n = _GROUP_SERIAL[serial] = _GROUP_SERIAL.get(serial, 0) + 1
        ranks = [g.world.index(m) for m in members]
        return Intracomm._of(_State(g.subgroup(ranks, ("MPI.Create_group", int(tag), n))))

    def Set_info(self, info):
        return None

    def Get_info(self):
        from . import Info  # the module's Info class (no communication involved)
        return Info.Create()

    info = property(Get_info, Set_info)

    def Idup(self, info=None):
        """(new communicator, a completed request): the dup itself is made at once."""
        return self.Dup(), Request._completed()

    def Create(self, group):
        g = _group(self)
        me = g.world[g.rank()]
        members = list(group._ranks)
        if me in members:
            return self._derive(g.split(0, members.index(me)))
        g.split(-1, 0)
        return COMM_NULL_HANDLE()

    def Cart_map(self, dims, periods=None):
        """This rank's rank in a Cartesian topology of dims (row-major, no reordering), or UNDEFINED."""
        return cart_map(_group(self).rank(), dims)

    def Create_cart(self, dims, periods=None, reorder=False):
        g = _group(self)
        topo = cart_topology(dims, periods, g.size())
        sub = g.split(0 if g.rank() < math.prod(topo[0]) else -1, g.rank())
        return self._derive(sub, Cartcomm, topo)

    def Graph_map(self, index, edges):
        """This rank's rank in a graph topology (no reordering), or UNDEFINED."""
        return graph_map(_group(self).rank(), graph_args(index, edges)[0])

    def Create_graph(self, index, edges, reorder=False):
        """A Graphcomm over the first len(index) ranks (the others get COMM_NULL); every rank passes the
        same graph, which is checked."""
        g = _group(self)
        graph, error = _checked(lambda: _graph(graph_args(index, edges), g, "Create_graph"))
        _agree(g, error, "Create_graph", graph and hash(graph))
        index, edges = graph
        sub = g.split(0 if g.rank() < len(index) else -1, g.rank())
        return self._derive(sub, Graphcomm, GraphTopo(tuple(index), tuple(edges[:index[-1] if index else 0])))

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None, info=None,
                                   reorder=False):
        """A Distgraphcomm over the same ranks, each giving its own in- and out-neighbours (PROC_NULL
        allowed). An edge one end lists must be listed by the other end as often: that is checked here,
        and a neighbourhood collective on a graph where it fails raises on every rank."""
        g = _group(self)
        what = "Create_dist_graph_adjacent"

        def args():
            src = [] if sources is None else _topo_ints(sources, "sources")
            dst = [] if destinations is None else _topo_ints(destinations, "destinations")
            sw = weights_arg(sourceweights, len(src), what, "sourceweights")
            dw = weights_arg(destweights, len(dst), what, "destweights")
            if (sw is None) != (dw is None):  # one side weighted: the other's edges weigh 1
                sw, dw = sw or [1] * len(src), dw or [1] * len(dst)
            problem = rank_problem(src, g.size(), "sources", True) or rank_problem(dst, g.size(), "destinations", True)
            if problem:
                raise MPIException(ERR_RANK, f"rank {g.rank()}: {what}: {problem}")
            return DistGraphTopo(tuple(src), tuple(dst), sw, dw)
        topo, error = _checked(args)
        lists = _agree(g, error, what, None if topo is None else (topo.sources, topo.destinations))
        topo = topo._replace(problem=adjacent_problem(lists, g.size()))
        return self._derive(g.split(0, g.rank()), Distgraphcomm, topo)

    def Create_dist_graph(self, sources, degrees, destinations, weights=None, info=None, reorder=False):
        """A Distgraphcomm over the same ranks from edges any rank may give: sources[i] has degrees[i]
        edges, to the next degrees[i] destinations. Each rank's neighbours are in the order the ranks
        gave the edges (by rank, then position)."""
        g = _group(self)
        what = "Create_dist_graph"

        def args():
            src, deg = _topo_ints(sources, "sources"), _topo_ints(degrees, "degrees")
            dst = _topo_ints(destinations, "destinations")
            if len(deg) != len(src):
                raise ValueError(f"{what}: {len(deg)} degrees for {len(src)} sources")
            if any(d < 0 for d in deg):
                raise MPIException(ERR_ARG, f"rank {g.rank()}: {what}: degrees must be >= 0, got {deg}")
            if len(dst) != sum(deg):
                raise ValueError(f"{what}: the degrees add up to {sum(deg)} edges, got {len(dst)} destinations")
            w = weights_arg(weights, len(dst), what, "weights")
            problem = rank_problem(src, g.size(), "sources", False) or rank_problem(dst, g.size(), "destinations",
                                                                                    False)
            if problem:
                raise MPIException(ERR_RANK, f"rank {g.rank()}: {what}: {problem}")
            return src, deg, dst, w
        spec, error = _checked(args)
        specs = _agree(g, error, what, spec)
        return self._derive(g.split(0, g.rank()), Distgraphcomm, dist_graph_edges(specs, g.rank()))

    # ---------------------------------------------------------------- point-to-point, buffers
    def Send(self, buf, dest, tag=0):
        g = self._c.g
        tb = type(buf)
        a = wire = None  # a plain message: its array of elements and wire code
        if g is not None and (tb is np.ndarray or tb is list or tb is tuple):
            # the common cases first (an array, [array, datatype], [array, count, datatype], the same of a
            # bytearray or mmap): one compiled call with the caller's own arguments, which checks rank and
            # tag; what it declines goes the long way below (the engine's own one call among it)
            fast = getattr(g, "p2p_fast", None)  # (an intercommunicator's has none)
            if tb is np.ndarray:
                a, wire = buf, _WIRE.get(buf.dtype)
            else:
                raw = raw_message(buf)
                if raw is not None:
                    if fast is not None and fast.send_buffer(raw[0], raw[1], dest, tag, raw[3], raw[2], "Send") is None:
                        return
                else:
                    a, wire = plain_message(buf, False) or (None, None)
            if wire is not None and fast is not None and fast.send_wire(a, dest, tag, wire, "Send") is None:
                return
        g = _group(self)
        if dest == PROC_NULL:
            return
        if wire is not None and (tb is not np.ndarray or buf.flags.c_contiguous):  # a plain message
            send(g, a if a.ndim == 1 else a.reshape(-1), wire, a.size, _dest(g, dest, "Send"), _stag(g, tag, "Send"))
            return
        if (tb is list or tb is tuple) and len(buf) == 3:  # [array, count, derived type]: packed in one C call
            a, count, dt, plan = _derived_triple(buf)
            packed = None if plan is None else derived_pack(a, plan, count)
            if packed is not None:
                send(g, packed, dt._wire, count * dt._mult, _dest(g, dest, "Send"), _stag(g, tag, "Send"))
                return
        self._send_buf(buf, dest, tag, False, True, "Send")

    Send._unpacking = True  # it receives nothing: never wrapped by _install_unpacking

    Bsend = Rsend = Send

    def Ssend(self, buf, dest, tag=0):
        self._send_buf(buf, dest, tag, True, True, "Ssend")

    def Recv(self, buf, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = self._c.g
        tb = type(buf)
        a = wire = None  # a plain message: its array of elements and wire code
        if g is not None and (tb is np.ndarray or tb is list or tb is tuple):
            # the common cases first (as Send's), from a named source with a named tag or ANY_TAG: one
            # compiled call; what it declines goes the long way below (the engine's own one call among it)
            fast = getattr(g, "p2p_fast", None)
            named = fast is not None and type(source) is int and type(tag) is int
            if tb is np.ndarray:
                a, wire = buf, _WIRE.get(buf.dtype)
            else:
                raw = raw_message(buf)
                if raw is not None:
                    if named:
                        got = fast.recv_buffer(raw[0], raw[1], source, _ENGINE_ANY_TAG if tag == ANY_TAG else tag,
                                               raw[3])
                        if got is not NotImplemented:
                            if status is not None:
                                status._fill(source, got, raw[1])
                            return
                else:
                    a, wire = plain_message(buf, True) or (None, None)
            if wire is not None and named:
                got = fast.recv_wire(a, source, _ENGINE_ANY_TAG if tag == ANY_TAG else tag, wire)
                if got is not NotImplemented:
                    if status is not None:
                        status._fill(source, got, a.nbytes)
                    return
        g = _group(self)
        if source == PROC_NULL:
            proc_null(status)
            return
        if wire is not None and (tb is not np.ndarray or buf.flags.c_contiguous and buf.flags.writeable):
            u8 = (a if a.ndim == 1 else a.reshape(-1)).view(np.uint8)  # a plain message
            fill(status, recv_into(g, u8, wire, _source(g, source, "Recv"), _rtag(g, tag, "Recv"), True, "Recv"))
            return
        if (tb is list or tb is tuple) and len(buf) == 3:  # [array, count, derived type]: unpacked in one C call
            a, count, dt, plan = _derived_triple(buf)
            packed = None if plan is None else derived_space(a, plan, count)
            if packed is not None:
                msg = recv_into(g, packed, dt._wire, _source(g, source, "Recv"), _rtag(g, tag, "Recv"), True, "Recv")
                derived_unpack(a, plan, count, packed, msg.nbytes)
                fill(status, msg)
                return
        self._recv_general(g, buf, source, tag, status)

    Recv._unpacking = True  # its general path below is the one that needs the wrapper

    @unpacking
    def _recv_general(self, g, buf, source, tag, status):
        m = parse_recv(buf)
        fill(status, recv_buf(g, m, _source(g, source, "Recv"), _rtag(g, tag, "Recv"), True, "Recv"))

    def Isend(self, buf, dest, tag=0):
        return self._send_buf(buf, dest, tag, False, False, "Isend")

    Ibsend = Irsend = Isend

    def Issend(self, buf, dest, tag=0):
        return self._send_buf(buf, dest, tag, True, False, "Issend")

    def _send_buf(self, buf, dest, tag, sync, block, what):
        """Every buffer send: standard or synchronous (sync), blocking or returning a Request."""
        g = _group(self)
        if dest == PROC_NULL:
            return None if block else Request._completed(fill=done_proc_null)
        m = parse_send(buf)
        r = send(g, m.u8, m.datatype._wire, m.array.size, _dest(g, dest, what), _stag(g, tag, what), sync=sync,
                 block=block, what=what)
        return None if block else Request._wrap(r, done_empty)

    def Irecv(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        g = _group(self)
        if source == PROC_NULL:
            return Request._completed(fill=done_proc_null)
        m = parse_recv(buf)
        r = recv_buf(g, m, _source(g, source, "Irecv"), _rtag(g, tag, "Irecv"), False, "Irecv")
        return Request._wrap(r, done_buf)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        g = _group(self)
        s = None if dest == PROC_NULL else parse_send(sendbuf)
        r = None if source == PROC_NULL else parse_recv(recvbuf)
        dest_r = None if s is None else _dest(g, dest, "Sendrecv")
        stag = _stag(g, sendtag, "Sendrecv")
        src_r = None if r is None else _source(g, source, "Sendrecv")
        rtag = _rtag(g, recvtag, "Sendrecv")
        if s is not None and s.nbytes <= EAGER_BYTES:
            # a small send completes into the socket buffer: then the receive's fast path
            send(g, s.u8, s.datatype._wire, s.array.size, dest_r, stag, what="Sendrecv")
            s = None
        req = None if r is None else recv_buf(g, r, src_r, rtag, s is None, "Sendrecv")
        if s is not None:
            send(g, s.u8, s.datatype._wire, s.array.size, dest_r, stag, what="Sendrecv")
            if req is not None:
                req = req.wait()
        if r is None:
            proc_null(status)
        else:
            fill(status, req)

    def Isendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG):
        """Sendrecv as one request: it completes once both the send and the receive have (its
        status is the receive's)."""
        rreq = self.Irecv(recvbuf, source, recvtag)
        return Request._both(rreq, self._send_buf(sendbuf, dest, sendtag, False, False, "Isendrecv"), "Isendrecv")

    def Isendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG):
        """Sendrecv_replace as one request: buf's contents are sent, and the message received
        replaces them."""
        g = _group(self)
        m = parse_recv(buf)
        copy = m.array.copy()  # what is sent: buf as it is now
        rreq = self.Irecv(buf, source, recvtag)
        if dest == PROC_NULL:
            sreq = Request._completed(fill=done_proc_null)
        else:
            sreq = Request._wrap(send(g, copy.view(np.uint8), m.datatype._wire, copy.size,
                                      _dest(g, dest, "Isendrecv_replace"), _stag(g, sendtag, "Isendrecv_replace"),
                                      block=False, what="Isendrecv_replace"), done_empty)
        return Request._both(rreq, sreq, "Isendrecv_replace")

    def Sendrecv_replace(self, buf, dest, sendtag=0, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        g = _group(self)
        m = parse_recv(buf)
        copy = m.array.copy()
        req = None
        if source != PROC_NULL:
            req = recv_buf(g, m, _source(g, source, "Sendrecv_replace"), _rtag(g, recvtag, "Sendrecv_replace"),
                            False, "Sendrecv_replace")
        if dest != PROC_NULL:
            send(g, copy.view(np.uint8), m.datatype._wire, copy.size, _dest(g, dest, "Sendrecv_replace"),
                  _stag(g, sendtag, "Sendrecv_replace"), what="Sendrecv_replace")
        if req is None:
            proc_null(status)
        else:
            fill(status, req.wait())

    def Probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = _group(self)
        if source == PROC_NULL:
            proc_null(status)
            return True
        msg = g.engine.probe(g.p2p, _source(g, source, "Probe"), _rtag(g, tag, "Probe"), True)
        fill(status, msg)
        return True

    def Iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = _group(self)
        if source == PROC_NULL:
            proc_null(status)
            return True
        msg = g.engine.probe(g.p2p, _source(g, source, "Iprobe"), _rtag(g, tag, "Iprobe"), False)
        if msg is None:
            return False
        fill(status, msg)
        return True

    def Mprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = _group(self)
        if source == PROC_NULL:
            return no_proc(status)
        return mprobe(g, _source(g, source, "Mprobe"), _rtag(g, tag, "Mprobe"), True, status)

    def Improbe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = _group(self)
        if source == PROC_NULL:
            return no_proc(status)
        return mprobe(g, _source(g, source, "Improbe"), _rtag(g, tag, "Improbe"), False, status)

    mprobe = Mprobe  # an object message is a byte message: the same probe
    improbe = Improbe

    def Send_init(self, buf, dest, tag=0):
        return Prequest._make(lambda: self.Isend(buf, dest, tag))

    Bsend_init = Rsend_init = Send_init

    def Ssend_init(self, buf, dest, tag=0):
        return Prequest._make(lambda: self.Issend(buf, dest, tag))

    def Recv_init(self, buf, source=ANY_SOURCE, tag=ANY_TAG):
        return Prequest._make(lambda: self.Irecv(buf, source, tag))

    def Psend_init(self, buf, partitions, dest, tag=0, info=None):
        """A partitioned send (`_partitioned.py`): Start, then Pready each partition; Wait."""
        g = _group(self)
        dest = dest if dest == PROC_NULL else _dest(g, dest, "Psend_init")
        return psend_init(g, buf, partitions, dest, _stag(g, tag, "Psend_init"))

    def Precv_init(self, buf, partitions, source=ANY_SOURCE, tag=ANY_TAG, info=None):
        """A partitioned receive (`_partitioned.py`): Start, then Parrived per partition; Wait."""
        g = _group(self)
        if source == ANY_SOURCE or tag == ANY_TAG:
            raise MPIException(ERR_ARG, f"rank {g.rank()}: Precv_init: partitioned communication takes no "
                                        f"MPI.ANY_SOURCE or MPI.ANY_TAG (source {source}, tag {tag})")
        source = source if source == PROC_NULL else _dest(g, source, "Precv_init")
        return precv_init(g, buf, partitions, source, _stag(g, tag, "Precv_init"))

    # ---------------------------------------------------------------- point-to-point, objects
    def send(self, obj, dest, tag=0):
        self._send_obj(obj, dest, tag, False, True, "send")

    bsend = send

    def ssend(self, obj, dest, tag=0):
        self._send_obj(obj, dest, tag, True, True, "ssend")

    def isend(self, obj, dest, tag=0):
        return self._send_obj(obj, dest, tag, False, False, "isend")

    ibsend = isend

    def issend(self, obj, dest, tag=0):
        return self._send_obj(obj, dest, tag, True, False, "issend")

    def _send_obj(self, obj, dest, tag, sync, block, what):
        """Every object send: MPI.pickle's bytes as a plain byte message."""
        g = _group(self)
        if dest == PROC_NULL:
            return None if block else Request._completed(fill=done_proc_null)
        data = dumps(obj)
        dest, tag = _dest(g, dest, what), _stag(g, tag, what)
        fast = getattr(g, "p2p_fast", None) if block and not sync else None  # (an intercommunicator's has none)
        if fast is not None and fast.send_wire(data, dest, tag, DT_BYTES, what) is None:
            return None  # (the one-call path, straight from here)
        r = send(g, data, DT_BYTES, data.size, dest, tag, sync=sync, block=block, what=what)
        return None if block else Request._wrap(r, done_empty)

    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        g = _group(self)
        if buf is not None:
            warnings.warn("the 'buf' argument of recv() is deprecated (and ignored)", UserWarning, stacklevel=2)
        if source == PROC_NULL:
            proc_null(status)
            return None
        return done_obj(recv_obj(g, _source(g, source, "recv"), _rtag(g, tag, "recv"), True, "recv"), status)

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        g = _group(self)
        if source == PROC_NULL:
            return Request._completed(fill=done_proc_null)
        r = recv_obj(g, _source(g, source, "irecv"), _rtag(g, tag, "irecv"), False, "irecv")
        return Request._wrap(r, done_obj)

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        g = _group(self)
        req = None
        if source != PROC_NULL:
            req = recv_obj(g, _source(g, source, "sendrecv"), _rtag(g, recvtag, "sendrecv"), False, "sendrecv")
        if dest != PROC_NULL:
            self.send(sendobj, dest, sendtag)
        if req is None:
            proc_null(status)
            return None
        return done_obj(req.wait(), status)

    def probe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Probe(source, tag, status)

    def iprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return self.Iprobe(source, tag, status)

    # ---------------------------------------------------------------- collectives
    def _run(self, fn, *args):
        g = _group(self)
        return g.stream.run(fn, g, *args)

    def _start(self, what, fn, *args):
        g = _group(self)
        return Request._wrap(g.stream.submit(what, fn, g, *args), done_empty)

    def Barrier(self):
        _coll.barrier(group=_group(self))

    barrier = Barrier

    def Ibarrier(self):
        return Request._wrap(_coll.ibarrier(group=_group(self)), done_empty)

    def _bcast_args(self, buf, root):
        g = _group(self)
        root = _root(g, root, "Bcast")
        m = parse_send(buf) if g.rank() == root else parse_recv(buf)
        return m.array, root

    def Bcast(self, buf, root=0):
        g = self._c.g
        if g is not None and type(root) is int and 0 <= root < g.size() and plain(buf, root != g.rank()):
            _coll.broadcast(buf, root, group=g)
            return
        arr, root = self._bcast_args(buf, root)
        _coll.broadcast(arr, root, group=_group(self))

    def Ibcast(self, buf, root=0):
        arr, root = self._bcast_args(buf, root)
        return Request._wrap(_coll.ibroadcast(arr, root, group=_group(self)), done_empty)

    def _reduce_args(self, sendbuf, recvbuf, op, what):
        r = parse_recv(recvbuf)
        if is_in_place(sendbuf):
            return r.array, r.array, _as_op(op, r.datatype), r.datatype
        s = parse_send(sendbuf)
        return s.array, _match(s, r, s.array.size, what), _as_op(op, s.datatype), s.datatype

    def Allreduce(self, sendbuf, recvbuf, op=SUM):
        g = self._c.g
        if type(op) is Op and op._kernel is not None and g is not None and plain_pair(sendbuf, recvbuf, 1) == 1:
            _coll.all_reduce(sendbuf, op._kernel, out=recvbuf, group=g)  # straight to commlib's all_reduce
            return
        s, out, op, dt = self._reduce_args(sendbuf, recvbuf, op, "Allreduce")
        if op._kernel is not None:
            _all_reduce_into(_group(self), s, out, op._kernel)
        else:
            self._run(allreduce_body, s, out, op, dt)

    def Iallreduce(self, sendbuf, recvbuf, op=SUM):
        return self._start("Iallreduce", allreduce_body, *self._reduce_args(sendbuf, recvbuf, op, "Iallreduce"))

    def _rooted_reduce_args(self, sendbuf, recvbuf, op, root, what):
        g = _group(self)
        root = _root(g, root, what)
        if g.rank() == root:
            s, out, op, dt = self._reduce_args(sendbuf, recvbuf, op, what)
        else:
            m = parse_send(sendbuf)
            s, out, op, dt = m.array, None, _as_op(op, m.datatype), m.datatype
        return s, out, op, dt, root

    def Reduce(self, sendbuf, recvbuf, op=SUM, root=0):
        self._run(reduce_body, *self._rooted_reduce_args(sendbuf, recvbuf, op, root, "Reduce"))

    def Ireduce(self, sendbuf, recvbuf, op=SUM, root=0):
        return self._start("Ireduce", reduce_body, *self._rooted_reduce_args(sendbuf, recvbuf, op, root, "Ireduce"))

    def Scan(self, sendbuf, recvbuf, op=SUM):
        self._run(scan_body, *self._reduce_args(sendbuf, recvbuf, op, "Scan"), False)

    def Iscan(self, sendbuf, recvbuf, op=SUM):
        return self._start("Iscan", scan_body, *self._reduce_args(sendbuf, recvbuf, op, "Iscan"), False)

    def Exscan(self, sendbuf, recvbuf, op=SUM):
        self._run(scan_body, *self._reduce_args(sendbuf, recvbuf, op, "Exscan"), True)

    def Iexscan(self, sendbuf, recvbuf, op=SUM):
        return self._start("Iexscan", scan_body, *self._reduce_args(sendbuf, recvbuf, op, "Iexscan"), True)

    def _rsb_args(self, sendbuf, recvbuf, op, what):
        g = _group(self)
        r = parse_recv(recvbuf)
        if is_in_place(sendbuf):
            arr, per = blocks(r, g.size(), what)
            return arr, arr[:per], _as_op(op, r.datatype), r.datatype, None
        s = parse_send(sendbuf)
        _same_type(s, r, what)
        if s.array.size != r.array.size * g.size():
            raise ValueError(f"{what}: mismatch in send count {s.count} and receive count {r.count} x {g.size()} ranks")
        return s.array, r.array, _as_op(op, r.datatype), r.datatype, None

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
        s, out, op, dt, lo = self._rsb_args(sendbuf, recvbuf, op, "Reduce_scatter_block")
        if op._kernel is not None:  # commlib's reduce_scatter returns the block: copied into recvbuf
            out[...] = _coll.reduce_scatter(s, op._kernel, group=_group(self))
        else:
            self._run(reduce_scatter_body, s, out, op, dt, lo)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
        return self._start("Ireduce_scatter_block", reduce_scatter_body,
                           *self._rsb_args(sendbuf, recvbuf, op, "Ireduce_scatter_block"))

    def _rs_args(self, sendbuf, recvbuf, recvcounts, op, what):
        g = _group(self)
        r = parse_recv(recvbuf)
        if is_in_place(sendbuf):
            s = r
        else:
            s = parse_send(sendbuf)
            _same_type(s, r, what)
        mult = r.datatype._mult
        if recvcounts is None:  # each rank's receive buffer says how much it gets (as mpi4py)
            counts = [int(c) for c in _api.all_gather(np.array([r.count], np.int64), group=g)]
        else:
            counts = [int(c) for c in (recvcounts.tolist() if isinstance(recvcounts, np.ndarray) else recvcounts)]
        if len(counts) != g.size() or sum(counts) * mult != s.array.size:
            raise ValueError(f"{what}: recvcounts {counts} do not split the {s.array.size // mult} elements of "
                             f"sendbuf over {g.size()} ranks")
        n = counts[g.rank()] * mult
        if r.array.size < n:
            raise ValueError(f"{what}: recvbuf holds {r.array.size // mult} elements, rank {g.rank()} gets {n // mult}")
        return s.array, r.array[:n], _as_op(op, r.datatype), r.datatype, sum(counts[:g.rank()]) * mult

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM):
        self._run(reduce_scatter_body, *self._rs_args(sendbuf, recvbuf, recvcounts, op, "Reduce_scatter"))

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM):
        return self._start("Ireduce_scatter", reduce_scatter_body,
                           *self._rs_args(sendbuf, recvbuf, recvcounts, op, "Ireduce_scatter"))

    def _gather_args(self, sendbuf, recvbuf, root, what):
        g = _group(self)
        root = _root(g, root, what)
        if g.rank() != root:
            return parse_send(sendbuf).array, root, None
        r = parse_recv(recvbuf)
        out, per = blocks(r, g.size(), what)
        if is_in_place(sendbuf):
            return out[g.rank() * per:(g.rank() + 1) * per], root, out
        s = parse_send(sendbuf)
        return _match(s, r, per, what, send_side=True), root, out

    def Gather(self, sendbuf, recvbuf, root=0):
        x, root, out = self._gather_args(sendbuf, recvbuf, root, "Gather")
        _coll.gather(x, root, out=out, group=_group(self))

    def Igather(self, sendbuf, recvbuf, root=0):
        x, root, out = self._gather_args(sendbuf, recvbuf, root, "Igather")
        return Request._wrap(_coll.igather(x, root, out=out, group=_group(self)), done_empty)

    def _scatter_args(self, sendbuf, recvbuf, root, what):
        g = _group(self)
        root = _root(g, root, what)
        if g.rank() != root:
            return None, root, parse_recv(recvbuf).array
        s = parse_send(sendbuf)
        src, per = blocks(s, g.size(), what)
        if is_in_place(recvbuf):
            return src, root, src[g.rank() * per:(g.rank() + 1) * per]
        r = parse_recv(recvbuf)
        return src, root, _match(r, s, per, what, send_side=True)

    def Scatter(self, sendbuf, recvbuf, root=0):
        x, root, out = self._scatter_args(sendbuf, recvbuf, root, "Scatter")
        _coll.scatter(x, root, out=out, group=_group(self))

    def Iscatter(self, sendbuf, recvbuf, root=0):
        x, root, out = self._scatter_args(sendbuf, recvbuf, root, "Iscatter")
        return Request._wrap(_coll.iscatter(x, root, out=out, group=_group(self)), done_empty)

    def _allgather_args(self, sendbuf, recvbuf, what):
        g = _group(self)
        r = parse_recv(recvbuf)
        out, per = blocks(r, g.size(), what)
        if is_in_place(sendbuf):
            return out[g.rank() * per:(g.rank() + 1) * per], out
        return _match(parse_send(sendbuf), r, per, what, send_side=True), out

    def Allgather(self, sendbuf, recvbuf):
        g = self._c.g
        if g is not None:
            shape = plain_pair(sendbuf, recvbuf, g.size())
            if shape:  # straight to commlib's all_gather, flattened where the shapes differ from its result's
                _coll.all_gather(sendbuf if shape == 1 else sendbuf.reshape(-1),
                                 out=recvbuf if shape == 1 else recvbuf.reshape(-1), group=g)
                return
        _all_gather_into(_group(self), *self._allgather_args(sendbuf, recvbuf, "Allgather"))

    def Iallgather(self, sendbuf, recvbuf):
        x, out = self._allgather_args(sendbuf, recvbuf, "Iallgather")
        return Request._wrap(_coll.iall_gather(x, out=out, group=_group(self)), done_empty)

    def _alltoall_args(self, sendbuf, recvbuf, what):
        g = _group(self)
        r = parse_recv(recvbuf)
        out, per = blocks(r, g.size(), what)
        if is_in_place(sendbuf):
            return out.copy(), out
        s = parse_send(sendbuf)
        src, sper = blocks(s, g.size(), what)
        _same_type(s, r, what)
        if sper != per:
            raise ValueError(f"{what}: mismatch in send count {sper} and receive count {per} per rank")
        return src, out

    def Alltoall(self, sendbuf, recvbuf):
        s, out = self._alltoall_args(sendbuf, recvbuf, "Alltoall")
        out[...] = _coll.all_to_all(s, group=_group(self))

    def Ialltoall(self, sendbuf, recvbuf):
        return self._start("Ialltoall", alltoall_body, *self._alltoall_args(sendbuf, recvbuf, "Ialltoall"))

    # vector collectives
    def _gatherv_args(self, sendbuf, recvbuf, root, what):
        g = _group(self)
        root = _root(g, root, what)
        if g.rank() != root:
            return parse_send(sendbuf).array, None, root
        R = parse_vector(recvbuf, g.size(), True)
        return None if is_in_place(sendbuf) else _cast(parse_send(sendbuf).array, R.datatype), R, root

    def Gatherv(self, sendbuf, recvbuf, root=0):
        self._run(gatherv_body, *self._gatherv_args(sendbuf, recvbuf, root, "Gatherv"))

    def Igatherv(self, sendbuf, recvbuf, root=0):
        return self._start("Igatherv", gatherv_body, *self._gatherv_args(sendbuf, recvbuf, root, "Igatherv"))

    def _scatterv_args(self, sendbuf, recvbuf, root, what):
        g = _group(self)
        root = _root(g, root, what)
        if g.rank() != root:
            return None, parse_recv(recvbuf).array, root
        S = parse_vector(sendbuf, g.size(), False)
        return S, None if is_in_place(recvbuf) else _cast(parse_recv(recvbuf).array, S.datatype), root

    def Scatterv(self, sendbuf, recvbuf, root=0):
        self._run(scatterv_body, *self._scatterv_args(sendbuf, recvbuf, root, "Scatterv"))

    def Iscatterv(self, sendbuf, recvbuf, root=0):
        return self._start("Iscatterv", scatterv_body, *self._scatterv_args(sendbuf, recvbuf, root, "Iscatterv"))

    def _allgatherv_args(self, sendbuf, recvbuf):
        """(g, this rank's array, every rank's receive block: flat views of the receive buffer)."""
        g = _group(self)
        R = parse_vector(recvbuf, g.size(), True)
        s = R.block(g.rank()).copy() if is_in_place(sendbuf) else _cast(parse_send(sendbuf).array, R.datatype)
        return g, s, [R.block(i) for i in range(g.size())]

    def Allgatherv(self, sendbuf, recvbuf):
        g, s, blocks = self._allgatherv_args(sendbuf, recvbuf)
        width = slot_width(blocks)
        if width:  # commlib's all_gather itself: its one-call path when the stream is idle
            allgatherv_padded(g, s, blocks, width, lambda x, out: _coll.all_gather(x, out=out, group=g))
        else:
            g.stream.run(exchange_body, g, lambda j: s, blocks.__getitem__, TAG_ALLGATHERV)

    def Iallgatherv(self, sendbuf, recvbuf):
        return self._start("Iallgatherv", allgatherv_body, *self._allgatherv_args(sendbuf, recvbuf)[1:])

    def _alltoallw_args(self, sendbuf, recvbuf, what):
        g = _group(self)
        R = parse_vectorw(recvbuf, g.size(), True, what)
        S = [r.copy() for r in R] if is_in_place(sendbuf) else parse_vectorw(sendbuf, g.size(), False, what)
        return S.__getitem__, R.__getitem__, TAG_ALLTOALLW

    def Alltoallw(self, sendbuf, recvbuf):
        """All-to-all with a count, a byte displacement and a datatype per rank on each side."""
        self._run(exchange_body, *self._alltoallw_args(sendbuf, recvbuf, "Alltoallw"))

    def Ialltoallw(self, sendbuf, recvbuf):
        return self._start("Ialltoallw", exchange_body, *self._alltoallw_args(sendbuf, recvbuf, "Ialltoallw"))

    def _alltoallv_args(self, sendbuf, recvbuf):
        g = _group(self)
        R = parse_vector(recvbuf, g.size(), True)
        if is_in_place(sendbuf):
            S = parse_vector(recvbuf, g.size(), False)
            S.array = S.array.copy()
        else:
            S = parse_vector(sendbuf, g.size(), False)
        return S.block, R.block, TAG_ALLTOALLV

    def Alltoallv(self, sendbuf, recvbuf):
        self._run(exchange_body, *self._alltoallv_args(sendbuf, recvbuf))

    def Ialltoallv(self, sendbuf, recvbuf):
        return self._start("Ialltoallv", exchange_body, *self._alltoallv_args(sendbuf, recvbuf))

    # object collectives
    def bcast(self, obj=None, root=0):
        g = _group(self)
        return _api.broadcast_obj(obj, _root(g, root, "bcast"), group=g)

    def gather(self, sendobj, root=0):
        g = _group(self)
        return _api.gather_obj(sendobj, _root(g, root, "gather"), group=g)

    def scatter(self, sendobj, root=0):
        g = _group(self)
        root = _root(g, root, "scatter")
        objs = None
        if g.rank() == root:  # as mpi4py: None scatters None to every rank; any iterable is taken
            objs = [None] * g.size() if sendobj is None else list(sendobj)
            if len(objs) != g.size():
                raise ValueError(f"scatter: root needs a sequence of {g.size()} objects, got {len(objs)}")
        return _api.scatter_obj(objs, root, group=g)

    def allgather(self, sendobj):
        return _api.all_gather_obj(sendobj, group=_group(self))

    def alltoall(self, sendobj):
        g = _group(self)
        objs = [None] * g.size() if sendobj is None else list(sendobj)
        if len(objs) != g.size():
            raise ValueError(f"alltoall: needs a sequence of {g.size()} objects, got {len(objs)}")
        return self._run(alltoall_obj_body, objs)

    def reduce(self, sendobj, op=SUM, root=0):
        g = _group(self)
        values = _api.gather_obj(sendobj, _root(g, root, "reduce"), group=g)
        return None if values is None else fold(values, op)

    def allreduce(self, sendobj, op=SUM):
        return fold(_api.all_gather_obj(sendobj, group=_group(self)), op)

    def scan(self, sendobj, op=SUM):
        g = _group(self)
        return fold(_api.all_gather_obj(sendobj, group=g)[:g.rank() + 1], op)

    def exscan(self, sendobj, op=SUM):
        g = _group(self)
        values = _api.all_gather_obj(sendobj, group=g)[:g.rank()]
        return fold(values, op) if values else None


def _as_op(op, dt=None):
    """op as an MPI.Op (a callable: an object reduction), checked against the buffer datatype dt."""
    if dt is not None and dt._mixed:
        raise MPIException(ERR_OP, f"reductions need a datatype of one basic type; {dt.Get_name()} mixes several "
                                   f"(commlib reduces no value-index pairs or structs)")
    if isinstance(op, Op):
        if not op:
            raise MPIException(10, "MPI.OP_NULL is not a reduction")
        return op
    if callable(op):
        return _callable_op(op)
    raise TypeError(f"op must be an MPI.Op or a callable, got {type(op).__name__}")


def _callable_op(fn):
    op = Op.Create(fn, True)
    op._obj, op._user = fn, None  # a plain callable reduces objects only
    return op


def _cast(arr, dt):
    """arr (a send side) viewed as dt's base dtype, reinterpreting bytes where the datatypes differ."""
    if arr.dtype == dt._base:
        return arr
    u8 = arr.view(np.uint8) if arr.size else np.empty(0, np.uint8)
    if u8.nbytes % dt._base.itemsize:
        raise MPIException(ERR_TYPE, f"a buffer of {u8.nbytes} bytes is not a whole number of "
                                     f"{dt.Get_name()} elements")
    return u8.view(dt._base)


def _same_type(s, r, what):
    """The two sides' datatypes agree: the same type, or, where either is derived, the same basic type
    (MPI matches the sequence of basic types: 1 column of 4 doubles receives 4 doubles)."""
    a, b = s.datatype, r.datatype
    derived = a._combiner != COMBINER_NAMED or b._combiner != COMBINER_NAMED
    if a._base != b._base or (a._mult != b._mult and not derived):
        raise ValueError(f"{what}: mismatch in send and receive MPI datatypes ({s.datatype.Get_name()} and "
                         f"{r.datatype.Get_name()})")


def _match(s, r, count, what, send_side=False):
    """The send side's array (send_side) or the receive side's array, checked to agree with the other
    side as mpi4py checks them: the same datatype, and `count` elements."""
    _same_type(s, r, what)
    arr = s.array if send_side else r.array
    if arr.size != count:
        mult = r.datatype._mult
        sent, got = (arr.size // mult, count // mult) if send_side else (count // mult, arr.size // mult)
        raise ValueError(f"{what}: mismatch in send count {sent} and receive count {got}")
    return arr


def _all_reduce_into(g, s, out, kernel):
    """commlib's all_reduce of s into out (the one-call path takes a separate out)."""
    _coll.all_reduce(s, kernel, out=out, group=g)


def _all_gather_into(g, x, out):
    """commlib's all_gather of the flat x into the flat out (the one-call path takes out=)."""
    _coll.all_gather(x, out=out, group=g)


def _persistent(name, cls=None):
    """<cls, default Comm>.<name>_init: a persistent collective, started anew at each Start() by the
    non-blocking I<name> with the arguments given here (so each Start reads the buffers as they are
    then). The trailing `info` argument, positional or not, is accepted and unused, as commlib takes
    no hints."""
    nonblocking = "I" + name[0].lower() + name[1:]
    width = len(inspect.signature(getattr(cls or Comm, nonblocking)).parameters) - 1  # without self

    def init(self, *args, info=None, **kwargs):
        if len(args) > width + 1:
            raise TypeError(f"{name}_init() takes at most {width + 1} positional arguments ({len(args)} given)")
        args = args[:width]
        return Prequest._make(lambda: getattr(self, nonblocking)(*args, **kwargs))
    init.__name__ = init.__qualname__ = f"{name}_init"
    init.__doc__ = f"A persistent {name}: each Start() runs {nonblocking} with these arguments."
    return init


for _name in ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
              "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter", "Scan",
              "Exscan"):
    setattr(Comm, f"{_name}_init", _persistent(_name))


class Intracomm(Comm):
    """An intra-communicator."""

    __slots__ = ()

    def Create_intercomm(self, local_leader, peer_comm, remote_leader, tag=0):
        """The intercommunicator of this group and another: collective over this communicator; the
        local leader and remote_leader (a rank of peer_comm) introduce the two groups over peer_comm."""
        return _built_on("create_intercomm")(self, local_leader, peer_comm, remote_leader, tag)

    # dynamic processes (_spawn.py): the children are started by the root, on its host
    def Spawn(self, command, args=None, maxprocs=1, info=None, root=0, errcodes=None):
        """Start maxprocs processes running `command args` (significant at the root only); the
        intercommunicator to them (collective over this communicator). errcodes: a list, filled
        with one code per child. info: `host` ('node1' or 'node1:2,node2:2', filled in order) or
        `hostfile` places the children on those hosts (started as commrun starts ranks there,
        through COMMLIB_RSH); `wdir` is their working directory; without `host`, they run on the
        root's host."""
        inter, counts = _built_on("spawn")(self, [(command, args, maxprocs, info)], root, "Spawn")
        if errcodes is not None:
            errcodes[:] = [SUCCESS] * sum(counts)
        return inter

    def Spawn_multiple(self, command, args=None, maxprocs=None, info=None, root=0, errcodes=None):
        """Spawn of several programs at once, all children in one job (its COMM_WORLD) in program
        order; errcodes: a list, filled with one list of codes per program."""
        g = _group(self)
        root = _root(g, root, "Spawn_multiple")
        programs = None
        if g.rank() == root:
            try:
                programs = _built_on("programs_of")(command, args, maxprocs, info)
            except ValueError as exc:
                programs = exc  # raised on the root, an ERR_ARG on the others
        inter, counts = _built_on("spawn")(self, programs, root, "Spawn_multiple")
        if errcodes is not None:
            errcodes[:] = [[SUCCESS] * n for n in counts]
        return inter


# Intercommunicators (`_intercomm.py`) and dynamic processes (`_spawn.py`) build on this module: each
# gives it, when commlib.MPI imports it, what the methods here that make one call (Get_parent,
# Create_intercomm, Spawn, Spawn_multiple), so that no import runs from here up to them.
_BUILT_ON = {}


def provide(**parts):
    """Called by the modules built on this one, as they are imported."""
    _BUILT_ON.update(parts)


def _built_on(name):
    return _BUILT_ON[name]  # (commlib.MPI imports every provider before a program can call these)


def COMM_NULL_HANDLE():
    return Intracomm._of(_NULL)


def _topo_ints(seq, name):
    try:
        vals = seq.tolist() if isinstance(seq, np.ndarray) else list(seq)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, got {type(seq).__name__}") from None
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in vals):
        raise TypeError(f"{name} must hold ints, got {vals!r}")
    return [int(v) for v in vals]


def _graph(args, g, what):
    index, edges = args
    problem = graph_problem(index, edges, g.size())
    if problem:
        raise MPIException(ERR_ARG, f"rank {g.rank()}: {what}: {problem}")
    return tuple(index), tuple(edges)


def _checked(fn):
    """(fn(), None), or (None, the argument error it raised): a topology's arguments are checked on
    every rank before any rank raises (`_agree`), so that none is left waiting in the creation."""
    try:
        return fn(), None
    except (MPIException, TypeError, ValueError) as exc:
        return None, exc


def _agree(g, error, what, value):
    """Every rank's value (each rank's arguments or a signature of them), after each rank has learnt
    every rank's argument error: a rank raises its own, or one naming the first rank that has one.
    Signatures (ints) must be equal on every rank."""
    gathered = _api.all_gather_obj((None if error is None else f"{type(error).__name__}: {error}", value), group=g)
    if error is not None:
        raise error
    for r, (problem, _) in enumerate(gathered):
        if problem is not None:
            raise MPIException(ERR_ARG, f"rank {g.rank()}: {what}: rank {r} gave bad arguments ({problem})")
    values = [v for _, v in gathered]
    if type(value) is int and any(v != value for v in values):
        raise MPIException(ERR_ARG, f"rank {g.rank()}: {what}: the ranks passed different graphs (ranks "
                                    f"{[r for r, v in enumerate(values) if v != values[0]]} differ from rank 0)")
    return values


def _root_decides(g, root, what, fn, role="root"):
    """fn() run on the group's `root` only, its result broadcast to every rank; an MPIException it
    raises is raised on every rank (the root's own; the others' naming the root's failure)."""
    reply = None
    if g.rank() == root:
        try:
            reply = ("ok", fn())
        except MPIException as exc:
            reply = ("error", exc.Get_error_class(), str(exc))
    reply = _api.broadcast_obj(reply, root, group=g)
    if reply[0] == "error":
        raise MPIException(reply[1], reply[2] if g.rank() == root else
                           f"rank {g.rank()}: {what}: the {role} failed: {reply[2]}")
    return reply[1]


class Topocomm(Topology, Intracomm):
    """A communicator with a process topology; MPI.Topocomm(comm) of one without is a TypeError."""

    __slots__ = ()
    _TOPO, _WHAT = None, "topology"
    is_topo = property(lambda self: True)

    def __new__(cls, comm=None):
        self = super().__new__(cls, comm)
        topo = self._c.topo
        if self._c.g is not None and (topo is None or cls._TOPO not in (None, topo.kind)):
            raise TypeError(f"expecting a {cls._WHAT} communicator, got one with "
                            f"{'no topology' if topo is None else type(topo).__name__}")
        return self


for _name, _fn in vars(Neighborhood).items():  # Topocomm's own, so that __init__'s unpacking wraps them
    if not _name.startswith("__"):
        setattr(Topocomm, _name, _fn)
for _name in NEIGHBOR_COLLECTIVES:
    setattr(Topocomm, f"{_name}_init", _persistent(_name, Topocomm))


class Cartcomm(Cartesian, Topocomm):
    """A communicator with a Cartesian topology (row-major rank order; the methods are `Cartesian`'s)."""

    __slots__ = ()
    _TOPO, _WHAT = CART, "Cartesian"


class Graphcomm(Graph, Topocomm):
    """A communicator with a general graph topology (the methods are `Graph`'s)."""

    __slots__ = ()
    _TOPO, _WHAT = GRAPH, "general graph"


class Distgraphcomm(DistGraph, Topocomm):
    """A communicator with a distributed graph topology (the methods are `DistGraph`'s)."""

    __slots__ = ()
    _TOPO, _WHAT = DIST_GRAPH, "distributed graph"


def comm_class(state):
    """The class of a communicator handle made from a state alone (Comm.fromhandle): its topology's."""
    topo = state.topo
    if getattr(state, "handle_class", None) is not None:  # an Intercomm's state (_intercomm.py)
        return state.handle_class
    return {None: Intracomm, CART: Cartcomm, GRAPH: Graphcomm, DIST_GRAPH: Distgraphcomm}[
        None if topo is None else topo.kind]


def world_comms():
    """(COMM_WORLD, COMM_SELF) handles over commlib's world group (initialising it)."""
    world = _api.init()
    self_group = world.subgroup([world.rank()], ("MPI_COMM_SELF",))
    return (Intracomm._of(_State(world, "MPI_COMM_WORLD", builtin=True)),
            Intracomm._of(_State(self_group, "MPI_COMM_SELF", builtin=True)))


def _builtin_handle(name, cls=None):
    h = _builtin(name)
    return (cls or type(h))(h)


def _builtin(name):
    from .. import MPI  # COMM_WORLD, COMM_SELF and COMM_NULL unpickle to the very same handles
    return getattr(MPI, name)


def processor_name():
    return socket.gethostname()
