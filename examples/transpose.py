"""A distributed matrix transpose with all_to_all: each rank holds a block of
rows of an N x N matrix and ends with the same block of rows of its transpose.

    commrun -n 4 examples/transpose.py
"""
import numpy as np

import commlib as cl

g = cl.init()
rank, size = g.rank(), g.size()
N = 8 * size
A = np.arange(N * N, dtype=np.float64).reshape(N, N)  # every rank can build the reference
rows = A[rank * N // size:(rank + 1) * N // size]  # my block of rows, shape (N/size, N)
# Split my rows by column block (block j goes to rank j), receive rank j's
# block of my columns, and stack them along the rows of the result.
blocks = cl.all_to_all(rows, split_axis=1, concat_axis=0)  # shape (N, N/size)
mine = blocks.T  # rows of A.T owned by this rank
assert np.array_equal(mine, A.T[rank * N // size:(rank + 1) * N // size])
print(f"rank {rank}: transposed block of {mine.shape} rows correct")
