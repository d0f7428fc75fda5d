"""torch.distributed through the commlib backend (`import commlib.torch`), every rank under the real `commrun`.

One job per (n, backend) runs every part of cases/torch_ops.py, each an item; see that file for what each part checks. The
backend is "commlib"; set TORCH_TEST_BACKEND=gloo (or "commlib,gloo" for both) to run the same
checks against torch's own gloo backend, which is how the case itself is validated. A few things
gloo itself does not do (int16, stacked layouts, non-dense views, ...) are skipped for gloo only
and listed by the case as `NOTE skipped for gloo` lines; every check applies to commlib.
"""
import os

from _needs import skip_unless_installed

from _harness import TORCH_FORKED, batched

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("torch", "torch is not installed: the torch.distributed backend tests need it")
skip_unless_installed("ml_dtypes", "ml_dtypes is not installed: the cases build bfloat16 data with it")

NS = [1, 2, 3, 4]
BACKENDS = [b.strip() for b in os.environ.get("TORCH_TEST_BACKEND", "commlib").split(",") if b.strip()]


# One job per (n, backend) runs every part of cases/torch_ops.py, each an item.
for _backend in BACKENDS:
    globals()[f"test_torch_ops_{_backend}"] = batched("torch_ops.py", NS, env={"TORCH_TEST_BACKEND": _backend},
                                                     options=TORCH_FORKED,
                                                     doc=f"Each part of cases/torch_ops.py over {_backend!r}.")
