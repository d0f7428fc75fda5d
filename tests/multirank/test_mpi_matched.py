"""commlib.MPI's matched probes through the real launcher (cases/mpi_matched.py, validated against
mpi4py 4.1.2 on the MPICH wheel): sizing a receive from the probe, two threads probing one source,
a claimed message invisible to other receives, every handle form."""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_matched_probes(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_matched.py", env=ENV, timeout=100), n, "MPI matched probes")
