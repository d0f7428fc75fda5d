"""examples/tensor_parallel_mlp.py through the real launcher: its loss curve on a ("dp", "tp") mesh must
equal one process training the whole model on the whole batch (recomputed here, serially)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

EXAMPLE = os.path.join(_harness.REPO, "examples", "tensor_parallel_mlp.py")


@pytest.fixture(scope="module")
def reference():
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    try:
        import tensor_parallel_mlp
    finally:
        sys.path.remove(os.path.dirname(EXAMPLE))
    return tensor_parallel_mlp.serial()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_tensor_parallel_mlp_matches_one_process(n, reference):
    rc, out, err = _harness._communicate([sys.executable, "-m", "commrun", "-n", str(n), EXAMPLE],
                                         _harness.base_env({"COMMLIB_TIMEOUT": "30"}), 100)
    assert rc == 0, f"exit {rc}\n{_harness._tail(out)}\n{_harness._tail(err)}"
    line = next((ln for ln in out.splitlines() if "RESULT losses " in ln), None)
    assert line, _harness._tail(out)
    losses = [float(v) for v in line.split("RESULT losses ", 1)[1].split()]
    assert len(losses) == len(reference)
    np.testing.assert_allclose(losses, reference, rtol=1e-9, atol=1e-12)
    assert losses[-1] < losses[0] / 5  # it trains
    assert "RESULT matches_one_process True" in out  # the example's own check


def _results(n, name):
    """{key: text} of the example's `RESULT key text` lines, run at n ranks."""
    path = os.path.join(_harness.REPO, "examples", name)
    rc, out, err = _harness._communicate([sys.executable, "-m", "commrun", "-n", str(n), path],
                                         _harness.base_env({"COMMLIB_TIMEOUT": "30"}), 100)
    assert rc == 0, f"exit {rc}\n{_harness._tail(out)}\n{_harness._tail(err)}"
    found = dict(ln.split("RESULT ", 1)[1].split(" ", 1) for ln in out.splitlines() if "RESULT " in ln)
    assert found, _harness._tail(out)
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_fft2d_pencil_matches_numpy(n):
    assert float(_results(n, "fft2d_pencil.py")["max_abs_error"]) < 1e-9


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_sharded_sgd_matches_one_process(n):
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(_harness.REPO, "examples"))
    try:
        import zero_sharded_sgd
    finally:
        sys.path.pop(0)
    found = _results(n, "zero_sharded_sgd.py")
    assert found["matches_one_process"] == "True"  # the example's own check
    losses = [float(v) for v in found["losses"].split()]
    np.testing.assert_allclose(losses, zero_sharded_sgd.serial(), rtol=1e-9, atol=1e-12)
    assert losses[-1] < losses[0] / 50  # it trains
