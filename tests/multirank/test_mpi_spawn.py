"""Dynamic processes through the real launcher (cases/mpi_spawn.py): Spawn and Spawn_multiple with
intercommunicator collectives, Merge and Disconnect; MPIPoolExecutor spawning its workers from a
plain script; a spawned worker killed mid-task failing its futures, with nothing left behind."""
import os
import subprocess
import sys
import time

import pytest

from _waiting import settled

ENV = {"COMMLIB_TIMEOUT": "30", "COMMLIB_TEST_MPI": "commlib"}
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")


def _leftovers():
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    procs = [line for line in out.splitlines() if "mpi_spawn.py child" in line or "futures._spawned" in line]
    shm = [f for f in os.listdir("/dev/shm") if f.startswith("commlib")]
    return procs, shm


def _anything_left():
    """_leftovers() where there is any, else None (for settled())."""
    procs, shm = _leftovers()
    return (procs, shm) if procs or shm else None


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [1, 2, 3], ids=lambda n: f"n{n}")
def test_spawn_programs(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_spawn.py", env=ENV, timeout=180), n, "MPI Spawn")
    assert _leftovers() == ([], [])


@pytest.mark.timeout(120)
def test_killed_worker_fails_its_futures_and_leaves_nothing(assert_ranks_ok, run):
    t0 = time.monotonic()
    assert_ranks_ok(run(1, "mpi_spawn.py", "kill", env=ENV, timeout=100), 1, "MPI Spawn, a worker killed")
    assert time.monotonic() - t0 < 60
    assert settled(_anything_left) is None  # a killed worker may take a moment to be reaped after the job returned


@pytest.mark.timeout(120)
def test_pool_from_a_plain_python_script(tmp_path):
    """No launcher at all: `python script.py` with an MPIPoolExecutor, as mpi4py users run it."""
    script = tmp_path / "pool_plain.py"
    script.write_text(
        "from commlib.MPI.futures import MPIPoolExecutor\n"
        "def cube(x):\n    return x ** 3\n"
        "if __name__ == '__main__':\n"
        "    with MPIPoolExecutor(max_workers=3) as ex:\n"
        "        print(sum(ex.map(cube, range(100), chunksize=10)))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMMLIB_", "RANK", "WORLD_SIZE", "LOCAL_"))}
    env["COMMLIB_TIMEOUT"] = "30"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(sum(x ** 3 for x in range(100)))]
    assert _leftovers() == ([], [])
