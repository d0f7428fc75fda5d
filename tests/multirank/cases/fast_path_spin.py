"""The one-call path learns each peer's waits like the step loop (adaptive spin).

usage: fast_path_spin.py SEED

Rank 1 sleeps before each small all_reduce; rank 0's one-call path must record
those waits in the channel's per-peer average (the one the Python path's
steps read), so its spin budget for that peer drops to nothing; then, with the
partner prompt again, the average comes back down. Results are checked too.
"""
import time

import numpy as np

import commlib as cl
from commlib._transport import _io
from _common import Checker

c = Checker("fast_path_spin")
n, me, g = c.size, c.rank, c.g
cl.barrier()  # arms the one-call path
cl.all_reduce(np.zeros(1))  # opens the collective connections on the Python path
slow = []
_run = g.stream.run
g.stream.run = lambda fn, *a: (slow.append(fn.__name__), _run(fn, *a))[1]
channel = g._channel
fd = channel.fds.get(channel.in_keys[1 - me]) if n == 2 else None  # the collective connection from the peer
c.ok(g.fast is not None and fd is not None, "armed", f"fast={g.fast} fd={fd}")


def rounds(late_s, k):
    for i in range(k):
        if me == 1 and late_s:
            time.sleep(late_s)  # the late peer under test: rank 0 must learn its waits (not synchronisation)
        c.equal(cl.all_reduce(np.full(2, me + i, np.float64)), np.full(2, 2 * i + 1.0), f"all_reduce {late_s} #{i}")


rounds(0.004, 12)
late = channel.stepper.learned_wait(fd)
if me == 0:  # the rank that waited 4 ms each call: no spin left for this peer
    c.ok(late >= 2 * _io.SPIN_FAST and _io.spin_budget(late, 200e-6) == 0, "late peer learned",
         f"learned wait {late * 1e6:.0f} us after 12 waits of 4 ms")
# Prompt again: the average comes down. On a loaded machine a "prompt" partner still costs a
# descheduled wait now and then, so give it up to 600 calls (both ranks agree when to stop).
for calls in range(60, 601, 60):
    rounds(0.0, 60)
    prompt = channel.stepper.learned_wait(fd)
    if cl.all_reduce(np.array([1.0 if me != 0 or prompt < late / 2 else 0.0]), op="min")[0] == 1.0:
        break
if me == 0:
    c.ok(prompt < late / 2, "prompt peer learned",
         f"learned wait {prompt * 1e6:.0f} us after {calls} prompt calls (was {late * 1e6:.0f})")
c.ok(not slow, "one-call path taken", f"took the Python path for {sorted(set(slow))}")
c.finish()
