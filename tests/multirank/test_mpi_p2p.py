"""commlib.MPI (the mpi4py-compatible layer): point-to-point and requests through the real launcher.

cases/mpi_p2p.py holds the checks: one job per world size and transport runs each
section of each part below as an item `PART.SECTION`. The case was validated against
mpi4py 4.1.2 on Open MPI (COMMLIB_TEST_MPI=mpi4py under mpirun). A failed
run names the section and check of every failing rank.

COMMLIB_TIMEOUT is 20 s: every legitimate wait in the case is well under a
second, so a receive that is never matched surfaces as an error rather than
a hang, and the harness kills the job if it outlives its own limit.
"""
import time

import pytest

from _harness import batched

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}
PARTS = {
    "bufspec": "message-argument forms, in-place receives, zero-length messages, Sendrecv(_replace)",
    "errors": "ERR_TRUNCATE/ERR_RANK/BufferError and going on after them, PROC_NULL everywhere, Status",
    "objects": "send/recv family, standard mode never waits, ssend/issend, wildcards, order, probes",
    "requests": "Wait*/Test* families, Request(), Cancel/Free, Ssend order, COMM_SELF, Dup isolation",
    "persistent": "Send_init/Recv_init, Start/Startall, restart, Free (tier B)",
}


test_mpi_p2p = batched("mpi_p2p.py", [1, 2, 3, 4], env=ENV,
                       doc="\n".join(f"{part}: {what}" for part, what in PARTS.items()))


PENDING = '''\
"""An mpi4py program that leaves receives nobody answers (MPI tolerates it), then ends."""
import sys

import numpy as np

from commlib import MPI

comm = MPI.COMM_WORLD
req = comm.Irecv(np.empty(8), source=(comm.rank + 1) % comm.size, tag=99)
req2 = comm.irecv(source=MPI.ANY_SOURCE, tag=98)
print(f"rank {comm.rank}: pending={bool(req) and not req.Test()}", flush=True)
comm.Barrier()  # (after it a peer may finish: a receive from it then fails as PeerLost, it does not hang)
if sys.argv[-1] == "finalize":
    MPI.Finalize()
'''


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["exit", "finalize"])
@pytest.mark.parametrize("n", [1, 3], ids=lambda n: f"n{n}")
def test_pending_receives_do_not_delay_exit(n, ending, tmp_path, run):
    script = tmp_path / "pending.py"
    script.write_text(PENDING)
    t = time.monotonic()
    rc, out, err = run(n, str(script), ending, env={"COMMLIB_TIMEOUT": "25"}, timeout=45)
    took = time.monotonic() - t
    report = f"exit code {rc} after {took:.1f} s\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-2000:]}"
    assert rc == 0, report
    assert all(f"rank {r}: pending=True" in out for r in range(n)), report
    assert took < 15, f"the job waited on its pending receives\n{report}"
