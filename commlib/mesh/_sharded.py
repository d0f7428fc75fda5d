"""ShardedArray: a global array laid out on a Mesh, and the moves between layouts.

A layout is one entry per dimension: () for replicated, or the tuple of mesh
axes that split it (row-major over them, blocks as np.array_split makes them),
plus `partial`, the axes along which the blocks are pending sums. A move
between layouts uses the fewest collectives the pair allows:

    partial -> sharded      psum_scatter over the target's axes (the rest of partial: psum)
    shard dim i -> dim j    all_to_all on the same axes (split j, concatenate i)
    sharded -> replicated   all_gather along the axes
    replicated -> sharded   a local slice, no traffic

Uneven splits take the same routes where the collective allows them (gathers
pad to the largest block); otherwise the dimension is gathered and re-sliced.
"""
import dataclasses

import numpy as np

from .._api import collectives as _c
from .._api import objects as _objects
from ._mesh import Mesh


def _bounds(length, parts, index):
    """(start, stop) of block `index` of `parts` along a dimension of `length` (np.array_split's blocks)."""
    base, extra = divmod(length, parts)
    start = index * base + min(index, extra)
    return start, start + base + (index < extra)


def _layout(mesh, spec, ndim):
    """The canonical layout: one tuple of axis names per dimension; ValueError naming the problem."""
    spec = () if spec is None else (tuple(spec) if isinstance(spec, (list, tuple)) else (spec,))
    if len(spec) > ndim:
        raise ValueError(f"spec {spec} has {len(spec)} entries for an array of {ndim} dimensions")
    out, used = [], set()
    for entry in spec + (None,) * (ndim - len(spec)):
        axes = () if entry is None else mesh.axes(entry)
        if used & set(axes):
            raise ValueError(f"mesh axis {sorted(used & set(axes))[0]!r} shards two dimensions in {spec}")
        used |= set(axes)
        out.append(axes)
    return tuple(out)


def _jax_spec(layout):
    return tuple(None if not t else t[0] if len(t) == 1 else t for t in layout)


class ShardedArray:
    """This rank's block (`.local`) of a global array of `.shape` laid out on `.mesh` by `.spec`."""

    def __init__(self, local, shape, mesh, layout, partial=frozenset()):
        self.local = local
        self.shape = tuple(shape)
        self.mesh = mesh
        self._layout = layout
        self.partial = frozenset(partial)

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def spec(self):
        """One entry per dimension: None (replicated), an axis name, or a tuple of names (PartitionSpec)."""
        return _jax_spec(self._layout)

    def __repr__(self):
        pending = f", partial={sorted(self.partial)}" if self.partial else ""
        return f"ShardedArray(shape={self.shape}, dtype={self.dtype}, spec={self.spec}{pending}, {self.mesh})"

    def block(self, dim):
        """(start, stop) of this rank's block along dimension `dim` of the global array."""
        t = self._layout[dim]
        if not t:
            return 0, self.shape[dim]
        return _bounds(self.shape[dim], self.mesh.size(t), self.mesh.axis_index(t))

    def full(self):
        """The global array on every rank (gathers every sharded dimension, sums the pending partials)."""
        return shard(self, self.mesh, (None,) * self.ndim).local

    @classmethod
    def from_local(cls, local, mesh, spec, partial=()):
        """Wrap the blocks every rank computed; their shapes are checked across ranks (ValueError on
        every rank when they do not fit `spec` with np.array_split's blocks)."""
        a = np.asarray(local)
        layout = _layout(mesh, spec, a.ndim)
        part = frozenset(mesh.axes(tuple(partial))) if partial else frozenset()
        if part & {x for t in layout for x in t}:
            raise ValueError(f"axes {sorted(part)} cannot be both partial and sharding a dimension")
        mine = (a.shape, a.dtype.str, layout, tuple(sorted(part)))
        every = _objects.all_gather_obj(mine, group=mesh.parent)
        for r, theirs in enumerate(every):
            if theirs[1:] != mine[1:] or len(theirs[0]) != a.ndim:
                raise ValueError(f"from_local: rank {r} has {theirs[1]} blocks of {len(theirs[0])} dimensions, "
                                 f"layout {_jax_spec(theirs[2])} partial {list(theirs[3])}; rank "
                                 f"{mesh.parent.rank()} has {mine[1]}, {a.ndim}, {_jax_spec(layout)}, "
                                 f"{sorted(part)}")
        shape = []
        for d, t in enumerate(layout):
            if not t:
                sizes = {theirs[0][d] for theirs in every}
                if len(sizes) != 1:
                    raise ValueError(f"from_local: dimension {d} is replicated but the ranks' blocks have "
                                     f"sizes {sorted(sizes)}")
                shape.append(sizes.pop())
                continue
            by_index = {}
            for r, theirs in enumerate(every):
                by_index.setdefault(mesh.axis_index(t, r), set()).add(theirs[0][d])
            parts = mesh.size(t)
            if any(len(v) != 1 for v in by_index.values()):
                raise ValueError(f"from_local: ranks at the same index along {t} hold blocks of different sizes "
                                 f"along dimension {d}")
            sizes = [by_index[k].pop() for k in range(parts)]
            length = sum(sizes)
            want = [b - a_ for a_, b in (_bounds(length, parts, k) for k in range(parts))]
            if sizes != want:
                raise ValueError(f"from_local: the blocks along dimension {d} have sizes {sizes}; a dimension of "
                                 f"{length} split over {parts} takes {want} (np.array_split)")
            shape.append(length)
        return cls(a, shape, mesh, layout, part)


@dataclasses.dataclass(frozen=True)
class NamedSharding:
    """A layout to give to_device(): `spec` (PartitionSpec form) on `mesh`."""

    mesh: Mesh
    spec: tuple


def to_device(x, device=None, *, sharding=None):
    """With a sharding: shard(x, sharding.mesh, sharding.spec); with neither, x as it is (CPU only)."""
    if device not in (None, "cpu"):
        raise ValueError(f"to_device: commlib holds arrays in host memory; device {device!r} is not supported")
    if sharding is None:
        return x
    return shard(x, sharding.mesh, sharding.spec)


def shard(x, mesh, dim_specs, replicated_axes=None):
    """x laid out on `mesh` by `dim_specs` (one entry per dimension, None: replicated).

    A plain array (the same global array on every rank) is sliced without
    traffic; a ShardedArray moves with the fewest collectives (see the module
    docstring). `replicated_axes`: mesh axes the result must be replicated
    along (checked: none may shard a dimension).
    """
    if not isinstance(x, ShardedArray):
        a = np.asarray(x)
        target = _layout(mesh, dim_specs, a.ndim)
        _check_replicated(mesh, target, replicated_axes)
        src = ShardedArray(a, a.shape, mesh, ((),) * a.ndim)
        return ShardedArray(_slice(src, target), a.shape, mesh, target)
    if x.mesh is not mesh and (x.mesh.shape != mesh.shape or x.mesh.axis_names != mesh.axis_names
                               or x.mesh.parent is not mesh.parent):
        raise ValueError(f"shard: the array lives on {x.mesh}, not on {mesh}")
    target = _layout(mesh, dim_specs, x.ndim)
    _check_replicated(mesh, target, replicated_axes)
    cur = ShardedArray(x.local, x.shape, x.mesh, list(x._layout), x.partial)
    _resolve_partial(cur, target)
    _move_between_dims(cur, target)
    for d, t in enumerate(cur._layout):
        if t and t != target[d]:
            _gather_dim(cur, d)
    cur.local = _slice(cur, target)
    cur._layout = target
    return cur


reshard = shard


def _check_replicated(mesh, target, replicated_axes):
    if replicated_axes is None:
        return
    rep = set(mesh.axes(replicated_axes))
    clash = rep & {a for t in target for a in t}
    if clash:
        raise ValueError(f"axes {sorted(clash)} are named both as replicated and as sharding a dimension")


def _resolve_partial(cur, target):
    """Pending sums: psum_scatter straight into a target shard where the split is even, psum the rest."""
    mesh = cur.mesh
    for d, t in enumerate(target):
        if t and not cur._layout[d] and set(t) <= cur.partial and cur.shape[d] % mesh.size(t) == 0 \
                and not any(set(t) & set(u) for u in cur._layout):
            cur.local = mesh.psum_scatter(cur.local, t, scatter_dimension=d, tiled=True)
            cur._layout[d] = t
            cur.partial -= set(t)
    if cur.partial:
        cur.local = mesh.psum(cur.local, tuple(sorted(cur.partial, key=mesh.axis_names.index)))
        cur.partial = frozenset()


def _move_between_dims(cur, target):
    """A shard that changes dimension on the same axes: one all_to_all (even splits)."""
    mesh = cur.mesh
    for i, t in enumerate(cur._layout):
        if not t or target[i] == t:
            continue
        j = next((j for j, u in enumerate(target) if u == t and not cur._layout[j]), None)
        n = mesh.size(t)
        if j is None or cur.shape[i] % n or cur.shape[j] % n:
            continue
        cur.local = mesh.all_to_all(cur.local, t, split_axis=j, concat_axis=i, tiled=True)
        cur._layout[i], cur._layout[j] = (), t


def _gather_dim(cur, d):
    """Dimension d becomes replicated: an all_gather along its axes (blocks padded when uneven)."""
    mesh, t = cur.mesh, cur._layout[d]
    n, length = mesh.size(t), cur.shape[d]
    if length % n == 0:
        cur.local = mesh.all_gather(cur.local, t, axis=d, tiled=True)
    else:
        big = -(-length // n)
        pad = [(0, 0)] * cur.local.ndim
        pad[d] = (0, big - cur.local.shape[d])
        stacked = mesh.all_gather(np.pad(cur.local, pad), t, axis=0)  # (n, ...padded block)
        head = (slice(None),) * d
        pieces = [stacked[k][head + (slice(0, stop - start),)]  # views; the concatenation is the one copy
                  for k, (start, stop) in enumerate(_bounds(length, n, k) for k in range(n))]
        cur.local = np.concatenate(pieces, axis=d)
    cur._layout[d] = ()


def _slice(cur, target):
    """This rank's block of the target layout, cut from the current one (which holds at least it)."""
    mesh = cur.mesh
    index = []
    for d, t in enumerate(target):
        if t == cur._layout[d] or not t:
            index.append(slice(None))
        else:
            index.append(slice(*_bounds(cur.shape[d], mesh.size(t), mesh.axis_index(t))))
    out = cur.local[tuple(index)]
    return np.ascontiguousarray(out)


# -------------------------------------------------------------- the module functions
def all_reduce(a):
    """The pending partial sums resolved (none pending: summed over the axes the array is replicated on)."""
    if a.partial:
        return shard(a, a.mesh, a.spec)
    rep = tuple(x for x in a.mesh.axis_names if all(x not in t for t in a._layout))
    if not rep:
        return ShardedArray(a.local.copy(), a.shape, a.mesh, a._layout)
    return ShardedArray(a.mesh.psum(a.local, rep), a.shape, a.mesh, a._layout)


def all_gather(a, axis=None):
    """Dimension `axis` (every dimension when None) becomes replicated."""
    spec = list(a.spec)
    for d in (range(a.ndim) if axis is None else [_c._axis(axis, a.ndim, "axis")]):
        spec[d] = None
    return shard(a, a.mesh, tuple(spec))


def all_to_all(a, split_axis, concat_axis, tiled=True):
    """The sharding of dimension `concat_axis` moves to dimension `split_axis`."""
    if not tiled:
        raise ValueError("all_to_all on a ShardedArray keeps its dimensions: only tiled=True applies")
    s, c = _c._axis(split_axis, a.ndim, "split_axis"), _c._axis(concat_axis, a.ndim, "concat_axis")
    spec = list(a.spec)
    if spec[c] is None:
        raise ValueError(f"all_to_all: dimension {c} (concat_axis) is not sharded (spec {a.spec})")
    if spec[s] is not None and s != c:
        raise ValueError(f"all_to_all: dimension {s} (split_axis) is already sharded (spec {a.spec})")
    spec[s], spec[c] = spec[c], None if s != c else spec[c]
    return shard(a, a.mesh, tuple(spec))


def reduce_scatter(a, axis):
    """The pending partial sums become shards of dimension `axis`."""
    if not a.partial:
        raise ValueError("reduce_scatter: the array has no pending partial sums")
    d = _c._axis(axis, a.ndim, "axis")
    spec = list(a.spec)
    if spec[d] is not None:
        raise ValueError(f"reduce_scatter: dimension {d} is already sharded (spec {a.spec})")
    spec[d] = tuple(x for x in a.mesh.axis_names if x in a.partial)
    return shard(a, a.mesh, tuple(spec))


def distributed_broadcast(x, mesh=None):
    """The first rank's x on every rank: a plain array, or a replicated ShardedArray on `mesh`."""
    g = mesh.parent if mesh is not None else _c._g(None)
    if g.size() > 1:
        meta = _objects.broadcast_obj((np.shape(x), np.asarray(x).dtype.str) if g.rank() == 0 else None, 0,
                                     group=g)
        buf = np.ascontiguousarray(x) if g.rank() == 0 else np.empty(meta[0], np.dtype(meta[1]))
        out = g.stream.run(_c._broadcast, g, buf, 0)
    else:
        out = np.asarray(x)
    if mesh is None:
        return out
    return ShardedArray(out, out.shape, mesh, ((),) * out.ndim)


def ppermute(a, permutation):
    """Blocks sent along (src, dst) pairs of flat mesh ranks; the layout stays (zeros where nothing arrives)."""
    g = a.mesh.parent
    local = g.stream.run(_c._ppermute, g, a.local, [tuple(p) for p in permutation])
    return ShardedArray(local, a.shape, a.mesh, a._layout, a.partial)
