"""examples/tensor_parallel_mlp.py, fft2d_pencil.py and zero_sharded_sgd.py through the real launcher, those
of a size one after another in one job (cases/run_examples.py, each as __main__): tensor_parallel_mlp's loss
curve on a ("dp", "tp") mesh must equal one process training the whole model on the whole batch (recomputed
here, serially); the FFT must match NumPy's; ZeRO's losses must be one process's."""
import os
import sys

import numpy as np
import pytest

from _needs import installed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

EXAMPLES = os.path.join(_harness.REPO, "examples")
SIZES = {  # example -> the sizes it runs at
    "tensor_parallel_mlp.py": (1, 2, 3, 4, 6),
    "fft2d_pencil.py": (2, 3, 4),
    "zero_sharded_sgd.py": (2, 3, 4),
}
HAS_TORCH = installed("torch")
_JOBS = {}  # n -> _harness.examples_job(): the examples of a size in one job


def _results(n, name):
    """{key: text} of the example's `RESULT key text` lines (any rank's), from the job of size n."""
    if n not in _JOBS:
        wanted = [e for e, ns in SIZES.items() if n in ns and (HAS_TORCH or e != "zero_sharded_sgd.py")]
        _JOBS[n] = _harness.examples_job(n, [os.path.join(EXAMPLES, e) for e in wanted], {"COMMLIB_TIMEOUT": "30"},
                                         300)
    rc, printed, failed, out, err = _JOBS[n]
    report = f"{name} n={n} (the job of the examples of a size: exit code {rc})\n{_harness._tail(out)}\n" \
             f"{_harness._tail(err)}"
    assert name in printed, f"{name} never started\n{report}"
    assert name not in failed, f"{failed[name]}\n{report}"
    found = dict(line.split("RESULT ", 1)[1].split(" ", 1) for _rank, line in printed[name] if "RESULT " in line)
    assert found, report
    return found


def _example_module(name):
    sys.path.insert(0, EXAMPLES)
    try:
        return __import__(name)
    finally:
        sys.path.remove(EXAMPLES)


@pytest.fixture(scope="module")
def reference():
    return _example_module("tensor_parallel_mlp").serial()


@pytest.mark.timeout(360)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_tensor_parallel_mlp_matches_one_process(n, reference):
    """Over 20 s at some sizes: the first item of a size runs the job of all its examples (torch in every
    rank for ZeRO's)."""
    found = _results(n, "tensor_parallel_mlp.py")
    losses = [float(v) for v in found["losses"].split()]
    assert len(losses) == len(reference)
    np.testing.assert_allclose(losses, reference, rtol=1e-9, atol=1e-12)
    assert losses[-1] < losses[0] / 5  # it trains
    assert found["matches_one_process"] == "True"  # the example's own check


@pytest.mark.timeout(360)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_fft2d_pencil_matches_numpy(n):
    assert float(_results(n, "fft2d_pencil.py")["max_abs_error"]) < 1e-9


@pytest.mark.timeout(360)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_sharded_sgd_matches_one_process(n):
    pytest.importorskip("torch")
    found = _results(n, "zero_sharded_sgd.py")
    assert found["matches_one_process"] == "True"  # the example's own check
    losses = [float(v) for v in found["losses"].split()]
    np.testing.assert_allclose(losses, _example_module("zero_sharded_sgd").serial(), rtol=1e-9, atol=1e-12)
    assert losses[-1] < losses[0] / 50  # it trains
