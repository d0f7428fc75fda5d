"""torch.distributed through the commlib backend (`import commlib.torch`), every rank under the real `commrun`.

One launch per (n, part) of cases/torch_ops.py; see that file for what each part checks. The
backend is "commlib"; set TORCH_TEST_BACKEND=gloo (or "commlib,gloo" for both) to run the same
checks against torch's own gloo backend, which is how the case itself is validated. A few things
gloo itself does not do (int16, stacked layouts, non-dense views, ...) are skipped for gloo only
and listed by the case as `NOTE skipped for gloo` lines; every check applies to commlib.
"""
import os

import pytest

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

pytest.importorskip("torch", reason="torch is not installed: the torch.distributed backend tests need it")
pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed: the cases build bfloat16 data with it")

NS = [1, 2, 3, 4]
PARTS = ["reduce", "gather", "p2p", "async", "objects", "groups", "errors", "tools"]
BACKENDS = [b.strip() for b in os.environ.get("TORCH_TEST_BACKEND", "commlib").split(",") if b.strip()]


# The case's own watchdog (TORCH_TEST_WATCHDOG, 120 s) dumps every rank's stacks first; run()
# kills the job at 180 s; pytest's timeout is the last resort.
@pytest.mark.timeout(200)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("n", NS)
def test_torch_ops(n, part, backend, run, assert_ranks_ok):
    result = run(n, "torch_ops.py", part, env={"TORCH_TEST_BACKEND": backend}, timeout=180)
    assert_ranks_ok(result, n, f"torch_ops.py {part} with backend {backend!r}")
