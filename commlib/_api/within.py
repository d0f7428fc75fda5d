"""Collectives for code that already runs on a group's stream: the front-ends' internal API.

A front-end queues a body on a group's ordered stream (`group.stream.submit(what, fn, ...)`,
`group.stream.run(fn, ...)`) when one operation needs several collectives, or work between them
(commlib.MPI's user-defined ops, its `I*` requests, torch's `monitored_barrier`). Inside such a
body the public functions of `collectives` must not be called: each would queue behind the body
that is waiting for it. These run the very same checks and cached plans at once, on the caller's
thread, and take the `out=` arguments the MPI layer needs.

Every function takes the engine `Group` first and raises like its public twin:
`ValueError`/`TypeError` for bad arguments (wrong shape, dtype, op or root), `MismatchError` when
ranks disagree on the call, `PeerLost`/`CommTimeout` when a peer fails or stays silent.
"""
from . import collectives as _c


def all_reduce(g, x, op="sum", out=None):
    """Element-wise reduction of array-like `x` over g's ranks with `op` (a name, or a kernel code
    from `_kernels`). out: None (a new array is returned), or a writable array of x's shape and
    dtype (it may be x: in place). Returns the result array."""
    return _c._all_reduce(g, x, op, out)


def all_gather(g, x, out=None):
    """g's ranks' `x` concatenated along axis 0 (0-d x: shape (size,)). out: None, or a C-contiguous
    array of x's dtype and size * x.size elements (x may already be this rank's block of it)."""
    return _c._all_gather(g, x, out)


def reduce(g, x, op="sum", root=0, out=None):
    """Reduction of `x` over g's ranks, on `root` only (None elsewhere). out (root only): None, or a
    C-contiguous array of x's dtype and size, which may be x. ValueError: root outside the group."""
    return _c._reduce(g, x, op, root, out)


def gather(g, x, root=0, out=None):
    """g's ranks' `x` concatenated along axis 0 on `root` (None elsewhere). out (root only): None, or
    a C-contiguous array of x's dtype and size * x.size elements. ValueError: root outside the group."""
    return _c._gather(g, x, root, out)


def reduce_scatter(g, x, op="sum", out=None):
    """Reduction of `x` over g's ranks; rank r gets block r of it along axis 0 (x.shape[0] must be a
    multiple of the size, ValueError otherwise). out: None, or a C-contiguous array of x's dtype and
    x.size / size elements that does not overlap x."""
    return _c._reduce_scatter(g, x, op, out)


def all_to_all(g, x, split_axis=0, concat_axis=0):
    """Distributed transpose: block j of `x` along split_axis goes to rank j, and the received blocks
    are concatenated along concat_axis in rank order (ValueError: a 0-d x, or an axis whose length
    is not a multiple of the size)."""
    return _c._all_to_all(g, x, split_axis, concat_axis)


def barrier(g):
    """Return when every rank of g has entered (CommTimeout names the ranks that did not)."""
    return _c._barrier(g)


__all__ = ["all_reduce", "all_gather", "reduce", "gather", "reduce_scatter", "all_to_all", "barrier"]
