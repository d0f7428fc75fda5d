"""mpi4py.futures for commlib.MPI: run callables on other ranks through the `concurrent.futures` API.

Two ways to have workers, as mpi4py has them:

- `commrun -n N --mpi4py -m mpi4py.futures script.py`: rank 0 runs the script; ranks 1 ... N-1
  serve every `MPIPoolExecutor` it makes, until the script ends.
- `with MPICommExecutor(comm, root) as executor:` inside any program: the root gets an executor,
  the other ranks of `comm` serve it until the root leaves the block (they get None).

An executor started from a plain `python script.py` would spawn its workers (MPI_Comm_spawn);
commlib.MPI cannot start processes yet, so it says how to run instead.

Tasks travel as pickled objects over a duplicate of the communicator (so they never meet the
program's own messages): the manager thread on the root hands each idle worker the next task and
takes results as they come, waking on a message to itself when a task is submitted (no polling).
A task's exception is raised in the caller with the worker's traceback as its cause.
"""
from concurrent.futures import (FIRST_COMPLETED, FIRST_EXCEPTION, ALL_COMPLETED, CancelledError,  # noqa: F401
                                Future, TimeoutError, as_completed, wait)

from commlib.MPI.futures._pool import (MPICommExecutor, MPIPoolExecutor, ProcessPoolExecutor, ThreadPoolExecutor,
                                       get_comm_workers)

__all__ = ["MPIPoolExecutor", "MPICommExecutor", "ThreadPoolExecutor", "ProcessPoolExecutor", "Future",
           "as_completed", "wait", "get_comm_workers", "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED",
           "CancelledError", "TimeoutError"]
