"""Exchanges through mpi4py's API: neighbourhood collectives, Alltoallv, and a posted Irecv/Isend pair.

    commrun -n N --mpi4py python benchmarks/mpi_exchange.py      (commlib.MPI through the stand-in)
    mpiexec -n N python benchmarks/mpi_exchange.py               (a real mpi4py, for reference)

Ops, on a distributed graph where rank r receives from r-2, r-1 and sends to r+1, r+2 (mod n; at
n = 2 one of each is the rank itself), 24-byte blocks (int32 x 6):

    ngh_alltoall    Neighbor_alltoall(s, r)
    ngh_alltoallw   Neighbor_alltoallw with explicit counts, displacements and datatypes
    ngh_allgather   Neighbor_allgather(s[0], r)
    alltoallv       COMM_WORLD.Alltoallv, 3 int32 to each rank
    irecv_isend     Irecv + Isend with the next rank, Waitall (a ring step, as stencil codes write it)

Each op: 50 warm-up calls, then --rounds rounds of --iters calls each, a Barrier before each round;
rank 0 prints one JSON line per op: the median over rounds of the wall and of the CPU time per call
(rank 0's `time.process_time`), in microseconds.
"""
import argparse
import json
import statistics
import time

import numpy as np
from mpi4py import MPI


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=400)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    n, me = comm.Get_size(), comm.Get_rank()
    graph = comm.Create_dist_graph_adjacent([(me - 2) % n, (me - 1) % n], [(me + 1) % n, (me + 2) % n])
    s, r = np.arange(12, dtype="i").reshape(2, 6), np.empty((2, 6), "i")
    cw = ([6, 6], [0, 24])
    v_send, v_recv = np.ones(3 * n, "i"), np.empty(3 * n, "i")
    x, y = np.ones(6, "i"), np.empty(6, "i")
    right, left = (me + 1) % n, (me - 1) % n

    def ring():
        MPI.Request.Waitall([comm.Irecv(y, left), comm.Isend(x, right)])

    ops = {
        "ngh_alltoall": lambda: graph.Neighbor_alltoall(s, r),
        "ngh_alltoallw": lambda: graph.Neighbor_alltoallw([s, cw, [MPI.INT] * 2], [r, cw, [MPI.INT] * 2]),
        "ngh_allgather": lambda: graph.Neighbor_allgather(s[0], r),
        "alltoallv": lambda: comm.Alltoallv([v_send, [3] * n], [v_recv, [3] * n]),
        "irecv_isend": ring,
    }
    for name, op in ops.items():
        for _ in range(50):
            op()
        walls, cpus = [], []
        for _ in range(a.rounds):
            comm.Barrier()
            t, c = time.perf_counter(), time.process_time()
            for _ in range(a.iters):
                op()
            walls.append((time.perf_counter() - t) / a.iters * 1e6)
            cpus.append((time.process_time() - c) / a.iters * 1e6)
        if me == 0:
            print(json.dumps({"n": n, "op": name, "median_us": round(statistics.median(walls), 1),
                              "cpu_us": round(statistics.median(cpus), 1), "rounds": a.rounds, "iters": a.iters}),
                  flush=True)
    graph.Free()


if __name__ == "__main__":
    main()
