"""Dask on commlib: dask-mpi's initialize() unchanged, over the mpi4py stand-in (commrun --mpi4py).

dask-mpi needs only mpi4py's COMM_WORLD, bcast and Barrier, which commlib.MPI gives; so no
commlib.dask helper: `commrun --mpi4py -n N prog.py` runs a dask-mpi program as mpirun would.
"""
import os
import subprocess
import sys

import pytest

from _needs import skip_unless_installed

import _harness

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("dask_mpi", "dask-mpi is not installed (pip install dask-mpi)")
skip_unless_installed("distributed", "dask.distributed is not installed")
skip_unless_installed("dask", "dask[array] is not installed")  # (not dask.array: finding it imports dask)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [3, 4])
def test_dask_mpi_initialize_runs_unchanged(n, tmp_path):
    argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py",
            os.path.join(_harness.CASES, "dask_cluster.py"), str(tmp_path / "scratch")]
    p = subprocess.run(argv, env=_harness.base_env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and f"dask ok: {n - 2} workers" in p.stdout, \
        f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"


@pytest.mark.timeout(90)
def test_too_small_a_world_fails_every_rank_quickly(tmp_path):
    argv = [sys.executable, "-m", "commrun", "-n", "2", "--mpi4py",
            os.path.join(_harness.CASES, "dask_cluster.py"), str(tmp_path / "scratch")]
    p = subprocess.run(argv, env=_harness.base_env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "WorldTooSmallException" in p.stdout + p.stderr, p.stdout + p.stderr


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [3, 4])
def test_documented_example_as_written(n, tmp_path):
    """docs/dask.md's program and command, as written."""
    argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py",
            os.path.join(_harness.REPO, "examples", "dask", "array_mean.py")]
    p = subprocess.run(argv, env=_harness.base_env(), cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and f"{n - 2} workers: column means equal NumPy's" in p.stdout, \
        f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-5000:]}"
