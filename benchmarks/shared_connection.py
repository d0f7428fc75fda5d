"""What a small collective pays when a large transfer to the same peer shares its connection.

usage: commrun -n 2 python benchmarks/shared_connection.py [MIB] [REPEATS]

Point-to-point and collective traffic between two ranks travel on separate connections; the
collectives of every group share one. This measures what sharing costs the overlapped pattern
of a pipeline (a large send to a neighbour while small collectives run with it): rank 0 sends
rank 1 MIB MiB while both run 8-byte all_reduces on the world, one after another, until the
transfer is done.

- alone:    the all_reduces with nothing else in flight (the reference);
- separate: the transfer is an isend/irecv (the point-to-point connection);
- shared:   the transfer is a broadcast of another group, run by a second thread (the same
            collective connection as the all_reduces: each waits for the message ahead of it).

Rank 0 prints, per mode, the median, the 90th percentile and the longest of an all_reduce's time while the
transfer is in flight, how many ran, and the transfer's time; REPEATS transfers each, modes
interleaved.
"""
import statistics
import sys
import threading
import time

import numpy as np

import commlib as cl

w = cl.init()
me, n = w.rank(), w.size()
if n != 2:
    raise SystemExit("run with commrun -n 2")
mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
other = w.split(0)  # a second group: its collectives share the world's connection
big = np.ones(mib << 17) if me == 0 else np.empty(mib << 17)  # float64: MIB MiB
small = np.ones(1)


def small_ops_until(done, times):
    """8-byte all_reduces on the world until both ranks have seen `done` (agreed by the reduction)."""
    while True:
        flag = np.array([1.0 if done() else 0.0])
        t0 = time.perf_counter()
        got = cl.all_reduce(flag)
        times.append(time.perf_counter() - t0)
        if got[0] == 2.0:
            return


def alone():
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        cl.all_reduce(small)
        times.append(time.perf_counter() - t0)
    return times, 0.0


def separate():
    times = []
    cl.barrier()
    t0 = time.perf_counter()
    req = cl.isend(big, 1, tag=7) if me == 0 else cl.irecv(big.shape, big.dtype, 0, tag=7)
    small_ops_until(req.test, times)
    req.wait()
    return times, time.perf_counter() - t0


def shared():
    times, finished = [], threading.Event()

    def transfer():
        cl.broadcast(big, root=0, group=other)
        finished.set()

    cl.barrier()
    t0 = time.perf_counter()
    thread = threading.Thread(target=transfer)
    thread.start()
    small_ops_until(finished.is_set, times)
    thread.join()
    return times, time.perf_counter() - t0


results = {"alone": [], "separate": [], "shared": []}
took = {name: [] for name in results}
for _ in range(repeats):
    for name, mode in (("alone", alone), ("separate", separate), ("shared", shared)):
        times, seconds = mode()
        results[name].extend(times)
        took[name].append(seconds)
if me == 0:
    print(f"2 ranks, {mib} MiB transfer, {repeats} repeats")
    for name, times in results.items():
        times = sorted(times)
        p90 = times[int(0.9 * (len(times) - 1))]
        transfer = f", transfer {statistics.median(took[name]) * 1e3:.1f} ms" if name != "alone" else ""
        print(f"{name:9s} all_reduce 8 B: median {statistics.median(times) * 1e6:.0f} us, p90 {p90 * 1e6:.0f} us, "
              f"max {times[-1] * 1e3:.1f} ms, {len(times) / repeats:.0f} per repeat{transfer}")
