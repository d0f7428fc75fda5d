"""The rank programs that each check one part of commlib.MPI, run whole in one job (_batch.script):
attributes and error handlers, message memory, derived datatypes, intercommunicators, matched
probes, topologies and pkl5. Each also runs alone (`commrun -n N
mpi_attrs.py SEED`), and under mpirun with COMMLIB_TEST_MPI=mpi4py against a reference MPI."""
from _batch import script

for _program in ("mpi_attrs.py", "mpi_buffers.py", "mpi_datatypes.py", "mpi_intercomm.py", "mpi_matched.py",
                 "mpi_topo.py", "mpi_pkl5.py"):
    script(_program)
