"""Every group's point-to-point traffic shares one connection each way per pair of ranks.

usage: shared_p2p.py SEED

- Early frames: every other rank makes a sub-group on its own (no communication: `subgroup`, as
  MPI's Create_group does here), sends on it at once (three messages, two with the same tag, one
  of 300 kB, then an issend) and then on the world. Rank 0 waits for the world's messages first,
  so it reads the sub-group's frames before the group exists on it; once it makes the group they
  are its messages, in the order sent, and the issend completes when one is received.
- Same source, same tag, three groups: each rank sends to its right neighbour on A, the world, A
  again, the split by parity (when both are in it), with one tag; the neighbour receives the
  world's first (a blocking receive that finds A's frame first and hands it to A), then A's in
  order, and an ANY_TAG receive on the world never takes another group's message.
- Concurrent: two threads exchange with both neighbours on two groups at once (blocking
  sendrecv, 7 B to 400 kB) over the same connections.
- Counting: at most one point-to-point connection each way per peer, whatever the groups.
Every result is checked against NumPy.
"""
import numpy as np

import commlib as cl
from commlib._transport import CH_P2P
from _common import Checker, in_threads

c = Checker("shared_p2p")
n, me, w = c.size, c.rank, c.g
ep, engine = w.channel.ep, w.engine
right, left = (me + 1) % n, (me - 1) % n


def value(k, size, who):
    return np.arange(size, dtype=np.float64) * (who + 1) + k


# -- frames of a group rank 0 does not have yet
members = list(range(n))
if me == 0:
    reqs = [cl.irecv(4, np.float64, src, tag=5) for src in range(1, n)]
    world_got = [r.wait() for r in reqs]  # the sub-group's frames come first: read aside
    for src, got in zip(range(1, n), world_got):
        c.equal(got, value(5, 4, src), f"world message after a new group's, from {src}", record=False)
    c.ok(len(engine._early) == 1 and sum(len(v) for v in engine._early.values()) == 4 * (n - 1),
         "frames of a group not made yet are kept", f"{ {g: len(v) for g, v in engine._early.items()} }")
    sub = w.subgroup(members, ("shared_p2p", 1))
    c.ok(not engine._early, "kept frames handed to their group", f"{list(engine._early)}")
    for src in range(1, n):
        first = cl.recv(7, np.float64, src, tag=1, group=sub)
        big = cl.recv(300_000 // 8, np.float64, src, tag=2, group=sub)
        second = cl.recv(7, np.float64, src, tag=1, group=sub)
        c.equal(first, value(1, 7, src), f"first early message from {src}", record=False)
        c.equal(big, value(2, 300_000 // 8, src), f"large early message from {src}", record=False)
        c.equal(second, value(3, 7, src), f"second early message from {src} (order kept)", record=False)
        c.equal(cl.recv(5, np.float64, src, tag=3, group=sub), value(4, 5, src), f"early issend from {src}",
                record=False)
else:
    sub = w.subgroup(members, ("shared_p2p", 1))
    cl.send(value(1, 7, me), 0, tag=1, group=sub)
    big = cl.isend(value(2, 300_000 // 8, me), 0, tag=2, group=sub)
    cl.send(value(3, 7, me), 0, tag=1, group=sub)
    sync = cl.issend(value(4, 5, me), 0, tag=3, group=sub)  # matched only once rank 0 has the group
    c.ok(not sync.test(), "an issend to a rank without its group is not complete", "it completed")
    cl.send(value(5, 4, me), 0, tag=5)
    big.wait()
    sync.wait()  # rank 0's acknowledgement, once a receive took it from the kept frames
cl.barrier()

# -- same source, same tag, three groups over one connection
a = w.split(0)
half = w.split(me % 2)
half_members = [r for r in range(n) if r % 2 == me % 2]
half_right = right in half_members and right != me
for k, size in enumerate((3, 5000, 200_000)):
    if n > 1:
        sends = [cl.isend(value(k, size, me), right, tag=9, group=a),
                 cl.isend(value(k + 10, size, me), right, tag=9),
                 cl.isend(value(k + 20, size, me), right, tag=9, group=a)]
        if half_right:
            sends.append(cl.isend(value(k + 30, size, me), half_members.index(right), tag=9, group=half))
        got_w = cl.recv(size, np.float64, left, tag=9)
        got_a1 = cl.recv(size, np.float64, left, tag=9, group=a)
        got_a2 = cl.recv(size, np.float64, left, tag=9, group=a)
        c.equal(got_w, value(k + 10, size, left), f"world's message, not A's, {size}", record=False)
        c.equal(got_a1, value(k, size, left), f"A's first, {size}", record=False)
        c.equal(got_a2, value(k + 20, size, left), f"A's second, {size}", record=False)
        if left in half_members and left != me:
            c.equal(cl.recv(size, np.float64, half_members.index(left), tag=9, group=half), value(k + 30, size, left),
                    f"the split's, {size}", record=False)
        for s in sends:
            s.wait()
        # ANY_TAG on the world takes the world's message even when A's came first
        x = cl.isend(value(k + 40, 2, me), right, tag=11, group=a)
        y = cl.isend(value(k + 50, 2, me), right, tag=12)
        got, st = cl.recv(2, np.float64, left, tag=cl.ANY_TAG, status=True)
        c.equal(got, value(k + 50, 2, left), f"ANY_TAG on the world, {size}", record=False)
        c.ok(st.tag == 12, f"ANY_TAG's status, {size}", f"tag {st.tag}")
        c.equal(cl.recv(2, np.float64, left, tag=11, group=a), value(k + 40, 2, left), f"A's tag 11, {size}",
                record=False)
        x.wait()
        y.wait()
cl.barrier()

# -- two groups at once, from two threads, over the same connections
errors = []


def work(group, t):
    try:
        for k in range(15):
            size = (1, 6000, 50_000)[k % 3]
            out = value(k + 100 * t, size, me)
            got = cl.sendrecv(out, right, left, tag=k, group=group)
            want = value(k + 100 * t, size, left)
            if not np.array_equal(got, want):
                errors.append(f"thread {t} exchange {k}: wrong data")
    except Exception as exc:  # reported below, with the rank
        errors.append(f"thread {t}: {type(exc).__name__}: {exc}")


b = w.split(0)
in_threads(c, "two groups at once", work, [(a, 0), (b, 1)], errors)

# -- one connection each way per peer, whatever the number of groups
p2p_out = [key for key in ep._out if key[1] == CH_P2P]
p2p_in = [key for key in ep._in if key[1] == CH_P2P]
c.ok(len(p2p_out) <= n - 1 and len(p2p_in) <= n - 1, "one point-to-point connection each way per peer",
     f"{len(p2p_out)} outgoing and {len(p2p_in)} incoming for {n - 1} peers: {sorted(p2p_out)}")
c.ok(not engine._early, "nothing left for groups not made", f"{list(engine._early)}")
c.finish()
