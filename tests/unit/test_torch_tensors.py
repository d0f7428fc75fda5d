"""The torch front-end's view of a tensor as a NumPy array: the same memory, or a clear refusal."""
import gc

import numpy as np
import pytest

from _needs import skip_unless_installed
from commlib._kernels import array_at

skip_unless_installed("torch", "torch is not installed: pip install torch==2.13.0 (CPU build)")

# torch is imported by the tests that use it (the `torch` fixture, conftest.py), not at collection
DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
          "complex128"]


@pytest.fixture(scope="module")
def array(torch):
    from commlib.torch._tensors import array
    return array


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("make", [lambda torch, d: torch.arange(24).to(d).reshape(2, 3, 4),
                                  lambda torch, d: torch.arange(24).to(d)[5:17],  # an offset into its storage
                                  lambda torch, d: torch.tensor(3).to(d),          # 0-d
                                  lambda torch, d: torch.zeros(0, 4, dtype=d)])
def test_a_view_is_the_tensors_memory(dtype, make, torch, array):
    t = make(torch, getattr(torch, dtype))
    a = array(t)
    assert a.shape == tuple(t.shape) and a.dtype == np.dtype(str(t.dtype).split(".")[1].replace("bool", "bool_"))
    np.testing.assert_array_equal(a, t.numpy())
    if a.size:
        a.reshape(-1)[-1] = a.reshape(-1)[0]  # writes reach the tensor
        assert t.reshape(-1)[-1].item() == t.reshape(-1)[0].item()


def test_the_view_keeps_the_tensor_alive_and_a_grad_tensor_is_viewed_detached(torch, array):
    t = torch.arange(1000, dtype=torch.float64, requires_grad=True)
    a = array(t)
    del t
    gc.collect()
    assert a[999] == 999.0 and a.base is not None
    b = torch.ones(4)
    array(b)[:] = 7
    assert b.tolist() == [7.0] * 4


def test_bfloat16_and_non_contiguous_tensors(torch, array):
    x = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    try:
        a = array(x)
    except TypeError as exc:  # without ml_dtypes: refused, naming the fix
        assert "ml_dtypes" in str(exc)
    else:
        assert a.astype(np.float32).tolist() == [1.5, -2.0]
    s = torch.arange(6.0).reshape(2, 3).t()  # through DLPack, strides kept
    assert array(s).tolist() == s.tolist() and not array(s).flags.c_contiguous


def test_what_cannot_be_viewed_is_refused_with_the_reason(torch, array):
    with pytest.raises(ValueError, match="lazy conj"):
        array(torch.ones(2, dtype=torch.complex64).conj())
    with pytest.raises(ValueError, match="sparse"):
        array(torch.ones(2).to_sparse())
    with pytest.raises(TypeError, match="must be a torch.Tensor, got list"):
        array([1, 2])


def test_array_at_checks_its_arguments():
    buf = np.arange(4, dtype=np.int32)
    v = array_at(buf.ctypes.data, (2, 2), np.dtype(np.int32), buf)
    assert v.base is buf and v.tolist() == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="null address"):
        array_at(0, (3,), np.dtype(np.int32), buf)
    assert array_at(0, (0,), np.dtype(np.int32), buf).size == 0
    with pytest.raises(ValueError, match="negative"):
        array_at(buf.ctypes.data, (-1,), np.dtype(np.int32), buf)
