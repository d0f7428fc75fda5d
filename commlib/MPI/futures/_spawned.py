"""A worker an MPIPoolExecutor spawned (`python -m commlib.MPI.futures._spawned`): it merges the
intercommunicator to its parent into one communicator (the parent is rank 0), applies the pool's
set-up (sys.path, working directory, environment, the parent's `__main__` script imported as
`__worker__`), then serves tasks until the pool stops it."""
import os
import runpy
import sys
import types

from commlib import MPI
from commlib._errors import CommError
from commlib.MPI.futures._pool import TAG_TASK, serve


def main():
    parent = MPI.Comm.Get_parent()
    if not parent:
        raise SystemExit("commlib.MPI.futures._spawned: not started by an MPIPoolExecutor")
    comm = parent.Merge(high=True)
    setup = comm.recv(None, 0, TAG_TASK)
    sys.path[:0] = setup["path"]
    if setup["wdir"]:
        os.chdir(setup["wdir"])
    os.environ.update(setup["env"])
    if setup["main"] and os.path.exists(setup["main"]):
        names = runpy.run_path(setup["main"], run_name="__worker__")
        module = types.ModuleType("__worker__")
        module.__dict__.update(names)
        sys.modules["__worker__"] = sys.modules["__main__"] = module
    try:
        serve(comm, 0, MPI.COMM_WORLD)
    except CommError as exc:  # the pool or a fellow worker is gone: nothing left to serve
        print(f"commlib: MPIPoolExecutor worker {MPI.COMM_WORLD.Get_rank()} stops: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    comm.Free()
    parent.Disconnect()


if __name__ == "__main__":
    main()
