"""Every kind of memory mpi4py takes as a message, through the real launcher (cases/mpi_buffers.py):
CUDA-array-interface and DLPack-on-CUDA arrays over host memory, MPI.buffer, Get_address, and
memory the host cannot reach refused with a BufferError."""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_message_memory(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_buffers.py", env=ENV, timeout=100), n, "MPI message memory")
