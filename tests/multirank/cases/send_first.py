"""Every rank sends large messages with blocking send BEFORE receiving (unsafe in MPI, fine here).

usage: send_first.py SEED
Each rank sends 16 MiB to both neighbours, then receives from both: the sends
stall until the engine hands them over and drains the peer's message into the
unexpected queue while it writes, so nobody deadlocks. Then 64 sends of 60 KiB
each way (each small enough for the one-call path, 3.8 MiB in all: more than
any connection buffers) before any receive: a one-call send that finds its
connection full hands itself to the engine, which reads while it waits. At
n >= 3, a chain no rank can end alone: rank 0 sends 30 such messages to rank 1
before it sends rank 2 the one rank 2 waits for before it sends rank 1 the one
rank 1 waits for first: rank 1's receive, which has read nothing of its frame,
hands itself to the engine once another connection has bytes waiting. Last, the same 60 KiB sends
through commlib.MPI from an mmap longer than each message.
"""
import numpy as np

import commlib as cl
from _common import Checker

c = Checker("send_first")
n, me = c.size, c.rank
left, right = (me - 1) % n, (me + 1) % n
for size in (1 << 10, 2 << 20):  # 8 KiB and 16 MiB of float64
    mine = np.arange(size, dtype=np.float64) + me * 1e6
    cl.send(mine, right, tag=1)
    cl.send(mine * 2, left, tag=2)
    from_left = cl.recv((size,), np.float64, left, tag=1)
    from_right = cl.recv((size,), np.float64, right, tag=2)
    c.equal(from_left, np.arange(size, dtype=np.float64) + left * 1e6, f"from left, {size} elements", record=False)
    c.equal(from_right, (np.arange(size, dtype=np.float64) + right * 1e6) * 2, f"from right, {size} elements", record=False)
block = 60 << 10 >> 3  # float64 elements of a 60 KiB message
for k in range(64):
    cl.send(np.full(block, me * 1000.0 + k), right, tag=3)
    cl.send(np.full(block, -me * 1000.0 - k), left, tag=4)
got_left = [cl.recv((block,), np.float64, left, tag=3) for _ in range(64)]
got_right = [cl.recv((block,), np.float64, right, tag=4) for _ in range(64)]
c.equal(np.stack(got_left), np.repeat(left * 1000.0 + np.arange(64.0), block).reshape(64, block),
        "64 eager-sized sends from left, in order", record=False)
c.equal(np.stack(got_right), np.repeat(-right * 1000.0 - np.arange(64.0), block).reshape(64, block),
        "64 eager-sized sends from right, in order", record=False)
if n >= 3:
    if me == 0:
        for k in range(30):
            cl.send(np.full(block, float(k)), 1, tag=5)
        cl.send(np.ones(4), 2, tag=6)
    elif me == 1:
        c.equal(cl.recv((4,), np.float64, 2, tag=7), np.full(4, 2.0), "rank 2's, after rank 0's thirty", record=False)
        got = np.stack([cl.recv((block,), np.float64, 0, tag=5) for _ in range(30)])
        c.equal(got, np.repeat(np.arange(30.0), block).reshape(30, block), "rank 0's thirty, in order", record=False)
    elif me == 2:
        c.equal(cl.recv((4,), np.float64, 0, tag=6), np.ones(4), "rank 0's, after its thirty", record=False)
        cl.send(np.full(4, 2.0), 1, tag=7)
# commlib.MPI's Send of [mmap, count, MPI.BYTE] (a buffer longer than its message, as mpi4py's OSU benchmarks
# pass it), both ways before any receive: a one-call send that stalls is finished by the engine from the
# message's bytes only
import mmap  # noqa: E402

from commlib import MPI  # noqa: E402

comm = MPI.COMM_WORLD
src = mmap.mmap(-1, 65536)
src[:] = bytes(range(256)) * 256
back = mmap.mmap(-1, 65536)
for k in range(64):
    comm.Send([src, 60000 - k, MPI.BYTE], right, 8)
    comm.Send([src, 50000 - k, MPI.BYTE], left, 9)
st = MPI.Status()
ok = True
for k in range(64):
    comm.Recv([back, 60000 - k, MPI.BYTE], left, 8, st)
    ok = ok and st.Get_count(MPI.BYTE) == 60000 - k and back[:60000 - k] == src[:60000 - k]
    comm.Recv([back, 50000 - k, MPI.BYTE], right, 9, st)
    ok = ok and st.Get_count(MPI.BYTE) == 50000 - k and back[:50000 - k] == src[:50000 - k]
c.equal(ok, True, "64 MPI Sends of [mmap, count, MPI.BYTE] each way before any receive: each message whole", record=False)
c.finish()
