"""Sum a large integer array in parallel: Scatter, local sums, Reduce.

Rank 0 builds the array (padded with zeros to a multiple of the number of
processes), scatters equal chunks, every rank sums its chunk, and the partial
sums are reduced onto rank 0, which checks the total against NumPy.

    commrun -n 4 examples/mpi4py/parallel_sum.py [N]

Only the import line differs from the mpi4py version.
"""
import sys

import numpy as np

from commlib import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_003
chunk = -(-N // size)  # ceil(N / size): every rank gets the same number of elements

data = None
if rank == 0:
    data = np.zeros(chunk * size, dtype=np.int64)
    data[:N] = (np.arange(N, dtype=np.int64) * 2654435761) % 1000003  # deterministic "random" values

local = np.empty(chunk, dtype=np.int64)
comm.Scatter(data, local, root=0)

partial = np.array([local.sum()], dtype=np.int64)
total = np.zeros(1, dtype=np.int64) if rank == 0 else None
comm.Reduce(partial, total, op=MPI.SUM, root=0)

if rank == 0:
    expected = int(data.sum())
    got = int(total[0])
    print(f"{size} processes, {chunk} elements each: total {got}, numpy says {expected}")
    if got != expected:
        print(f"MISMATCH: {got} != {expected}", file=sys.stderr)
        comm.Abort(1)
    print(f"RESULT parallel_sum {got}")
