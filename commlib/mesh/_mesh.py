"""Mesh: a group's ranks on named axes (row-major), the sub-group along any axes, and named-axis collectives.

A sub-group is built by its members alone (no traffic, nothing every rank has
to call together): its identity comes from the parent group, the mesh's serial
number in this process (every rank makes its meshes in the same order, as with
any collective) and the axes. Each collective is one commlib collective on that
sub-group, run on its ordered stream; the `i` variants queue there and return a
Request. Shapes follow jax.lax: the reshaping around the collective is a view
where numpy allows one, a copy only where the shape change needs it.
"""
import collections

import numpy as np

from .._api import collectives as _c
from .._api import lifecycle
from . import _tensors

_SERIAL = collections.Counter()  # (parent gid, shape, names) -> meshes made so far in this process


def _prod(values):
    out = 1
    for v in values:
        out *= int(v)
    return out


class Mesh:
    """`shape` ranks of `group` (default: the world) on the axes `axis_names`, in row-major order."""

    def __init__(self, shape, axis_names, group=None):
        g = group if group is not None else lifecycle.init()
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        if not shape or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
            raise ValueError(f"Mesh shape must be positive ints, got {shape!r}")
        if len(names) != len(shape):
            raise ValueError(f"Mesh has {len(shape)} dimensions {shape} but {len(names)} axis names {names}")
        if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"Mesh axis names must be distinct non-empty strings, got {names}")
        if _prod(shape) != g.size():
            raise ValueError(f"Mesh shape {shape} holds {_prod(shape)} ranks but the group has {g.size()} "
                             f"(rank {g.rank()})")
        self.shape = tuple(int(s) for s in shape)
        self.axis_names = names
        self._g = g
        key = (g.gid, self.shape, names)
        _SERIAL[key] += 1
        self._serial = _SERIAL[key]  # in the sub-groups' keys: each Mesh's groups are its own
        self._ranks = np.arange(g.size()).reshape(self.shape)
        self._groups = {}
        self._layouts = {}  # (dim_specs, ndim, replicated_axes) -> canonical layout (_sharded.py)
        self._plans = {}  # (shape, layout, partial, target) -> the steps of a move (_sharded.py)

    # ------------------------------------------------------------ layout
    def __repr__(self):
        return f"Mesh({dict(zip(self.axis_names, self.shape))})"

    @property
    def parent(self):
        """The group the mesh lays out."""
        return self._g

    def coords(self, rank=None):
        """The index along each axis of `rank` (this rank's by default)."""
        r = self._g.rank() if rank is None else self._g.check_rank(rank, "rank")
        return tuple(int(i) for i in np.unravel_index(r, self.shape))

    def rank_of(self, coords):
        """The group rank at `coords` (one index per axis)."""
        coords = tuple(coords)
        if len(coords) != len(self.shape) or any(not 0 <= int(c) < s for c, s in zip(coords, self.shape)):
            raise ValueError(f"coords {coords} are not on mesh {self}")
        return int(np.ravel_multi_index(tuple(int(c) for c in coords), self.shape))

    def axes(self, axes):
        """The axis names `axes` (one name or a tuple) as a tuple, checked."""
        t = (axes,) if isinstance(axes, str) else tuple(axes)
        if not t:
            raise ValueError("no axis names given")
        for a in t:
            if a not in self.axis_names:
                raise ValueError(f"unknown mesh axis {a!r}: the axes are {self.axis_names}")
        if len(set(t)) != len(t):
            raise ValueError(f"axis names repeated in {t}")
        return t

    def axis_index(self, name, rank=None):
        """The index of this rank (or `rank`) along axis `name` (a tuple of names: row-major over them,
        as in JAX)."""
        t = self.axes(name)
        c = self.coords(rank)
        idx = 0
        for a in t:
            i = self.axis_names.index(a)
            idx = idx * self.shape[i] + c[i]
        return idx

    def size(self, name):
        """The length of axis `name` (a tuple of names: the product)."""
        return _prod(self.shape[self.axis_names.index(a)] for a in self.axes(name))

    def group(self, axes):
        """The commlib group of this rank and the ranks that differ from it only along `axes`,
        ordered row-major over `axes` as given. Built once (by its members, no traffic), then reused."""
        t = self.axes(axes)
        g = self._groups.get(t)
        if g is None:
            g = self._groups[t] = self._build(t)
        return g

    def _build(self, t):
        parent = self._g
        along = [self.axis_names.index(a) for a in t]
        rest = [i for i in range(len(self.shape)) if i not in along]
        mine = self.coords()
        plane = self._ranks.transpose(rest + along)[tuple(mine[i] for i in rest)]
        members = [int(r) for r in plane.reshape(-1)]  # parent ranks, row-major over t as given
        return parent.subgroup(members, ("mesh", self.shape, self.axis_names, self._serial, t))

    # ------------------------------------------------------ collectives
    def preduce(self, x, axes, op):
        """Element-wise reduction of x with `op` over the ranks along `axes` (jax.lax.psum and kin)."""
        g, (a, back) = self.group(axes), _tensors.as_array(x)
        return _run(back, _preduce, g, a, op)

    def ipreduce(self, x, axes, op):
        g, (a, back) = self.group(axes), _tensors.as_array(x)
        return _submit("ipreduce", g, back, _preduce, g, a, op)

    def psum(self, x, axes):
        return self.preduce(x, axes, "sum")

    def pmax(self, x, axes):
        return self.preduce(x, axes, "max")

    def pmin(self, x, axes):
        return self.preduce(x, axes, "min")

    def pprod(self, x, axes):
        return self.preduce(x, axes, "prod")

    def ipsum(self, x, axes):
        return self.ipreduce(x, axes, "sum")

    def ipmax(self, x, axes):
        return self.ipreduce(x, axes, "max")

    def ipmin(self, x, axes):
        return self.ipreduce(x, axes, "min")

    def ipprod(self, x, axes):
        return self.ipreduce(x, axes, "prod")

    def all_gather(self, x, axis_name, *, axis=0, tiled=False):
        """jax.lax.all_gather: the blocks of the ranks along `axis_name`, stacked on a new dimension at
        `axis` (tiled: concatenated along `axis`)."""
        g, a, back, axis = self._gather_args(x, axis_name, axis, tiled)
        return _run(back, _all_gather, g, a, axis, tiled)

    def iall_gather(self, x, axis_name, *, axis=0, tiled=False):
        g, a, back, axis = self._gather_args(x, axis_name, axis, tiled)
        return _submit("iall_gather", g, back, _all_gather, g, a, axis, tiled)

    def _gather_args(self, x, axis_name, axis, tiled):
        g, (a, back) = self.group(axis_name), _tensors.as_array(x)
        if tiled and a.ndim == 0:
            raise ValueError("all_gather(tiled=True) needs an array of at least one dimension")
        return g, a, back, _axis(axis, a.ndim + (0 if tiled else 1), "axis")

    def psum_scatter(self, x, axis_name, *, scatter_dimension=0, tiled=False):
        """jax.lax.psum_scatter: the sum over the ranks along `axis_name`, of which this rank keeps block
        i (its index) of `scatter_dimension` (untiled: that dimension has the axis's size and goes)."""
        g, a, back, d = self._scatter_args(x, axis_name, scatter_dimension, tiled)
        return _run(back, _psum_scatter, g, a, d, tiled)

    def ipsum_scatter(self, x, axis_name, *, scatter_dimension=0, tiled=False):
        g, a, back, d = self._scatter_args(x, axis_name, scatter_dimension, tiled)
        return _submit("ipsum_scatter", g, back, _psum_scatter, g, a, d, tiled)

    def _scatter_args(self, x, axis_name, d, tiled):
        g, (a, back) = self.group(axis_name), _tensors.as_array(x)
        d = _axis(d, a.ndim, "scatter_dimension")
        n = g.size()
        if tiled and a.shape[d] % n:
            raise ValueError(f"psum_scatter(tiled=True): dimension {d} of shape {a.shape} is not divisible by "
                             f"the size {n} of {axis_name!r}")
        if not tiled and a.shape[d] != n:
            raise ValueError(f"psum_scatter: dimension {d} of shape {a.shape} must equal the size {n} of "
                             f"{axis_name!r} (or pass tiled=True)")
        return g, a, back, d

    def all_to_all(self, x, axis_name, split_axis, concat_axis, *, tiled=False):
        """jax.lax.all_to_all: block j of `split_axis` goes to the j-th rank along `axis_name`; the blocks
        received are stacked at `concat_axis` (tiled: concatenated along it)."""
        g, a, back, s, c = self._a2a_args(x, axis_name, split_axis, concat_axis, tiled)
        return _run(back, _all_to_all, g, a, s, c, tiled)

    def iall_to_all(self, x, axis_name, split_axis, concat_axis, *, tiled=False):
        g, a, back, s, c = self._a2a_args(x, axis_name, split_axis, concat_axis, tiled)
        return _submit("iall_to_all", g, back, _all_to_all, g, a, s, c, tiled)

    def _a2a_args(self, x, axis_name, split_axis, concat_axis, tiled):
        g, (a, back) = self.group(axis_name), _tensors.as_array(x)
        if a.ndim == 0:
            raise ValueError("all_to_all needs an array of at least one dimension")
        s = _axis(split_axis, a.ndim, "split_axis")
        c = _axis(concat_axis, a.ndim, "concat_axis")
        n = g.size()
        if tiled and a.shape[s] % n:
            raise ValueError(f"all_to_all(tiled=True): split_axis {s} of shape {a.shape} is not divisible by "
                             f"the size {n} of {axis_name!r}")
        if not tiled and a.shape[s] != n:
            raise ValueError(f"all_to_all: split_axis {s} of shape {a.shape} must equal the size {n} of "
                             f"{axis_name!r} (or pass tiled=True)")
        return g, a, back, s, c

    def ppermute(self, x, axis_name, perm):
        """jax.lax.ppermute: send x along the (src, dst) pairs of indices along `axis_name`; zeros where
        nothing arrives."""
        g, a, back, perm = self._perm_args(x, axis_name, perm)
        return _run(back, _ppermute, g, a, perm)

    def ippermute(self, x, axis_name, perm):
        g, a, back, perm = self._perm_args(x, axis_name, perm)
        return _submit("ippermute", g, back, _ppermute, g, a, perm)

    def _perm_args(self, x, axis_name, perm):
        g, (a, back) = self.group(axis_name), _tensors.as_array(x)
        n = g.size()
        pairs = [tuple(p) for p in perm]
        for p in pairs:
            if len(p) != 2 or any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n
                                  for i in p):
                raise ValueError(f"ppermute: {p!r} is not a (src, dst) pair of indices along {axis_name!r} "
                                 f"(size {n})")
        return g, a, back, pairs  # a repeated source or destination: ValueError from the collective


def _run(back, fn, *args):
    """fn(*args) now (its collective keeps the group's order, and may take the one-call path); the
    result as a tensor when the input was one (`back`)."""
    out = fn(*args)
    return out if back is None else back(out)


def _submit(what, g, back, fn, *args):
    """fn(*args) queued on g's stream (its collective then runs inline there); a Request."""
    if back is None:
        return g.stream.submit(what, fn, *args)
    return g.stream.submit(what, _converted, back, fn, *args)


def _converted(back, fn, *args):
    return back(fn(*args))


def _axis(axis, ndim, what):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{what}={axis!r} is out of range for {ndim} dimensions")
    return int(axis) % ndim


# ----------------------------------------------------------- bodies: one public collective of commlib on g
def _preduce(g, a, op):
    return _c.all_reduce(a, op, group=g)


def _ppermute(g, a, perm):
    return _c.ppermute(a, perm, group=g)


def _all_gather(g, a, axis, tiled):
    # without out=, a large result lands on a recycled buffer nobody holds (as cl.all_gather's
    # does), not on 64 MiB of fresh memory touched for the first time every call
    if tiled and axis == 0:
        return _c.all_gather(a, group=g)
    stacked = _c.all_gather(a[None], group=g)  # (n, *a.shape): block i from the i-th rank
    if not tiled:
        return np.moveaxis(stacked, 0, axis)
    return np.concatenate(list(stacked), axis=axis)


def _psum_scatter(g, a, d, tiled):
    front = np.moveaxis(a, d, 0)  # reduce_scatter splits dimension 0
    block = _c.reduce_scatter(front, "sum", group=g)
    if not tiled:
        return block[0]
    return np.moveaxis(block, 0, d)


def _all_to_all(g, a, s, c, tiled):
    if tiled:
        return _c.all_to_all(a, s, c, group=g)
    front = np.moveaxis(a, s, 0)  # (n, ...): block j to the j-th rank
    got = _c.all_to_all(front, 0, 0, group=g)  # (n, ...): block j from the j-th rank
    return np.moveaxis(got, 0, c)


__all__ = ["Mesh"]
