"""What the idle-connection limit costs and saves: a manager sending tasks to its workers in turn.

usage: commrun -n N python benchmarks/idle_connections.py [ROUNDS] [PAUSE_S] [BATCH]

Rank 0 sends each worker a 64 B task (a blocking send), in turn, then takes each worker's
64 B answer; ROUNDS rounds, PAUSE_S seconds apart (the manager doing other work). With BATCH,
each round talks to the next BATCH workers only (round-robin): the others' connections, both
ways, are idle meanwhile. Rank 0 prints
the median time of a round, how many outgoing point-to-point connections it holds at the end
and closed on the way, its open descriptors and the shared-memory segments it has mapped. Run
it under different COMMLIB_P2P_CONNECTIONS and COMMLIB_P2P_IDLE_S settings: with a limit below N - 1 and no idle time every send to another
worker reconnects (the worst case: what a round costs then); with an idle time shorter than the
pause the connections close between rounds and open again at the next.
"""
import os
import statistics
import sys
import time

import numpy as np

import commlib as cl

def _segments():
    """Shared-memory segments this process has mapped (each a memfd)."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if "memfd:commlib" in line)


w = cl.init()
me, n = w.rank(), w.size()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
pause = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
batch = int(sys.argv[3]) if len(sys.argv) > 3 else n - 1
task = np.zeros(8)
times = []
for k in range(rounds):
    workers = [1 + (k * batch + i) % (n - 1) for i in range(batch)]
    cl.barrier()
    if me == 0:
        t0 = time.perf_counter()
        for worker in workers:
            cl.send(task, worker, tag=k)
        for worker in workers:
            cl.recv(8, np.float64, worker, tag=k)
        times.append(time.perf_counter() - t0)
        time.sleep(pause)
    elif me in workers:
        cl.send(cl.recv(8, np.float64, 0, tag=k) + 1, 0, tag=k)
cl.barrier()
if me == 0:
    p2p, ep = w.engine.p2p, w.channel.ep
    out = sum(1 for key in ep._out if key[1] == 1)  # CH_P2P
    inc = sum(1 for key in ep._in if key[1] == 1)
    print(f"{n} ranks, limit {p2p.max_connections}, idle {p2p.idle_s:g} s, pause {pause:g} s: round "
          f"{statistics.median(times[1:] or times) * 1e3:.2f} ms median ({batch} of {n - 1} workers); manager holds "
          f"{out} outgoing / {inc} incoming point-to-point connections, closed {p2p.retired}, asked {p2p.asks}, "
          f"{len(os.listdir('/proc/self/fd'))} descriptors, {_segments()} shared-memory segments mapped")
