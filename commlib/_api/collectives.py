"""The functions of API.md: normalise arrays, check arguments, run an algorithm.

Every argument is checked before a byte is sent, so a bad call raises the
same ValueError/TypeError on every rank that makes it. Arrays are accepted
in any form np.asarray takes without copying; non-contiguous input is
packed once. Algorithms work on flat contiguous buffers by address.
"""
import functools
import zlib

import numpy as np

import commlib._debug as _debug
import commlib._kernels as _kernels
import commlib._tracecall as _tracecall
from .._algorithms import choose, decide, doubling, hier, logstep, pairwise, ring, tree
from .._plan import RES, even, slots
from .._wire import COLL as _WIRE_COLL
from .._dtypes import check_op, dtype_code, dtype_of, op_code
from .._engine.p2p import EAGER_BYTES
from .._kernels import address as _addr
from . import lifecycle


def _g(group):
    if group is not None:
        return group
    w = lifecycle._world
    return w if w is not None else lifecycle.init()


# ----------------------------------------------------------------- arrays
def _array(x, what="x"):
    """(contiguous array, wire dtype code) for any array-like, copying only if strided."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    if a.dtype == object:
        raise TypeError(f"{what}: cannot communicate an object array; use the *_obj functions")
    code = dtype_code(a.dtype)
    if not a.flags.c_contiguous:
        packed = np.empty(a.shape, a.dtype)
        _kernels.pack(a, packed.reshape(-1).view(np.uint8))
        a = packed
    return a, code


def _writable(x, what):
    a = x if type(x) is np.ndarray else np.asarray(x)
    if not a.flags.writeable:
        raise ValueError(f"{what} is read-only")
    dtype_code(a.dtype)
    return a


_LOGICAL = (op_code("land"), op_code("lor"))
_LEGAL = {}  # (op as given, dtype code) -> op code, for pairs already checked


def _reduction(op, code):
    """Op code for `op` on dtype `code`; ValueError naming both if it does not apply."""
    try:
        return _LEGAL[op, code]
    except (KeyError, TypeError):  # TypeError: an unhashable op, reported by op_code
        opc = op_code(op)
        check_op(code, opc)
        if len(_LEGAL) < 256:
            _LEGAL[op, code] = opc
        return opc


def _identity(out, a, opc):
    """A reduction over one rank: a itself, except that land/lor still give 0/1."""
    if opc in _LOGICAL:
        np.not_equal(a, 0, out=out, casting="unsafe")
    elif out is not a and _addr(out) != _addr(a):
        np.copyto(out, a)


# ------------------------------------------------------------ collectives
def _all_reduce(g, x, op="sum", out=None):
    """Element-wise reduction of x over all ranks; `out=x` reduces in place and returns x."""
    a, code = _array(x)
    opc = _reduction(op, code)
    if out is None:
        res = target = np.empty(a.shape, a.dtype)
    elif out is a and a.flags.writeable:  # in place on a contiguous array: already checked
        res = target = a
    else:
        target = _writable(out, "out")
        if target.shape != a.shape or target.dtype != a.dtype:
            raise ValueError(f"out has shape {target.shape} and dtype {target.dtype}, "
                             f"x has {a.shape} and {a.dtype}")
        res = target if target.flags.c_contiguous else np.empty(a.shape, a.dtype)
    if g._size == 1:
        _identity(res, a, opc)
    else:
        o = g.op("all_reduce", code, opc, a.size, 0, dims=a.shape)
        numbers, layout = g.hosts()
        algo = choose("all_reduce", a.nbytes, g._size, layout)
        plan = (_HOSTED[algo](numbers, g._rank) if algo in _HOSTED else _ALL_REDUCE[algo](g._size, g._rank))
        scratch = g.scratch(a.nbytes) if plan.name == "doubling" else 0
        o.run(plan, slots(_addr(a), _addr(res), scratch), even(a.size, a.itemsize))
    if res is not target:
        target[...] = res
    return out if out is not None else res


def _all_gather(g, x, out=None, coll="all_gather"):
    """Ranks' x concatenated along axis 0 (a 0-d x gives shape (size,)).

    out: a C-contiguous array of x's dtype and size * x.size elements to gather
    into (commlib.MPI); x may already be this rank's block of it (in place).
    coll: the collective the header names (all_gather_obj: an object all-gather's first round).
    """
    a, code = _array(x)
    n = g._size
    if out is None:
        out = np.empty((n,) if a.ndim == 0 else (n * a.shape[0],) + a.shape[1:], a.dtype)
    else:
        _check_out(out, a, n * a.size)
    flat = out.reshape(-1)
    mine = flat[g._rank * a.size:(g._rank + 1) * a.size]
    if a.size and _addr(mine) != _addr(a):
        mine[...] = a.reshape(-1)
    if n > 1:
        o = g.op(coll, code, 0, a.size, 0, dims=a.shape)
        numbers, layout = g.hosts()
        algo = choose("all_gather", n * a.nbytes, n, layout)
        plan = (g.ring_all_gather() if algo == "ring" else hier.all_gather(numbers, g._rank) if algo == "leaders"
                else _ALL_GATHER[algo](n, g._rank))
        o.run(plan, slots(res=_addr(out), scratch=g.scratch(n * a.nbytes) if plan.name == "bruck" else 0),
              even(n * a.size, a.itemsize))
    return out


def _all_gather_user(g, x, out):
    """all_gather as API.md has it: `out` must be exactly the result's array; without one the
    result may be a recycled buffer (`Group.recycled`), never one the caller still holds."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    n = g._size
    shape = (n,) if a.ndim == 0 else (n * a.shape[0],) + a.shape[1:]
    if out is None:
        a, code = _array(a)
        return _all_gather(g, a, g.recycled(shape, a.dtype))
    if type(out) is not np.ndarray:
        raise ValueError(f"rank {g._rank}: all_gather: out must be a NumPy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != a.dtype or not out.flags.c_contiguous:
        raise ValueError(f"rank {g._rank}: all_gather: out must be a C-contiguous {a.dtype} array of shape "
                         f"{shape}, got {'a non-contiguous ' if not out.flags.c_contiguous else ''}"
                         f"{out.dtype} array of shape {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"rank {g._rank}: all_gather: out is read-only")
    if a.size and np.may_share_memory(a, out) and (
            not a.flags.c_contiguous or _addr(a) != _addr(out) + g._rank * a.nbytes):
        raise ValueError(f"rank {g._rank}: all_gather: x overlaps out other than as this rank's block of it")
    return _all_gather(g, a, out)


def _reduce_scatter(g, x, op="sum", out=None):
    """Reduce x over ranks; rank r gets block r of the result along axis 0.

    out: a C-contiguous array of x's dtype and x.size / size elements to
    reduce into (commlib.torch); it must not overlap x.
    """
    a, code = _array(x)
    opc = _reduction(op, code)
    n, r = g._size, g._rank
    if a.ndim == 0 or a.shape[0] % n:
        raise ValueError(f"reduce_scatter: x.shape[0] must be divisible by the group size {n}, "
                         f"got shape {a.shape}")
    if out is None:
        out = np.empty((a.shape[0] // n,) + a.shape[1:], a.dtype)
    else:
        _check_out(out, a, a.size // n)
        if np.may_share_memory(out, a):
            raise ValueError(f"rank {r}: reduce_scatter: out overlaps x")
    if n == 1:
        _identity(out.reshape(a.shape), a, opc)
        return out
    count = out.size
    o = g.op("reduce_scatter", code, opc, a.size, 0, dims=a.shape)
    algo = choose("reduce_scatter", a.nbytes, n)
    if algo == "halving" and n & (n - 1) == 0:  # log2 n steps on a copy of x in scratch, then block r
        o.run(logstep.reduce_scatter(n, r), slots(_addr(a), _addr(out), g.scratch(a.nbytes)),
              even(a.size, a.itemsize))
    elif algo == "pairwise":  # rank r's block of every rank straight to rank r, reduced into out
        o.run(pairwise.reduce_scatter(n, r), slots(_addr(a), _addr(out)), even(a.size, a.itemsize))
    elif algo != "ring":  # doubling (also a forced "halving" where n is not a power of two): an all-reduce
        full = np.empty(a.shape, a.dtype)
        o.run(doubling.all_reduce(n, r), slots(_addr(a), _addr(full), g.scratch(a.nbytes)),
              even(a.size, a.itemsize))
        out.reshape(-1)[...] = full.reshape(-1)[r * count:(r + 1) * count]
    else:  # the ring: blocks in transit in two one-block temporaries, this rank's block into out
        tmp = np.empty(2 * count if n > 2 else 0, a.dtype)
        o.run(ring.reduce_scatter(n, r), slots(_addr(a), _addr(out), 0, _addr(tmp), _addr(tmp) + count * a.itemsize),
              even(a.size, a.itemsize))
    return out


def _broadcast(g, x, root=0, coll="broadcast"):
    """Root's array on every rank; writes into x when it is writable and returns it.
    coll: the collective the header names (broadcast_obj: an object broadcast's first round)."""
    root = g.check_rank(root, "root")
    a = x if type(x) is np.ndarray else np.asarray(x)
    code = dtype_code(a.dtype)
    if g._size == 1:
        return x
    is_root = g._rank == root
    if is_root:
        buf = a if a.flags.c_contiguous else _array(a)[0]
    elif a.flags.writeable and a.flags.c_contiguous:
        buf = a
    else:
        buf = np.empty(a.shape, a.dtype)
    o = g.op(coll, code, 0, a.size, root, dims=a.shape)
    _run_broadcast(o, g, _addr(buf), a.nbytes, root)
    if is_root or buf is a:
        return x
    if a.flags.writeable:
        a[...] = buf
        return x
    return buf


def _reduce(g, x, op="sum", root=0, out=None):
    """Reduction of x over ranks on root; None elsewhere.

    out: on root, a C-contiguous array of x's dtype and size to reduce into
    (commlib.MPI); it may be x itself.
    """
    root = g.check_rank(root, "root")
    a, code = _array(x)
    opc = _reduction(op, code)
    is_root = g._rank == root
    if is_root and out is not None:
        _check_out(out, a, a.size)
    if g._size == 1:
        res = np.empty(a.shape, a.dtype) if out is None else out.reshape(a.shape)
        _identity(res, a, opc)
        return res if out is None else out
    o = g.op("reduce", code, opc, a.size, root, dims=a.shape)
    numbers, layout = g.hosts()
    algo = choose("reduce", a.nbytes, g._size, layout)
    order = g.ring_order() if algo == "chain" else None  # (ranks placed round-robin: the chain by host)
    plan = (tree.reduce_chain_in(order, g._rank, root) if order is not None else
            hier.reduce(numbers, g._rank, root) if algo == "leaders" else
            hier.reduce_rails(numbers, g._rank, root) if algo == "rails" else
            (tree.reduce_chain if algo == "chain" else tree.reduce_tree)(g._size, g._rank, root))
    acc = None
    if RES in plan.slots:  # this rank accumulates its children's data (a leaf sends x itself)
        if is_root and out is not None and _addr(out) != _addr(a):
            acc = out.reshape(a.shape)
        else:
            acc = np.empty(a.shape, a.dtype)
    o.run(plan, slots(_addr(a), _addr(acc) if acc is not None else 0), even(a.size, a.itemsize))
    if not is_root:
        return None
    if out is None:
        return acc
    if acc is None or _addr(acc) != _addr(out):
        out.reshape(-1)[...] = (a if acc is None else acc).reshape(-1)
    return out


def _gather(g, x, root=0, out=None):
    """Ranks' x concatenated along axis 0 on root (0-d x: shape (size,)); None elsewhere.

    out: on root, a C-contiguous array of x's dtype and size * x.size elements
    to gather into (commlib.MPI); x may already be root's block of it.
    """
    root = g.check_rank(root, "root")
    a, code = _array(x)
    n = g._size
    if g._rank != root:
        out = None
    elif out is None:
        out = np.empty((n,) if a.ndim == 0 else (n * a.shape[0],) + a.shape[1:], a.dtype)
    else:
        _check_out(out, a, n * a.size)
    if n == 1:
        if a.size and _addr(out) != _addr(a):
            out.reshape(-1)[:] = a.reshape(-1)
        return out
    o = g.op("gather", code, 0, a.size, root, dims=a.shape)
    if choose("gather", n * a.nbytes, n) == "tree" and a.nbytes:
        plan, scratch = tree.gather_tree(n, g._rank, root), _subtree_scratch(g, root, a.nbytes)
    else:
        plan, scratch = tree.gather_linear(n, g._rank, root), 0
    o.run(plan, slots(_addr(a), _addr(out) if out is not None else 0, scratch), even(n * a.size, a.itemsize))
    return out


def _subtree_scratch(g, root, block):
    """SCRATCH's address for the binomial gather or scatter (tree.scratch_blocks): this rank's
    subtree's blocks, addressed from its relative rank (the address of block 0, which lies before
    the buffer, is what the plan adds block offsets to); 0 for a leaf."""
    blocks, first = tree.scratch_blocks(g._size, g._rank, root)
    return g.scratch(blocks * block) - first * block if blocks else 0


def _scatter(g, x, root=0, out=None):
    """Block r (along axis 0) of root's x on rank r; non-roots' x is ignored.

    out: a C-contiguous array to receive the block into (commlib.MPI; every
    rank knows the block's dtype and size, so no metadata goes first); on root
    it may already be root's block of x.
    """
    root = g.check_rank(root, "root")
    n = g._size
    if g._rank == root:
        a, code = _array(x)
        if a.ndim == 0 or a.shape[0] % n:
            raise ValueError(f"scatter: root's x.shape[0] must be divisible by the group size {n}, "
                             f"got shape {a.shape}")
        meta = np.array([code, a.ndim] + [a.shape[0] // n] + list(a.shape[1:]), dtype=np.int64)
        if out is not None:
            _check_out(out, a, a.size // n)
    else:
        a, meta = None, None
        if out is not None:
            _check_out(out, out, out.size if isinstance(out, np.ndarray) else -1)
    if out is not None:
        code = dtype_code(out.dtype)
        if n == 1:
            if out.size and _addr(out) != _addr(a):
                out.reshape(-1)[...] = a.reshape(-1)
            return out
        o = g.op("scatter", code, 0, out.size * n, root, dims=(out.size,))
        _run_scatter(o, g, a, out, root)
        return out
    if n == 1:
        return a.copy()
    # Only the root knows the block's dtype and shape: send them first (one
    # small broadcast), so non-roots may pass None.
    header = _broadcast_meta(meta, root, g)
    code, ndim = int(header[0]), int(header[1])
    shape = tuple(int(d) for d in header[2:2 + ndim])
    out = np.empty(shape, dtype_of(code))
    o = g.op("scatter", code, 0, out.size * n, root, dims=shape)
    _run_scatter(o, g, a, out, root)
    return out


def _run_scatter(o, g, a, out, root):
    n = g._size
    if choose("scatter", n * out.nbytes, n) == "tree" and out.nbytes:
        plan, scratch = tree.scatter_tree(n, g._rank, root), _subtree_scratch(g, root, out.nbytes)
    else:
        plan, scratch = tree.scatter_linear(n, g._rank, root), 0
    o.run(plan, slots(_addr(a) if a is not None else 0, _addr(out), scratch), even(n * out.nbytes, 1))


def _run_broadcast(o, g, addr, nbytes, root):
    """The broadcast schedule choose() picks, on nbytes at addr (in place)."""
    numbers, layout = g.hosts()
    algo = choose("broadcast", nbytes, g._size, layout)
    order = g.ring_order() if algo == "chain" else None  # (ranks placed round-robin: the chain by host)
    if order is not None:
        plan = tree.broadcast_chain_in(order, g._rank, root)
    elif algo == "leaders":
        plan = hier.broadcast(numbers, g._rank, root)
    elif algo == "scatter_gather" and layout is not None:  # by host: among the leaders, then within hosts
        plan = hier.broadcast_large(numbers, g._rank, root)
    else:
        plan = _BROADCAST[algo](g._size, g._rank, root)
    o.run(plan, slots(res=addr), even(nbytes, 1))


def _check_out(out, a, count):
    """`out` must be a writable C-contiguous ndarray of a's dtype and `count` elements."""
    if (type(out) is not np.ndarray or out.dtype != a.dtype or out.size != count or not out.flags.c_contiguous
            or not out.flags.writeable):
        raise ValueError(f"out must be a writable C-contiguous {a.dtype} array of {count} elements, got "
                         f"{type(out).__name__}" + (f" of {out.dtype}, {out.size} elements" if
                                                    isinstance(out, np.ndarray) else ""))


def _broadcast_meta(meta, root, g):
    """Broadcast a short int64 vector (at most 34 values) known only to root."""
    buf = np.zeros(34, dtype=np.int64)
    if meta is not None:
        if meta.size > 33:
            raise ValueError("arrays of more than 32 dimensions are not supported")
        buf[0] = meta.size
        buf[1:1 + meta.size] = meta
    _broadcast(g, buf, root)
    return buf[1:1 + int(buf[0])]


def _all_to_all(g, x, split_axis=0, concat_axis=0):
    """Distributed transpose: block j of x along split_axis goes to rank j; received blocks
    are concatenated along concat_axis in rank order."""
    a = x if type(x) is np.ndarray else np.asarray(x)
    code = dtype_code(a.dtype)
    n = g._size
    if a.ndim == 0:
        raise ValueError("all_to_all needs an array with at least one dimension")
    split_axis, concat_axis = _axis(split_axis, a.ndim, "split_axis"), _axis(concat_axis, a.ndim, "concat_axis")
    if a.shape[split_axis] % n:
        raise ValueError(f"all_to_all: x.shape[{split_axis}] = {a.shape[split_axis]} is not divisible by "
                         f"the group size {n}")
    # the n blocks to send, consecutive in one buffer (x itself when it is split along its first axis)
    if split_axis == 0 and a.flags.c_contiguous:
        send = a.reshape((n, a.shape[0] // n) + a.shape[1:])
    else:
        send = np.stack(np.split(a, n, axis=split_axis))
    block = send.shape[1:]
    recv = np.empty((n,) + block, a.dtype)  # with concat_axis 0, the result itself
    if n == 1:
        recv[...] = send
    else:
        o = g.op("all_to_all", code, 0, a.size, 0, shape=split_axis * 64 + concat_axis, dims=a.shape)
        numbers, layout = g.hosts()
        algo = choose("all_to_all", send.nbytes, n, layout)
        if algo == "rails":
            plan, scratch = hier.all_to_all_rails(numbers, g._rank), g.scratch(send.nbytes)
        elif algo == "bruck":
            plan, scratch = logstep.all_to_all(n, g._rank), g.scratch(send.nbytes)
        else:
            plan, scratch = pairwise.all_to_all(n, g._rank), 0
        o.run(plan, slots(_addr(send), _addr(recv), scratch), even(n * send[0].size, a.itemsize))
    if concat_axis == 0:
        return recv.reshape((n * block[0],) + block[1:])
    return np.concatenate(recv, axis=concat_axis)


def _axis(axis, ndim, what):
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{what}={axis!r} is out of range for an array with {ndim} dimensions")
    return int(axis) % ndim


def _ppermute(g, x, perm):
    """Send x along the (src, dst) pairs of perm; returns what this rank received, zeros if nothing."""
    a, code = _array(x)
    pairs = []
    for pair in perm:
        try:
            s, d = pair
        except (TypeError, ValueError):
            raise ValueError(f"ppermute: perm entries must be (src, dst) pairs, got {pair!r}") from None
        pairs.append((g.check_rank(s, "ppermute src"), g.check_rank(d, "ppermute dst")))
    for i, what in ((0, "source"), (1, "destination")):
        seen = [p[i] for p in pairs]
        dup = {r for r in seen if seen.count(r) > 1}
        if dup:
            raise ValueError(f"ppermute: rank {min(dup)} appears twice as a {what} in perm {list(perm)}")
    me = g._rank
    dst = next((d for s, d in pairs if s == me), None)
    src = next((s for s, d in pairs if d == me), None)
    out = np.zeros(a.shape, a.dtype)
    if g._size == 1:
        if dst == 0:
            np.copyto(out, a)
        return out
    o = g.op("ppermute", code, 0, a.size, 0,
             shape=zlib.crc32(repr(sorted(pairs)).encode()), dims=a.shape)
    plan = pairwise.ppermute(me, dst, src)
    if len(plan):
        o.run(plan, slots(_addr(a), _addr(out)), even(a.size, a.itemsize))
    return out


def _barrier(g):
    """Return when every rank of the group has entered."""
    if g._size > 1:
        g.op("barrier", 0, 0, 0).run(_barrier_plan(g, choose("barrier", 0, g._size, g.hosts()[1])), slots(), even(0, 1))


def _barrier_plan(g, algo):
    return hier.barrier(g.hosts()[0], g._rank) if algo == "leaders" else doubling.barrier(g._size, g._rank)




# ------------------------------------------------------ the one-call path
# Small blocking collectives on an idle stream run as one call of the group's
# `FastPath` (_transport/_fast.pxi): same checks, header and schedule as the
# functions above, without a Python call per step. It answers NotImplemented
# for anything it does not take (then the functions above run, and raise
# whatever error the arguments deserve).
_ALL_REDUCE = {"doubling": doubling.all_reduce, "ring": ring.all_reduce, "rabenseifner": logstep.all_reduce}
_HOSTED = {"rails": hier.all_reduce_rails, "leaders": hier.all_reduce}  # of (host numbers, rank)
_BROADCAST = {"tree": tree.broadcast_tree, "chain": tree.broadcast_chain, "linear": tree.broadcast_linear,
              "scatter_gather": tree.broadcast_scatter_gather}
_ALL_GATHER = {"ring": ring.all_gather, "bruck": logstep.all_gather, "pairwise": pairwise.all_gather}


def _limit(kind, size, algo, layout):
    """Largest power of two <= EAGER_BYTES up to which choose() picks `algo` at every size; 0 if none."""
    limit, p = 0, 8
    try:
        while p <= EAGER_BYTES and decide(kind, p, size, layout) == algo:
            limit, p = p, p * 2
    except ValueError:  # a bad COMMLIB_ALGO_<KIND>: the Python path reports it on that collective
        return 0
    return limit


def _arm(g):
    """Give g its one-call path once its collective connections can exist (after a first collective).

    It runs, up to the eager limit, the plans choose() picks at every size up to that limit: the
    same cached plans as the functions above.
    """
    n, r = g.size(), g.rank()
    if n < 2:
        return
    numbers, layout = g.hosts()

    def small(kind):  # the algorithm at 8 B; None for a bad COMMLIB_ALGO_<KIND> (the Python path reports it)
        try:
            return decide(kind, 8, n, layout)
        except ValueError:
            return None

    gather, bcast, red, sync = small("all_gather"), small("broadcast"), small("reduce"), small("barrier")
    plans, limits = {"all_reduce": doubling.all_reduce(n, r)}, {"all_reduce": _limit("all_reduce", n, "doubling", layout)}
    if sync is not None:
        plans["barrier"] = _barrier_plan(g, sync)
    if gather in ("bruck", "leaders", "ring"):
        plans["all_gather"] = (logstep.all_gather(n, r) if gather == "bruck" else hier.all_gather(numbers, r)
                               if gather == "leaders" else g.ring_all_gather())
        limits["all_gather"] = _limit("all_gather", n, gather, layout)
    if bcast in ("tree", "linear", "leaders"):
        plans["broadcast"] = functools.partial(*((hier.broadcast, numbers) if bcast == "leaders"
                                                 else (_BROADCAST[bcast], n)), r)
        limits["broadcast"] = _limit("broadcast", n, bcast, layout)
    if red in ("tree", "leaders"):
        plans["reduce"] = functools.partial(*((hier.reduce, numbers) if red == "leaders" else (tree.reduce_tree, n)), r)
        limits["reduce"] = _limit("reduce", n, red, layout)
    if n & (n - 1) == 0:  # recursive halving runs at power-of-two n only
        plans["reduce_scatter"] = logstep.reduce_scatter(n, r)
        limits["reduce_scatter"] = _limit("reduce_scatter", n, "halving", layout)
    g.arm(plans, limits)
    if g.fast is not None:  # what each plan is, for the records of a trace
        algos = {"all_reduce": "doubling", "barrier": sync, "all_gather": gather, "all_gather_obj": gather,
                 "broadcast": bcast, "broadcast_obj": bcast, "reduce": red, "reduce_scatter": "halving"}
        g.fast.set_algos({_WIRE_COLL[kind]: 1 + _tracecall.ALGORITHMS.index(algo) for kind, algo in algos.items()
                          if algo is not None})
    if _debug.LEVEL:
        _debug.log(_debug.INFO, lambda: f"group {g.gid} ({n} ranks): the one-call path takes "
                   + ", ".join(f"{kind} up to {limit} B" for kind, limit in limits.items() if limit))


def _python_path(g, fn, *args):
    """A blocking collective the one-call path did not take: fn on the group's stream; the first
    one of a group also arms its one-call path (its connections exist from then on)."""
    res = g.stream.run(fn, g, *args)
    if g.fast is None:
        _arm(g)
    return res


# ------------------------------------------------- blocking and i variants
# Each collective runs on its group's ordered stream: inline when the group has
# nothing pending (the fast path), else behind the pending ones. The i variant
# queues on the stream and returns a Request at once; arguments are checked when
# it runs, and a bad one is raised by wait().
def all_reduce(x, op="sum", *, out=None, group=None):
    """Element-wise reduction of x over all ranks; `out=x` reduces in place and returns x."""
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.all_reduce(x, op, out)
        if res is not NotImplemented:
            return res
    return _python_path(g, _all_reduce, x, op, out)


def iall_reduce(x, op="sum", *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("iall_reduce", _all_reduce, g, x, op, out)


# all_sum & co. call all_reduce by this name, which tracing (commlib._trace) does not replace: their
# call is recorded once, as itself, without a second wrapper's cost inside it
_all_reduce_call = all_reduce


def all_sum(x, *, group=None):
    return _all_reduce_call(x, "sum", group=group)


def all_prod(x, *, group=None):
    return _all_reduce_call(x, "prod", group=group)


def all_min(x, *, group=None):
    return _all_reduce_call(x, "min", group=group)


def all_max(x, *, group=None):
    return _all_reduce_call(x, "max", group=group)


def all_gather(x, *, out=None, group=None):
    """Ranks' x concatenated along axis 0 (a 0-d x gives shape (size,)); out: gather into it, return it."""
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.all_gather(x, out)
        if res is not NotImplemented:
            return res
    return _python_path(g, _all_gather_user, x, out)


def gather_slots(slot, out, coll, group):
    """all_gather of this rank's uint8 `slot` into `out` (size * slot.size, this rank's block may be
    `slot` itself) as collective `coll`: the object collectives' fixed-size first round, on the
    one-call path when the group is idle."""
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.all_gather(slot, out, _WIRE_COLL[coll])
        if res is not NotImplemented:
            return res
    return _python_path(g, _all_gather, slot, out, coll)


def broadcast_slot(slot, root, coll, group):
    """broadcast of root's uint8 `slot` into `slot` on every rank as collective `coll` (the object
    collectives' fixed-size first round), on the one-call path when the group is idle."""
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.broadcast(slot, root, _WIRE_COLL[coll])
        if res is not NotImplemented:
            return res
    return _python_path(g, _broadcast, slot, root, coll)


def iall_gather(x, *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("iall_gather", _all_gather_user, g, x, out)


def reduce_scatter(x, op="sum", *, out=None, group=None):
    """Reduce x over ranks; rank r gets block r of the result along axis 0.

    out: a C-contiguous array of x's dtype and x.size / size elements, not overlapping x, to
    write the block into (returned); ValueError otherwise.
    """
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.reduce_scatter(x, op, out)
        if res is not NotImplemented:
            return res
    return _python_path(g, _reduce_scatter, x, op, out)


def ireduce_scatter(x, op="sum", *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("ireduce_scatter", _reduce_scatter, g, x, op, out)


def broadcast(x, root=0, *, group=None):
    """Root's array on every rank; writes into x when it is writable and returns it."""
    g = _g(group)
    f = g.fast
    if f is not None:
        res = f.broadcast(x, root)
        if res is not NotImplemented:
            return res
    return _python_path(g, _broadcast, x, root)


def ibroadcast(x, root=0, *, group=None):
    g = _g(group)
    return g.stream.submit("ibroadcast", _broadcast, g, x, root)


def reduce(x, op="sum", root=0, *, out=None, group=None):
    """Reduction of x over ranks on root; None elsewhere.

    out (root only; ignored elsewhere): a C-contiguous array of x's dtype and size to reduce into
    (it may be x itself), returned on root; ValueError otherwise.
    """
    g = _g(group)
    f = g.fast
    if f is not None and out is None:
        res = f.reduce(x, op, root)
        if res is not NotImplemented:
            return res
    return _python_path(g, _reduce, x, op, root, out)


def ireduce(x, op="sum", root=0, *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("ireduce", _reduce, g, x, op, root, out)


def gather(x, root=0, *, out=None, group=None):
    """Ranks' x concatenated along axis 0 on root (0-d x: shape (size,)); None elsewhere.

    out (root only; ignored elsewhere): a C-contiguous array of x's dtype and size * x.size
    elements to gather into (x may already be root's block of it), returned on root.
    """
    g = _g(group)
    return g.stream.run(_gather, g, x, root, out)


def igather(x, root=0, *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("igather", _gather, g, x, root, out)


def scatter(x, root=0, *, out=None, group=None):
    """Block r (along axis 0) of root's x on rank r; non-roots' x is ignored.

    out: an array to receive the block into, on every rank (then no rank needs to learn the
    block's dtype and shape from the root first): C-contiguous, of root's dtype and x.size / size
    elements (on root it may be root's block of x); returned.
    """
    g = _g(group)
    return g.stream.run(_scatter, g, x, root, out)


def iscatter(x, root=0, *, out=None, group=None):
    g = _g(group)
    return g.stream.submit("iscatter", _scatter, g, x, root, out)


def all_to_all(x, split_axis=0, concat_axis=0, *, group=None):
    """Distributed transpose: block j of x along split_axis goes to rank j; received blocks
    are concatenated along concat_axis in rank order."""
    g = _g(group)
    return g.stream.run(_all_to_all, g, x, split_axis, concat_axis)


def iall_to_all(x, split_axis=0, concat_axis=0, *, group=None):
    g = _g(group)
    return g.stream.submit("iall_to_all", _all_to_all, g, x, split_axis, concat_axis)


def ppermute(x, perm, *, group=None):
    """Send x along the (src, dst) pairs of perm; returns what this rank received, zeros if nothing."""
    g = _g(group)
    return g.stream.run(_ppermute, g, x, perm)


def ippermute(x, perm, *, group=None):
    g = _g(group)
    return g.stream.submit("ippermute", _ppermute, g, x, perm)


def barrier(*, group=None):
    """Return when every rank of the group has entered."""
    g = _g(group)
    f = g.fast
    if f is not None and f.barrier() is not NotImplemented:
        return None
    _python_path(g, _barrier)


def ibarrier(*, group=None):
    g = _g(group)
    return g.stream.submit("ibarrier", _barrier, g)
