"""2-D heat equation (explicit Jacobi-style update) on a Cartesian process grid.

The NX x NY grid is split over a 2-D process grid from MPI.Compute_dims;
each process owns a block plus one ghost cell on every side. Every step it
trades edge rows and columns with its four neighbours (Cartcomm.Shift +
Sendrecv; at the outer edges the neighbour is PROC_NULL, so the ghost keeps
its fixed boundary value), then updates its block:

    u_new = u + ALPHA * (u_up + u_down + u_left + u_right - 4 u)

The boundary is held at 1.0 along the top edge and 0.0 elsewhere. After
STEPS steps the residual ||u_new - u|| of the last step (an Allreduce every
step) and a
checksum of the whole gathered field are printed by rank 0.

    commrun -n 4 examples/mpi4py/heat2d.py [STEPS]

Only the import line differs from the mpi4py version.
"""
import sys

import numpy as np

from commlib import MPI

NX, NY = 60, 44          # global interior grid
ALPHA = 0.2              # stable for ALPHA <= 0.25
TOP = 1.0                # boundary value above row 0 (all other edges: 0.0)
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def initial(i, j):
    """Initial value at global interior point (i, j)."""
    return ((7 * i + 13 * j) % 17) / 17.0


def split(n, parts, index):
    """Offset and length of block `index` when n points are split as evenly as possible."""
    base, extra = divmod(n, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


world = MPI.COMM_WORLD
dims = MPI.Compute_dims(world.Get_size(), 2)
cart = world.Create_cart(dims, periods=[False, False], reorder=False)
rank, size = cart.Get_rank(), cart.Get_size()
coords = cart.Get_coords(rank)
x0, nx = split(NX, dims[0], coords[0])
y0, ny = split(NY, dims[1], coords[1])

# local block with a ghost layer; the ghosts of the outer edges hold the boundary values
u = np.zeros((nx + 2, ny + 2), dtype=np.float64)
ii, jj = np.meshgrid(np.arange(x0, x0 + nx), np.arange(y0, y0 + ny), indexing="ij")
u[1:-1, 1:-1] = initial(ii, jj)
if coords[0] == 0:
    u[0, :] = TOP

up, down = cart.Shift(0, 1)      # neighbours in the row direction (PROC_NULL at the edges)
left, right = cart.Shift(1, 1)   # neighbours in the column direction


def exchange_halos(u):
    # rows are contiguous: receive straight into the ghost rows (slice views)
    cart.Sendrecv(u[-2, 1:-1], dest=down, sendtag=0, recvbuf=u[0, 1:-1], source=up, recvtag=0)
    cart.Sendrecv(u[1, 1:-1], dest=up, sendtag=1, recvbuf=u[-1, 1:-1], source=down, recvtag=1)
    # columns are strided: send contiguous copies, receive into a scratch buffer
    col = u[1:-1, 0].copy()  # stays as it is when the source is PROC_NULL
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, -2]), dest=right, sendtag=2,
                  recvbuf=col, source=left, recvtag=2)
    u[1:-1, 0] = col
    col = u[1:-1, -1].copy()
    cart.Sendrecv(np.ascontiguousarray(u[1:-1, 1]), dest=left, sendtag=3,
                  recvbuf=col, source=right, recvtag=3)
    u[1:-1, -1] = col


local_sq = np.zeros(1, dtype=np.float64)
residual = np.zeros(1, dtype=np.float64)
t0 = MPI.Wtime()
for step in range(STEPS):
    exchange_halos(u)
    c = u[1:-1, 1:-1]
    new = c + ALPHA * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
    local_sq[0] = np.sum((new - c) ** 2)
    u[1:-1, 1:-1] = new
    cart.Allreduce(local_sq, residual, op=MPI.SUM)  # global squared change of this step
residual = float(np.sqrt(residual[0]))
elapsed = MPI.Wtime() - t0

# gather every block (with its position) on rank 0 and assemble the whole field
blocks = cart.gather((x0, y0, np.ascontiguousarray(u[1:-1, 1:-1])), root=0)
if rank == 0:
    field = np.empty((NX, NY), dtype=np.float64)
    for bx, by, blk in blocks:
        field[bx:bx + blk.shape[0], by:by + blk.shape[1]] = blk
    checksum = float(field.sum())
    print(f"{NX}x{NY} grid on a {dims[0]}x{dims[1]} process grid, {STEPS} steps, {elapsed:.3f} s")
    print(f"final residual {residual:.6e}, checksum {checksum:.12f}")
    print(f"RESULT heat2d_residual {residual!r}")
    print(f"RESULT heat2d_checksum {checksum!r}")
cart.Free()
