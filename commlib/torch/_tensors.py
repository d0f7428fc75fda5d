"""Tensors as numpy arrays over the same memory, and torch's reduce ops as commlib's."""
import numpy as np
import torch
import torch.distributed as dist

from .._dtypes import BFLOAT16
from .._kernels import array_at as _array_at

_from_dlpack = np.from_dlpack
_STRIDED = torch.strided
# torch dtype -> numpy dtype for the direct view (the dtypes commlib reduces; bfloat16 with ml_dtypes)
_NP = {torch.bool: np.dtype(np.bool_), torch.int8: np.dtype(np.int8), torch.uint8: np.dtype(np.uint8),
       torch.int16: np.dtype(np.int16), torch.int32: np.dtype(np.int32), torch.int64: np.dtype(np.int64),
       torch.float16: np.dtype(np.float16), torch.float32: np.dtype(np.float32),
       torch.float64: np.dtype(np.float64), torch.complex64: np.dtype(np.complex64),
       torch.complex128: np.dtype(np.complex128)}
for _name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
    if hasattr(torch, _name):
        _NP[getattr(torch, _name)] = np.dtype(_name)
if BFLOAT16 is not None:
    _NP[torch.bfloat16] = np.dtype(BFLOAT16)
_R = dist.ReduceOp.RedOpType
# torch op -> commlib op name; AVG and PREMUL_SUM are a sum plus a scaling (see reduce_op)
OPS = {_R.SUM: "sum", _R.PRODUCT: "prod", _R.MIN: "min", _R.MAX: "max", _R.BAND: "band", _R.BOR: "bor",
       _R.BXOR: "bxor"}
# the same by the enum's integer value: an index is cheaper than hashing the pybind enum (fast path)
SIMPLE = [None] * (1 + max(op.value for op in _R.__members__.values()))
for _op, _name in OPS.items():
    SIMPLE[_op.value] = _name


def array(t, what="tensor"):
    """The tensor's memory as a numpy array (a view: writes reach the tensor); bfloat16 via ml_dtypes.

    Not Tensor.numpy(): numpy() marks the tensor's storage non-resizable for
    good, and FSDP frees its unsharded parameters with storage.resize_(0). A
    dense, contiguous CPU tensor is viewed at its address (`array_at`: 0.5 µs
    against DLPack's 2.4); anything else goes through DLPack, or is refused
    with the reason.
    """
    try:
        dt = _NP.get(t.dtype)
        if (dt is not None and t.is_cpu and t.layout is _STRIDED and t.is_contiguous() and not t.is_neg()
                and not t.is_conj()):
            return _array_at(t.data_ptr(), t.shape, dt, t)
    except AttributeError:
        return _array_slow(t, what)
    try:
        return _from_dlpack(t)
    except (BufferError, RuntimeError, TypeError, AttributeError):
        return _array_slow(t, what)


def _array_slow(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"commlib backend: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"commlib backend: {what} is on {t.device}; the commlib backend takes CPU tensors only")
    if t.layout != torch.strided:
        raise ValueError(f"commlib backend: {what} has layout {t.layout}; only dense (strided) tensors are supported")
    t = t.detach()
    if t.dtype is torch.bfloat16:
        if BFLOAT16 is None:
            raise TypeError(f"commlib backend: {what} is bfloat16, which needs ml_dtypes (pip install ml_dtypes)")
        return _from_dlpack(t.view(torch.int16)).view(BFLOAT16)
    if t.is_conj() or t.is_neg():
        raise ValueError(f"commlib backend: {what} is a lazy conj()/neg() view; call .resolve_conj() first")
    try:
        return _from_dlpack(t)
    except (BufferError, TypeError):
        raise TypeError(f"commlib backend: {what} has dtype {t.dtype}, which commlib does not support "
                        "(supported: bool, int8/16/32/64, uint8/16/32/64, float16, bfloat16, float32, "
                        "float64, complex64, complex128)") from None


def reduce_op(op):
    """(commlib op name, scale) for a torch ReduceOp; scale: None, "avg", or PREMUL_SUM's factor."""
    code = op.op if isinstance(op, dist.ReduceOp) else op
    name = OPS.get(code)
    if name is not None:
        return name, None
    if code == _R.AVG:
        return "sum", "avg"
    if code == _R.PREMUL_SUM:
        return "sum", op.factor
    raise ValueError(f"commlib backend: unsupported reduce op {op}")


def premultiply(t, factor):
    """PREMUL_SUM's scaling of the input, in place (as NCCL does)."""
    t.mul_(factor)


def average(t, n):
    """AVG: the sum divided by the group size (integers: truncated, as NCCL does)."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.div_(n)
    elif t.dtype is torch.bool:
        raise ValueError("commlib backend: ReduceOp.AVG does not apply to bool tensors")
    else:
        t.copy_(torch.div(t, n, rounding_mode="trunc"))


def contiguous_target(t, what):
    """(array to write into, tensor to copy it back to or None) for an output tensor."""
    a = array(t, what)
    if a.flags.c_contiguous and a.flags.writeable:
        return a, None
    tmp = torch.empty(t.shape, dtype=t.dtype)
    return array(tmp, what), tmp


def same_dtype(tensors, what):
    dt = tensors[0].dtype
    for t in tensors[1:]:
        if t.dtype != dt:
            raise TypeError(f"commlib backend: {what} mixes dtypes {dt} and {t.dtype}")
    return dt


__all__ = ["array", "reduce_op", "premultiply", "average", "contiguous_target", "same_dtype"]
