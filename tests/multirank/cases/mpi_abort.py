"""MPI.COMM_WORLD.Abort(7) from the last rank while every other rank blocks.

usage: mpi_abort.py SEED MODE
  MODE recv     the others wait in comm.recv() for a message that never comes
  MODE barrier  the others wait in Barrier()
  MODE bcast    the others wait in a Bcast rooted at the aborting rank

Each rank prints `pid rank R PID` first, so the test can check that no rank outlives the job.
Reaching any line after the blocking call is a failure: Abort must stop every rank.
"""
import os
import sys

import numpy as np

from _mpicase import MPI

MODE = sys.argv[2]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
print(f"pid rank {rank} {os.getpid()}", flush=True)
comm.Barrier()  # every rank is up (and has printed its pid) before anyone aborts
if rank == size - 1:
    for _ in range(size - 1):  # every other rank is at its blocking call (one statement from it): abort now
        comm.recv(source=MPI.ANY_SOURCE, tag=98)
    comm.Abort(7)
    print(f"FAIL rank {rank} abort: Abort(7) returned", flush=True)
    sys.exit(3)
comm.send(rank, size - 1, tag=98)  # a small standard-mode send: it does not wait for the receive
if MODE == "recv":
    comm.recv(source=size - 1, tag=99)
elif MODE == "barrier":
    comm.Barrier()
else:
    comm.Bcast(np.zeros(10), root=size - 1)
print(f"FAIL rank {rank} abort: the blocking {MODE} returned", flush=True)
sys.exit(4)
