"""What an i-collective waited on at once costs against its blocking form: `Iallreduce(...).Wait()`
against `Allreduce`, `Ineighbor_alltoall(...).Wait()` against `Neighbor_alltoall` (a periodic 1-D
cartesian communicator), 8-int32 blocks, through commlib.MPI. Rank 0 prints each call's wall and CPU
(this process, all its threads) microseconds, over `--calls` after 200 warm-up calls.

    commrun -n 4 --mpi4py python benchmarks/icollective_wait.py [--calls 2000]
"""
import argparse
import time

import numpy as np
from mpi4py import MPI


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    cart = comm.Create_cart([comm.Get_size()], periods=[True])
    s, r = np.ones(8, "i"), np.empty(8, "i")
    calls = {"Allreduce": lambda: comm.Allreduce(s, r), "Iallreduce.Wait": lambda: comm.Iallreduce(s, r).Wait(),
             "Neighbor_alltoall": lambda: cart.Neighbor_alltoall(s, r),
             "Ineighbor_alltoall.Wait": lambda: cart.Ineighbor_alltoall(s, r).Wait()}
    for name, call in calls.items():
        comm.Barrier()
        for _ in range(200):
            call()
        comm.Barrier()
        t, c = time.perf_counter(), time.process_time()
        for _ in range(a.calls):
            call()
        wall, cpu = (time.perf_counter() - t) / a.calls * 1e6, (time.process_time() - c) / a.calls * 1e6
        if comm.Get_rank() == 0:
            print(f"{name:24s} wall {wall:7.1f} us  cpu {cpu:7.1f} us", flush=True)


if __name__ == "__main__":
    main()
