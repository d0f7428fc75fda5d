"""The functions of API.md: normalise arrays, check arguments, run an algorithm.

Every argument is checked before a byte is sent, so a bad call raises the
same ValueError/TypeError on every rank that makes it. Arrays are accepted
in any form np.asarray takes without copying; non-contiguous input is
packed once. Algorithms work on flat contiguous buffers by address.
"""
import contextlib
import atexit
import os
import sys
import threading
import time
import zlib

import numpy as np

from . import _io, _kernels
from ._algorithms import choose, doubling, pairwise, ring, tree
from ._dtypes import check_op, dtype_code, dtype_of, op_code
from ._errors import CommError, MismatchError
from ._group import ANY_SOURCE, ANY_TAG, Group, Status, check_message
from ._progress import nonblocking, ordered
from ._transport import CH_COLL
from ._protocol import KIND_P2P, decode, encode

DEFAULT_TIMEOUT_S = 300.0
EAGER_BYTES = 64 << 10

_world = None
_client = None
_finalized = False
_lock = threading.Lock()


# ------------------------------------------------------------------ setup
def is_available():
    """True: the socket backend needs nothing external."""
    return True


def init(strict=False, timeout=None):
    """The world group; the second call returns the same group.

    Finds peers from commrun's COMMLIB_* variables, Slurm's srun variables or
    torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT. Outside any
    launcher it returns a group of size 1 (every collective is the identity),
    or raises CommError when `strict`.
    """
    global _world, _client
    with _lock:
        if _world is not None:
            return _world
        if _finalized:
            raise CommError("commlib.finalize() was called on this rank; the job cannot be joined again")
        from . import _rendezvous
        from ._transport import Endpoint

        if timeout is None:
            raw = os.environ.get("COMMLIB_TIMEOUT", "")
            try:
                timeout = float(raw) if raw else DEFAULT_TIMEOUT_S
            except ValueError:
                raise CommError(f"COMMLIB_TIMEOUT={raw!r} is not a number of seconds") from None
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        env = _rendezvous.discover()
        if env is None:
            if strict:
                raise CommError("commlib.init(strict=True): no launcher environment found "
                                "(run under commrun, srun, or set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)")
            _world = Group(None, 0, [0], 0, timeout)
            return _world
        coordinator = None
        if env.host_coordinator:
            coordinator = _rendezvous.Coordinator(env.size, env.secret, host=env.coordinator[0],
                                                  port=env.coordinator[1])
            coordinator.start()
        ep = Endpoint(env.rank, env.secret, env.coordinator[0], timeout)
        try:
            client = _rendezvous.Client.connect(env.coordinator, env.secret, env.rank, timeout)
            ep.table = client.register(ep.info(), timeout)
        except BaseException:
            ep.close()
            raise
        ep.notify = client.send
        client.start_listener(ep.on_notice)
        _client = client
        _world = Group(ep, 0, list(range(env.size)), env.rank, timeout)
        if env.size > 1:  # the ring neighbour is needed by every large collective: connect now
            ep.outgoing(0, CH_COLL, (env.rank + 1) % env.size, time.monotonic() + timeout, "init")
        _world._coordinator = coordinator
        _install_excepthook(client, env.rank)
        atexit.register(finalize)
        return _world


def finalize():
    """Close this rank's connections; also run at exit. Safe to call twice."""
    global _world, _client, _finalized
    with _lock:
        world, client = _world, _client
        _world = _client = None
        if world is not None and world.ep is not None:
            _finalized = True
    if world is None or world.ep is None:
        return
    world.ep._closed = True
    coordinator = getattr(world, "_coordinator", None)
    if client is not None:
        with contextlib.suppress(OSError):
            client.close()
    world.ep.close()
    if coordinator is not None:
        # This rank hosts the job's coordinator (srun/torchrun): ranks still
        # working need it, so wait for them to leave (bounded by the timeout).
        if not coordinator.wait_until_alone(world.world[world._rank], world.timeout):
            print(f"commlib: rank {world._rank}: closing the coordinator while ranks "
                  f"{coordinator.connected()} are still connected", file=sys.stderr)
        coordinator.close()


def _install_excepthook(client, rank):
    """An uncaught exception tells the job at once, so peers raise PeerLost instead of waiting."""
    previous = sys.excepthook

    def hook(etype, value, tb):
        if _world is not None and not issubclass(etype, (KeyboardInterrupt, SystemExit)):
            try:
                client.send({"kind": "abort", "to": "all", "error": "exception", "rank": rank,
                             "message": f"{etype.__name__}: {value}"})
            except Exception as err:  # the report is best effort; the traceback still prints
                print(f"commlib: could not report the failure to peers: {err}", file=sys.stderr)
        previous(etype, value, tb)

    sys.excepthook = hook


def _g(group):
    if group is not None:
        return group
    return _world if _world is not None else init()


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


_addr = _io.address


# ------------------------------------------------------------ collectives
def all_reduce(x, op="sum", *, out=None, group=None):
    """Element-wise reduction of x over all ranks; `out=x` reduces in place and returns x."""
    g = _g(group)
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
        if choose("all_reduce", a.nbytes, g._size) == "ring":
            ring.all_reduce(o, _addr(a), _addr(res), a.size, a.itemsize)
        else:
            if res is not a and _addr(res) != _addr(a):
                np.copyto(res, a)
            doubling.all_reduce(o, _addr(res), a.nbytes, g.scratch(a.nbytes))
    if res is not target:
        target[...] = res
    return out if out is not None else res


def all_sum(x, *, group=None):
    return all_reduce(x, "sum", group=group)


def all_prod(x, *, group=None):
    return all_reduce(x, "prod", group=group)


def all_min(x, *, group=None):
    return all_reduce(x, "min", group=group)


def all_max(x, *, group=None):
    return all_reduce(x, "max", group=group)


def all_gather(x, *, group=None):
    """Ranks' x concatenated along axis 0 (a 0-d x gives shape (size,))."""
    g = _g(group)
    a, code = _array(x)
    n = g._size
    shape = (n,) if a.ndim == 0 else (n * a.shape[0],) + a.shape[1:]
    out = np.empty(shape, a.dtype)
    flat = out.reshape(-1)
    flat[g._rank * a.size:(g._rank + 1) * a.size] = a.reshape(-1)
    if n > 1:
        o = g.op("all_gather", code, 0, a.size, 0, dims=a.shape)
        ring.all_gather(o, _addr(out), [i * a.size for i in range(n)], [a.size] * n, a.itemsize)
    return out


def reduce_scatter(x, op="sum", *, group=None):
    """Reduce x over ranks; rank r gets block r of the result along axis 0."""
    g = _g(group)
    a, code = _array(x)
    opc = _reduction(op, code)
    n, r = g._size, g._rank
    if a.ndim == 0 or a.shape[0] % n:
        raise ValueError(f"reduce_scatter: x.shape[0] must be divisible by the group size {n}, "
                         f"got shape {a.shape}")
    out = np.empty((a.shape[0] // n,) + a.shape[1:], a.dtype)
    if n == 1:
        _identity(out, a, opc)
        return out
    count = out.size
    o = g.op("reduce_scatter", code, opc, a.size, 0, dims=a.shape)
    tmp = [np.empty(count, a.dtype) for _ in range(2 if n > 2 else 0)]
    dst_of = [0] * n
    for s in range(n - 1):
        dst_of[(r - s - 2) % n] = _addr(out) if s == n - 2 else _addr(tmp[s % 2])
    ring.reduce_scatter(o, _addr(a), dst_of, [i * count for i in range(n)], [count] * n, a.itemsize)
    return out


def broadcast(x, root=0, *, group=None):
    """Root's array on every rank; writes into x when it is writable and returns it."""
    g = _g(group)
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
    o = g.op("broadcast", code, 0, a.size, root, dims=a.shape)
    algo = tree.broadcast_tree if choose("broadcast", a.nbytes, g._size) == "tree" else tree.broadcast_chain
    algo(o, _addr(buf), a.nbytes, root)
    if is_root or buf is a:
        return x
    if a.flags.writeable:
        a[...] = buf
        return x
    return buf


def reduce(x, op="sum", root=0, *, group=None):
    """Reduction of x over ranks on root; None elsewhere."""
    g = _g(group)
    root = g.check_rank(root, "root")
    a, code = _array(x)
    opc = _reduction(op, code)
    is_root = g._rank == root
    if g._size == 1:
        out = np.empty(a.shape, a.dtype)
        _identity(out, a, opc)
        return out
    o = g.op("reduce", code, opc, a.size, root, dims=a.shape)
    chain = choose("reduce", a.nbytes, g._size) == "chain"
    leaf = not chain and (g._rank - root) % g._size % 2 == 1
    acc = None if leaf or (chain and (g._rank - root) % g._size == g._size - 1) else np.empty(a.shape, a.dtype)
    (tree.reduce_chain if chain else tree.reduce_tree)(o, _addr(a), _addr(acc) if acc is not None else 0,
                                                        a.nbytes, root)
    return acc if is_root else None


def gather(x, root=0, *, group=None):
    """Ranks' x concatenated along axis 0 on root (0-d x: shape (size,)); None elsewhere."""
    g = _g(group)
    root = g.check_rank(root, "root")
    a, code = _array(x)
    n = g._size
    out = None
    if g._rank == root:
        out = np.empty((n,) if a.ndim == 0 else (n * a.shape[0],) + a.shape[1:], a.dtype)
    if n == 1:
        out.reshape(-1)[:] = a.reshape(-1)
        return out
    o = g.op("gather", code, 0, a.size, root, dims=a.shape)
    tree.gather_linear(o, _addr(a), _addr(out) if out is not None else 0, a.nbytes, root)
    return out


def scatter(x, root=0, *, group=None):
    """Block r (along axis 0) of root's x on rank r; non-roots' x is ignored."""
    g = _g(group)
    root = g.check_rank(root, "root")
    n = g._size
    if g._rank == root:
        a, code = _array(x)
        if a.ndim == 0 or a.shape[0] % n:
            raise ValueError(f"scatter: root's x.shape[0] must be divisible by the group size {n}, "
                             f"got shape {a.shape}")
        meta = np.array([code, a.ndim] + [a.shape[0] // n] + list(a.shape[1:]), dtype=np.int64)
    else:
        a, meta = None, None
    if n == 1:
        return a.copy()
    # Only the root knows the block's dtype and shape: send them first (one
    # small broadcast), so non-roots may pass None.
    header = _broadcast_meta(meta, root, g)
    code, ndim = int(header[0]), int(header[1])
    shape = tuple(int(d) for d in header[2:2 + ndim])
    out = np.empty(shape, dtype_of(code))
    o = g.op("scatter", code, 0, out.size * n, root, dims=shape)
    tree.scatter_linear(o, _addr(a) if a is not None else 0, _addr(out), out.nbytes, root)
    return out


def _broadcast_meta(meta, root, g):
    """Broadcast a short int64 vector (at most 34 values) known only to root."""
    buf = np.zeros(34, dtype=np.int64)
    if meta is not None:
        if meta.size > 33:
            raise ValueError("arrays of more than 32 dimensions are not supported")
        buf[0] = meta.size
        buf[1:1 + meta.size] = meta
    broadcast(buf, root, group=g)
    return buf[1:1 + int(buf[0])]


def all_to_all(x, split_axis=0, concat_axis=0, *, group=None):
    """Distributed transpose: block j of x along split_axis goes to rank j; received blocks
    are concatenated along concat_axis in rank order."""
    g = _g(group)
    a = x if type(x) is np.ndarray else np.asarray(x)
    code = dtype_code(a.dtype)
    n = g._size
    if a.ndim == 0:
        raise ValueError("all_to_all needs an array with at least one dimension")
    split_axis, concat_axis = _axis(split_axis, a.ndim, "split_axis"), _axis(concat_axis, a.ndim, "concat_axis")
    if a.shape[split_axis] % n:
        raise ValueError(f"all_to_all: x.shape[{split_axis}] = {a.shape[split_axis]} is not divisible by "
                         f"the group size {n}")
    send = [np.ascontiguousarray(b) for b in np.split(a, n, axis=split_axis)]
    recv = [np.empty_like(send[0]) for _ in range(n)]
    if n == 1:
        recv[0][...] = send[0]
    else:
        o = g.op("all_to_all", code, 0, a.size, 0, shape=split_axis * 64 + concat_axis, dims=a.shape)
        pairwise.all_to_all(o, [_addr(b) for b in send], [_addr(b) for b in recv], send[0].nbytes)
    return np.concatenate(recv, axis=concat_axis)


def _axis(axis, ndim, what):
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{what}={axis!r} is out of range for an array with {ndim} dimensions")
    return int(axis) % ndim


def ppermute(x, perm, *, group=None):
    """Send x along the (src, dst) pairs of perm; returns what this rank received, zeros if nothing."""
    g = _g(group)
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
    pairwise.ppermute(o, dst, src, _addr(a), _addr(out), a.nbytes)
    return out


def barrier(*, group=None):
    """Return when every rank of the group has entered."""
    g = _g(group)
    if g._size > 1:
        doubling.barrier(g.op("barrier", 0, 0, 0))


# --------------------------------------------------------- point-to-point
def _tag(tag, allow_any):
    if not isinstance(tag, (int, np.integer)) or (tag < 0 and not (allow_any and tag == ANY_TAG)):
        raise ValueError(f"tag must be a non-negative int{' or ANY_TAG' if allow_any else ''}, got {tag!r}")
    return int(tag)


def _src(g, src):
    return ANY_SOURCE if src == ANY_SOURCE else g.check_rank(src, "src")


def send(x, dst, tag=0, *, group=None):
    """Send x to rank dst; up to 64 KiB returns without waiting for the receiver."""
    g = _g(group)
    dst, tag = g.check_rank(dst, "dst"), _tag(tag, False)
    a, code = _array(x)
    if g._size == 1 and dst == 0:
        g._queue.append((decode(encode(KIND_P2P, 0, code, 0, 0, 0, 0, 0, 0, tag, a.size, a.nbytes)),
                         a.reshape(-1).view(np.uint8).copy()))
        return
    g.send_bytes(_addr(a), a.nbytes, code, a.size, dst, tag)


def recv_into(buf, src, tag=0, *, group=None):
    """Receive into buf (writable array-like); returns a Status."""
    g = _g(group)
    src, tag = _src(g, src), _tag(tag, True)
    a = _writable(buf, "buf")
    code = dtype_code(a.dtype)
    dst = a if a.flags.c_contiguous else np.empty(a.shape, a.dtype)
    u8 = dst.reshape(-1).view(np.uint8)
    expect = None
    if src != ANY_SOURCE and tag != ANY_TAG and g.ep is not None:  # the header a same-shaped send carries
        expect = encode(KIND_P2P, 0, code, 0, 0, g.gid, src, 0, 0, tag, a.size, a.nbytes)
    h, payload = g.recv_bytes(src, tag, "recv", into=u8, expect=expect)
    check_message(h, code, a.nbytes, f"recv(tag={tag})", g.ep.rank if g.ep else 0, g.world)
    if payload is not u8:
        u8[:h.nbytes] = payload
    if dst is not a:
        a[...] = dst
    return Status(h.root, h.tag, h.nbytes, h.count, h.dtype)


def recv(shape, dtype, src, tag=0, *, status=False, group=None):
    """Receive a message of exactly this shape and dtype from src."""
    out = np.empty(shape, dtype)
    st = recv_into(out, src, tag, group=group)
    if st.nbytes != out.nbytes:
        raise MismatchError(
            f"recv posted shape {tuple(out.shape)} {out.dtype} ({out.nbytes} bytes) but rank "
            f"{st.source} sent {st.nbytes} bytes (tag {st.tag})")
    return (out, st) if status else out


def recv_like(x, src, tag=0, *, status=False, group=None):
    """recv with x's shape and dtype."""
    a = np.asarray(x)
    return recv(a.shape, a.dtype, src, tag, status=status, group=group)


def sendrecv(x, dst, src, tag=0, *, group=None):
    """Send x to dst and receive a same-shaped array from src, deadlock-free."""
    g = _g(group)
    dst, src, tag = g.check_rank(dst, "dst"), g.check_rank(src, "src"), _tag(tag, False)
    a, code = _array(x)
    if g._size == 1:
        return a.copy()
    if a.nbytes <= EAGER_BYTES:  # the send cannot block: fits the socket buffer
        send(a, dst, tag, group=group)
        return recv(a.shape, a.dtype, src, tag, group=group)
    out = np.empty(a.shape, a.dtype)
    g.sendrecv_bytes(_addr(a), a.nbytes, code, a.size, dst, out.reshape(-1).view(np.uint8), src, tag)
    return out


def probe(src=ANY_SOURCE, tag=ANY_TAG, *, group=None):
    """Status of the next matching message, waiting for one."""
    g = _g(group)
    return g.probe(_src(g, src), _tag(tag, True), True)


def iprobe(src=ANY_SOURCE, tag=ANY_TAG, *, group=None):
    """Status of a matching message already waiting, else None."""
    g = _g(group)
    return g.probe(_src(g, src), _tag(tag, True), False)


# ------------------------------------------------------- program order, i*
# Every blocking function waits behind pending requests; the i* variants
# queue on the progress thread. (Rebinding here keeps the definitions above
# plain functions that the progress thread itself calls.)
for _name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
              "all_to_all", "ppermute", "barrier", "send", "recv", "recv_into", "recv_like", "sendrecv",
              "probe", "iprobe"):
    globals()[_name] = ordered(globals()[_name])

isend = nonblocking(send.__wrapped__)
irecv = nonblocking(recv.__wrapped__)
iall_reduce = nonblocking(all_reduce.__wrapped__)
iall_gather = nonblocking(all_gather.__wrapped__)
ibroadcast = nonblocking(broadcast.__wrapped__)
ireduce_scatter = nonblocking(reduce_scatter.__wrapped__)
