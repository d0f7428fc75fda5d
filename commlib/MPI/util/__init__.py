"""mpi4py.util for commlib.MPI: `pkl5` (objects as pickle 5 with out-of-band buffers)."""
