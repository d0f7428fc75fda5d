"""CPU torch tensors in, NumPy arrays inside, tensors back out (over the same memory, no copy).

torch is never imported here: a tensor can only exist if the caller already
imported it, so `sys.modules` tells whether to look for one.
"""
import sys

import numpy as np

from .._dtypes import BFLOAT16


def as_array(x):
    """(NumPy array over x's memory, how to turn a result back into x's kind: None for NumPy)."""
    if type(x) is np.ndarray:
        return x, None
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        a = np.asarray(x)
        if a.dtype == object:
            raise TypeError("mesh arrays must be numeric, not object arrays")
        return a, None
    if x.device.type != "cpu":
        raise ValueError(f"commlib.mesh takes CPU tensors; this one is on {x.device}")
    t = x.detach()
    if t.dtype is torch.bfloat16:
        if BFLOAT16 is None:
            raise TypeError("a bfloat16 tensor needs ml_dtypes (pip install ml_dtypes)")
        return np.from_dlpack(t.view(torch.int16)).view(BFLOAT16), to_torch
    try:
        return np.from_dlpack(t.resolve_conj().resolve_neg()), to_torch
    except (BufferError, TypeError, RuntimeError) as exc:
        raise TypeError(f"commlib.mesh cannot use a {t.dtype} tensor: {exc}") from None


def to_torch(a):
    """A torch tensor over the NumPy array a's memory (bfloat16 through int16)."""
    import torch
    if BFLOAT16 is not None and a.dtype == BFLOAT16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def dtype_code(dt):
    """A string naming dt that `dtype()` turns back into it (bfloat16's own '<V2' is ambiguous)."""
    return "bfloat16" if BFLOAT16 is not None and dt == BFLOAT16 else dt.str


def dtype(code):
    """The NumPy dtype named by `dtype_code()`."""
    return BFLOAT16 if code == "bfloat16" else np.dtype(code)
