"""Every group's collectives share one connection each way per pair of ranks.

usage: shared_connections.py SEED

- Counting: after collectives on the world, a split and two same-member copies (several groups
  over the same pairs), each rank holds at most one collective connection each way per peer.
- Crossed order: rank 0 calls group A's collective, then B's; the others call B's first. The
  others' steps for B read A's message first on the shared connection and park it for A; A's
  collective then takes it from there. Blocking broadcasts of eager sizes (MPI's rule: a program
  whose progress needs more buffering is erroneous), and `i` all_reduce, reduce, broadcast and
  all_gather up to 2.4 MB (a parked message larger than the socket buffers).
- Concurrent: two threads run collectives of two groups at once over the same connections
  (messages claimed whole per direction, never interleaved).
Every result is checked against NumPy.
"""

import numpy as np

import commlib as cl
from commlib._transport import CH_COLL
from _common import Checker, in_threads

c = Checker("shared_connections")
n, me, w = c.size, c.rank, c.g
a, b = w.split(0), w.split(0)  # the world's members, two more groups
half = w.split(me % 2)
rng = c.rng("data")
ep = w.channel.ep


def value(k, size, who):
    return np.arange(size, dtype=np.float64) * (who + 1) + k


for size in (3, 1000, 300_000):
    for k in range(3):
        # crossed blocking broadcasts: rank 0 sends on A, then B; the others wait on B first. Valid
        # only while rank 0's broadcast on A completes without its receivers (MPI: eager sizes)
        if size <= 1000:
            if me == 0:
                x = cl.broadcast(value(k, size, 0), root=0, group=a)
                y = cl.broadcast(value(k + 1, size, 0), root=0, group=b)
            else:
                y = cl.broadcast(np.zeros(size), root=0, group=b)
                x = cl.broadcast(np.zeros(size), root=0, group=a)
            c.equal(x, value(k, size, 0), f"broadcast on A crossed, {size}")
            c.equal(y, value(k + 1, size, 0), f"broadcast on B crossed, {size}")
        # crossed i-collectives of any size (each group's stream runs in its own thread)
        if me == 0:
            ra = cl.iall_reduce(value(k, size, me), group=a)
            rb = cl.iall_reduce(value(k + 2, size, me), group=b)
        else:
            rb = cl.iall_reduce(value(k + 2, size, me), group=b)
            ra = cl.iall_reduce(value(k, size, me), group=a)
        c.equal(ra.wait(), sum(value(k, size, i) for i in range(n)), f"iall_reduce on A crossed, {size}")
        c.equal(rb.wait(), sum(value(k + 2, size, i) for i in range(n)), f"iall_reduce on B crossed, {size}")
        m = size // 3 + 1
        if me == 0:
            red = cl.ireduce(value(k, size, me), root=n - 1, group=a)
            gat = cl.iall_gather(value(k, m, me), group=b)
            bc = cl.ibroadcast(value(k, size, me), root=n - 1, group=a)
        else:  # each group's own order is the same on every rank (MPI's rule)
            gat = cl.iall_gather(value(k, m, me), group=b)
            red = cl.ireduce(value(k, size, me), root=n - 1, group=a)
            bc = cl.ibroadcast(value(k, size, me), root=n - 1, group=a)
        red = red.wait()
        if me == n - 1:
            c.equal(red, sum(value(k, size, i) for i in range(n)), f"ireduce crossed, {size}", record=False)
        c.equal(gat.wait(), np.concatenate([value(k, m, i) for i in range(n)]), f"iall_gather crossed, {size}")
        c.equal(bc.wait(), value(k, size, n - 1), f"ibroadcast crossed, {size}")

# the split group too (its members only)
z = cl.all_reduce(np.full(50_000, float(me)), group=half)
c.equal(z, np.full(50_000, float(sum(i for i in range(n) if i % 2 == me % 2))), "all_reduce on a split", record=False)

# two groups at once, from two threads, over the same connections
results = {0: [], 1: []}
errors = []


def work(group, t):
    try:
        for k in range(12):
            size = (7, 40_000, 250_000)[k % 3]
            v = np.full(size, float(t * 10 + me))
            results[t].append((size, cl.all_reduce(v, group=group)))
            results[t].append((size, cl.broadcast(v.copy(), root=k % n, group=group)))
    except Exception as exc:  # reported below, with the rank
        errors.append(f"thread {t}: {type(exc).__name__}: {exc}")


in_threads(c, "two groups at once", work, [(a, 0), (b, 1)], errors)
for t in (0, 1):
    for i, (size, got) in enumerate(results[t]):
        k = i // 2
        want = np.full(size, float(sum(t * 10 + r for r in range(n)) if i % 2 == 0 else t * 10 + k % n))
        c.equal(got, want, f"thread {t} call {i}", record=False)

# one connection each way per peer, whatever the number of groups
coll_out = [key for key in ep._out if key[1] == CH_COLL]
coll_in = [key for key in ep._in if key[1] == CH_COLL]
c.ok(len(coll_out) <= n - 1 and len(coll_in) <= n - 1, "one connection each way per peer",
     f"{len(coll_out)} outgoing and {len(coll_in)} incoming collective connections for {n - 1} peers: "
     f"{sorted(coll_out)}")
c.ok(not ep.parked, "nothing left parked", f"{ {g: {s: len(q) for s, q in d.items()} for g, d in ep.parked.items()} }")
c.finish()
