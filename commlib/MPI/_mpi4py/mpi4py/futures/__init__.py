"""mpi4py.futures is not provided by commlib's stand-in yet."""
raise ImportError("mpi4py.futures (MPIPoolExecutor, MPICommExecutor) is not provided by commlib's stand-in "
                  "mpi4py yet; use concurrent.futures within a rank, or commlib's collectives")
