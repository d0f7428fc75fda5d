"""commlib.mesh.Mesh: named axes over a group, and jax.lax-style collectives on NumPy arrays.

usage: mesh_axes.py SEED

For every mesh shape that fits the world size: the mesh's geometry (shape,
axis_names, coords, rank_of, axis_index, size, group), then every named-axis
collective (psum, pmax, pmin, pprod, preduce, all_gather, psum_scatter,
all_to_all, ppermute and their i-variants) along every axis name, along
tuples of two axes (in mesh order and reversed) and, for a 3-D mesh, along all
three. Every rank rebuilds every rank's input from (seed, mesh, label, rank),
works out which ranks share its axis group (row-major over the named axes in
the order given, as jax.lax does for a tuple of axis names) and applies
jax.lax's shape semantics with numpy. Then errors that must be a ValueError on
every rank (mesh size mismatch, unknown / duplicated axis names, a
psum_scatter or all_to_all dimension that does not fit the axis, ppermute
indices out of range or repeated), each followed by a psum that must still be
right, and a mesh over a sub-group made with split().
"""
import itertools
import math
import traceback

import numpy as np

import commlib as cl
from _common import Checker, dname, expected_reduce, gen, kind_for, legal

c = Checker("mesh_axes")
n, me = c.size, c.rank

from commlib.mesh import Mesh  # noqa: E402  (after init: a failing import still prints a traceback)

F64, F32, I32 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int32)
DTS = [F64, F32, I32]

MESHES = {
    1: [((1,), ("x",))],
    2: [((2,), ("x",)), ((1, 2), ("data", "model")), ((2, 1), ("data", "model"))],
    3: [((3,), ("x",)), ((1, 3), ("data", "model"))],
    4: [((4,), ("x",)), ((2, 2), ("data", "model")), ((1, 4), ("pipe", "tensor"))],
    5: [((5,), ("x",))],
    6: [((2, 3), ("data", "model")), ((3, 2), ("data", "model"))],
    7: [((7,), ("x",))],
    8: [((2, 4), ("data", "model")), ((2, 2, 2), ("x", "y", "z"))],
}


def tup(axes):
    return (axes,) if isinstance(axes, str) else tuple(axes)


def call(label, fn, *args, **kwargs):
    """(True, fn(...)) or (False, None) with the exception recorded; a broken group is fatal."""
    try:
        return True, fn(*args, **kwargs)
    except cl.CommError as err:
        c.checks += 1
        c.fail(label, f"raised {type(err).__name__}: {err}\n{traceback.format_exc()}")
        raise
    except Exception as err:
        c.checks += 1
        c.fail(label, f"raised {type(err).__name__}: {err}\n{traceback.format_exc()}")
        return False, None


class Picture:
    """The global picture of one mesh: which group ranks hold which coordinates, everyone's inputs."""

    def __init__(self, key, tag, mesh, shape, names, gsize, grank, record):
        self.key, self.tag, self.m, self.shape, self.names = key, tag, mesh, tuple(shape), tuple(names)
        self.gsize, self.grank, self.record = gsize, grank, record
        self.k = 0  # case counter: the dtype rotates through DTS across cases

    def coords(self, r):
        return tuple(int(i) for i in np.unravel_index(r, self.shape))

    def members(self, axes):
        """Group ranks of this rank's axis group, in axis-index order (row-major over axes as given)."""
        axes = tup(axes)
        idx = [self.names.index(a) for a in axes]
        sub = [self.shape[i] for i in idx]
        mine = list(self.coords(self.grank))
        out = []
        for lin in range(math.prod(sub)):
            cc = list(mine)
            for i, v in zip(idx, np.unravel_index(lin, sub)):
                cc[i] = int(v)
            out.append(int(np.ravel_multi_index(cc, self.shape)))
        return out

    def inputs(self, axes, label, dt, shape, kind="any"):
        """(inputs of the axis group's members in order, this rank's index, this rank's input)."""
        mem = self.members(axes)
        xs = [gen(c.rng(self.key, r, *label), dt, shape, kind) for r in mem]
        i = mem.index(self.grank)
        return xs, i, xs[i]

    def dt(self):
        self.k += 1
        return DTS[self.k % len(DTS)]

    def full(self, axes):
        return len(self.members(axes)) == self.gsize


# ------------------------------------------------------------------ expectations (jax.lax semantics)
def ex_all_gather(xs, axis, tiled):
    return np.concatenate(xs, axis=axis) if tiled else np.stack(xs, axis=axis)


def ex_psum_scatter(xs, i, dim, tiled):
    total = expected_reduce(xs, "sum")
    if tiled:
        return np.split(total, len(xs), axis=dim)[i]
    return np.take(total, i, axis=dim)


def ex_all_to_all(xs, i, split_axis, concat_axis, tiled):
    N = len(xs)
    if tiled:
        return np.concatenate([np.split(x, N, axis=split_axis)[i] for x in xs], axis=concat_axis)
    # np.insert(np.delete(x.shape, split_axis), concat_axis, N); out[.., j, ..] = x_j[.., i, ..]
    return np.stack([np.take(x, i, axis=split_axis) for x in xs], axis=concat_axis)


def ex_ppermute(xs, i, perm):
    src = [s for s, d in perm if d == i]
    return xs[src[0]].copy() if src else np.zeros_like(xs[i])


# ------------------------------------------------------------------ checks
def geometry_checks(p, tag):
    m, shape, names = p.m, p.shape, p.names
    lab = f"{tag} geometry"
    ok, got = call(lab + " shape", lambda: m.shape)
    if ok:
        c.ok(isinstance(got, tuple) and got == shape, lab + " shape", f"{got!r} != {shape!r}")
    ok, got = call(lab + " axis_names", lambda: m.axis_names)
    if ok:
        c.ok(isinstance(got, tuple) and got == names, lab + " axis_names", f"{got!r} != {names!r}")
    mine = p.coords(p.grank)
    ok, got = call(lab + " coords()", m.coords)
    if ok:
        c.ok(isinstance(got, tuple) and tuple(got) == mine, lab + " coords()", f"{got!r} != {mine!r}")
    for r in range(p.gsize):
        ok, got = call(lab + f" coords({r})", m.coords, r)
        if ok:
            c.ok(isinstance(got, tuple) and tuple(got) == p.coords(r), lab + f" coords({r})",
                 f"{got!r} != {p.coords(r)!r}")
        ok, got = call(lab + f" rank_of({p.coords(r)})", m.rank_of, p.coords(r))
        if ok:
            c.ok(got == r, lab + f" rank_of({p.coords(r)})", f"{got!r} != {r}")
    for d, name in enumerate(names):
        ok, got = call(lab + f" axis_index({name})", m.axis_index, name)
        if ok:
            c.ok(got == mine[d], lab + f" axis_index({name})", f"{got!r} != {mine[d]}")
        ok, got = call(lab + f" size({name})", m.size, name)
        if ok:
            c.ok(got == shape[d], lab + f" size({name})", f"{got!r} != {shape[d]}")
    for axes in axis_sets(names) + ([names] if len(names) > 1 else []):
        sz = math.prod(shape[names.index(a)] for a in tup(axes))
        if not isinstance(axes, str):
            ok, got = call(lab + f" size({axes})", m.size, axes)
            if ok:
                c.ok(got == sz, lab + f" size({axes})", f"{got!r} != {sz}")
        ok, g = call(lab + f" group({axes})", m.group, axes)
        if not ok:
            continue
        ok2, g2 = call(lab + f" group({axes}) again", m.group, axes)
        if ok2:
            c.ok(g2 is g, lab + f" group({axes}) reused", "a second call made a new group")
        mem = p.members(axes)
        c.ok(g.size() == sz, lab + f" group({axes}).size()", f"{g.size()} != {sz}")
        c.ok(g.rank() == mem.index(p.grank), lab + f" group({axes}).rank()",
             f"{g.rank()} != {mem.index(p.grank)}")
        # The group's members, in its rank order, are the axis group's members in axis-index order.
        ok, got = call(lab + f" all_gather on group({axes})", cl.all_gather, np.array([p.grank], np.int64),
                       group=g)
        if ok:
            c.equal(got, np.array(mem, np.int64), lab + f" group({axes}) members", record=False)


def axis_sets(names):
    sets = list(names)
    if len(names) >= 2:
        pairs = list(itertools.combinations(names, 2))
        sets += pairs + [tuple(reversed(pairs[0]))]
    return sets


def check(p, label, expected, fn, *args, **kwargs):
    ok, got = call(label, fn, *args, **kwargs)
    if ok:
        c.ok(isinstance(got, np.ndarray) or (np.ndim(expected) == 0 and isinstance(got, np.generic)), label,
             f"returned a {type(got).__name__}, not a NumPy array")
        c.equal(got, expected, label, record=p.record and p.replicated)


def reduce_checks(p, axes):
    p.replicated = p.full(axes)
    methods = (("psum", "sum"), ("pmax", "max"), ("pmin", "min"), ("pprod", "prod"))
    for shape in ((), (5,), (2, 3), (0, 3), (3, 0)):
        for meth, op in methods:
            dt = p.dt()
            label = ("red", meth, str(axes), shape, dname(dt))
            xs, i, x = p.inputs(axes, label, dt, shape, kind_for(op))
            check(p, f"{p.tag} {meth} axes={axes} {dname(dt)} shape={shape}", expected_reduce(xs, op),
                  getattr(p.m, meth), x, axes)
    for dt in DTS:
        for op in ("sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor"):
            if not legal(op, dt):
                continue
            label = ("preduce", op, str(axes), dname(dt))
            xs, i, x = p.inputs(axes, label, dt, (4,), kind_for(op))
            check(p, f"{p.tag} preduce {op} axes={axes} {dname(dt)}", expected_reduce(xs, op), p.m.preduce, x,
                  axes, op)
    # Non-contiguous inputs: a transpose and a strided view.
    xs, i, x = p.inputs(axes, ("redT",), F32, (3, 4), "small")
    check(p, f"{p.tag} psum axes={axes} transposed input", expected_reduce([v.T for v in xs], "sum"), p.m.psum,
          x.T, axes)
    xs, i, x = p.inputs(axes, ("redS",), I32, (4, 6))
    check(p, f"{p.tag} pmax axes={axes} strided input", expected_reduce([v[::2, 1::3] for v in xs], "max"),
          p.m.pmax, x[::2, 1::3], axes)
    # The input is not modified.
    xs, i, x = p.inputs(axes, ("ro",), F64, (3,), "small")
    keep = x.copy()
    call("psum input", p.m.psum, x, axes)
    c.equal(x, keep, f"{p.tag} psum axes={axes} leaves x unchanged", record=False)


def all_gather_checks(p, axes):
    p.replicated = p.full(axes)
    for shape in ((), (3,), (2, 3), (0, 2), (2, 0)):
        nd = len(shape)
        for tiled in (False, True):
            for axis in range(nd if tiled else nd + 1):
                dt = p.dt()
                label = ("ag", str(axes), shape, tiled, axis, dname(dt))
                xs, i, x = p.inputs(axes, label, dt, shape)
                check(p, f"{p.tag} all_gather axes={axes} {dname(dt)} shape={shape} axis={axis} tiled={tiled}",
                      ex_all_gather(xs, axis, tiled), p.m.all_gather, x, axes, axis=axis, tiled=tiled)
    xs, i, x = p.inputs(axes, ("agT",), F64, (2, 3))
    check(p, f"{p.tag} all_gather axes={axes} transposed input axis=1",
          ex_all_gather([v.T for v in xs], 1, False), p.m.all_gather, x.T, axes, axis=1)
    # Default keywords: axis=0, tiled=False.
    xs, i, x = p.inputs(axes, ("agdef",), I32, (2, 2))
    check(p, f"{p.tag} all_gather axes={axes} defaults", np.stack(xs), p.m.all_gather, x, axes)


def psum_scatter_checks(p, axes):
    p.replicated = False
    N = len(p.members(axes))
    cases = []
    for base in ((), (3,), (2, 0), (2, 3)):
        for dim in range(len(base) + 1):
            cases.append((base[:dim] + (N,) + base[dim:], dim, False))
            cases.append((base[:dim] + (2 * N,) + base[dim:], dim, True))
            cases.append((base[:dim] + (N,) + base[dim:], dim, True))
    cases.append(((0,), 0, True))
    cases.append(((0, 3), 0, True))
    cases.append(((3, 0), 1, True))
    for shape, dim, tiled in cases:
        dt = p.dt()
        label = ("rs", str(axes), shape, dim, tiled, dname(dt))
        xs, i, x = p.inputs(axes, label, dt, shape, "small")
        check(p, f"{p.tag} psum_scatter axes={axes} {dname(dt)} shape={shape} dim={dim} tiled={tiled}",
              ex_psum_scatter(xs, i, dim, tiled), p.m.psum_scatter, x, axes, scatter_dimension=dim, tiled=tiled)
    xs, i, x = p.inputs(axes, ("rsdef",), I32, (N, 2), "small")
    check(p, f"{p.tag} psum_scatter axes={axes} defaults", ex_psum_scatter(xs, i, 0, False), p.m.psum_scatter,
          x, axes)


def all_to_all_checks(p, axes):
    p.replicated = False
    N = len(p.members(axes))
    cases = []
    for base in ((), (3,), (2, 3), (0, 2)):
        nd = len(base) + 1
        for split_axis in range(nd):
            for concat_axis in range(nd):
                cases.append((base[:split_axis] + (N,) + base[split_axis:], split_axis, concat_axis, False))
    for base in ((2,), (2, 3)):
        nd = len(base)
        for split_axis in range(nd):
            for concat_axis in range(nd):
                shape = tuple(b * N if d == split_axis else b for d, b in enumerate(base))
                cases.append((shape, split_axis, concat_axis, True))
    cases.append(((0, 3), 0, 1, True))
    cases.append(((N, 0), 0, 1, True))
    xs, i, x = p.inputs(axes, ("a2aT",), I32, (3, N))
    check(p, f"{p.tag} all_to_all axes={axes} transposed input", ex_all_to_all([v.T for v in xs], i, 0, 1, False),
          p.m.all_to_all, x.T, axes, 0, 1)
    for shape, split_axis, concat_axis, tiled in cases:
        dt = p.dt()
        label = ("a2a", str(axes), shape, split_axis, concat_axis, tiled, dname(dt))
        xs, i, x = p.inputs(axes, label, dt, shape)
        check(p, f"{p.tag} all_to_all axes={axes} {dname(dt)} shape={shape} split_axis={split_axis} "
                 f"concat_axis={concat_axis} tiled={tiled}",
              ex_all_to_all(xs, i, split_axis, concat_axis, tiled), p.m.all_to_all, x, axes, split_axis,
              concat_axis, tiled=tiled)


def perms(N):
    out = {"shift+1": [(j, (j + 1) % N) for j in range(N)],
           "reverse": [(j, N - 1 - j) for j in range(N)],
           "identity": [(j, j) for j in range(N)],
           "empty": [],
           "first->last": [(0, N - 1)]}
    if N > 2:
        out["partial shift-1"] = [(j, j - 1) for j in range(1, N)]
    return out


def ppermute_checks(p, axes):
    p.replicated = False
    N = len(p.members(axes))
    for name, perm in perms(N).items():
        for shape in ((4,), (), (2, 0), (2, 3)):
            dt = p.dt()
            label = ("pp", str(axes), name, shape, dname(dt))
            xs, i, x = p.inputs(axes, label, dt, shape)
            check(p, f"{p.tag} ppermute axes={axes} {name} {perm} {dname(dt)} shape={shape}",
                  ex_ppermute(xs, i, perm), p.m.ppermute, x, axes, perm)
    # A perm given as a tuple of lists.
    xs, i, x = p.inputs(axes, ("pptl",), F32, (3,))
    perm = tuple([j, (j + 1) % N] for j in range(N))
    check(p, f"{p.tag} ppermute axes={axes} perm as lists", ex_ppermute(xs, i, perm), p.m.ppermute, x, axes, perm)


def nonblocking_checks(p, axes_list):
    """Several requests outstanding (over different axis groups too), waited in reverse order."""
    p.replicated = False
    pending = []  # (label, request, expected)

    def post(label, expected, fn, *args, **kwargs):
        ok, req = call(label, fn, *args, **kwargs)
        if ok:
            pending.append((label, req, expected))

    for axes in axes_list:
        N = len(p.members(axes))
        for meth, op in (("ipsum", "sum"), ("ipmax", "max"), ("ipmin", "min"), ("ipprod", "prod")):
            dt = p.dt()
            xs, i, x = p.inputs(axes, ("i", meth, str(axes), dname(dt)), dt, (3, 2), kind_for(op))
            post(f"{p.tag} {meth} axes={axes} {dname(dt)}", expected_reduce(xs, op), getattr(p.m, meth), x, axes)
        xs, i, x = p.inputs(axes, ("ipreduce", str(axes)), I32, (5,))
        post(f"{p.tag} ipreduce bxor axes={axes}", expected_reduce(xs, "bxor"), p.m.ipreduce, x, axes, "bxor")
        xs, i, x = p.inputs(axes, ("iag", str(axes)), F32, (2, 3))
        post(f"{p.tag} iall_gather axes={axes} axis=1", ex_all_gather(xs, 1, False), p.m.iall_gather, x, axes,
             axis=1)
        xs, i, x = p.inputs(axes, ("iagt", str(axes)), F64, (2, 3))
        post(f"{p.tag} iall_gather axes={axes} tiled axis=1", ex_all_gather(xs, 1, True), p.m.iall_gather, x,
             axes, axis=1, tiled=True)
        xs, i, x = p.inputs(axes, ("irs", str(axes)), F64, (3, N), "small")
        post(f"{p.tag} ipsum_scatter axes={axes} dim=1", ex_psum_scatter(xs, i, 1, False), p.m.ipsum_scatter, x,
             axes, scatter_dimension=1)
        xs, i, x = p.inputs(axes, ("irst", str(axes)), I32, (2 * N, 2), "small")
        post(f"{p.tag} ipsum_scatter axes={axes} tiled", ex_psum_scatter(xs, i, 0, True), p.m.ipsum_scatter, x,
             axes, tiled=True)
        xs, i, x = p.inputs(axes, ("ia2a", str(axes)), F32, (N, 3))
        post(f"{p.tag} iall_to_all axes={axes} 0->1", ex_all_to_all(xs, i, 0, 1, False), p.m.iall_to_all, x,
             axes, 0, 1)
        xs, i, x = p.inputs(axes, ("ia2at", str(axes)), I32, (2, 3 * N))
        post(f"{p.tag} iall_to_all axes={axes} tiled 1->0", ex_all_to_all(xs, i, 1, 0, True), p.m.iall_to_all,
             x, axes, 1, 0, tiled=True)
        perm = [(j, (j + 1) % N) for j in range(N)]
        xs, i, x = p.inputs(axes, ("ipp", str(axes)), F64, (4,))
        post(f"{p.tag} ippermute axes={axes} shift", ex_ppermute(xs, i, perm), p.m.ippermute, x, axes, perm)
    for label, req, expected in reversed(pending):
        ok, got = call(label + " wait", req.wait)
        if ok:
            c.equal(got, expected, label + " (waited in reverse)", record=False)


def psum_still_works(p, after):
    axes = p.names[0]
    xs, i, x = p.inputs(axes, ("after", after), I32, (3,), "small")
    ok, got = call(f"{p.tag} psum after {after}", p.m.psum, x, axes)
    if ok:
        c.equal(got, expected_reduce(xs, "sum"), f"{p.tag} psum after {after}", record=False)


def everyone_raised(p, label, fn, *args, **kwargs):
    """fn must raise ValueError on this rank, and on every other rank too; then a psum must work."""
    err = c.raises(ValueError, label, fn, *args, **kwargs)
    if isinstance(err, cl.CommError):
        raise err
    flags = cl.all_gather(np.array([isinstance(err, ValueError)], np.int8))
    c.ok(np.all(flags == 1), label + " (on every rank)",
         f"ranks that did not raise ValueError: {np.flatnonzero(flags == 0).tolist()}")
    psum_still_works(p, label)


def error_checks(p):
    names = p.names
    first = names[0]
    N = p.shape[0]
    x = np.ones(3, np.float64)
    everyone_raised(p, f"{p.tag} psum unknown axis", p.m.psum, x, "nope")
    everyone_raised(p, f"{p.tag} all_gather unknown axis", p.m.all_gather, x, "nope")
    everyone_raised(p, f"{p.tag} psum axes with an unknown name", p.m.psum, x, (first, "nope"))
    everyone_raised(p, f"{p.tag} size unknown axis", p.m.size, "nope")
    everyone_raised(p, f"{p.tag} axis_index unknown axis", p.m.axis_index, "nope")
    everyone_raised(p, f"{p.tag} group unknown axis", p.m.group, "nope")
    everyone_raised(p, f"{p.tag} psum_scatter dim != axis size", p.m.psum_scatter, np.ones((N + 1, 2)), first)
    everyone_raised(p, f"{p.tag} psum_scatter dim=1 != axis size", p.m.psum_scatter, np.ones((2, N + 1)), first,
                    scatter_dimension=1)
    everyone_raised(p, f"{p.tag} psum_scatter of a 0-d array", p.m.psum_scatter, np.float64(1.0), first)
    if N > 1:
        everyone_raised(p, f"{p.tag} psum_scatter tiled not divisible", p.m.psum_scatter, np.ones(2 * N + 1),
                        first, tiled=True)
        everyone_raised(p, f"{p.tag} all_to_all tiled not divisible", p.m.all_to_all, np.ones((N + 1, 2)), first,
                        0, 1, tiled=True)
    everyone_raised(p, f"{p.tag} all_to_all split dim != axis size", p.m.all_to_all, np.ones((N + 1, 2)), first,
                    0, 1)
    everyone_raised(p, f"{p.tag} ppermute src out of range", p.m.ppermute, x, first, [(N, 0)])
    everyone_raised(p, f"{p.tag} ppermute dst out of range", p.m.ppermute, x, first, [(0, N)])
    everyone_raised(p, f"{p.tag} ppermute negative src", p.m.ppermute, x, first, [(-1, 0)])
    if N > 1:
        everyone_raised(p, f"{p.tag} ppermute repeated dst", p.m.ppermute, x, first, [(0, 1), (1, 1)])
        everyone_raised(p, f"{p.tag} ppermute repeated src", p.m.ppermute, x, first, [(0, 0), (0, 1)])
    everyone_raised(p, f"{p.tag} ipsum unknown axis", p.m.ipsum, x, "nope")


def mesh_checks(mi, shape, names, group=None, gsize=None, grank=None, record=True):
    tag = f"mesh{shape}{names}" + ("" if group is None else " on a sub-group")
    gsize = n if gsize is None else gsize
    grank = me if grank is None else grank
    ok, m = call(tag + " Mesh()", Mesh, shape, names, group=group) if group is not None else \
        call(tag + " Mesh()", Mesh, shape, names)
    if not ok:
        return
    p = Picture(("mesh", mi, shape, names, group is not None), tag, m, shape, names, gsize, grank, record)
    geometry_checks(p, tag)
    sets = axis_sets(names)
    for axes in sets:
        reduce_checks(p, axes)
        all_gather_checks(p, axes)
        psum_scatter_checks(p, axes)
        all_to_all_checks(p, axes)
        ppermute_checks(p, axes)
    if len(names) == 3:
        for axes in (names, names[::-1]):
            p.replicated = True
            xs, i, x = p.inputs(axes, ("all3", str(axes)), F64, (2, 2), "small")
            check(p, f"{tag} psum axes={axes}", expected_reduce(xs, "sum"), m.psum, x, axes)
            xs, i, x = p.inputs(axes, ("ag3", str(axes)), I32, (2,))
            check(p, f"{tag} all_gather axes={axes}", ex_all_gather(xs, 0, False), m.all_gather, x, axes)
            p.replicated = False
            xs, i, x = p.inputs(axes, ("a2a3", str(axes)), F32, (gsize, 2))
            check(p, f"{tag} all_to_all axes={axes}", ex_all_to_all(xs, i, 0, 1, False), m.all_to_all, x, axes, 0,
                  1)
    nonblocking_checks(p, sets)
    error_checks(p)


def mesh_errors():
    """Meshes that cannot be built: a ValueError on every rank, and the world still works."""
    base = Picture(("base",), "world mesh", None, (n,), ("w",), n, me, False)
    ok, wm = call("world mesh", Mesh, (n,), ("w",))
    if not ok:
        return
    base.m = wm
    everyone_raised(base, "Mesh((n+1,)) size mismatch", Mesh, (n + 1,), ("x",))
    everyone_raised(base, "Mesh((n, 2)) size mismatch", Mesh, (n, 2), ("x", "y"))
    everyone_raised(base, "Mesh duplicated axis names", Mesh, (1, n), ("x", "x"))
    everyone_raised(base, "Mesh names shorter than shape", Mesh, (1, n), ("x",))


def subgroup_checks():
    """A mesh over a sub-group from split(): coordinates are in that group's ranks."""
    if n < 2:
        return
    half = c.g.split(color=me % 2)
    hs, hr = half.size(), half.rank()
    shapes = [((hs,), ("h",))] + ([((2, hs // 2), ("p", "q"))] if hs % 2 == 0 and hs >= 4 else [])
    for shape, names in shapes:
        tag = f"sub-group mesh{shape}{names}"
        ok, m = call(tag + " Mesh()", Mesh, shape, names, group=half)
        if not ok:
            continue
        p = Picture(("sub", shape, me % 2), tag, m, shape, names, hs, hr, False)
        p.replicated = False
        geometry_checks(p, tag)
        for axes in axis_sets(names):
            xs, i, x = p.inputs(axes, ("subpsum", str(axes)), F64, (3,), "small")
            check(p, f"{tag} psum axes={axes}", expected_reduce(xs, "sum"), m.psum, x, axes)
            xs, i, x = p.inputs(axes, ("subag", str(axes)), I32, (2,))
            check(p, f"{tag} all_gather axes={axes}", ex_all_gather(xs, 0, False), m.all_gather, x, axes)
            N = len(p.members(axes))
            perm = [(j, (j + 1) % N) for j in range(N)]
            xs, i, x = p.inputs(axes, ("subpp", str(axes)), F32, (2,))
            check(p, f"{tag} ppermute axes={axes}", ex_ppermute(xs, i, perm), m.ppermute, x, axes, perm)
        # The sub-group mesh's members are world ranks of one parity.
        ok, g = call(tag + " group", m.group, names[0] if len(names) == 1 else names)
        if ok:
            got = cl.all_gather(np.array([me], np.int64), group=g)
            c.equal(got, np.arange(me % 2, n, 2, dtype=np.int64), tag + " members are the half's world ranks",
                    record=False)
    # A mismatched mesh over the sub-group.
    base = Picture(("subbase", me % 2), "sub-group mesh", None, (hs,), ("h",), hs, hr, False)
    ok, base.m = call("sub-group base mesh", Mesh, (hs,), ("h",), group=half)
    if ok:
        everyone_raised(base, "sub-group Mesh size mismatch", Mesh, (hs + 1,), ("h",), group=half)


for mi, (shape, names) in enumerate(MESHES.get(n, [((n,), ("x",))])):
    mesh_checks(mi, shape, names)
mesh_errors()
subgroup_checks()
c.finish()
