"""commlib.mlx, MLX's mx.distributed API over commlib, through the real commrun at n = 1 ... 4."""
import os
import re
import subprocess
import sys

import pytest

from _needs import skip_unless_installed

from _harness import REPO, base_env

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("mlx.core", "mlx is not installed (pip install 'mlx[cpu]'): commlib.mlx needs it")
skip_unless_installed("ml_dtypes", "ml_dtypes is not installed: the bfloat16 checks need it")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_mlx_distributed_api(n, run, assert_ranks_ok):
    assert_ranks_ok(run(n, "mlx_dist.py", timeout=180), n, "mlx_dist.py")


@pytest.mark.timeout(60)
def test_outside_a_launcher_strict_is_an_error(run_plain):
    rc, out, err = run_plain("mlx_plain.py")
    assert rc == 0 and "plain ok" in out, out + err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3])
def test_the_data_parallel_example_converges(n):
    p = subprocess.run([sys.executable, "-m", "commrun", "-n", str(n), os.path.join(REPO, "examples", "mlx",
                        "data_parallel.py")], env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(rf"{n} ranks: mean loss (\S+), weight error (\S+)", p.stdout)
    assert m and float(m[1]) < 1e-8 and float(m[2]) < 1e-4, p.stdout
