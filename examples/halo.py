"""1-D heat equation with a halo exchange: each rank owns a slab and trades
its edge cells with its neighbours through sendrecv (deadlock-free).

    commrun -n 4 examples/halo.py
"""
import numpy as np

import commlib as cl

g = cl.init()
rank, size = g.rank(), g.size()
n_local, steps, alpha = 1000, 500, 0.25
u = np.zeros(n_local + 2)  # one ghost cell on each side
if rank == 0:
    u[1:50] = 100.0  # a hot spot at the left end of the rod
left, right = (rank - 1) % size, (rank + 1) % size
for _ in range(steps):
    # Send my right edge to the right neighbour, receive my left ghost from the left, and back.
    u[0] = cl.sendrecv(u[-2:-1], dst=right, src=left, tag=1)[0]
    u[-1] = cl.sendrecv(u[1:2], dst=left, src=right, tag=2)[0]
    if rank == 0:
        u[0] = u[1]  # insulated ends (the ring wraps; override at the boundary)
    if rank == size - 1:
        u[-1] = u[-2]
    u[1:-1] += alpha * (u[:-2] - 2 * u[1:-1] + u[2:])
total = cl.all_reduce(np.array([u[1:-1].sum()]))[0]
if rank == 0:
    print(f"heat is conserved: {total:.6f} (started with {49 * 100.0:.6f})")
assert abs(total - 4900.0) < 1e-6
