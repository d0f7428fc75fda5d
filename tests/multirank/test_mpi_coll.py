"""commlib.MPI, the mpi4py-compatible layer, through the real launcher (cases/mpi_coll.py, cases/mpi_comm.py).

One job per (case file, world size 1 to 4, transport) runs every section of the case
(listed in its docstring) as a check of its own: an item `PART.SECTION`. The case scripts also run unchanged under real mpi4py
(COMMLIB_TEST_MPI=mpi4py, under mpirun), which is how they were validated; the
few checks of values the spec fixes but Open MPI does not share run under
commlib only.

COMMLIB_TIMEOUT is 20 s: a collective stuck on one rank surfaces as CommTimeout
well before the harness kills the job.

test_abort: one rank calls COMM_WORLD.Abort(7) while the others block; commrun
must exit with code 7 promptly and leave no rank process behind.
"""
import os
import re
import time

import psutil
import pytest

from _harness import batched
from _waiting import settled

# COMMLIB_TEST_MPI pinned: a developer who exported it for mpirun runs still tests commlib here.
ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}
ABORT_S = 10.0  # "quickly": well under COMMLIB_TIMEOUT, so an abort that waits for a timeout fails


test_mpi_coll = batched("mpi_coll.py", [1, 2, 3, 4], env=ENV)
test_mpi_comm = batched("mpi_comm.py", [1, 2, 3, 4], env=ENV)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("script,part", [("mpi_comm.py", "comm"), ("mpi_coll.py", "objects")],
                         ids=["comm", "objects"])
def test_mpi_singleton_without_launcher(script, part, run_plain, assert_ranks_ok):
    # outside a launcher, `from commlib import MPI` is a size-1 world
    assert_ranks_ok(run_plain(script, part, env=ENV, timeout=60), 1, f"{script} {part} without commrun")


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _case_processes(token):
    """Processes still running this test's case (matched by its unique seed argument)."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any(a.endswith("mpi_abort.py") for a in cmd) and token in cmd and _alive(p.info["pid"]):
            found.append(p.info["pid"])
    return found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,mode", [(1, "barrier"), (2, "recv"), (3, "barrier"), (3, "bcast"), (4, "recv")],
                         ids=lambda v: str(v))
def test_abort(n, mode, run):
    seed = 900000 + (os.getpid() % 1000) * 100 + n * 10 + ["recv", "barrier", "bcast"].index(mode)
    t = time.monotonic()
    rc, out, err = run(n, "mpi_abort.py", mode, env=ENV, timeout=45, seed=seed)
    took = time.monotonic() - t
    report = f"exit code {rc} after {took:.1f} s\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    pids = {int(r): int(p) for r, p in re.findall(r"pid rank (\d+) (\d+)", out)}
    assert set(pids) == set(range(n)), f"not every rank started\n{report}"
    assert "FAIL" not in out, f"a rank went on past Abort\n{report}"
    assert rc != 0, f"commrun exited 0 after Abort(7)\n{report}"
    assert rc == 7, f"commrun should exit with the Abort error code 7\n{report}"
    assert took < ABORT_S, f"Abort took {took:.1f} s to stop the job (limit {ABORT_S} s)\n{report}"
    # ranks get 5 s (times SCALE) to disappear after commrun returned
    left = settled(lambda: sorted(set(p for p in pids.values() if _alive(p)) | set(_case_processes(str(seed)))), 5.0)
    assert not left, f"rank processes survived the abort: {left}\n{report}"
