"""A window of non-blocking sends (osu_mbw_mr style): rank 0 isends W messages of 8 B to rank 1, which
has W irecvs posted, both wait for all; then one 8 B message back. Per message, median of 5 rounds of R
windows: wall time, and each rank's CPU (process time, its threads included).

    commrun -n 2 python benchmarks/isend_window.py [--window 64] [--rounds 300]
"""
import argparse
import time

import numpy as np

import commlib as cl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=300)
    a = ap.parse_args()
    g = cl.init()
    me = g.rank()
    if g.size() != 2:
        raise SystemExit("run with commrun -n 2")
    buf = np.zeros(1, np.float64)

    def window():
        if me == 0:
            reqs = [cl.isend(buf, 1, 5) for _ in range(a.window)]
        else:
            reqs = [cl.irecv((1,), np.float64, 0, 5) for _ in range(a.window)]
        cl.wait_all(reqs)
        if me == 0:
            cl.recv_into(buf, 1, 6)
        else:
            cl.send(buf, 0, 6)

    for _ in range(20):
        window()
    rows = []
    for _ in range(5):
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(a.rounds):
            window()
        n = a.rounds * a.window
        rows.append(((time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6))
    rows.sort()
    wall, cpu = rows[2]
    print(f"rank {me} ({'sender' if me == 0 else 'receiver'}): {wall:.2f} us a message, CPU {cpu:.2f} us", flush=True)


if __name__ == "__main__":
    main()
