"""commlib started by a real MPI launcher (Open MPI's mpirun), not by commrun: the ranks find each
other through the launcher's variables, and an mpi4py program on commlib.MPI runs unchanged.
Skipped where no Open MPI mpirun is installed (CI has none; the benchmark machine does)."""
import os
import shutil
import subprocess
import sys

import pytest

from _harness import REPO, base_env

MPIRUN = shutil.which("mpirun")


def _open_mpi():
    if MPIRUN is None:
        return False
    try:
        out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out or "OpenRTE" in out


pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not _open_mpi(), reason="needs Open MPI's mpirun (apt-get install openmpi-bin)")]

PROGRAM = """
import numpy as np
import commlib as cl
from commlib import MPI

g = cl.init(strict=True)  # strict: a size-1 world here would be a silent failure
comm = MPI.COMM_WORLD
assert comm.size == g.size() and comm.rank == g.rank()
total = cl.all_reduce(np.array([g.rank() + 1], dtype=np.int64))[0]
buf = np.empty(g.size(), dtype="i")
comm.Allgather(np.array([comm.rank], dtype="i"), buf)
right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
got = comm.sendrecv(comm.rank, dest=right, source=left)
print(f"rank {g.rank()} of {g.size()}: total {total} gathered {buf.tolist()} from-left {got}", flush=True)
"""


@pytest.mark.parametrize("n", [2, 3])
def test_commlib_joins_the_ranks_of_open_mpi_mpirun(n, tmp_path):
    script = tmp_path / "under_mpirun.py"
    script.write_text(PROGRAM)
    env = base_env({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "COMMLIB_SECRET": os.urandom(32).hex(), "COMMLIB_TIMEOUT": "30"})
    argv = [MPIRUN, "-n", str(n), "--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "oob_tcp_if_include", "lo", "-x", "COMMLIB_SECRET", "-x", "COMMLIB_TIMEOUT", "-x", "PYTHONPATH",
            sys.executable, str(script)]
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=100)
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-2000:]}"
    assert proc.returncode == 0, report
    want_total = n * (n + 1) // 2
    for r in range(n):
        line = f"rank {r} of {n}: total {want_total} gathered {list(range(n))} from-left {(r - 1) % n}"
        assert line in proc.stdout, report
