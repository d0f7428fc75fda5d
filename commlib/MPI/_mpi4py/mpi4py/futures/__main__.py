"""python -m mpi4py.futures script.py: rank 0 runs the script, the other ranks serve its pool."""
from commlib.MPI.futures.__main__ import main

main()
