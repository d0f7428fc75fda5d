"""`mlx.core.distributed`'s API over commlib: MLX arrays in, MLX arrays out.

    import mlx.core as mx
    from commlib import mlx as dist        # instead of: dist = mx.distributed

    world = dist.init()
    y = dist.all_sum(mx.ones(4))            # an mlx.core.array

Run it under `commrun -n 4 prog.py` (or any launcher commlib.init() knows) on any
machine MLX installs on. The functions take MLX's arguments (`group=`, and
`stream=`, accepted and unused: the bytes move on the host) and give MLX's
results: the same shapes and dtypes, bfloat16 included (through `ml_dtypes`),
with every rank of a group making the same calls in the same order.

Data: an input is read where MLX keeps it (a NumPy view of the evaluated array,
no copy; a bfloat16 one through its buffer); the result is one new MLX array,
copied from commlib's (MLX does not wrap memory it did not allocate). Errors
are commlib's: a bad argument is a ValueError/TypeError naming the problem, a
lost peer a `PeerLost`, a rank calling something else a `MismatchError`.

MLX's backend names (`ring`, `mpi`, `nccl`, `jaccl`, `any`) and `commlib` are
all accepted by init() and is_available(): whichever a program names, its
arrays go over commlib.
"""
import numpy as np

try:
    import mlx.core as mx
except ImportError as e:
    raise ImportError(f"commlib.mlx needs MLX ({e}): pip install 'commlib[mlx]' (on Linux: mlx[cpu])") from e

from . import _api, _rendezvous
from ._api import lifecycle

BACKENDS = ("any", "commlib", "ring", "mpi", "nccl", "jaccl")

# MLX dtype -> NumPy dtype for the dtypes NumPy holds natively (bfloat16 is handled apart)
_NUMPY = {mx.bool_: np.bool_, mx.uint8: np.uint8, mx.uint16: np.uint16, mx.uint32: np.uint32,
          mx.uint64: np.uint64, mx.int8: np.int8, mx.int16: np.int16, mx.int32: np.int32, mx.int64: np.int64,
          mx.float16: np.float16, mx.float32: np.float32, mx.float64: np.float64, mx.complex64: np.complex64}


def _check_backend(backend):
    if backend not in BACKENDS:
        raise ValueError(f"commlib.mlx: unknown backend {backend!r} (expected one of {', '.join(BACKENDS)}; "
                         f"all of them run over commlib)")


def is_available(backend="any"):
    """True: commlib can make a group for any of BACKENDS (init(strict=True) says whether it will)."""
    _check_backend(backend)
    return True


class Group:
    """A group of processes, as `mlx.core.distributed.Group`: rank(), size(), split()."""

    __slots__ = ("_g",)

    def __init__(self, group):
        self._g = group  # the commlib group

    def rank(self):
        return self._g.rank()

    def size(self):
        return self._g.size()

    def split(self, color, key=-1):
        """The processes of this group that pass the same color, ordered by key (-1: by their rank
        here), as a new Group. Every process of this group calls it."""
        color, key = int(color), int(key)
        if color < 0:
            raise ValueError(f"commlib.mlx: rank {self.rank()}: split color must be >= 0, got {color}")
        return Group(self._g.split(color, None if key == -1 else key))

    def __eq__(self, other):
        return isinstance(other, Group) and other._g is self._g

    def __hash__(self):
        return id(self._g)

    def __repr__(self):
        return f"<commlib.mlx.Group rank {self.rank()} of {self.size()}>"


def init(strict=False, backend="any"):
    """The group of every process of the job (the same one on later calls). Outside any launcher: a
    group of one, or a RuntimeError when `strict` (as MLX)."""
    _check_backend(backend)
    if strict and lifecycle.current() is None and _rendezvous.discover() is None:
        raise RuntimeError("commlib.mlx.init(strict=True): no launcher environment found (run under commrun, "
                           "srun, or set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)")
    return Group(_api.init(strict=strict))


def _group(group):
    if group is None:
        return _api.init()
    if not isinstance(group, Group):
        raise TypeError(f"commlib.mlx: group must be a commlib.mlx.Group (from init() or split()), "
                        f"got {type(group).__name__}")
    return group._g


def _bf16():
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("commlib.mlx: bfloat16 arrays need the ml_dtypes package "
                        "(pip install 'commlib[mlx]')") from None
    return ml_dtypes.bfloat16


def _numpy(x, what):
    """x (an mlx array, or anything mx.array takes) as a NumPy array over its data, and its MLX dtype."""
    if not isinstance(x, mx.array):
        try:
            x = mx.array(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"commlib.mlx.{what}: expected an mlx.core.array, got {type(x).__name__} ({e})") from None
    dtype = x.dtype
    if dtype == mx.bfloat16:
        bf16 = _bf16()
        flat = np.frombuffer(mx.contiguous(x), dtype=np.uint16)  # evaluates; row-major, no copy
        return flat.view(bf16).reshape(x.shape), dtype
    if dtype not in _NUMPY:
        raise TypeError(f"commlib.mlx.{what}: {dtype} arrays are not supported")
    return np.asarray(x), dtype


def _mlx(a, dtype):
    """A new MLX array of `dtype` holding NumPy array a (commlib's result)."""
    if dtype == mx.bfloat16:
        return mx.array(np.ascontiguousarray(a).view(np.uint16)).view(mx.bfloat16)
    return mx.array(a, dtype=dtype)  # dtype given: MLX would make float64 float32 otherwise


def _alone(x, a, dtype):
    """A collective's result in a group of one: its input, as MLX returns it."""
    return x if isinstance(x, mx.array) else _mlx(a, dtype)


def _reduce(x, op, group, what):
    a, dtype = _numpy(x, what)
    g = _group(group)
    if g.size() == 1:
        return _alone(x, a, dtype)
    return _mlx(_api.all_reduce(a, op, group=g), dtype)


def all_sum(x, *, group=None, stream=None):
    """The element-wise sum of x over the group's processes."""
    return _reduce(x, "sum", group, "all_sum")


def all_max(x, *, group=None, stream=None):
    """The element-wise maximum of x over the group's processes."""
    return _reduce(x, "max", group, "all_max")


def all_min(x, *, group=None, stream=None):
    """The element-wise minimum of x over the group's processes."""
    return _reduce(x, "min", group, "all_min")


def all_gather(x, *, group=None, stream=None):
    """Every process's x concatenated along the first axis, in rank order."""
    a, dtype = _numpy(x, "all_gather")
    g = _group(group)
    if g.size() == 1:
        return _alone(x, a, dtype)
    return _mlx(_api.all_gather(a, group=g), dtype)


def sum_scatter(x, *, group=None, stream=None):
    """The sum of x over the group, split along the first axis: this process's part
    (x.shape[0] must be a multiple of the group's size)."""
    a, dtype = _numpy(x, "sum_scatter")
    g = _group(group)
    n = g.size()
    if a.ndim == 0 or a.shape[0] % n:
        raise ValueError(f"commlib.mlx.sum_scatter: rank {g.rank()}: the first axis of x (shape {tuple(a.shape)}) "
                         f"must be a multiple of the group's size {n}")
    if n == 1:
        return _alone(x, a, dtype)
    res = _api.reduce_scatter(a, "sum", group=g)
    return _mlx(res.reshape((a.shape[0] // n,) + a.shape[1:]), dtype)


def send(x, dst, *, group=None, stream=None):
    """Send x to the process of rank dst in the group; returns x (as MLX's send returns an array)."""
    a, _ = _numpy(x, "send")
    _api.send(a, int(dst), group=_group(group))
    return x


def recv(shape, dtype, src, *, group=None, stream=None):
    """An array of this shape and MLX dtype, received from the process of rank src."""
    if not isinstance(dtype, mx.Dtype):
        raise TypeError(f"commlib.mlx.recv: dtype must be an mlx.core.Dtype (mx.float32, ...), got {dtype!r}")
    shape = tuple(int(s) for s in shape)
    np_dtype = _bf16() if dtype == mx.bfloat16 else _NUMPY.get(dtype)
    if np_dtype is None:
        raise TypeError(f"commlib.mlx.recv: {dtype} arrays are not supported")
    return _mlx(_api.recv(shape, np_dtype, int(src), group=_group(group)), dtype)


def recv_like(x, src, *, group=None, stream=None):
    """An array of x's shape and dtype, received from the process of rank src."""
    a, dtype = _numpy(x, "recv_like")
    return _mlx(_api.recv(a.shape, a.dtype, int(src), group=_group(group)), dtype)
