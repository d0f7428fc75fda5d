"""dask-mpi's initialize(), unchanged, on commlib's mpi4py stand-in (run under commrun --mpi4py).

usage: dask_cluster.py SCRATCH_DIR

Rank 0 runs the scheduler, the ranks from 2 on a worker each (initialize() returns only on rank
1, the client); the client waits for every worker, computes with dask.array across them and
checks the results against NumPy. Every address is loopback's (interface="lo").
"""
import os
import sys

import numpy as np
from dask_mpi import initialize

initialize(interface="lo", dashboard=False, nthreads=1, local_directory=sys.argv[1])

import dask.array as da  # noqa: E402
from distributed import Client  # noqa: E402
from mpi4py import MPI  # noqa: E402

workers_wanted = MPI.COMM_WORLD.Get_size() - 2
SCALE = float(os.environ.get("COMMLIB_TEST_TIMEOUT_SCALE") or 1)  # the suite's one timeout setting
with Client() as client:
    client.wait_for_workers(workers_wanted, timeout=60 * SCALE)  # raises WorkerStartTimeoutError, with the counts
    a = np.random.default_rng(7).standard_normal((400, 300))
    x = da.from_array(a, chunks=(100, 100))
    np.testing.assert_allclose((x @ x.T).sum(axis=0).compute(), (a @ a.T).sum(axis=0), rtol=1e-10)
    np.testing.assert_allclose(x.mean(axis=1).compute(), a.mean(axis=1), rtol=1e-12)
    np.testing.assert_array_equal((x > 0).sum().compute(), (a > 0).sum())
    placed = client.run(lambda: 1)  # every worker ran something
    assert len(placed) == workers_wanted, placed
    print(f"dask ok: {workers_wanted} workers, results equal NumPy's", flush=True)
