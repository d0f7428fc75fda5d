"""The idle-connection limit: point-to-point connections closed for being idle, and opened again.

usage: idle_p2p.py SEED   (run with COMMLIB_P2P_CONNECTIONS=1 COMMLIB_P2P_IDLE_S=0: every rank
keeps one outgoing point-to-point connection, and closes any other as soon as its receiver has
taken every byte of it)

- Manager and workers: rank 0 sends each worker a task in turn (blocking sends of 7 B to 300 kB,
  an issend every third round) and takes their answers; its connection to each worker closes
  while it talks to the next, and opens again next round.
- A receiver that is not reading: rank 1 takes a message, then makes no commlib call until the new
  connection below is waiting; meanwhile rank 0 closes that connection (its last frame unread on
  rank 1) and sends three more (one of 300 kB) on a new one, which waits behind the old until
  rank 1 reads the old to its end, then closes it again
  and sends once more (over TCP a third connection, behind the second). Rank 1 receives all in
  order.
- Two threads on two groups, each rank alternating between two destinations (sendrecv), so
  connections close and open while the other thread sends.
- A receiver over its incoming limit: every worker sends rank 0 a report; rank 0, reading on,
  asks its senders to close their idle connections, and is down to one incoming connection.
- Afterwards each rank holds at most one outgoing point-to-point connection once it sends again, and
  maps no shared-memory segment of a connection it closed.
Every result is checked against NumPy.
"""
import time

import numpy as np

import commlib as cl
from commlib._transport import CH_P2P, shm
from _batch import SCALE
from _common import Checker, in_threads

c = Checker("idle_p2p")
n, me, w = c.size, c.rank, c.g
ep, engine = w.channel.ep, w.engine
p2p = engine.p2p
SIZES = (7, 5000, 300_000 // 8)
WAIT_S = 10.0 * SCALE  # deadline of the polling loops below


def value(k, size, who):
    return np.arange(size, dtype=np.float64) * (who + 1) + k


c.ok(p2p.max_connections == 1 and p2p.idle_s == 0, "the limit is set", f"{p2p.max_connections}, {p2p.idle_s}")

# -- a manager and its workers
ROUNDS = 6
for k in range(ROUNDS):
    size = SIZES[k % 3]
    if me == 0:
        for worker in range(1, n):
            if k % 3 == 2:
                cl.issend(value(k, size, worker), worker, tag=k).wait()
            else:
                cl.send(value(k, size, worker), worker, tag=k)
        for worker in range(1, n):
            c.equal(cl.recv(size, np.float64, worker, tag=k), value(k + 1, size, worker),
                    f"answer of worker {worker}, round {k}", record=False)
    else:
        task = cl.recv(size, np.float64, 0, tag=k)
        c.equal(task, value(k, size, me), f"task of round {k}", record=False)
        cl.send(task + 1, 0, tag=k)
if me == 0 and n >= 3:
    # (at least the one to the last worker each round, when it sends to the first: the others
    # close too where their worker has read its task by the time the next one is sent)
    c.ok(p2p.retired >= ROUNDS - 1, "the manager closed idle connections",
         f"{p2p.retired} closed in {ROUNDS} rounds with {n - 1} workers")
cl.barrier()

# -- a receiver that is not reading while its sender closes and reopens
if n >= 3:
    if me == 0:
        cl.send(value(100, 3, 1), 1, tag=100)
        cl.recv(1, np.float64, 1, tag=100)  # rank 1 took it: the connection is idle
        cl.send(value(0, 1, 2), 2, tag=100)  # ... and closes, its last frame unread on rank 1
        later = [cl.isend(value(100 + t, size, 1), 1, tag=100 + t) for t, size in ((1, 5), (2, 300_000 // 8), (3, 9))]
        for r in later:
            r.wait()
        cl.send(value(1, 1, 2), 2, tag=101)  # over TCP the second closes too (its receiver's kernel has it all)
        cl.send(value(104, 4, 1), 1, tag=104)
    elif me == 1:
        c.equal(cl.recv(3, np.float64, 0, tag=100), value(100, 3, 1), "before the close", record=False)
        cl.send(np.zeros(1), 0, tag=100)
        deadline = time.monotonic() + WAIT_S
        while True:  # not reading (no commlib call) until rank 0's new connection is queued behind the old
            with ep._cond:
                waiting = sum(len(q) for key, q in ep._next.items() if key[1] == CH_P2P)
            if waiting >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.005)
        c.ok(waiting >= 1, "the new connection waits behind the old", f"{waiting} waiting after {WAIT_S:.0f} s")
        for t, size in ((1, 5), (2, 300_000 // 8), (3, 9), (4, 4)):
            c.equal(cl.recv(size, np.float64, 0, tag=100 + t), value(100 + t, size, 1),
                    f"message {t} after the reconnect", record=False)
        c.ok(not ep._next, "no connection left waiting", f"{ep._next}")
    elif me == 2:
        c.equal(cl.recv(1, np.float64, 0, tag=100), value(0, 1, 2), "rank 2's first", record=False)
        c.equal(cl.recv(1, np.float64, 0, tag=101), value(1, 1, 2), "rank 2's second", record=False)
cl.barrier()

# -- two threads, two groups, two destinations each
errors = []
steps = (1, 2) if n >= 3 else (1,)


def work(group, t):
    try:
        for k in range(12):
            s = steps[k % len(steps)]
            size = SIZES[(k + t) % 3]
            got = cl.sendrecv(value(k + 100 * t, size, me), (me + s) % n, (me - s) % n, tag=k, group=group)
            if not np.array_equal(got, value(k + 100 * t, size, (me - s) % n)):
                errors.append(f"thread {t} exchange {k}: wrong data")
    except Exception as exc:  # reported below, with the rank
        errors.append(f"thread {t}: {type(exc).__name__}: {exc}")


if n > 1:
    in_threads(c, "two threads closing and opening connections", work, [(w.split(0), 0), (w.split(0), 1)], errors)
cl.barrier()

# -- a receiver over its incoming limit: its senders, asked, close their idle connections to it
if n >= 3:
    if me == 0:
        for worker in range(1, n):
            c.equal(cl.recv(2, np.float64, worker, tag=200), value(200, 2, worker), f"worker {worker}'s report",
                    record=False)
        asks_before, deadline = p2p.asks, time.monotonic() + WAIT_S
        while True:  # reading on (a probe services the connections): their last frames come in
            cl.iprobe(1, tag=201)
            with ep._cond:
                incoming = sum(1 for key in ep._in if key[1] == CH_P2P) + sum(
                    len(q) for key, q in ep._next.items() if key[1] == CH_P2P)
            if incoming <= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        c.ok(incoming <= 1 and p2p.asks > 0, "the receiver's incoming connections are down to its limit",
             f"{incoming} incoming, {p2p.asks} asked ({p2p.asks - asks_before} here)")
    else:
        cl.send(value(200, 2, me), 0, tag=200)
cl.barrier()

# -- one outgoing connection once this rank sends again (every other one's bytes were taken)
if n > 1:
    got = cl.sendrecv(value(999, 3, me), (me + 1) % n, (me - 1) % n, tag=999)
    c.equal(got, value(999, 3, (me - 1) % n), "the last exchange", record=False)
    with engine.lock:  # (none, where its receiver, over its own incoming limit, asked it closed since)
        out = [key for key in ep._out if key[1] == CH_P2P]
        c.ok(len(out) <= 1 and len(p2p._out) <= 1, "at most one outgoing point-to-point connection",
             f"{sorted(out)}, {sorted(p2p._out)}")

# -- a closed connection's shared-memory segment is unmapped: as many mapped as links open
with engine.lock, ep._cond:  # (a sender asked to close one does it under the engine's lock)
    socks = list(ep._out.values()) + list(ep._in.values()) + [s for q in ep._next.values() for s in q]
    linked = sum(1 for s in socks if shm.linked(s))
    with open("/proc/self/maps") as maps:
        mapped = sum(1 for line in maps if "memfd:commlib-link" in line)
# (at most one or two may: a connection whose last frame a blocking receive has read, and not yet
# handed to the engine, looks like an abandoned handshake attempt to the acceptor taking its
# successor, which then only detaches it, a reader possibly being in it; rare, under load)
c.ok(linked <= mapped <= linked + 2, "no segment of a closed connection stays mapped",
     f"{mapped} segments mapped for {linked} links open ({p2p.retired} connections closed here)")
c.finish()
