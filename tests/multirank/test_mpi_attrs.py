"""ERRORS_ARE_FATAL stopping a job whose other ranks wait (cases/mpi_attrs.py fatal; the rest of the
program runs in test_mpi_layer.py's jobs)."""
import time

import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"n{n}")
def test_errors_are_fatal_stops_the_job(n, run):
    t0 = time.monotonic()
    code, out, err = run(n, "mpi_attrs.py", "fatal", env=ENV, timeout=100)
    assert code != 0, (out, err)
    assert "not stopped" not in out, out
    assert "MPI_ERRORS_ARE_FATAL" in err and f"rank {n - 1}: Send:" in err, err
    assert time.monotonic() - t0 < 15, "the waiting ranks must stop at once, not at their timeout"
