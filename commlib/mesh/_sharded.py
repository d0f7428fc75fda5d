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
A move is planned once per (shape, layout, partial, target) and mesh, as a list
of `Step`s and a final slice (`plan()`); later moves of that kind only run the
collectives, which keeps the layer's Python cost to a few microseconds a call.
"""
import dataclasses

import numpy as np

from .._api import collectives as _c
from .._api import lifecycle
from .._api import objects as _objects
from . import _mesh as _mesh_bodies
from . import _tensors
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

    def __init__(self, local, shape, mesh, layout, partial=frozenset(), *, back=None):
        self._local = local  # always a NumPy array
        self._back = back  # None, or how a block goes back to the caller's kind (a torch tensor)
        self.shape = tuple(shape)
        self.mesh = mesh
        self._layout = tuple(layout)
        self.partial = frozenset(partial)

    @property
    def local(self):
        """This rank's block: a NumPy array, or a torch tensor over the same memory when the array was
        made from one."""
        return self._local if self._back is None else self._back(self._local)

    @property
    def dtype(self):
        return self._local.dtype

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
        a, back = _tensors.as_array(local)
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
        return cls(a, shape, mesh, layout, part, back=back)


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
    along (checked: none may shard a dimension). A CPU torch tensor gives a
    ShardedArray whose `.local` and `.full()` are tensors.
    """
    if not isinstance(x, ShardedArray):
        a, back = _tensors.as_array(x)
        target = _target(mesh, dim_specs, a.ndim, replicated_axes)
        index = _slice_index(mesh, a.shape, ((),) * a.ndim, target)
        return ShardedArray(_cut(a, index), a.shape, mesh, target, back=back)
    if x.mesh is not mesh and (x.mesh.shape != mesh.shape or x.mesh.axis_names != mesh.axis_names
                               or x.mesh.parent is not mesh.parent):
        raise ValueError(f"shard: the array lives on {x.mesh}, not on {mesh}")
    target = _target(mesh, dim_specs, x.ndim, replicated_axes)
    steps, index = plan(mesh, x.shape, x._layout, x.partial, target)
    local = x._local
    for step in steps:
        local = step.run(local)
    return ShardedArray(_cut(local, index), x.shape, mesh, target, back=x._back)


reshard = shard


def _target(mesh, dim_specs, ndim, replicated_axes):
    """The canonical target layout, cached per mesh (the checks run once per distinct spec)."""
    try:
        key = (dim_specs, ndim, replicated_axes)
        return mesh._layouts[key]
    except TypeError:  # an unhashable spec (a list): checked every time
        key = None
    except KeyError:
        pass
    target = _layout(mesh, dim_specs, ndim)
    if replicated_axes is not None:
        rep = set(mesh.axes(replicated_axes))
        clash = rep & {a for t in target for a in t}
        if clash:
            raise ValueError(f"axes {sorted(clash)} are named both as replicated and as sharding a dimension")
    if key is not None:
        _remember(mesh._layouts, key, target)
    return target


def _remember(cache, key, value):
    if len(cache) >= _CACHE_ENTRIES:
        cache.clear()
    cache[key] = value


_CACHE_ENTRIES = 256


# ------------------------------------------------------------------ plans
@dataclasses.dataclass(frozen=True)
class Step:
    """One collective of a move: `kind` on the sub-group along `axes`, at dimension `dim` (all_to_all:
    split `dim`, concatenate `other`); `sizes`: the block sizes of an uneven gather."""

    kind: str  # "psum_scatter" | "psum" | "all_to_all" | "all_gather"
    axes: tuple
    dim: int = 0
    other: int = 0
    sizes: tuple = ()
    group: object = dataclasses.field(default=None, compare=False, repr=False)

    def run(self, a):
        g = self.group
        if self.kind == "psum":
            return _c.all_reduce(a, "sum", group=g)
        if self.kind == "psum_scatter":
            return _mesh_bodies._psum_scatter(g, a, self.dim, True)
        if self.kind == "all_to_all":
            return _c.all_to_all(a, self.dim, self.other, group=g)
        if not self.sizes:
            return _mesh_bodies._all_gather(g, a, self.dim, True)
        return _gather_uneven(g, a, self.dim, self.sizes)


def plan(mesh, shape, layout, partial, target):
    """(steps, index): the collectives that move this rank's block from (layout, partial) to `target`,
    and the slice that cuts its target block from what they leave. Cached per mesh; no traffic."""
    key = (tuple(shape), tuple(layout), frozenset(partial), target)
    got = mesh._plans.get(key)
    if got is None:
        got = _plan(mesh, *key)
        _remember(mesh._plans, key, got)
    return got


def _plan(mesh, shape, layout, partial, target):
    cur, partial, steps = list(layout), set(partial), []

    def step(kind, axes, dim=0, other=0, sizes=()):
        steps.append(Step(kind, axes, dim, other, sizes, mesh.group(axes)))

    # pending sums: psum_scatter straight into a target shard where the split is even, psum the rest
    for d, t in enumerate(target):
        if t and not cur[d] and set(t) <= partial and shape[d] % mesh.size(t) == 0 \
                and not any(set(t) & set(u) for u in cur):
            step("psum_scatter", t, d)
            cur[d] = t
            partial -= set(t)
    if partial:
        step("psum", tuple(a for a in mesh.axis_names if a in partial))
    # a shard that changes dimension on the same axes: one all_to_all (even splits)
    for i, t in enumerate(cur):
        if not t or target[i] == t:
            continue
        j = next((j for j, u in enumerate(target) if u == t and not cur[j]), None)
        n = mesh.size(t)
        if j is not None and shape[i] % n == 0 and shape[j] % n == 0:
            step("all_to_all", t, j, i)
            cur[i], cur[j] = (), t
    # what is still sharded differently becomes replicated: an all_gather (uneven: padded blocks)
    for d, t in enumerate(cur):
        if t and t != target[d]:
            n = mesh.size(t)
            even = shape[d] % n == 0
            step("all_gather", t, d, sizes=() if even else tuple(b - a for a, b in
                                                                  (_bounds(shape[d], n, k) for k in range(n))))
            cur[d] = ()
    return tuple(steps), _slice_index(mesh, shape, cur, target)


def _slice_index(mesh, shape, cur, target):
    """The index that cuts this rank's target block from a block laid out as `cur` (None: all of it)."""
    index = [slice(None) if t == cur[d] or not t else slice(*_bounds(shape[d], mesh.size(t), mesh.axis_index(t)))
             for d, t in enumerate(target)]
    return None if all(s == slice(None) for s in index) else tuple(index)


def _cut(a, index):
    return a if index is None else np.ascontiguousarray(a[index])


def _gather_uneven(g, a, d, sizes):
    """The blocks of `sizes` along dimension d gathered: padded to the largest, stacked, then cut back."""
    big = max(sizes)
    pad = [(0, 0)] * a.ndim
    pad[d] = (0, big - a.shape[d])
    stacked = _mesh_bodies._all_gather(g, np.pad(a, pad), 0, False)  # (n, ...padded block)
    head = (slice(None),) * d
    # views; the concatenation is the one copy
    return np.concatenate([stacked[k][head + (slice(0, size),)] for k, size in enumerate(sizes)], axis=d)


# -------------------------------------------------------------- the module functions
def all_reduce(a):
    """The pending partial sums resolved (none pending: summed over the axes the array is replicated on)."""
    if a.partial:
        return shard(a, a.mesh, a.spec)
    rep = tuple(x for x in a.mesh.axis_names if all(x not in t for t in a._layout))
    if not rep:
        return ShardedArray(a._local.copy(), a.shape, a.mesh, a._layout, back=a._back)
    return ShardedArray(a.mesh.psum(a._local, rep), a.shape, a.mesh, a._layout, back=a._back)


def all_gather(a, axis=None):
    """Dimension `axis` (every dimension when None) becomes replicated."""
    spec = list(a.spec)
    for d in (range(a.ndim) if axis is None else [_mesh_bodies._axis(axis, a.ndim, "axis")]):
        spec[d] = None
    return shard(a, a.mesh, tuple(spec))


def all_to_all(a, split_axis, concat_axis, tiled=True):
    """The sharding of dimension `concat_axis` moves to dimension `split_axis`."""
    if not tiled:
        raise ValueError("all_to_all on a ShardedArray keeps its dimensions: only tiled=True applies")
    s = _mesh_bodies._axis(split_axis, a.ndim, "split_axis")
    c = _mesh_bodies._axis(concat_axis, a.ndim, "concat_axis")
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
    d = _mesh_bodies._axis(axis, a.ndim, "axis")
    spec = list(a.spec)
    if spec[d] is not None:
        raise ValueError(f"reduce_scatter: dimension {d} is already sharded (spec {a.spec})")
    spec[d] = tuple(x for x in a.mesh.axis_names if x in a.partial)
    return shard(a, a.mesh, tuple(spec))


def distributed_broadcast(x, mesh=None):
    """The first rank's x on every rank (the other ranks' x is ignored; they may pass None): a plain
    array (a torch tensor when the first rank's x is one), or a replicated ShardedArray on `mesh`."""
    g = mesh.parent if mesh is not None else lifecycle.init()
    first = g.rank() == 0
    a, back = _tensors.as_array(x) if first else (None, None)
    if g.size() > 1:
        meta = (a.shape, _tensors.dtype_code(a.dtype), back is not None) if first else None
        shape, dtype, torch_kind = _objects.broadcast_obj(meta, 0, group=g)
        buf = np.ascontiguousarray(a) if first else np.empty(shape, _tensors.dtype(dtype))
        a = _c.broadcast(buf, 0, group=g)
        back = _tensors.to_torch if torch_kind else None
    if mesh is not None:
        return ShardedArray(a, a.shape, mesh, ((),) * a.ndim, back=back)
    return a if back is None else back(a)


def ppermute(a, permutation):
    """Blocks sent along (src, dst) pairs of flat mesh ranks; the layout stays (zeros where nothing arrives)."""
    g = a.mesh.parent
    local = _c.ppermute(a._local, [tuple(p) for p in permutation], group=g)
    return ShardedArray(local, a.shape, a.mesh, a._layout, a.partial, back=a._back)
