"""comm.allreduce(int) through commlib.MPI or mpi4py: the object path, timed on rank 0.

    commrun -n N python benchmarks/objects_allreduce.py commlib
    mpirun -n N --mca pml ob1 --mca btl tcp,self python benchmarks/objects_allreduce.py ompi-tcp
    .env-mpich/bin/mpiexec -n N .env-mpich/bin/python benchmarks/objects_allreduce.py mpich

The first argument is the label; one starting with "commlib" imports commlib.MPI, any other mpi4py.
"""
import sys, time
if sys.argv[1].startswith("commlib"):
    from commlib import MPI
else:
    from mpi4py import MPI
c = MPI.COMM_WORLD
r = c.Get_rank()
for _ in range(200): c.allreduce(r)
c.Barrier()
t0 = time.perf_counter()
N = 2000
for _ in range(N): c.allreduce(r)
dt = (time.perf_counter() - t0) / N * 1e6
if r == 0: print(sys.argv[1], f"{dt:.1f} us", flush=True)
