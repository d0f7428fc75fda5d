"""Derived datatypes through the real launcher (cases/mpi_datatypes.py, validated against mpi4py
4.1.2 on the MPICH wheel): a column halo exchange with Create_vector, a slab 3-D FFT whose transpose
is one Alltoallw of subarray types (against numpy.fft), resized column types in Gather/Gatherv/
Scatter, strided Bcast and Allreduce, a struct of mixed types, Pack/Unpack/Pack_external, decode and
pickling, and the errors of a type past its buffer and a reduction over a struct."""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_derived_datatypes(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_datatypes.py", env=ENV, timeout=120), n, "MPI derived datatypes")
