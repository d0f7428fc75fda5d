"""Type stub for the compiled commlib._kernels extension."""
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from commlib._dtypes import ReduceOp

SIMD_NAMES: tuple[str, str, str]

def simd_level() -> int:
    """Loop set in use: 0 baseline, 1 AVX2+FMA+F16C, 2 AVX-512."""
    ...

def _set_simd_level(level: int) -> int: ...
def _cpu_simd_level() -> int: ...
def reduce_into(dst: Any, src: ArrayLike, op: str | ReduceOp) -> Any:
    """dst = op(dst, src) element-wise in place; returns dst."""
    ...

def pack(src: ArrayLike, dst: Any) -> Any:
    """Copy src (any strides) into the writable contiguous buffer dst (C order); returns dst."""
    ...

def unpack(src: Any, dst: np.ndarray) -> np.ndarray:
    """Copy the contiguous buffer src (C order) into the writable array dst (any strides); returns dst."""
    ...

def array_at(address: int, shape: tuple[int, ...], dtype: np.dtype, base: Any) -> np.ndarray:
    """A C-contiguous writable array of shape and dtype over memory at address, owned by base."""
    ...

def dlpack_view(obj: Any, writable: bool = False) -> np.ndarray:
    """A flat view of a contiguous DLPack array's memory (versioned capsule first, never consumed)."""
    ...

def plain_pair(s: Any, r: Any, mult: int) -> int:
    """0: not both plain C-contiguous ndarrays of one dtype with r writable holding mult x s's
    elements; 1: plain, r's shape is s's with the first dimension times mult; 2: plain, other shapes."""
    ...

def plain(a: Any, writable: bool) -> bool:
    """a is a C-contiguous ndarray (and writable, if asked)."""
    ...

def cai_view(obj: Any, writable: bool = False) -> np.ndarray:
    """A view of __cuda_array_interface__ memory, host memory only (device memory: BufferError)."""
    ...

def typemap_copy(user: Any, packed: Any, runs: np.ndarray, count: int, extent: int, origin: int,
                 pack: bool) -> int:
    """Copy count elements of a derived datatype (runs: int64 (k, 4) displacement, length, stride,
    repetitions) between user memory (element i at origin + i * extent) and its packed form."""
    ...

def derived_pack(a: Any, plan: tuple, count: int) -> np.ndarray | None:
    """count elements of a derived datatype (plan: runs, extent, true lb, true ub, packed bytes per
    element) packed from the start of the C-contiguous array a; None when that does not apply."""
    ...

def derived_space(a: Any, plan: tuple, count: int) -> np.ndarray | None:
    """Uninitialised packed bytes for receiving count elements into the writable C-contiguous array a."""
    ...

def derived_unpack(a: Any, plan: tuple, count: int, packed: np.ndarray, nbytes: int) -> int:
    """The first nbytes of packed written into a, element by element (a partial last element too)."""
    ...

def host_span(address: int, nbytes: int, writable: bool) -> np.ndarray:
    """A uint8 view of nbytes at an absolute address, probed first (BufferError if not this process's)."""
    ...
