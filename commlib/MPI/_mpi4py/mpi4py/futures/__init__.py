"""mpi4py.futures of commlib's stand-in: `commlib.MPI.futures` itself (the same module object)."""
import sys

from commlib.MPI import futures as _futures

sys.modules[__name__] = _futures
