"""mpi4py.util is not provided by commlib's stand-in yet."""
raise ImportError("mpi4py.util (pkl5, dtlib, pool, sync) is not provided by commlib's stand-in mpi4py yet")
