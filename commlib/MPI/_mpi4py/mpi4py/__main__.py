"""python -m mpi4py [--rc key=value ...] <pyfile | -m module | -c command> [args]: mpi4py.run."""
from .run import main

main()
