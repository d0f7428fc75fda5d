"""Master/worker task farm with object messages.

Rank 0 (the master) hands out NTASKS task objects one at a time; each worker
computes a result and sends it back; the master receives from ANY_SOURCE,
looks at `status.Get_source()` to give that worker its next task, and finally
sends every worker a stop sentinel (None). With a single process there are no
workers and the master does every task itself.

    commrun -n 4 examples/mpi4py/master_worker.py [NTASKS]

Only the import line differs from the mpi4py version.
"""
import sys

from commlib import MPI

TAG_TASK, TAG_RESULT = 1, 2

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
size = comm.Get_size()
NTASKS = int(sys.argv[1]) if len(sys.argv) > 1 else 40


def work(task):
    """The 'expensive' function: the sum of k*k for k < 100 * x."""
    x = task["x"]
    return {"id": task["id"], "value": sum(k * k for k in range(100 * x))}


def master():
    tasks = [{"id": i, "x": i} for i in range(NTASKS)]
    results = {}
    if size == 1:
        print("no workers (1 process): the master does every task itself")
        for t in tasks:
            r = work(t)
            results[r["id"]] = r["value"]
        return results
    todo = iter(tasks)
    active = 0
    for w in range(1, size):  # one task to every worker, or the sentinel when there is none left
        task = next(todo, None)
        comm.send(task, dest=w, tag=TAG_TASK)
        active += task is not None
    status = MPI.Status()
    while active:
        r = comm.recv(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=status)
        assert status.Get_tag() == TAG_RESULT
        results[r["id"]] = r["value"]
        worker = status.Get_source()
        task = next(todo, None)  # None is the stop sentinel
        comm.send(task, dest=worker, tag=TAG_TASK)
        if task is None:
            active -= 1
    print(f"{size - 1} workers finished {len(results)} tasks")
    return results


def worker():
    done = 0
    while True:
        task = comm.recv(source=0, tag=TAG_TASK)
        if task is None:
            return done
        comm.send(work(task), dest=0, tag=TAG_RESULT)
        done += 1


if rank == 0:
    results = master()
    assert sorted(results) == list(range(NTASKS)), sorted(results)
    values = [results[i] for i in range(NTASKS)]
    print(f"RESULT master_worker {values}")
else:
    worker()
