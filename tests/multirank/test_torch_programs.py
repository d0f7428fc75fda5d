"""The torch programs a user writes first (examples/torch/), through the real launcher at n = 2, 3, 4.

collectives.py checks its own results on every rank and rank 0 reports them;
ddp_train.py and fsdp_train.py must end with the weights a single process
gets on the whole batches, computed here serially (same model, same data).
Each runs in a job of its own, its ranks forked from a commrun that imported torch once
(`--fork --preload torch`: a rank's import of torch is most of its CPU): run one after another in one process (as the mesh
examples are, cases/run_examples.py), fsdp_train.py once hung at its start after ddp_train.py had
destroyed its process group (1 of 1 full run under two busy loops; 0 of 4 such jobs alone): until that is
understood, a torch program here gets a fresh process.
"""
import os
import re
import sys

import pytest

from _needs import skip_unless_installed

skip_unless_installed("torch", "torch is not installed: pip install torch==2.13.0 (CPU build)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

EXAMPLES = os.path.join(_harness.REPO, "examples", "torch")
_RESULT = re.compile(r"^\[0\] RESULT (\S+) (.*)$")


def _results(n, script):
    argv = [sys.executable, "-m", "commrun", *_harness.TORCH_FORKED, "-n", str(n), os.path.join(EXAMPLES, script)]
    rc, out, err = _harness._communicate(argv, _harness.base_env({"COMMLIB_TIMEOUT": "60"}), 150)
    assert rc == 0, f"{script} n={n}: exit code {rc}\n{_harness._tail(out)}\n{_harness._tail(err)}"
    found = dict(m.groups() for m in map(_RESULT.match, out.splitlines()) if m)
    assert found, f"{script} n={n}: no RESULT line\n{_harness._tail(out)}"
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


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_example(n):
    got = _results(n, "collectives.py")
    assert got == {"sum": f"{n * (n + 1) // 2}", "all_ranks_ok": "True"}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("script", ["ddp_train.py", "fsdp_train.py"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_training_matches_one_process(n, script, serial_weight_sum):
    """Over 20 s at 4 ranks for FSDP: torch in every rank and FSDP's wrapping on 2 cores oversubscribed."""
    got = float(_results(n, script)["weight_sum"])
    assert got == pytest.approx(serial_weight_sum, rel=1e-6, abs=1e-6), (script, n)
