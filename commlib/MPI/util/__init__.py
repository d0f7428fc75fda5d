"""mpi4py.util for commlib.MPI: `pkl5` (objects as pickle 5 with out-of-band buffers) and `dtlib`
(NumPy dtypes and MPI datatypes, each made from the other)."""
