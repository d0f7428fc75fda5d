"""How late a receive that its rank only tests completes while that rank keeps posting receives (one every
0.2 ms, computing in between: no wait). Rank 1 posts the receive, then posts others; after the tenth it
tells rank 0, which sends the message at once. Rank 1 prints the time from its signal to the receive's
completion (median, 90th percentile and worst of `--rounds`) and the receives it posted meanwhile: only
the progress thread can have read the message, so this is that thread's reaction time on a busy rank.

    commrun -n 2 python benchmarks/tested_receive.py [--rounds 200]      (COMMLIB_TRANSPORT=socket or shm)
"""
import argparse
import time

import numpy as np

import commlib as cl


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    a = p.parse_args()
    g = cl.init()
    if g.size() != 2:
        raise SystemExit("tested_receive.py runs on 2 ranks")
    late, posts = [], []
    for i in range(a.rounds):
        tag = 100 + 4 * i
        if g.rank() == 1:
            first, more, signalled = cl.irecv((1,), np.float64, 0, tag=tag + 1), [], None
            deadline = time.monotonic() + 10
            while not first.test() and time.monotonic() < deadline:
                more.append(cl.irecv((1,), np.float64, 0, tag=tag + 2))
                if len(more) == 10:
                    cl.send(np.zeros(1), 0, tag=tag)
                    signalled = time.monotonic()
                end = time.monotonic() + 0.0002
                while time.monotonic() < end:  # computing: no commlib call
                    pass
            if signalled is None:
                raise SystemExit(f"round {i}: the receive completed before rank 0 was told to send it")
            late.append(time.monotonic() - signalled)
            posts.append(len(more))
            for r in more:
                r.cancel()
            first.wait()
        else:
            cl.recv((1,), np.float64, 1, tag=tag)
            cl.send(np.full(1, 5.0), 1, tag=tag + 1)
        cl.barrier()
    if g.rank() == 1:
        q = np.percentile(np.array(late) * 1e3, [50, 90, 100])
        print(f"tested receive completed {q[0]:.1f} ms (median) / {q[1]:.1f} ms (90th) / {q[2]:.1f} ms (worst) after "
              f"it was sent, {int(np.median(posts))} / {max(posts)} receives posted meanwhile ({a.rounds} rounds)")


if __name__ == "__main__":
    main()
