"""Process topologies: Cartesian grids (`Cartesian`, mixed into `Cartcomm`) and `Compute_dims`.

A Cartesian topology is data on the communicator, `(dims, periods)`, over
its ranks in row-major order: no reordering, so rank r of the new
communicator is rank r of the old one and `Create_cart` is one split. Every
query (coordinates, shifts, neighbours) is arithmetic on that pair; only
`Sub` makes a communicator. Graph and distributed-graph topologies are out
of scope: their classes exist (isinstance checks work) but none can be made.

This module knows nothing of groups or messages: `_comm.py` builds the
communicators and mixes `Cartesian` into its `Cartcomm`.
"""
import math

import numpy as np

from ._constants import ERR_ARG, ERR_RANK, ERR_TOPOLOGY, PROC_NULL, UNDEFINED, MPIException


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
    return tuple(dims), tuple(periods)


def cart_map(rank, dims):
    """This rank's rank in a Cartesian topology of dims (row-major, no reordering), or UNDEFINED."""
    return rank if rank < math.prod(int(d) for d in dims) else UNDEFINED


class Cartesian:
    """mpi4py's Cartcomm methods, over the communicator's `_c.topo` = (dims, periods).

    The class it is mixed into provides Get_rank, Get_size, `_c.g` (the commlib Group) and
    `_derive(group, cls, topo)`, which wraps a new group as a communicator.
    """

    __slots__ = ()

    # Neighbours, as MPI orders them for a Cartesian topology: per dimension, the one below, then
    # the one above (PROC_NULL past a non-periodic edge).
    @property
    def inedges(self):
        return [r for d in range(self.Get_dim()) for r in self.Shift(d, 1)]

    outedges = inedges

    @property
    def inoutedges(self):
        return self.inedges, self.outedges

    @property
    def indegree(self):
        return 2 * self.Get_dim()

    outdegree = indegree

    @property
    def degrees(self):
        return self.indegree, self.outdegree

    def _topo(self):
        if self._c.topo is None:
            raise MPIException(ERR_TOPOLOGY, "communicator has no Cartesian topology")
        return self._c.topo

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
        dims, _ = self._topo()
        if not 0 <= rank < self.Get_size():
            raise MPIException(ERR_RANK, f"Get_coords: {rank} is not a rank of this communicator")
        coords = []
        for d in reversed(dims):
            coords.append(rank % d)
            rank //= d
        return coords[::-1]

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
        topo = (tuple(d for d, k in zip(dims, keep) if k), tuple(p for p, k in zip(periods, keep) if k))
        return self._derive(self._c.g.split(color, key), type(self), topo)
