"""What one point-to-point call costs, between ranks 0 and 1 (rank 0 sends, rank 1 receives).

    commrun -n 2 python benchmarks/p2p_calls.py [--messages 200000] [--windows 300] [--repeats 5]

Rows (µs a message, median of the repeats; each rank's wall time and its main thread's CPU):
  stream   rank 0 sends --messages blocking 8-byte sends, rank 1 takes them with blocking recvs: the
           slower side sets the pace, and each side's CPU is what its call costs (plus its spin)
  post     rank 1 posts a window of 64 irecvs of 8 bytes (before rank 0 sends them)
  wait     ... then waits for each in turn, their messages sent meanwhile by 64 isends
The post and wait rows are those of benchmarks/isend_window.py taken apart: where a window's time goes.
"""
import argparse
import statistics
import time

import numpy as np

import commlib as cl

WINDOW = 64


def stream(me, messages):
    x = np.ones(1)
    cl.barrier()
    t, c = time.perf_counter(), time.thread_time()
    if me == 0:
        for _ in range(messages):
            cl.send(x, 1)
    else:
        for _ in range(messages):
            cl.recv((1,), np.float64, 0)
    t, c = time.perf_counter() - t, time.thread_time() - c
    cl.barrier()
    return t / messages * 1e6, c / messages * 1e6


def windows(me, count):
    """(post, wait) of rank 1: (wall, CPU) µs a message each; None on rank 0."""
    buf = np.zeros(1, np.float64)
    post = [0.0, 0.0]
    wait = [0.0, 0.0]
    for _ in range(count):
        cl.barrier()
        if me == 0:
            cl.wait_all([cl.isend(buf, 1, 5) for _ in range(WINDOW)])
            cl.recv_into(buf, 1, 6)
            continue
        t, c = time.perf_counter(), time.thread_time()
        reqs = [cl.irecv((1,), np.float64, 0, 5) for _ in range(WINDOW)]
        t2, c2 = time.perf_counter(), time.thread_time()
        cl.wait_all(reqs)
        t3, c3 = time.perf_counter(), time.thread_time()
        cl.send(buf, 0, 6)
        post[0] += t2 - t
        post[1] += c2 - c
        wait[0] += t3 - t2
        wait[1] += c3 - c2
    if me == 0:
        return None
    k = count * WINDOW / 1e6
    return (post[0] / k, post[1] / k), (wait[0] / k, wait[1] / k)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200000)
    ap.add_argument("--windows", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    g = cl.init()
    me = g.rank()
    if g.size() != 2:
        raise SystemExit("run with commrun -n 2")
    stream(me, 2000)
    windows(me, 20)
    rows = {"stream": [], "post": [], "wait": []}
    for _ in range(a.repeats):  # interleaved: each repeat measures every row once
        rows["stream"].append(stream(me, a.messages))
        got = windows(me, a.windows)
        if got is not None:
            rows["post"].append(got[0])
            rows["wait"].append(got[1])
    side = "sender" if me == 0 else "receiver"
    for name, got in rows.items():
        if got:
            wall, cpu = statistics.median(w for w, _ in got), statistics.median(c for _, c in got)
            print(f"rank {me} ({side}) {name:6s} {wall:7.2f} us a message, CPU {cpu:7.2f}", flush=True)


if __name__ == "__main__":
    main()
