"""mpi4py.futures through the real launcher (cases/mpi_futures.py): an MPIPoolExecutor under
`commrun --mpi4py -m mpi4py.futures` (map with chunks, unordered, as_completed, wait, starmap, a
task's exception with its worker traceback, initializer, get_comm_workers, cancel_futures, an
unpicklable task), MPICommExecutor with two roots, and the error a plain `python` script gets."""
import os
import re
import subprocess
import sys

import pytest

TRANSPORTS = ("shm",)  # a pool on the MPI layer: the transports' own paths are the batched suites' (conftest.py)

import _harness

ENV = {"COMMLIB_TIMEOUT": "30"}


def _standin_env():
    path = subprocess.run([sys.executable, "-m", "commlib.MPI", "--path"], env=_harness.base_env(), text=True,
                          capture_output=True, check=True).stdout.strip()
    env = dict(ENV)
    env["PYTHONPATH"] = os.pathsep.join([path, _harness.REPO])
    return env


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 3, 4], ids=lambda n: f"n{n}")
def test_pool_under_m_mpi4py_futures(n):
    argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py", "-m", "mpi4py.futures",
            os.path.join(_harness.CASES, "mpi_futures.py"), "1", "pool"]
    rc, out, err = _harness._communicate(argv, _harness.base_env(ENV), 120)
    assert rc == 0 and re.search(r"rank 0: \d+ checks ok", out), f"rc {rc}\n{out[-3000:]}\n{err[-3000:]}"
    assert "FAIL" not in out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_comm_executor(n, run, assert_ranks_ok):
    argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py", os.path.join(_harness.CASES, "mpi_futures.py"),
            "1", "comm"]
    assert_ranks_ok(_harness._communicate(argv, _harness.base_env(ENV), 120), n, "MPICommExecutor")


@pytest.mark.timeout(60)
def test_pool_from_a_plain_script_spawns_its_workers():
    argv = [sys.executable, os.path.join(_harness.CASES, "mpi_futures.py"), "1", "plain"]
    rc, out, err = _harness._communicate(argv, _harness.base_env(_standin_env()), 50)
    assert rc == 0 and "rank 0: 4 checks ok" in out, f"rc {rc}\n{out}\n{err}"
