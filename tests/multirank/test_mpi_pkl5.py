"""mpi4py.util.pkl5 through the real launcher (cases/mpi_pkl5.py, validated against mpi4py 4.1.2 on
the MPICH wheel): objects with out-of-band arrays over send/recv, issend + mprobe().irecv(),
sendrecv, improbe; buffers split into many messages; the five object collectives; and, when
COMMLIB_SLOW_TESTS=1, one 3 GiB object (16 s and 4 GiB of memory a rank on the 2-core VM)."""
import os

import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_pkl5(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_pkl5.py", env=ENV, timeout=120), n, "pkl5")


@pytest.mark.timeout(300)
@pytest.mark.skipif(os.environ.get("COMMLIB_SLOW_TESTS") != "1", reason="a 3 GiB object: set COMMLIB_SLOW_TESTS=1")
def test_pkl5_three_gib_object(assert_ranks_ok, run):
    env = dict(ENV, COMMLIB_TIMEOUT="120")
    assert_ranks_ok(run(2, "mpi_pkl5.py", "--big", "3", env=env, timeout=280), 2, "pkl5 3 GiB")
