"""One-sided communication (MPI.Win) and mpi4py.util.sync through the real launcher (cases/mpi_rma.py):
a work-sharing counter, a halo exchange under Fence, PSCW, passive target while the target sleeps,
Allocate_shared, util.sync; a window left unfreed does not hold up the exit, and a rank that dies
while the others wait in Fence gives them PeerLost, not a hang."""
import time

import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_rma(n, assert_ranks_ok, run):
    t0 = time.monotonic()
    assert_ranks_ok(run(n, "mpi_rma.py", env=ENV, timeout=100), n, "MPI one-sided communication")
    assert time.monotonic() - t0 < 60, "the job (with a window never freed) took too long to exit"


@pytest.mark.timeout(60)
def test_rma_peer_dies(run, rank_lines):
    n = 3
    t0 = time.monotonic()
    rc, out, err = run(n, "mpi_rma.py", "die", env=ENV, timeout=50)
    lost = rank_lines(out, "PEERLOST")
    assert rc != 0, out + err
    assert set(lost) == {0, 1}, out + err
    assert all("PeerLost" in text and f"rank {n - 1}" in text for text in lost.values()), lost
    assert time.monotonic() - t0 < 30
