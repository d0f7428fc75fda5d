"""comm.allreduce(int) and comm.bcast(a small dict) through commlib.MPI or mpi4py: the object path, timed on rank 0.

    commrun -n N python benchmarks/objects_allreduce.py commlib
    mpirun -n N --mca pml ob1 --mca btl tcp,self python benchmarks/objects_allreduce.py ompi-tcp
    .env-mpich/bin/mpiexec -n N .env-mpich/bin/python benchmarks/objects_allreduce.py mpich

The first argument is the label; one starting with "commlib" imports commlib.MPI, any other mpi4py.
"""
import sys
import time

if sys.argv[1].startswith("commlib"):
    from commlib import MPI
else:
    from mpi4py import MPI

WARMUP, CALLS = 200, 2000

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
for _ in range(WARMUP):
    comm.allreduce(rank)
comm.Barrier()
t0 = time.perf_counter()
for _ in range(CALLS):
    total = comm.allreduce(rank)
dt = (time.perf_counter() - t0) / CALLS * 1e6
assert total == sum(range(comm.Get_size())), total
msg = {"step": 1, "loss": 0.25, "name": "w"}
for _ in range(WARMUP):
    comm.bcast(msg if rank == 0 else None, root=0)
comm.Barrier()
t0 = time.perf_counter()
for _ in range(CALLS):
    got = comm.bcast(msg if rank == 0 else None, root=0)
db = (time.perf_counter() - t0) / CALLS * 1e6
assert got == msg, got
if rank == 0:
    print(sys.argv[1], f"{dt:.1f} us", f"bcast(dict) {db:.1f} us", flush=True)
