"""mpi4py.util.pkl5 with one 3 GiB object, when COMMLIB_SLOW_TESTS=1 (16 s and 4 GiB of memory a rank
on the 2-core VM; the rest of cases/mpi_pkl5.py runs in test_mpi_layer.py's jobs)."""
import os

import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.environ.get("COMMLIB_SLOW_TESTS") != "1", reason="a 3 GiB object: set COMMLIB_SLOW_TESTS=1")
def test_pkl5_three_gib_object(assert_ranks_ok, run):
    env = dict(ENV, COMMLIB_TIMEOUT="120")
    assert_ranks_ok(run(2, "mpi_pkl5.py", "--big", "3", env=env, timeout=280), 2, "pkl5 3 GiB")
