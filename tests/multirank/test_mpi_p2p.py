"""commlib.MPI (the mpi4py-compatible layer): point-to-point and requests through the real launcher.

cases/mpi_p2p.py holds the checks; each part below is one launch per world
size, and its docstring lists the sections. The case was validated against
mpi4py 4.1.2 on Open MPI (COMMLIB_TEST_MPI=mpi4py under mpirun). A failed
run names the section and check of every failing rank.

COMMLIB_TIMEOUT is 20 s: every legitimate wait in the case is well under a
second, so a receive that is never matched surfaces as an error rather than
a hang, and the harness kills the job if it outlives its own limit.
"""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}
PARTS = {
    "bufspec": "message-argument forms, in-place receives, zero-length messages, Sendrecv(_replace)",
    "errors": "ERR_TRUNCATE/ERR_RANK/BufferError and going on after them, PROC_NULL everywhere, Status",
    "objects": "send/recv family, standard mode never waits, ssend/issend, wildcards, order, probes",
    "requests": "Wait*/Test* families, Request(), Cancel/Free, Ssend order, COMM_SELF, Dup isolation",
    "persistent": "Send_init/Recv_init, Start/Startall, restart, Free (tier B)",
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("part", list(PARTS))
def test_mpi_p2p(part, n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_p2p.py", part, env=ENV, timeout=120), n, f"MPI p2p {part}: {PARTS[part]}")
