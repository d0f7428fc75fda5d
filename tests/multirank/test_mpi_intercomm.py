"""Intercommunicators through the real launcher (cases/mpi_intercomm.py): a manager/worker job joined
by Create_intercomm (Bcast with MPI.ROOT, Scatter, Gather, Reduce, object forms), ping-pong between
the two halves (unequal at odd n) with remote ranks in every status, Merge back to an intracomm
with an Allreduce checked against NumPy, the `all` collectives each way with their I and
persistent forms, Dup/Split/Create, and the errors (a remote rank that is not there, a bad root,
IN_PLACE, Scan)."""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_intercomm(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_intercomm.py", env=ENV, timeout=100), n, "MPI intercommunicators")
