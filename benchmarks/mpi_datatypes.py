"""Derived-datatype messages against the same bytes packed by hand with NumPy, interleaved.

usage: commrun -n 2 python benchmarks/mpi_datatypes.py [--rows 64 4096 262144] [--rounds 5] [--reps N]

Rank 0 and rank 1 ping-pong one column of a (rows, 8) float64 matrix:
  datatype   Send([a, 1, column]) / Recv([b, 1, column]) with column = DOUBLE.Create_vector(rows, 1, 8)
  by hand    Send(np.ascontiguousarray(a[:, 0])) / Recv(tmp); b[:, 0] = tmp
and the cost the unpacking wrapper adds to an 8-byte Allreduce once a packed type exists (measured
in a fresh process before any derived type is made, then after). Prints µs per round trip, the
median of `rounds` interleaved rounds, and the ratio datatype / by hand. Run it with commlib.MPI
(default) or, with COMMLIB_TEST_MPI=mpi4py under mpiexec, with mpi4py.
"""
import argparse
import os
import time

import numpy as np

if os.environ.get("COMMLIB_TEST_MPI") == "mpi4py":
    from mpi4py import MPI
else:
    from commlib import MPI

comm = MPI.COMM_WORLD
me = comm.Get_rank()
peer = 1 - me


def allreduce_us(reps):
    x, out = np.ones(1), np.empty(1)
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(reps):
        comm.Allreduce(x, out)
    return (time.perf_counter() - t) / reps * 1e6


def pingpong(send, recv, reps):
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(reps):
        if me == 0:
            send()
            recv()
        else:
            recv()
            send()
    return (time.perf_counter() - t) / reps * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, nargs="+", default=[64, 4096, 262144])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=0, help="round trips per measurement (0: by size)")
    a = p.parse_args()
    if comm.Get_size() != 2:
        raise SystemExit("run with 2 ranks")
    before = allreduce_us(20000)
    col8 = MPI.DOUBLE.Create_vector(4, 1, 8).Commit()  # the first packed type: the wrapper goes on
    after = allreduce_us(20000)
    before2 = after
    for _ in range(2):
        after = min(after, allreduce_us(20000))
    col8.Free()
    if me == 0:
        print(f"Allreduce 8 B: {before:.2f} us before a packed type exists, {min(after, before2):.2f} us after")
        print("rows | bytes | datatype us | by hand us | datatype/by hand")
    for rows in a.rows:
        reps = a.reps or max(20, min(5000, 20_000_000 // (rows * 8 + 4096)))
        src = np.arange(rows * 8, dtype=np.float64).reshape(rows, 8) + me
        dst = np.zeros((rows, 8))
        tmp = np.empty(rows)
        column = MPI.DOUBLE.Create_vector(rows, 1, 8).Commit()

        def dt_send():
            comm.Send([src, 1, column], peer, 1)

        def dt_recv():
            comm.Recv([dst, 1, column], peer, 1)

        def hand_send():
            comm.Send(np.ascontiguousarray(src[:, 0]), peer, 2)

        def hand_recv():
            comm.Recv(tmp, peer, 2)
            dst[:, 0] = tmp

        dts, hands = [], []
        for _ in range(a.rounds):
            dts.append(pingpong(dt_send, dt_recv, reps))
            hands.append(pingpong(hand_send, hand_recv, reps))
        assert (dst[:, 0] == src[:, 0] - me + peer).all()
        column.Free()
        if me == 0:
            d, h = float(np.median(dts)), float(np.median(hands))
            print(f"{rows} | {rows * 8} | {d:.1f} | {h:.1f} | {d / h:.2f}")


main()
