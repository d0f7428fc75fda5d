"""Point-to-point: send/recv/recv_like/recv_into, Status, wildcards, ordering, eager sends,
sendrecv, probe/iprobe, every dtype, buffer-protocol inputs.

usage: p2p.py SEED
With one rank, only sends to self are checked.
"""
import array
import time

import numpy as np

import _batch
import commlib as cl
from _common import DTYPES, Checker, dname, gen

c = Checker("p2p")
n, me = c.size, c.rank
MiB = 1 << 20
EAGER_WAIT_S = 10.0 * _batch.SCALE  # how long a 64 KiB send may take to return with no receive posted


def status_ok(st, source, tag, nbytes, label):
    c.ok(isinstance(st, cl.Status), label + " Status type", f"got {type(st).__name__}")
    c.ok((st.source, st.tag, st.nbytes) == (source, tag, nbytes), label + " Status fields",
         f"got {st!r}, expected source={source} tag={tag} nbytes={nbytes}")


def self_messages():
    """A size-1 group: a send to self is queued and received later."""
    x = np.arange(10, dtype=np.float32)
    cl.send(x, 0, tag=3)
    cl.send(x * 2, 0, tag=4)
    got, st = cl.recv((10,), np.float32, 0, tag=4, status=True)
    c.equal(got, x * 2, "send to self, tag 4 first")
    status_ok(st, 0, 4, 40, "send to self")
    c.equal(cl.recv_like(x, cl.ANY_SOURCE, cl.ANY_TAG), x, "send to self, wildcard")
    c.ok(cl.iprobe() is None, "iprobe with nothing queued", "returned a Status")


def pairs_from_zero():
    """Rank 0 sends each peer one message per dtype; the peer receives with each API."""
    for p in range(1, n):
        for i, dt in enumerate(DTYPES):
            shape = [(5,), (0,), (3, 4), ()][i % 4]
            x = gen(c.rng("p2p", p, dname(dt)), dt, shape)
            tag = 100 + i
            if me == 0:
                cl.send(x, p, tag=tag)
            elif me == p:
                label = f"p2p {dname(dt)} shape={shape} to {p}"
                api = i % 3
                if api == 0:
                    got, st = cl.recv(shape, dt, 0, tag, status=True)
                elif api == 1:
                    got, st = cl.recv_like(np.empty(shape, dt), 0, tag, status=True)
                else:
                    got = np.full(shape, 1, dt)
                    st = cl.recv_into(got, 0, tag)
                c.equal(got, x, label, record=False)
                status_ok(st, 0, tag, x.nbytes, label)
    # Without status=True only the array comes back.
    if me == 0:
        for p in range(1, n):
            cl.send(np.arange(3), p)
    else:
        got = cl.recv((3,), np.int64, 0)
        c.ok(isinstance(got, np.ndarray), "recv without status", f"returned {type(got).__name__}")
        c.equal(got, np.arange(3), "recv without status value", record=False)


def wildcards():
    """Every other rank sends to 0 with its own tag; 0 receives with ANY_SOURCE / ANY_TAG."""
    if me == 0:
        seen = set()
        for i in range(n - 1):
            buf = np.empty(4, np.int32)
            st = cl.recv_into(buf, cl.ANY_SOURCE, cl.ANY_TAG)
            c.ok(st.source == buf[0] and st.tag == 50 + buf[0] and st.nbytes == 16, "ANY_SOURCE/ANY_TAG",
                 f"Status {st!r} for payload {buf.tolist()}")
            seen.add(int(buf[0]))
        c.ok(seen == set(range(1, n)), "ANY_SOURCE saw every rank", f"saw {sorted(seen)}")
        cl.barrier()  # the next messages are sent only now: ANY_TAG above could have matched them
        # ANY_SOURCE with a fixed tag, and a fixed source with ANY_TAG.
        for p in range(1, n):
            got, st = cl.recv((2,), np.int64, cl.ANY_SOURCE, 7, status=True)
            c.ok(st.tag == 7 and got[0] == st.source, "ANY_SOURCE tag 7", f"{st!r} {got}")
        for p in range(1, n):
            got, st = cl.recv((2,), np.int64, p, cl.ANY_TAG, status=True)
            c.ok(st.source == p and st.tag == 8 and got[1] == 8, f"src {p} ANY_TAG", f"{st!r} {got}")
    else:
        cl.send(np.array([me, 0, 0, 0], np.int32), 0, tag=50 + me)
        cl.barrier()
        cl.send(np.array([me, 7]), 0, tag=7)
        cl.send(np.array([me, 8]), 0, tag=8)


def ordering():
    """Many messages one sender, one tag: received in the order sent. Tags received in reverse."""
    if n < 2:
        return
    count = 300
    if me == 1:
        for i in range(count):
            cl.send(np.array([i], np.int64), 0, tag=5)
        for t in range(10):
            cl.send(np.full(t + 1, t, np.int16), 0, tag=20 + t)
    elif me == 0:
        got = [int(cl.recv((1,), np.int64, 1 if i % 2 else cl.ANY_SOURCE, 5)[0]) for i in range(count)]
        c.ok(got == list(range(count)), "300 messages in order", f"order {got[:20]}...")
        for t in reversed(range(10)):
            m, st = cl.recv((t + 1,), np.int16, 1, 20 + t, status=True)
            c.ok(np.all(m == t) and st.tag == 20 + t, f"tag {20 + t} received in reverse order", f"{st!r} {m}")


def large():
    """8 MiB each way between 0 and 1, and odd sizes; recv_into a strided buffer."""
    if n < 2 or me > 1:
        return
    peer = 1 - me
    for sender in (0, 1):
        for dt, count in ((np.dtype(np.float64), MiB), (np.dtype(np.uint8), 8 * MiB + 3)):
            x = gen(c.rng("big", sender, dname(dt)), dt, (count,))
            if me == sender:
                cl.send(x, peer, tag=9)
            else:
                got, st = cl.recv((count,), dt, peer, 9, status=True)
                c.equal(got, x, f"8 MiB {dname(dt)} from {sender}", record=False)
                status_ok(st, sender, 9, x.nbytes, f"8 MiB {dname(dt)} from {sender}")
    x = gen(c.rng("strided", 0), np.dtype(np.int32), (1000, 3))
    if me == 0:
        cl.send(x[:, ::2], 1, tag=11)  # non-contiguous send
    else:
        buf = np.full((1000, 4), -1, np.int32)
        st = cl.recv_into(buf[:, 1:3], 0, 11)  # non-contiguous receive
        c.equal(buf[:, 1:3], x[:, ::2], "strided send into strided recv_into", record=False)
        c.ok(np.all(buf[:, [0, 3]] == -1), "strided recv_into gaps", "wrote outside the view")
        status_ok(st, 0, 11, 8000, "strided recv_into")


def eager():
    """A 64 KiB send returns before the receiver posts its receive, or reads at all: rank 1 touches no
    point-to-point call until rank 0, its send returned, joins a barrier of the two (on the collective
    connections). A send that waited for the receiver would never join: rank 1 gives up after
    EAGER_WAIT_S, reports it and receives, so the job goes on."""
    if n < 2 or me > 1:
        return
    x = gen(c.rng("eager"), np.dtype(np.uint8), (64 << 10,))
    pair = c.g.subgroup([0, 1], ("p2p.eager",))
    if me == 0:
        cl.send(x, 1, tag=12)
        cl.barrier(group=pair)  # "my send returned"
    else:
        returned = cl.ibarrier(group=pair)
        deadline = time.monotonic() + EAGER_WAIT_S
        while not returned.test() and time.monotonic() < deadline:
            time.sleep(0.005)
        c.ok(returned.test(), "64 KiB send is eager",
             f"rank 0's send had not returned after {EAGER_WAIT_S:.0f} s with no receive posted for it")
        c.equal(cl.recv_like(x, 0, 12), x, "eager message content", record=False)
        returned.wait()


def shifts():
    """sendrecv ring shifts, small and large (both directions progress: no deadlock)."""
    for k in range(1, n) if n > 1 else [0]:
        for dt, count in ((np.dtype(np.int64), 17), (np.dtype(np.float32), 3 * MiB + 1), (np.dtype(np.uint8), 0)):
            dst, src = (me + k) % n, (me - k) % n
            x = gen(c.rng("shift", me, k, dname(dt)), dt, (count,))
            got = cl.sendrecv(x, dst, src, tag=k)
            want = gen(c.rng("shift", src, k, dname(dt)), dt, (count,))
            c.equal(got, want, f"sendrecv shift {k} {dname(dt)} count={count}", record=False)
    # A smaller message with another tag is already in the stream when a large
    # sendrecv starts: it is queued mid-exchange, the exchange resumes, and a
    # later recv finds it.
    if n > 1:
        dst, src = (me + 1) % n, (me - 1) % n
        cl.send(np.full(5, me, np.int32), dst, tag=50)
        x = gen(c.rng("overtaken", me), np.dtype(np.float64), (MiB,))
        got = cl.sendrecv(x, dst, src, tag=51)
        c.equal(got, gen(c.rng("overtaken", src), np.dtype(np.float64), (MiB,)),
                "large sendrecv behind another tag's message", record=False)
        c.equal(cl.recv((5,), np.int32, src, tag=50), np.full(5, src, np.int32),
                "the message queued during sendrecv", record=False)
    # 2-D non-contiguous, each rank exchanging with its mirror.
    x = gen(c.rng("mirror", me), np.dtype(np.complex128), (40, 30))
    peer = n - 1 - me
    got = cl.sendrecv(x.T, peer, peer, tag=3)
    c.equal(got, gen(c.rng("mirror", peer), np.dtype(np.complex128), (40, 30)).T, "sendrecv mirror transposed",
            record=False)


def probing():
    """iprobe returns None when nothing waits; probe returns the Status, then recv takes the message."""
    cl.barrier()
    c.ok(cl.iprobe() is None, "iprobe with nothing sent", "returned a Status")
    c.ok(cl.iprobe(cl.ANY_SOURCE, 77) is None, "iprobe tag 77 with nothing sent", "returned a Status")
    cl.barrier()
    if n < 2:
        return
    if me == 1:
        cl.send(np.arange(6, dtype=np.int16), 0, tag=31)
        cl.send(np.arange(9, dtype=np.float64), 0, tag=32)
    elif me == 0:
        st = cl.probe()
        status_ok(st, 1, 31, 12, "probe()")
        st2 = cl.probe(1, 32)
        status_ok(st2, 1, 32, 72, "probe(1, 32) behind another message")
        deadline = time.monotonic() + 10
        while cl.iprobe(1, 32) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        status_ok(cl.iprobe(1, 32), 1, 32, 72, "iprobe(1, 32)")
        c.ok(cl.iprobe(1, 33) is None, "iprobe(1, 33) with only tags 31, 32 waiting", "returned a Status")
        c.equal(cl.recv((9,), np.float64, 1, 32), np.arange(9, dtype=np.float64), "recv after probe (tag 32)",
                record=False)
        c.equal(cl.recv((6,), np.int16, st.source, st.tag), np.arange(6, dtype=np.int16), "recv after probe (tag 31)",
                record=False)
        c.ok(cl.iprobe() is None, "iprobe after everything was received", "returned a Status")
    cl.barrier()


def buffer_inputs():
    """memoryview, bytearray and array.array are accepted as send and receive buffers."""
    if n < 2 or me > 1:
        return
    if me == 0:
        cl.send(bytearray(b"hello"), 1, tag=40)
        cl.send(array.array("i", [1, -2, 3]), 1, tag=41)
        cl.send(memoryview(np.arange(5, dtype=np.float32)), 1, tag=42)
        cl.send(memoryview(b"read-only bytes"), 1, tag=43)
    else:
        ba = bytearray(5)
        st = cl.recv_into(ba, 0, 40)
        c.ok(bytes(ba) == b"hello", "recv_into bytearray", f"got {bytes(ba)!r}")
        status_ok(st, 0, 40, 5, "recv_into bytearray")
        aa = array.array("i", [0, 0, 0])
        cl.recv_into(aa, 0, 41)
        c.ok(aa.tolist() == [1, -2, 3], "recv_into array.array", f"got {aa.tolist()}")
        f = np.zeros(5, np.float32)
        cl.recv_into(memoryview(f), 0, 42)
        c.equal(f, np.arange(5, dtype=np.float32), "recv_into memoryview", record=False)
        got = cl.recv((15,), np.uint8, 0, 43)
        c.ok(got.tobytes() == b"read-only bytes", "send read-only memoryview", f"got {got.tobytes()!r}")


if n == 1:
    self_messages()
pairs_from_zero()
wildcards()
ordering()
large()
eager()
shifts()
probing()
buffer_inputs()
cl.barrier()
c.finish()
