"""Broadcast, reduce, barrier and all_to_all on ranks of several hosts: the host-aware schedules (`leaders`)
where choose() picks them, the one-call path's copies of them on repeated small calls, from every
root; every result matches NumPy, and the barrier holds every rank until the last has entered.
Prints `rank R: K checks ok (host H)`."""
import os
import time

import numpy as np

import commlib as cl

g = cl.init(strict=True)
r, n = g.rank(), g.size()
ok = 0
here = os.stat("/proc/self/ns/net").st_ino  # (namespace hosts share a hostname, not a network)
cl.barrier()  # the group's first collective: the Python path (which writes the debug line of its choice)
for root in range(n):
    for count in (1, 700, 20_000):  # 8 B, 5.6 KiB, 160 KiB of float64: latency-bound sizes
        x = ((np.arange(count) * 3 + 7 * root) % 11).astype(np.float64)
        got = cl.broadcast(x if r == root else np.zeros(count), root=root)
        assert np.array_equal(got, x), f"rank {r}: broadcast of {count} from {root}"
        parts = [((np.arange(count) + 5 * k) % 9).astype(np.float64) for k in range(n)]
        for op, want in (("sum", np.sum(parts, axis=0)), ("max", np.max(parts, axis=0))):
            red = cl.reduce(parts[r], op=op, root=root)
            assert (np.array_equal(red, want) if r == root else red is None), f"rank {r}: reduce {op} to {root}"
    ok += 1
for k in range(40):  # repeated small calls: the one-call path runs the same schedules
    root = k % n
    got = cl.broadcast(np.full(3, k + root, np.int64) if r == root else np.zeros(3, np.int64), root=root)
    red = cl.reduce(np.full(5, r + k, np.int32), root=root)
    assert np.array_equal(got, np.full(3, k + root)), f"rank {r}: small broadcast {k}"
    assert red is None if r != root else np.array_equal(red, np.full(5, sum(range(n)) + n * k)), f"rank {r}: reduce {k}"
    cl.barrier()
ok += 1
assert cl.broadcast_obj({"from": "root", "n": n} if r == 0 else None, root=0) == {"from": "root", "n": n}
ok += 1
for count in (1, 300, 9000):  # all_to_all: block j of every rank's x to rank j (by rails where forced)
    x = np.stack([np.full((count, 2), 1000 * r + j, np.int64) for j in range(n)]).reshape(n * count, 2)
    got = cl.all_to_all(x)
    want = np.concatenate([np.full((count, 2), 1000 * k + r, np.int64) for k in range(n)])
    assert np.array_equal(got, want), f"rank {r}: all_to_all of {count} rows"
    y = np.arange(n * 6 * count, dtype=np.float32).reshape(6 * count, n) + 100 * r  # split along axis 1
    got = cl.all_to_all(y, split_axis=1, concat_axis=0)
    assert np.array_equal(got, np.concatenate([np.arange(n * 6 * count, dtype=np.float32).reshape(6 * count, n)[:, r:r + 1]
                                               + 100 * k for k in range(n)])), f"rank {r}: all_to_all along axis 1"
ok += 1
for late in (n - 1, 0, n // 2):  # the barrier waits for its last rank, whichever host it is on
    cl.barrier()
    if r == late:
        time.sleep(0.3)  # late on purpose: the barrier under test must hold every other rank until it enters
    entered = time.time()
    cl.barrier()
    left = time.time()
    times = cl.all_gather_obj((entered, left))
    last_in = max(t[0] for t in times)
    assert all(t[1] >= last_in for t in times), f"rank {r}: a rank left the barrier before rank {late} entered: {times}"
    ok += 1
print(f"rank {r}: {ok} checks ok (host {here})", flush=True)
cl.finalize()
