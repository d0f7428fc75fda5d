"""The one-call blocking send/recv (_transport/_p2p_fast.pxi): taken, right, and interoperable.

usage: p2p_fast.py SEED

Rank 0 and rank 1 exchange (results are rank-specific: none is recorded for the cross-rank digest)
messages the way MPI programs do: ping-pong over every dtype and several
shapes, one side on the Python path (a strided view, a list, status=True,
ANY_TAG) and the other on the one-call path, a receive whose peer is late
(longer than the fast path's 20 ms slice), messages taken out of tag order
(the one-call receive finds another frame first and hands it to the engine),
a burst received after it arrived, and mismatched receives that must raise
MismatchError. The Python path's entry points are counted, so a plain
ping-pong that falls off the one-call path fails the test.
"""
import time

import numpy as np

import commlib as cl
import commlib._api.p2p as api_p2p
from _common import DTYPES, Checker, dname, gen

c = Checker("p2p_fast")
n, me = c.size, c.rank
slow = []
for name in ("_post_send", "_receive"):
    orig = getattr(api_p2p, name)
    setattr(api_p2p, name, (lambda f, nm: lambda *a, **k: (slow.append((nm, getattr(a[1], "dtype", None),
                                                                     getattr(a[1], "shape", None))),
                                                                f(*a, **k))[1])(orig, name))
peer = 1 - me if me < 2 else None


def ping_pong(x, label, rounds=3):
    """Rank 0 sends x, rank 1 returns x + 1 (bool: not x); both check what they get."""
    back = np.asarray(~x if x.dtype == bool else (x + 1).astype(x.dtype))  # an array even for 0-d x
    for i in range(rounds):
        if me == 0:
            cl.send(x, 1, tag=i)
            c.equal(cl.recv(x.shape, x.dtype, 1, tag=i), back, f"{label} back #{i}", record=False)
        elif me == 1:
            c.equal(cl.recv(x.shape, x.dtype, 0, tag=i), x, f"{label} there #{i}", record=False)
            cl.send(back, 0, tag=i)


cl.barrier()
if peer is not None:  # a first exchange each way opens and adopts the connections (Python path)
    ping_pong(np.zeros(1), "warm-up", rounds=1)
del slow[:]
for dt in DTYPES:
    for shape in [(), (1,), (7,), (3, 4)]:
        x = gen(c.rng(0, "pp", dname(dt), shape), dt, shape, "small")
        ping_pong(x, f"ping-pong {dname(dt)} {shape}")
x = gen(c.rng(0, "pp-big"), np.float64, (8192,))  # 64 KiB: the eager limit, still one call
ping_pong(x, "ping-pong 64 KiB")
c.ok(not slow, "plain ping-pong on the one-call path", f"took the Python path {len(slow)} times: {slow[:12]}")

# One side on the Python path, the other on the one-call path, both directions.
x = np.arange(20, dtype=np.int32)
if me == 0:
    cl.send(x[::2], 1, tag=5)  # strided: Python path
    cl.send(x[:10], 1, tag=6)  # one-call
    c.equal(cl.recv((10,), np.int32, 1, tag=7), x[::2] * 3, "one-call recv of a strided send", record=False)
    got, st = cl.recv((10,), np.int32, 1, tag=8, status=True)  # status: Python path
    c.equal(got, x[:10] * 3, "status recv of a one-call send", record=False)
    c.ok((st.source, st.tag, st.nbytes) == (1, 8, 40), "status fields", repr(st))
elif me == 1:
    c.equal(cl.recv((10,), np.int32, 0, tag=5), x[::2], "one-call recv of a strided send", record=False)
    c.equal(cl.recv((10,), np.int32, cl.ANY_SOURCE, tag=6), x[:10], "ANY_SOURCE recv of a one-call send", record=False)
    cl.send(np.repeat(x[::2] * 3, 2)[::2], 0, tag=7)  # strided int32: Python path
    cl.send(x[:10] * 3, 0, tag=8)

# A late sender: the receive waits past the one-call step's 20 ms slice and goes on in the engine.
if me == 1:
    time.sleep(0.15)  # the late sender under test (not synchronisation)
    cl.send(np.full(5, 9.5), 0, tag=9)
elif me == 0:
    c.equal(cl.recv(5, np.float64, 1, tag=9), np.full(5, 9.5), "recv from a sender 150 ms late", record=False)

# Out of tag order: the one-call receive of tag 11 reads tag 10's header first and hands it over.
if me == 0:
    cl.send(np.full(3, 10, np.int16), 1, tag=10)
    cl.send(np.full(3, 11, np.int16), 1, tag=11)
cl.barrier()  # both sends have returned: both frames wait in rank 1's stream (nothing reads it meanwhile)
if me == 1:
    c.equal(cl.recv((3,), np.int16, 0, tag=11), np.full(3, 11, np.int16), "tag 11 received first", record=False)
    c.equal(cl.recv((3,), np.int16, 0, tag=10), np.full(3, 10, np.int16), "then tag 10 (from the engine)", record=False)

# A burst that arrives before any receive is posted, received in order.
if me == 0:
    for k in range(50):
        cl.send(np.array([k, -k], np.int64), 1, tag=12)
cl.barrier()  # every send of the burst has returned before rank 1 posts a receive
if me == 1:
    got = [cl.recv((2,), np.int64, 0, tag=12) for _ in range(50)]
    c.equal(np.array(got), np.array([[k, -k] for k in range(50)], np.int64), "burst of 50 in order", record=False)

# Receives left pending beside blocking ones (a wildcard-source irecv of another tag, as a
# program's "stop" message): blocking ping-pong stays right; a receive posted for the same
# (source, tag) before a blocking one still takes the first message (MPI's posting order), and an
# ANY_TAG blocking receive does not overtake it either.
cl.barrier()
if peer is not None:
    stop = cl.irecv((1,), np.int64, cl.ANY_SOURCE, tag=99)
    ping_pong(np.arange(6.0), "ping-pong beside a pending irecv", rounds=20)
    first = cl.irecv((2,), np.int32, peer, tag=15)
    cl.send(np.array([me, 1], np.int32), peer, tag=15)
    cl.send(np.array([me, 2], np.int32), peer, tag=15)
    cl.send(np.array([me, 3], np.int32), peer, tag=16)
    c.equal(cl.recv((2,), np.int32, peer, tag=15), np.array([peer, 2], np.int32),
            "a blocking recv after an irecv of the same (source, tag) gets the second message", record=False)
    c.equal(first.wait(), np.array([peer, 1], np.int32), "the irecv posted first gets the first", record=False)
    third = cl.irecv((2,), np.int32, peer, tag=16)
    cl.send(np.array([me, 4], np.int32), peer, tag=17)
    c.equal(cl.recv((2,), np.int32, peer, tag=cl.ANY_TAG), np.array([peer, 4], np.int32),
            "an ANY_TAG recv leaves the message a posted irecv matches to it", record=False)
    c.equal(third.wait(), np.array([peer, 3], np.int32), "the posted irecv of tag 16", record=False)
    cl.send(np.array([me]), peer, tag=99)
    c.equal(stop.wait(), np.array([peer]), "the pending wildcard irecv completes last", record=False)

# Mismatched receives raise (the frame is handed to the engine, which knows the error), last.
cl.barrier()
if me == 0:
    cl.send(np.ones(4, np.float32), 1, tag=13)
    cl.send(np.ones(4, np.float32), 1, tag=14)
elif me == 1:
    c.raises(cl.MismatchError, "recv of another dtype", cl.recv, (4,), np.int32, 0, tag=13)
    c.raises(cl.MismatchError, "recv of another size", cl.recv, (5,), np.float32, 0, tag=14)
c.finish()
