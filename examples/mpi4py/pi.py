"""Compute pi by midpoint integration of 4 / (1 + x^2) over [0, 1].

The classic `cpi` program: rank 0 chooses the number of intervals and
broadcasts it, every rank integrates its share (intervals rank, rank + size,
...), and the partial sums are reduced onto rank 0.

    commrun -n 4 examples/mpi4py/pi.py [INTERVALS]

Only the import line differs from the mpi4py version.
"""
import math
import sys

import numpy as np

from commlib import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()

n = None
if rank == 0:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
n = comm.bcast(n, root=0)

t0 = MPI.Wtime()
h = 1.0 / n
x = h * (np.arange(rank, n, size, dtype=np.float64) + 0.5)
mypi = np.array(h * np.sum(4.0 / (1.0 + x * x)), dtype=np.float64)  # 0-d buffer: one double

pi = np.array(0.0, dtype=np.float64)
comm.Reduce([mypi, MPI.DOUBLE], [pi, MPI.DOUBLE], op=MPI.SUM, root=0)
elapsed = MPI.Wtime() - t0

if rank == 0:
    err = abs(float(pi) - math.pi)
    print(f"pi is approximately {float(pi):.16f}, error is {err:.3e} "
          f"({n} intervals, {size} processes, {elapsed:.3f} s)")
    print(f"RESULT pi {float(pi)!r}")
