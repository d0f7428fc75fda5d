"""commlib.MPI through the real launcher: one job per (world size, transport) runs each rank program
of cases/mpi_layer.py, each an item. The programs (each also runs alone, and was validated under
mpirun with COMMLIB_TEST_MPI=mpi4py against a reference MPI):

- Attributes and keyvals, error handlers, error classes and Info through the real launcher
(cases/mpi_attrs.py), and ERRORS_ARE_FATAL stopping a job whose other ranks wait.

- Every kind of memory mpi4py takes as a message, through the real launcher (cases/mpi_buffers.py):
CUDA-array-interface and DLPack-on-CUDA arrays over host memory, MPI.buffer, Get_address, and
memory the host cannot reach refused with a BufferError.

- Derived datatypes through the real launcher (cases/mpi_datatypes.py, validated against mpi4py
4.1.2 on the MPICH wheel): a column halo exchange with Create_vector, a slab 3-D FFT whose transpose
is one Alltoallw of subarray types (against numpy.fft), resized column types in Gather/Gatherv/
Scatter, strided Bcast and Allreduce, a struct of mixed types, Pack/Unpack/Pack_external, decode and
pickling, and the errors of a type past its buffer and a reduction over a struct.

- Intercommunicators through the real launcher (cases/mpi_intercomm.py): a manager/worker job joined
by Create_intercomm (Bcast with MPI.ROOT, Scatter, Gather, Reduce, object forms), ping-pong between
the two halves (unequal at odd n) with remote ranks in every status, Merge back to an intracomm
with an Allreduce checked against NumPy, the `all` collectives each way with their I and
persistent forms, Dup/Split/Create, and the errors (a remote rank that is not there, a bad root,
IN_PLACE, Scan).

- commlib.MPI's matched probes through the real launcher (cases/mpi_matched.py, validated against
mpi4py 4.1.2 on the MPICH wheel): sizing a receive from the probe, two threads probing one source,
a claimed message invisible to other receives, every handle form.

- Process topologies, neighbourhood collectives and partitioned point-to-point through the real
launcher (cases/mpi_topo.py): a periodic 2-D halo exchange, a ring with uneven counts, graphs made
from others' edges, a partitioned send filled by threads, and bad graph arguments refused on every
rank with the rank named.

- mpi4py.util.pkl5 through the real launcher (cases/mpi_pkl5.py, validated against mpi4py 4.1.2 on
the MPICH wheel): objects with out-of-band arrays over send/recv, issend + mprobe().irecv(),
sendrecv, improbe; buffers split into many messages; the five object collectives; and, when
COMMLIB_SLOW_TESTS=1, one 3 GiB object (16 s and 4 GiB of memory a rank on the 2-core VM).

COMMLIB_TIMEOUT is 20 s: a wait that is never satisfied surfaces as an error long before the job's
own limit. The programs' special endings (a fatal error handler, a 3 GiB object) keep their own
jobs in test_mpi_attrs.py and test_mpi_pkl5.py; one-sided communication (whose exit with a window
never freed is timed) keeps its own in test_mpi_rma.py.
"""
from _harness import batched

ENV = {"COMMLIB_TIMEOUT": "20", "COMMLIB_TEST_MPI": "commlib"}

test_mpi_layer = batched("mpi_layer.py", [1, 2, 3, 4], env=ENV)
