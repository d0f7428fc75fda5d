"""Process topologies, neighbourhood collectives and partitioned point-to-point through the real
launcher (cases/mpi_topo.py): a periodic 2-D halo exchange, a ring with uneven counts, graphs made
from others' edges, a partitioned send filled by threads, and bad graph arguments refused on every
rank with the rank named."""
import pytest

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_topologies(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mpi_topo.py", env=ENV, timeout=100), n, "MPI topologies")
