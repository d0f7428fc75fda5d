"""Every rank checks an all-reduce with the others, then says where it runs.

    srun -n 4 python examples/slurm/hello_nodes.py        (Slurm starts the ranks)
    salloc -n 4 commrun examples/slurm/hello_nodes.py     (commrun on the allocation's nodes)
"""
import socket

import numpy as np

import commlib as cl

g = cl.init(strict=True)  # an error, not a world of one, if no launcher started this process
r, n = g.rank(), g.size()
total = cl.all_reduce(np.arange(1000.0) + r)
assert np.array_equal(total, np.arange(1000.0) * n + n * (n - 1) / 2), f"rank {r}: wrong all_reduce"
print(f"rank {r} of {n} on {socket.gethostname()}: all_reduce ok")
