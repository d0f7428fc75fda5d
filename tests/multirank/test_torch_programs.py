"""The torch programs a user writes first (examples/torch/), through the real launcher at n = 2, 3, 4.

collectives.py checks its own results on every rank and rank 0 reports them;
ddp_train.py and fsdp_train.py must end with the weights a single process
gets on the whole batches, computed here serially (same model, same data).
The three run one after another in one job per size (cases/run_examples.py), each as __main__.
"""
import os
import re
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 (CPU build)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

EXAMPLES = os.path.join(_harness.REPO, "examples", "torch")
SCRIPTS = ("collectives.py", "ddp_train.py", "fsdp_train.py")
_RESULT = re.compile(r"^RESULT (\S+) (.*)$")
_JOBS = {}  # n -> _harness.examples_job(): every example of a size in one job


def _results(n, script):
    if n not in _JOBS:
        paths = [os.path.join(EXAMPLES, s) for s in SCRIPTS]
        _JOBS[n] = _harness.examples_job(n, paths, {"COMMLIB_TIMEOUT": "60"}, 300)
    rc, printed, failed, out, err = _JOBS[n]
    report = f"{script} n={n} (the job of every example: exit code {rc})\n{_harness._tail(out)}\n{_harness._tail(err)}"
    assert script in printed, f"{script} never started\n{report}"
    assert script not in failed, f"{failed[script]}\n{report}"
    found = dict(m.groups() for rank, line in printed[script] if rank == 0 and (m := _RESULT.match(line)))
    assert found, f"{script} n={n}: no RESULT line\n{report}"
    return found


@pytest.fixture(scope="module")
def serial_weight_sum():
    sys.path.insert(0, EXAMPLES)
    try:
        import ddp_train
    finally:
        sys.path.remove(EXAMPLES)
    net = ddp_train.train(ddp_train.model())
    return sum(p.double().sum().item() for p in net.parameters())


@pytest.mark.timeout(400)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_example(n):
    """Over 20 s: the first item of a size runs the job of all three examples (torch in every rank, FSDP's
    wrapping; 20-40 s at 4 ranks on 2 cores)."""
    got = _results(n, "collectives.py")
    assert got == {"sum": f"{n * (n + 1) // 2}", "all_ranks_ok": "True"}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("script", ["ddp_train.py", "fsdp_train.py"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_training_matches_one_process(n, script, serial_weight_sum):
    got = float(_results(n, script)["weight_sum"])
    assert got == pytest.approx(serial_weight_sum, rel=1e-6, abs=1e-6), (script, n)
