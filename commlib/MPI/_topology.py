"""Process topologies: Cartesian grids, graphs and distributed graphs, as data on a communicator.

A topology is a small immutable value kept on the communicator's state
(`_c.topo`): `CartTopo(dims, periods)`, `GraphTopo(index, edges)` or
`DistGraphTopo(sources, destinations, sourceweights, destweights)`. None
reorders ranks, so rank r of the new communicator is rank r of the old one
and making one is one split. Every query is arithmetic on that value; the
mixins here (`Topology`, `Cartesian`, `Graph`, `DistGraph`) give mpi4py's
methods over it.

Each topology also says who this rank's neighbours are, in MPI's order, and
which tag each neighbour message carries (`neighbors(rank)`), which is all
the neighbourhood collectives (`_neighbor.py`) need. Tags make the k-th
message to a peer match the k-th receive from it that MPI pairs it with:
for a graph, the k-th time a peer appears in a list; for a Cartesian grid,
the direction, so that a block sent towards -1 is received as coming from
+1 even where both neighbours are one process (a periodic dimension of
size 1 or 2), as MPI 4 specifies and MPICH does.

The argument checks are pure functions of the arguments (and, for the
distributed graph, of every rank's arguments gathered): `_comm.py` gathers
and builds the communicators.
"""
import collections
import math

import numpy as np

from ._constants import CART, DIST_GRAPH, ERR_ARG, ERR_RANK, ERR_TOPOLOGY, GRAPH, PROC_NULL, UNDEFINED, MPIException

# MPI.UNWEIGHTED and MPI.WEIGHTS_EMPTY: opaque ints, as mpi4py's (addresses in C), told from any weights list.
UNWEIGHTED = 0x4D504957  # "MPIW"
WEIGHTS_EMPTY = 0x4D504945  # "MPIE"

Neighbors = collections.namedtuple("Neighbors", "sources destinations rtags stags")


def Compute_dims(nnodes, dims):
    """MPI_Dims_create: fill the zero entries of dims (or `dims` zeros) with a balanced factorisation."""
    out = [0] * dims if isinstance(dims, int) else [int(d) for d in dims]
    fixed = math.prod(d for d in out if d > 0)
    free = [i for i, d in enumerate(out) if d == 0]
    if fixed == 0 or nnodes % fixed:
        raise MPIException(ERR_ARG, f"Compute_dims: {nnodes} nodes do not fit the fixed dims {out}")
    rest = nnodes // fixed
    if not free:
        if rest != 1:
            raise MPIException(ERR_ARG, f"Compute_dims: dims {out} do not multiply to {nnodes}")
        return out
    factors, p, m = [], 2, rest
    while p * p <= m:
        while m % p == 0:
            factors.append(p)
            m //= p
        p += 1
    if m > 1:
        factors.append(m)
    vals = [1] * len(free)
    for f in sorted(factors, reverse=True):
        i = vals.index(min(vals))
        vals[i] *= f
    vals.sort(reverse=True)
    for i, v in zip(free, vals):
        out[i] = v
    return out


def cart_topology(dims, periods, size):
    """Create_cart's (dims, periods) as tuples, checked against a communicator of `size` ranks."""
    dims = [int(d) for d in dims]
    if any(d <= 0 for d in dims):
        raise MPIException(ERR_ARG, f"Create_cart: dims must be positive, got {dims}")
    if periods is None or isinstance(periods, (bool, int, np.integer)):  # one flag for every dimension
        periods = [bool(periods)] * len(dims)
    periods = [bool(p) for p in periods]
    if len(periods) != len(dims):
        raise ValueError(f"Create_cart: {len(periods)} periods for {len(dims)} dimensions")
    n = math.prod(dims)
    if n > size:
        raise MPIException(ERR_ARG, f"Create_cart: dims {dims} need {n} ranks, the communicator has {size}")
    return CartTopo(tuple(dims), tuple(periods))


def cart_map(rank, dims):
    """This rank's rank in a Cartesian topology of dims (row-major, no reordering), or UNDEFINED."""
    return rank if rank < math.prod(int(d) for d in dims) else UNDEFINED


def _occurrences(ranks):
    """For each entry, how many times the same rank came before it: the tag that pairs duplicates in order."""
    seen = collections.Counter()
    tags = []
    for r in ranks:
        tags.append(seen[r])
        seen[r] += 1
    return tags


class CartTopo(collections.namedtuple("CartTopo", "dims periods")):
    """Create_cart's dims and periods (tuples); ranks in row-major order of the coordinates."""

    __slots__ = ()
    kind = CART

    def coords(self, rank):
        coords = []
        for d in reversed(self.dims):
            coords.append(rank % d)
            rank //= d
        return coords[::-1]

    def shift(self, coords, direction, step):
        """The rank `step` away from coords along direction (PROC_NULL past a non-periodic edge)."""
        c = list(coords)
        c[direction] += step
        d = self.dims[direction]
        if not self.periods[direction] and not 0 <= c[direction] < d:
            return PROC_NULL
        rank = 0
        for x, n in zip(c, self.dims):
            rank = rank * n + x % n
        return rank

    def neighbors(self, rank):
        """Per dimension the neighbour at -1, then at +1; a block sent towards -1 carries tag 2d and is
        received from the +1 side, so receive slot k expects tag k ^ 1."""
        coords = self.coords(rank)
        ranks = [self.shift(coords, d, step) for d in range(len(self.dims)) for step in (-1, 1)]
        tags = list(range(len(ranks)))
        return Neighbors(ranks, ranks, [t ^ 1 for t in tags], tags)


class GraphTopo(collections.namedtuple("GraphTopo", "index edges")):
    """MPI_Graph_create's arrays: index[i] is the end of node i's neighbours in edges."""

    __slots__ = ()
    kind = GRAPH

    def adjacent(self, rank):
        return list(self.edges[self.index[rank - 1] if rank else 0:self.index[rank]])

    def neighbors(self, rank):
        ranks = self.adjacent(rank)
        tags = _occurrences(ranks)
        return Neighbors(ranks, ranks, tags, tags)


class DistGraphTopo(collections.namedtuple("DistGraphTopo", "sources destinations sourceweights destweights problem",
                                           defaults=(None,))):
    """This rank's in- and out-neighbours; the weights are lists, or None for an unweighted graph.
    `problem`: why the ranks' adjacency lists disagree (MPI lets such a graph be made, as MPICH does;
    a neighbourhood collective on it is refused on every rank rather than left to hang)."""

    __slots__ = ()
    kind = DIST_GRAPH

    def neighbors(self, rank):
        return Neighbors(list(self.sources), list(self.destinations), _occurrences(self.sources),
                         _occurrences(self.destinations))


# ------------------------------------------------------------------ argument checks (pure)
def _ints(seq, what, name):
    try:
        vals = seq.tolist() if isinstance(seq, np.ndarray) else list(seq)
    except TypeError:
        raise TypeError(f"{what}: {name} must be a sequence of ints, got {type(seq).__name__}") from None
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{what}: {name} must hold ints, got {v!r}")
    return [int(v) for v in vals]


def graph_args(index, edges):
    """Create_graph's (index, edges) as lists; an index that starts with 0 and ends at len(edges) (the
    'standard' adjacency array, one entry longer) loses its leading 0, as mpi4py's."""
    index, edges = _ints(index, "Create_graph", "index"), _ints(edges, "Create_graph", "edges")
    if len(index) > 1 and index[0] == 0 and index[-1] == len(edges):
        index = index[1:]
    return index, edges


def graph_problem(index, edges, size):
    """What is wrong with a graph of len(index) nodes for a communicator of `size` ranks, or None."""
    nnodes = len(index)
    if nnodes > size:
        return f"the graph has {nnodes} nodes, the communicator {size} ranks"
    prev = 0
    for i, end in enumerate(index):
        if end < prev:
            return f"index must not decrease: index[{i}] = {end} after {prev}"
        prev = end
    if prev > len(edges):
        return f"index ends at {prev} but there are only {len(edges)} edges"
    bad = [e for e in edges[:prev] if not 0 <= e < nnodes]
    if bad:
        return f"edge {bad[0]} is not a node of the graph (0..{nnodes - 1})"
    return None


def graph_map(rank, index):
    """This rank's rank in a graph topology of len(index) nodes (no reordering), or UNDEFINED."""
    return rank if rank < len(index) else UNDEFINED


def weights_arg(weights, n, what, name):
    """A weights argument as a list of n ints, [] for MPI.WEIGHTS_EMPTY, or None for unweighted."""
    if weights is None or (type(weights) is int and weights == UNWEIGHTED):
        return None
    if type(weights) is int and weights == WEIGHTS_EMPTY:
        if n > 0:
            raise ValueError(f"{what}: {name} is MPI.WEIGHTS_EMPTY but the degree is {n}")
        return []
    vals = _ints(weights, what, name)
    if len(vals) != n:
        raise ValueError(f"{what}: {len(vals)} {name} for {n} edges")
    return vals


def rank_problem(ranks, size, name, proc_null):
    """The first entry of ranks that names no rank of a communicator of `size` (PROC_NULL where allowed)."""
    for r in ranks:
        if not (0 <= r < size or (proc_null and r == PROC_NULL)):
            return f"{name} holds {r}, not a rank of the communicator (size {size})"
    return None


def adjacent_problem(lists, size):
    """What makes the ranks' (sources, destinations) disagree, or None: every edge i -> j must be listed
    as often among i's destinations as among j's sources."""
    out_edges, in_edges = collections.Counter(), collections.Counter()
    for i, (sources, destinations) in enumerate(lists):
        out_edges.update((i, j) for j in destinations if j != PROC_NULL)
        in_edges.update((j, i) for j in sources if j != PROC_NULL)
    for (i, j) in sorted(set(out_edges) | set(in_edges)):
        if out_edges[i, j] != in_edges[i, j]:
            return (f"rank {i} lists rank {j} as a destination {out_edges[i, j]} time(s) but rank {j} lists "
                    f"rank {i} as a source {in_edges[i, j]} time(s)")
    return None


def dist_graph_edges(specs, me):
    """This rank's DistGraphTopo from every rank's (sources, degrees, destinations, weights) of
    Create_dist_graph: its in- and out-edges in the order the ranks gave them (rank, then position)."""
    sources, destinations, sw, dw = [], [], [], []
    weighted = specs[me][3] is not None
    for srcs, degrees, dsts, weights in specs:
        pos = 0
        for s, deg in zip(srcs, degrees):
            for k in range(pos, pos + deg):
                w = 1 if weights is None else weights[k]
                if s == me:
                    destinations.append(dsts[k])
                    dw.append(w)
                if dsts[k] == me:
                    sources.append(s)
                    sw.append(w)
            pos += deg
    return DistGraphTopo(sources, destinations, sw if weighted else None, dw if weighted else None)


# ------------------------------------------------------------------ mixins
class Topology:
    """Topocomm's neighbour queries, over the communicator's `_c.topo` (any kind)."""

    __slots__ = ()

    def _neighbors(self):
        """This rank's Neighbors (read-only: callers copy what they hand out), made once per communicator."""
        c = self._c
        if c.neighbors is None:
            if c.topo is None:
                raise MPIException(ERR_TOPOLOGY, "the communicator has no topology")
            c.neighbors = c.topo.neighbors(self.Get_rank())
        return c.neighbors

    @property
    def degrees(self):
        nb = self._neighbors()
        return len(nb.sources), len(nb.destinations)

    indegree = property(lambda self: self.degrees[0])
    outdegree = property(lambda self: self.degrees[1])

    @property
    def inoutedges(self):
        nb = self._neighbors()
        return list(nb.sources), list(nb.destinations)

    inedges = property(lambda self: self.inoutedges[0])
    outedges = property(lambda self: self.inoutedges[1])


class Cartesian:
    """mpi4py's Cartcomm methods, over the communicator's `_c.topo`, a CartTopo (dims, periods).

    The class it is mixed into provides Get_rank, Get_size, `_c.g` (the commlib Group) and
    `_derive(group, cls, topo)`, which wraps a new group as a communicator.
    """

    __slots__ = ()

    def _topo(self):
        topo = self._c.topo
        if type(topo) is not CartTopo:
            raise MPIException(ERR_TOPOLOGY, "communicator has no Cartesian topology")
        return topo

    def Get_dim(self):
        return len(self._topo()[0])

    ndim = dim = property(Get_dim)

    def Get_topo(self):
        dims, periods = self._topo()
        return list(dims), [int(p) for p in periods], self.Get_coords(self.Get_rank())

    topo = property(Get_topo)
    dims = property(lambda self: list(self._topo()[0]))
    periods = property(lambda self: [int(p) for p in self._topo()[1]])
    coords = property(lambda self: self.Get_coords(self.Get_rank()))

    def Get_coords(self, rank):
        topo = self._topo()
        if not 0 <= rank < self.Get_size():
            raise MPIException(ERR_RANK, f"Get_coords: {rank} is not a rank of this communicator")
        return topo.coords(rank)

    def Get_cart_rank(self, coords):
        dims, periods = self._topo()
        rank = 0
        for c, d, p in zip(coords, dims, periods):
            c = int(c)
            if p:
                c %= d
            elif not 0 <= c < d:
                raise MPIException(ERR_RANK, f"Get_cart_rank: coordinate {c} is outside the non-periodic "
                                             f"dimension of size {d}")
            rank = rank * d + c
        return rank

    def Shift(self, direction, disp):
        """(source, dest) ranks for a shift by disp along direction; PROC_NULL past a non-periodic edge."""
        dims, periods = self._topo()
        if not 0 <= direction < len(dims):
            raise MPIException(ERR_ARG, f"Shift: direction {direction} out of range for {len(dims)} dimensions")
        coords = self.Get_coords(self.Get_rank())

        def neighbour(step):
            c = list(coords)
            c[direction] += step
            if not periods[direction] and not 0 <= c[direction] < dims[direction]:
                return PROC_NULL
            return self.Get_cart_rank(c)

        return neighbour(-disp), neighbour(disp)

    def Sub(self, remain_dims):
        """The Cartesian communicator of the ranks that share this rank's coordinates outside remain_dims."""
        dims, periods = self._topo()
        coords = self.Get_coords(self.Get_rank())
        keep = [bool(r) for r in remain_dims]
        color = 0
        for c, d, k in zip(coords, dims, keep):
            if not k:
                color = color * d + c
        key = 0
        for c, d, k in zip(coords, dims, keep):
            if k:
                key = key * d + c
        topo = CartTopo(tuple(d for d, k in zip(dims, keep) if k), tuple(p for p, k in zip(periods, keep) if k))
        return self._derive(self._c.g.split(color, key), type(self), topo)


class Graph:
    """mpi4py's Graphcomm methods, over the communicator's `_c.topo`, a GraphTopo (index, edges)."""

    __slots__ = ()

    def _topo(self):
        topo = self._c.topo
        if type(topo) is not GraphTopo:
            raise MPIException(ERR_TOPOLOGY, "communicator has no graph topology")
        return topo

    def Get_dims(self):
        topo = self._topo()
        return len(topo.index), len(topo.edges)

    dims = property(Get_dims)
    nnodes = property(lambda self: self.Get_dims()[0])
    nedges = property(lambda self: self.Get_dims()[1])

    def Get_topo(self):
        topo = self._topo()
        return list(topo.index), list(topo.edges)

    topo = property(Get_topo)
    index = property(lambda self: self.Get_topo()[0])
    edges = property(lambda self: self.Get_topo()[1])

    def _node(self, rank, what):
        topo = self._topo()
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < len(topo.index):
            raise MPIException(ERR_RANK, f"rank {self.Get_rank()}: {what}: {rank!r} is not a node of the graph "
                                         f"(0..{len(topo.index) - 1})")
        return topo, int(rank)

    def Get_neighbors_count(self, rank):
        topo, rank = self._node(rank, "Get_neighbors_count")
        return len(topo.adjacent(rank))

    def Get_neighbors(self, rank):
        topo, rank = self._node(rank, "Get_neighbors")
        return topo.adjacent(rank)

    nneighbors = property(lambda self: self.Get_neighbors_count(self.Get_rank()))
    neighbors = property(lambda self: self.Get_neighbors(self.Get_rank()))


class DistGraph:
    """mpi4py's Distgraphcomm methods, over the communicator's `_c.topo`, a DistGraphTopo."""

    __slots__ = ()

    def _topo(self):
        topo = self._c.topo
        if type(topo) is not DistGraphTopo:
            raise MPIException(ERR_TOPOLOGY, "communicator has no distributed graph topology")
        return topo

    def Get_dist_neighbors_count(self):
        topo = self._topo()
        return len(topo.sources), len(topo.destinations), topo.sourceweights is not None

    def Get_dist_neighbors(self):
        topo = self._topo()
        weights = None if topo.sourceweights is None else (list(topo.sourceweights), list(topo.destweights))
        return list(topo.sources), list(topo.destinations), weights
