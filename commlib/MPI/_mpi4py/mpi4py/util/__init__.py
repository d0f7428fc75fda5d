"""mpi4py.util of commlib's stand-in: `mpi4py.util.pkl5` is `commlib.MPI.util.pkl5` itself (the same
module object, so that setting `pkl5.pickle` or `pkl5._bigmpi` acts on it); `mpi4py.util.dtlib` is
`commlib.MPI.util.dtlib`. `mpi4py.util.pool` is `commlib.MPI.util.pool`, and `mpi4py.util.sync`
`commlib.MPI.util.sync`."""
import sys

from commlib.MPI.util import dtlib, pkl5, pool, sync

sys.modules[__name__ + ".pkl5"] = pkl5
sys.modules[__name__ + ".dtlib"] = dtlib
sys.modules[__name__ + ".sync"] = sync
sys.modules[__name__ + ".pool"] = pool
__all__ = ["dtlib", "pkl5", "pool", "sync"]
