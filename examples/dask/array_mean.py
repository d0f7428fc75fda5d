"""A Dask cluster started by dask-mpi on commlib: rank 0 the scheduler, rank 1 this client, the rest workers.

    commrun -n 4 --mpi4py examples/dask/array_mean.py

dask-mpi's initialize() runs unchanged on commlib's mpi4py stand-in. interface="lo" keeps Dask on
loopback (one machine); across hosts name the interface the hosts share (e.g. "eth0").
"""
import numpy as np
from dask_mpi import initialize

initialize(interface="lo", dashboard=False, nthreads=1)   # returns on rank 1 only

import dask.array as da  # noqa: E402
from distributed import Client  # noqa: E402

with Client() as client:
    a = np.random.default_rng(0).random((2_000, 500))
    x = da.from_array(a, chunks=(500, 500))
    mean = x.mean(axis=0).compute()                       # computed by the workers
    assert np.allclose(mean, a.mean(axis=0))
    print(f"{len(client.scheduler_info()['workers'])} workers: column means equal NumPy's "
          f"(first {mean[0]:.4f})")
