"""MPIPoolExecutor.map of many tiny tasks: tasks per second, commlib against mpi4py.

usage:
  commrun -n 4 --mpi4py -m mpi4py.futures benchmarks/futures_map.py [--tasks 10000] [--rounds 3]
  mpiexec -n 4 python -m mpi4py.futures benchmarks/futures_map.py ...   (mpi4py on MPICH)

Rank 0 maps `abs` over range(tasks) with chunksize 1 (one message each way per task) and with
chunksize 100, `rounds` times each, interleaved; prints the median seconds and tasks per second.
"""
import argparse
import statistics
import time

from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    times = {1: [], 100: []}
    with MPIPoolExecutor() as ex:
        list(ex.map(abs, range(200)))  # warm up every worker
        for _ in range(a.rounds):
            for chunk in times:
                t = time.perf_counter()
                out = list(ex.map(abs, range(-a.tasks, 0), chunksize=chunk))
                times[chunk].append(time.perf_counter() - t)
                assert out[0] == a.tasks and len(out) == a.tasks
        workers = ex.num_workers
    lib = MPI.Get_library_version().splitlines()[0][:40]
    for chunk, ts in times.items():
        med = statistics.median(ts)
        print(f"{lib} | workers {workers} | chunksize {chunk} | {a.tasks} tasks | {med:.3f} s | "
              f"{a.tasks / med:,.0f} tasks/s")


if __name__ == "__main__":
    main()
