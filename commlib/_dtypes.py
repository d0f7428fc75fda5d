"""dtype <-> wire code, op names <-> op code, and the op x dtype legality table.

The integer codes are shared with the C kernels (`_kernels.pxd`) and travel in
every message header, so they are part of the wire format: never renumber.
"""
import enum

import numpy as np

try:  # bfloat16 is optional
    import ml_dtypes

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    ml_dtypes = None
    BFLOAT16 = None

# Wire codes for dtypes (order matches the DT_* enum in _kernels.pxd).
DTYPE_NAMES = (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
)
DT_BOOL, DT_BF16 = 0, 10
DT_BYTES = 255  # raw bytes: pickled objects and p2p payloads reinterpreted by the receiver

_CODE_OF = {np.dtype(n): i for i, n in enumerate(DTYPE_NAMES) if n != "bfloat16"}
if BFLOAT16 is not None:
    _CODE_OF[BFLOAT16] = DT_BF16


class ReduceOp(str, enum.Enum):
    """Reduction operators; members compare equal to their names."""

    SUM = "sum"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    LAND = "land"
    LOR = "lor"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __str__(self):
        return self.value


OP_NAMES = tuple(op.value for op in ReduceOp)  # wire code = index
_OP_CODE = {name: i for i, name in enumerate(OP_NAMES)}

_INTS = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}
_COMPLEX = {"complex64", "complex128"}


def dtype_code(dtype):
    """Wire code of a numpy dtype; TypeError for an unsupported one."""
    dt = np.dtype(dtype)
    code = _CODE_OF.get(dt)
    if code is not None:
        return code
    if dt.kind in "biufc" and dt.newbyteorder("=") in _CODE_OF and not dt.isnative:
        raise TypeError(f"byte-swapped dtype {dt.str} is not supported; convert with .astype({dt.newbyteorder('=')})")
    hint = " (install ml_dtypes for bfloat16)" if "bfloat16" in str(dt) else ""
    raise TypeError(f"unsupported dtype {dt}{hint}")


def dtype_of(code):
    """numpy dtype of a wire code."""
    if code == DT_BF16:
        if BFLOAT16 is None:
            raise TypeError("bfloat16 needs ml_dtypes, which is not installed")
        return BFLOAT16
    return np.dtype(DTYPE_NAMES[code])


def dtype_name(code):
    return "bytes" if code == DT_BYTES else DTYPE_NAMES[code]


def op_code(op):
    """Wire code of an op name or ReduceOp; ValueError for an unknown one."""
    try:
        return _OP_CODE[str(op.value if isinstance(op, ReduceOp) else op).lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown reduction op {op!r}; expected one of {', '.join(OP_NAMES)}") from None


def op_name(code):
    return OP_NAMES[code]


def legal(dtype_code_, op_code_):
    """Whether op applies to dtype (bitwise only on integers/bool; no min/max on complex)."""
    name, op = DTYPE_NAMES[dtype_code_], OP_NAMES[op_code_]
    if op in ("band", "bor", "bxor"):
        return name == "bool" or name in _INTS
    if op in ("min", "max"):
        return name not in _COMPLEX
    return True


def check_op(dtype_code_, op_code_):
    """Raise ValueError naming both when op does not apply to dtype."""
    if not legal(dtype_code_, op_code_):
        raise ValueError(f"reduction op {OP_NAMES[op_code_]!r} is not defined for dtype {DTYPE_NAMES[dtype_code_]}")
