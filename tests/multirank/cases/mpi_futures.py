"""mpi4py.futures as its users write it.

usage:
  commrun -n N --mpi4py -m mpi4py.futures mpi_futures.py SEED pool   rank 0 runs `pool`; the others serve
  commrun -n N --mpi4py mpi_futures.py SEED comm                     every rank runs `comm`
  python mpi_futures.py SEED plain                                   no workers at all

Parts:
  pool    MPIPoolExecutor: map (chunksize, unordered, a generator input), submit + as_completed, wait,
          starmap, an exception re-raised with the worker's traceback as its cause, initializer on
          each worker, get_comm_workers inside a task, shutdown(cancel_futures=True), a second
          executor on the same workers, a task that cannot be pickled failing only its future
  comm    `with MPICommExecutor(comm, root) as executor:` twice (root 0, then the last rank), the
          other ranks serving and getting None
  plain   MPIPoolExecutor from a plain `python script.py`: it spawns its two workers (Spawn)
"""
import os
import sys
import threading
import time

from mpi4py import MPI
from mpi4py.futures import (FIRST_COMPLETED, MPICommExecutor, MPIPoolExecutor, as_completed, get_comm_workers,
                            wait)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mpicase import Checker  # noqa: E402

_state = {}


def square(x):
    return x * x


def who(_):
    return MPI.COMM_WORLD.Get_rank()


def fail(x):
    raise KeyError(f"no key {x}")


def setup(value):
    _state["value"] = value


def read_state(_):
    return _state.get("value")


def workers_size(_):
    return get_comm_workers().Get_size()


def slow(x):
    time.sleep(0.05)  # a task's work: 40 of them keep the workers busy while shutdown cancels the rest
    return x


def pool():
    c = Checker()
    n = MPI.COMM_WORLD.Get_size()
    with MPIPoolExecutor(initializer=setup, initargs=(42,)) as ex:
        c.equal(ex.num_workers, n - 1, "pool: the workers are ranks 1 ... N-1")
        c.equal(list(ex.map(square, range(100), chunksize=7)), [i * i for i in range(100)], "pool: map in order")
        c.equal(sorted(ex.map(square, (i for i in range(30)), unordered=True)), sorted(i * i for i in range(30)),
                "pool: map of a generator, unordered")
        ranks = set(ex.map(who, range(4 * n), chunksize=1))
        c.ok(ranks <= set(range(1, n)) and 0 not in ranks, "pool: tasks run on the workers only", str(ranks))
        fs = [ex.submit(square, i) for i in range(10)]
        c.equal(sorted(f.result() for f in as_completed(fs)), [i * i for i in range(10)], "pool: as_completed")
        done, _ = wait([ex.submit(square, 3)], return_when=FIRST_COMPLETED)
        c.equal([f.result() for f in done], [9], "pool: wait")
        c.equal(list(ex.starmap(pow, [(2, 5), (3, 3)])), [32, 27], "pool: starmap")
        f = ex.submit(fail, "k")
        err = c.raises(KeyError, f.result, "pool: a task's exception is raised in the caller")
        if err is not None:
            c.ok("fail" in str(err.__cause__) and "Traceback" in str(err.__cause__),
                 "pool: ... with the worker's traceback as its cause", str(err.__cause__))
        c.equal(set(ex.map(read_state, range(2 * n))), {42}, "pool: the initializer ran on every worker")
        c.equal(ex.submit(workers_size, 0).result(), n - 1, "pool: get_comm_workers() in a task")
        lock = threading.Lock()
        bad = ex.submit(square, lock)  # a lock cannot be pickled: only this future fails
        c.raises(TypeError, bad.result, "pool: an unpicklable task fails its own future")
        c.equal(ex.submit(square, 5).result(), 25, "pool: ... and the pool goes on")
        many = [ex.submit(slow, i) for i in range(40)]
        ex.shutdown(wait=True, cancel_futures=True)
        c.ok(any(f.cancelled() for f in many) and all(f.done() for f in many),
             "pool: shutdown(cancel_futures=True) cancels what had not started")
    with MPIPoolExecutor() as ex2:
        c.equal(list(ex2.map(square, [4, 5])), [16, 25], "pool: a second executor on the same workers")
    c.finish()


def comm_part():
    world = MPI.COMM_WORLD
    c = Checker(world)
    n, me = world.Get_size(), world.Get_rank()
    for root in (0, n - 1):
        with MPICommExecutor(world, root) as ex:
            if ex is not None:
                c.equal(me, root, f"comm: root {root} gets the executor")
                got = list(ex.map(square, range(50), chunksize=5))
                c.equal(got, [i * i for i in range(50)], f"comm: map with root {root}")
                if n > 1:
                    c.ok(root not in set(ex.map(who, range(3 * n))), f"comm: root {root} runs no task itself")
            else:
                c.ok(me != root, f"comm: rank {me} served root {root} and got None")
    c.finish()


def _workers_size():
    return get_comm_workers().Get_size()


def plain():
    c = Checker()
    with MPIPoolExecutor(max_workers=2) as ex:
        c.equal(list(ex.map(square, range(30), chunksize=4)), [x * x for x in range(30)],
                "plain: the pool spawned its workers; map")
        c.equal(ex.submit(_workers_size).result(), 2, "plain: get_comm_workers is the spawned workers' world")
    here = os.path.dirname(os.path.abspath(__file__))
    with MPIPoolExecutor(max_workers=1, mpi_info={"host": "localhost", "wdir": here}) as ex:
        c.equal(ex.submit(os.getcwd).result(), here, "plain: mpi_info reaches Spawn (host, wdir)")
    try:
        with MPIPoolExecutor(max_workers=1, mpi_info=[("host", "nowhere:0")]) as ex:
            ex.submit(os.getcwd).result()
        c.equal("no error", "MPI.Exception", "plain: a bad mpi_info host is refused")
    except MPI.Exception as exc:
        c.equal(exc.Get_error_class(), MPI.ERR_INFO, "plain: a bad mpi_info host is an info error")
    c.finish()


if __name__ == "__main__":
    {"pool": pool, "comm": comm_part, "plain": plain}[sys.argv[2]]()
