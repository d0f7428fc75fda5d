"""Blocking Send/Recv ping-pong through the forms mpi4py programs write, commlib.MPI or real mpi4py.

    commrun -n 2 python benchmarks/mpi_pingpong_forms.py commlib
    mpiexec -n 2 python benchmarks/mpi_pingpong_forms.py mpich       (any label but "commlib": mpi4py)

Forms, between ranks 0 and 1 (8 B unless said; one way = round trip / 2, µs, the median of 7 batches of
5,000 round trips after 500):

    array       comm.Send(buf, peer, 1) / comm.Recv(buf, peer, 1)            a NumPy array, a named tag
    any_tag     comm.Send(buf, peer) / comm.Recv(buf, peer)                  Recv's default tag: ANY_TAG
    datatype    comm.Send([buf, MPI.DOUBLE], peer, 1) / comm.Recv([buf, MPI.DOUBLE], peer, 1)
    osu N       comm.Send([s_buf, N, MPI.BYTE], peer, 1) / comm.Recv([r_buf, N, MPI.BYTE], peer, 1), s_buf and
                r_buf mmaps of 64 KiB: the shape of mpi4py's demo/osu_latency.py, at N = 8 and 16384

Rank 0 prints one line: the label and each form's one-way µs.
"""
import mmap
import statistics
import sys
import time

import numpy as np

if sys.argv[1:2] == ["commlib"]:
    from commlib import MPI
else:
    from mpi4py import MPI

comm = MPI.COMM_WORLD
me = comm.Get_rank()
peer = 1 - me
BATCHES, ITERS, WARMUP = 7, 5000, 500


def timed(send, recv):
    first, then = (send, recv) if me == 0 else (recv, send)  # rank 0 starts each round trip

    def round_trip():
        first()
        then()

    for _ in range(WARMUP):
        round_trip()
    out = []
    for _ in range(BATCHES):
        comm.Barrier()
        t = time.perf_counter()
        for _ in range(ITERS):
            round_trip()
        out.append((time.perf_counter() - t) / ITERS / 2 * 1e6)
    return statistics.median(out)


def main():
    if comm.Get_size() != 2:
        raise SystemExit("run with 2 ranks")
    buf = np.zeros(1)
    s_buf, r_buf = mmap.mmap(-1, 1 << 16), mmap.mmap(-1, 1 << 16)
    rows = {
        "array": timed(lambda: comm.Send(buf, peer, 1), lambda: comm.Recv(buf, peer, 1)),
        "any_tag": timed(lambda: comm.Send(buf, peer), lambda: comm.Recv(buf, peer)),
        "datatype": timed(lambda: comm.Send([buf, MPI.DOUBLE], peer, 1), lambda: comm.Recv([buf, MPI.DOUBLE], peer, 1)),
    }
    for size in (8, 16384):
        s_msg, r_msg = [s_buf, size, MPI.BYTE], [r_buf, size, MPI.BYTE]
        rows[f"osu{size}"] = timed(lambda: comm.Send(s_msg, peer, 1), lambda: comm.Recv(r_msg, peer, 1))
    if me == 0:
        print(sys.argv[1] if len(sys.argv) > 1 else "mpi4py", " ".join(f"{k} {v:.2f}" for k, v in rows.items()),
              flush=True)


if __name__ == "__main__":
    main()
