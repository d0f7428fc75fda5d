"""Dynamic processes as programs use them: Spawn, Spawn_multiple, Get_parent, an MPIPoolExecutor that
spawns its workers, and a spawned worker that dies.

usage: mpi_spawn.py [kill | child MODE]

Sections (every rank of the job is a parent):
  manager   COMM_WORLD.Spawn of n + 1 children (unequal groups): the parents' root Bcasts a vector
            with MPI.ROOT, each child scales it by its rank and the root Gathers the results; a
            ping-pong between parent rank 0 and the last child; Merge into one intracommunicator
            whose Allreduce is checked against NumPy; the children's own COMM_WORLD; Disconnect
  multiple  Spawn_multiple of two programs (different arguments), errcodes one list per program, the
            children's world spanning both
  pool      each parent rank's own MPIPoolExecutor(max_workers=2), spawned from this script: map
            with chunks and a function defined in this script (the workers import it as __worker__)
With `kill`: a pool whose worker kills itself mid-task: the task's future fails with an error that
names the lost process, quickly, and the parent exits cleanly (the test checks nothing is left).
"""
import os
import signal
import sys
import time

import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

HERE = os.path.abspath(__file__)


def scaled(x):
    return 3 * x


def child(mode):
    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    assert parent != MPI.COMM_NULL, "a spawned child has a parent"
    if mode == "manager":
        v = np.zeros(5)
        parent.Bcast(v, root=0)
        parent.Gather(v * (world.Get_rank() + 1), None, root=0)
        if world.Get_rank() == world.Get_size() - 1:
            msg = parent.recv(source=0, tag=7)
            parent.send(("pong", msg, world.Get_size()), dest=0, tag=8)
        merged = parent.Merge(high=True)
        total = np.zeros(3)
        merged.Allreduce(np.full(3, float(merged.Get_rank())), total)
        merged.Free()
    else:  # multiple: say which program and where in the children's world this child is
        parent.gather((mode, world.Get_rank(), world.Get_size()), root=0)
    parent.Disconnect()
    assert MPI.Comm.Get_parent() == MPI.COMM_NULL


def manager(c, comm):
    me, n = comm.Get_rank(), comm.Get_size()
    k = n + 1
    errcodes = []
    inter = comm.Spawn(sys.executable, [HERE, "child", "manager"], maxprocs=k, root=0, errcodes=errcodes)
    c.equal((inter.Is_inter(), inter.Get_size(), inter.Get_remote_size(), errcodes), (True, n, k, [0] * k),
            "manager: the intercommunicator and errcodes")
    vec = np.arange(5.0)
    inter.Bcast(vec if me == 0 else None, root=MPI.ROOT if me == 0 else MPI.PROC_NULL)
    out = np.zeros((k, 5)) if me == 0 else None
    inter.Gather(None, out, root=MPI.ROOT if me == 0 else MPI.PROC_NULL)
    if me == 0:
        c.equal(out, np.outer(np.arange(1, k + 1), vec), "manager: Bcast with MPI.ROOT, Gather of the children")
        inter.send("ping", dest=k - 1, tag=7)
        c.equal(inter.recv(source=k - 1, tag=8), ("pong", "ping", k), "manager: ping-pong with the last child")
    merged = inter.Merge(high=False)
    total = np.zeros(3)
    merged.Allreduce(np.full(3, float(merged.Get_rank())), total)
    c.equal((merged.Get_size(), merged.Get_rank()), (n + k, me), "manager: Merge puts the parents first")
    c.equal(total, np.full(3, sum(range(n + k)), float), "manager: the merged communicator's Allreduce")
    merged.Free()
    inter.Disconnect()
    c.equal(inter, MPI.COMM_NULL, "manager: Disconnect")


def multiple(c, comm):
    me = comm.Get_rank()
    codes = []
    inter = comm.Spawn_multiple([sys.executable, sys.executable],
                                [[HERE, "child", "first"], [HERE, "child", "second"]], [1, 2], root=0, errcodes=codes)
    got = inter.gather(None, root=MPI.ROOT if me == 0 else MPI.PROC_NULL)
    c.equal(codes, [[0], [0, 0]], "multiple: errcodes, one list per program")
    if me == 0:
        c.equal(got, [("first", 0, 3), ("second", 1, 3), ("second", 2, 3)],
                "multiple: the children of both programs share one COMM_WORLD, in program order")
    inter.Disconnect()


def _executor():
    if USING_MPI4PY:
        from mpi4py.futures import MPIPoolExecutor
    else:
        from commlib.MPI.futures import MPIPoolExecutor
    return MPIPoolExecutor


def pool(c, comm):
    with _executor()(max_workers=2, path=[os.path.dirname(HERE)]) as ex:
        c.equal(list(ex.map(scaled, range(40), chunksize=7)), [3 * x for x in range(40)],
                "pool: map with a function of this script, on spawned workers")
        c.equal(ex.submit(pow, 2, comm.Get_rank()).result(), 2 ** comm.Get_rank(), "pool: submit")


def die_in_task(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)  # a task's work: others are still queued or running when a worker dies
    return x


def kill(c):
    ex = _executor()(max_workers=2, path=[os.path.dirname(HERE)])
    futures = [ex.submit(die_in_task, x) for x in range(6)]
    t0 = time.monotonic()
    errors = []
    for f in futures:
        try:
            f.result(timeout=30)
        except Exception as exc:  # the lost worker's error, on the futures it took down
            errors.append(str(exc))
    c.ok(errors and time.monotonic() - t0 < 15, "kill: the futures of a killed worker fail, quickly",
         f"{errors} after {time.monotonic() - t0:.1f} s")
    c.ok(any("lost" in e or "died" in e or "exited" in e for e in errors), "kill: ... saying a process was lost",
         repr(errors))
    ex.shutdown(wait=True, cancel_futures=True)


if __name__ == "__main__":
    if sys.argv[-2:-1] == ["child"]:
        child(sys.argv[-1])
        sys.exit(0)
    comm = MPI.COMM_WORLD
    c = Checker()
    if sys.argv[-1] == "kill":
        if USING_MPI4PY:
            raise SystemExit("the kill section is commlib's own")
        c.run([lambda: kill(c)])
    else:
        for fn in (manager, multiple, pool):
            c.run([lambda fn=fn: fn(c, comm)])  # noqa: B023
            comm.Barrier()
    c.finish()
