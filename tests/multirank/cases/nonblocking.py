"""Non-blocking point-to-point, requests and i-collectives (the progress-engine contract of API.md).

usage: nonblocking.py SEED [PART-OR-SECTION ...]      (default: every part but `exit`)

Parts (what test_nonblocking.py runs, one launch each):
  p2p   fanin ring halo many owned
  sync  issend cancel blocking handoff testany
  coll  icoll groups
  exit  leftover  (ends with receives nobody ever matches; the job must still exit 0 promptly)
A section name runs that section alone. With one rank every message goes to self.

Every section uses its own tags. A section that raises (e.g. CommTimeout
because a request waited behind another) is recorded with its traceback; the
ranks then resynchronise with a barrier and the next section runs, unless that
barrier fails too (the group is unusable), which skips the rest. Polling loops
have deadlines; every wait is bounded by the group's timeout (COMMLIB_TIMEOUT).
The expected values are computed with numpy from every rank's regenerated input.
"""
import threading
import time
import traceback

import numpy as np

import commlib as cl
from _batch import SCALE, sections
from _common import Checker, expected_reduce, gen

c = Checker("nonblocking")
n, me = c.size, c.rank
left, right = (me - 1) % n, (me + 1) % n
POLL_S = 10.0  # deadline of every polling loop (test()/test_any()/test_all())
MISSING = "<no attribute>"


def data(dt, shape, *label, kind="any"):
    """Input of one message/collective: a pure function of (seed, label), so any rank can rebuild it."""
    return gen(c.rng(*label), np.dtype(dt), shape, kind)


def poll(fn, deadline=POLL_S):
    """Call fn until it returns something truthy or the deadline passes; returns its last value."""
    end = time.monotonic() + deadline
    while True:
        value = fn()
        if value or time.monotonic() > end:
            return value
        time.sleep(0.002)


def is_none(value, label):
    return c.ok(value is None, label, f"returned {type(value).__name__} instead of None")


def cancelled(req):
    return getattr(req, "cancelled", MISSING)


# ------------------------------------------------------------------ 3. fan-in
def fanin():
    """Rank 0 collects one message from every other rank with wait_any, popping each completed request."""
    senders = list(range(1, n)) or [0]

    def payload(src, rnd, size=6):
        return np.arange(size, dtype=np.int64) + 1000 * src + 100 * rnd

    def collect(reqs, srcs, rnd, size, label):
        seen = []
        while reqs:
            i, res = cl.wait_any(reqs)
            if not c.ok(isinstance(i, (int, np.integer)) and 0 <= i < len(reqs), f"{label} wait_any index",
                        f"index {i!r} for a list of {len(reqs)}"):
                return
            c.ok(reqs[i].test(), f"{label} request {i} returned by wait_any is complete", "test() is False")
            req, src = reqs.pop(i), srcs.pop(i)
            if src is None:  # ANY_SOURCE: the Status says who sent it
                if not c.ok(isinstance(res, tuple) and len(res) == 2, f"{label} status=True result",
                            f"got {type(res).__name__}"):
                    return
                arr, st = res
                c.ok(st.tag == (3000 if rnd == 1 else 3100 + st.source), f"{label} Status.tag",
                     f"{st!r}")
                c.ok(st.nbytes == size * 8, f"{label} Status.nbytes", f"{st!r}")
                src = st.source
            else:
                arr = res
            c.equal(arr, payload(src, rnd, size), f"{label} payload from {src}", record=False)
            seen.append(int(src))
        c.ok(sorted(seen) == senders, f"{label}: every sender's message arrived once", f"got {seen}")

    # Round 1: ANY_SOURCE, fixed tag; the senders start in reverse rank order. (The staggered starts
    # below only vary the order the messages come in; every order is right, so none is synchronisation.)
    if me == 0:
        reqs = [cl.irecv((6,), np.int64, cl.ANY_SOURCE, tag=3000, status=True) for _ in senders]
    sends = []
    if me in senders:
        time.sleep(0.03 * ((n - me) % n))  # staggered start: an arrival order, not synchronisation
        sends.append(cl.isend(payload(me, 1), 0, tag=3000))
    if me == 0:
        collect(reqs, [None] * len(reqs), 1, 6, "fan-in ANY_SOURCE")
    # Round 2: ANY_SOURCE and ANY_TAG, messages over 64 KiB (tag 3100 + sender), senders in rank order.
    big = 9000
    if me == 0:
        reqs = [cl.irecv((big,), np.int64, cl.ANY_SOURCE, cl.ANY_TAG, status=True) for _ in senders]
    if me in senders:
        time.sleep(0.03 * (me - 1) if n > 1 else 0)  # staggered start: an arrival order, not synchronisation
        sends.append(cl.isend(payload(me, 2, big), 0, tag=3100 + me))
    if me == 0:
        collect(reqs, [None] * len(reqs), 2, big, "fan-in ANY_SOURCE/ANY_TAG 72 KB")
    cl.barrier()  # round 3 starts only now: an ANY_TAG receive above could otherwise match its messages
    # Round 3: one receive per source; the index wait_any returns must be that of the request it completed.
    if me == 0:
        srcs = list(senders)
        reqs = [cl.irecv((6,), np.int64, s, tag=3200) for s in srcs]
    if me in senders:
        time.sleep(0.03 * ((n - me) % n))  # staggered start: an arrival order, not synchronisation
        sends.append(cl.isend(payload(me, 3), 0, tag=3200))
    if me == 0:
        collect(reqs, srcs, 3, 6, "fan-in per-source receives")
    for i, s in enumerate(sends):
        is_none(s.wait(), f"fan-in isend {i} wait()")


# ---------------------------------------------------------------- 1. ring
def ring():
    """irecv from the left posted BEFORE isend to the right; waited receive-first and send-first."""
    for count in (100, 1 << 20):
        for k, first in enumerate(("recv", "send")):
            tag = 1000 + 10 * k + (count > 100)
            label = f"ring {count} float64, irecv posted first, {first}.wait() first"
            x = data(np.float64, (count,), "ring", me, count, first)
            r = cl.irecv((count,), np.float64, left, tag=tag)
            s = cl.isend(x, right, tag=tag)
            c.ok(isinstance(r, cl.Request) and isinstance(s, cl.Request), label + ": Request objects",
                 f"{type(r).__name__}, {type(s).__name__}")
            if first == "recv":
                got = r.wait()
                sent = s.wait()
            else:
                sent = s.wait()
                got = r.wait()
            is_none(sent, label + ": isend wait()")
            c.equal(got, data(np.float64, (count,), "ring", left, count, first), label, record=False)
            c.ok(r.test() and s.test(), label + ": test() True after wait()", f"{r.test()}, {s.test()}")
    # isend posted first, in both directions at once, 1M each way
    x = data(np.float64, (1 << 20,), "ring2", me)
    s1, s2 = cl.isend(x, right, tag=1100), cl.isend(x[::-1], left, tag=1101)
    r1, r2 = cl.irecv((1 << 20,), np.float64, left, tag=1100), cl.irecv((1 << 20,), np.float64, right, tag=1101)
    got2, got1 = r2.wait(), r1.wait()
    is_none(s2.wait(), "ring both ways: isend wait()")
    is_none(s1.wait(), "ring both ways: isend wait()")
    c.equal(got1, data(np.float64, (1 << 20,), "ring2", left), "ring both ways, from the left", record=False)
    c.equal(got2, data(np.float64, (1 << 20,), "ring2", right)[::-1], "ring both ways, from the right",
            record=False)


# ---------------------------------------------------------------- 2. halo
def halo():
    """Periodic 1-D stencil: receives from both sides posted first, then the sends, then wait_all."""
    P = 1_000_003
    for w, local, iters in ((2, 50, 20), (9000, 12000, 3)):  # halos of 16 B and of 72 KB (> 64 KiB)
        glob = data(np.int64, (n * local,), "halo", w) % P  # every rank evolves the whole domain itself
        u = np.empty(local + 2 * w, np.int64)
        u[w:-w] = glob[me * local:(me + 1) * local]
        for it in range(iters):
            label = f"halo w={w} iteration {it}"
            reqs = [cl.irecv((w,), np.int64, left, tag=2001),    # left's last cells
                    cl.irecv((w,), np.int64, right, tag=2002),   # right's first cells
                    cl.isend(u[w:2 * w], left, tag=2002),
                    cl.isend(u[-2 * w:-w], right, tag=2001)]
            res = cl.wait_all(reqs)
            if not c.ok(isinstance(res, list) and len(res) == 4, label + ": wait_all result",
                        f"got {type(res).__name__} {len(res) if hasattr(res, '__len__') else ''}"):
                return
            c.ok(res[2] is None and res[3] is None, label + ": wait_all gives None for the sends",
                 f"{type(res[2]).__name__}, {type(res[3]).__name__}")
            lo, hi = me * local, (me + 1) * local
            want_left = np.take(glob, np.arange(lo - w, lo), mode="wrap")
            want_right = np.take(glob, np.arange(hi, hi + w), mode="wrap")
            ok = c.equal(res[0], want_left, label + ": ghost cells from the left", record=False)
            ok &= c.equal(res[1], want_right, label + ": ghost cells from the right", record=False)
            if not ok:
                return
            u[:w], u[-w:] = res[0], res[1]
            # update: the local stencil and the global reference
            v = u
            u = np.empty_like(v)
            u[w:-w] = (v[:-2 * w] + 3 * v[w - 1:-w - 1] + 5 * v[w:-w] + 7 * v[w + 1:len(v) - w + 1]
                       + 11 * v[2 * w:] + it) % P
            glob = (np.roll(glob, w) + 3 * np.roll(glob, 1) + 5 * glob + 7 * np.roll(glob, -1)
                    + 11 * np.roll(glob, -w) + it) % P
        c.equal(u[w:-w], glob[me * local:(me + 1) * local], f"halo w={w}: field after {iters} iterations",
                record=False)


# ---------------------------------------------------------------- 6. many
SIZES = [0, 1, 17, 100, 1000, 9000, 40000, 3, 0, 257]
DTYPES = [np.float64, np.int32, np.uint8, np.complex64, np.float32]


def many():
    """100 isends and 100 irecvs outstanding (sizes 0 B to 320 KB, 3 tags per direction); posted in a
    random interleaving, waited in a random order, then in reverse order with wait_all."""
    K = 25  # messages per direction and round

    def spec(d, k):
        dt = np.dtype(DTYPES[(k + d) % len(DTYPES)])
        size = SIZES[(3 * k + d) % len(SIZES)]
        shape = (90, 100) if size == 9000 else (size,)
        return dt, shape, 6000 + 10 * d + k % 3

    for rnd, how in enumerate(("random order", "reverse order, wait_all")):
        rng = c.rng("many-order", me, rnd)
        recvs, sends, want = [], [], []
        for d, (dst, src) in enumerate(((right, left), (left, right))):
            for k in range(K):
                dt, shape, tag = spec(d, k)
                recvs.append((f"from {src} tag {tag} #{k} {dt.name}{shape}", shape, dt, src, tag))
                want.append(data(dt, shape, "many", src, d, k, rnd))
                sends.append((data(dt, shape, "many", me, d, k, rnd), dst, tag))
        # a random interleaving that keeps the order within the receives and within the sends
        picks = rng.permutation([0] * len(recvs) + [1] * len(sends))
        reqs, labels, ri, si = [], [], 0, 0
        for p in picks:
            if p == 0:
                label, shape, dt, src, tag = recvs[ri]
                reqs.append(cl.irecv(shape, dt, src, tag=tag))
                labels.append((label, want[ri]))
                ri += 1
            else:
                x, dst, tag = sends[si]
                reqs.append(cl.isend(x, dst, tag=tag))
                labels.append((f"isend to {dst} tag {tag} #{si}", None))
                si += 1
        if rnd == 0:
            order = rng.permutation(len(reqs))
            results = [None] * len(reqs)
            for i in order:
                results[i] = reqs[i].wait()
        else:
            results = cl.wait_all(reqs[::-1])[::-1]
        for (label, expect), got in zip(labels, results):
            if expect is None:
                is_none(got, f"many ({how}): {label} wait()")
            else:
                c.equal(got, expect, f"many ({how}): {label}", record=False)


def owned():
    """A small isend owns its data: the caller overwrites x after each call, and every message arrives
    as it was sent, in order, both where the connection took the frame in the call (a completed
    request) and where it did not: rank 1 sits in a barrier, reading no point-to-point byte, while
    rank 0 isends it 16 MB in 64 KB messages (more than a shared-memory ring or a loopback socket buffer holds),
    so the later isends queue their rest, which must not be read from x afterwards."""
    K, size, tag = 256, 8192, 6400
    if n == 1:
        src = dst = 0
    else:
        src, dst = 0, 1
    reqs, done_in_call = [], 0
    if me == src:
        x = np.empty(size, np.float64)
        for k in range(K):
            x[:] = data(np.float64, (size,), "owned", k)
            reqs.append(cl.isend(x, dst, tag=tag))
            done_in_call += reqs[-1].test()
            x[:] = -1.0  # reused at once
    if n > 1:
        cl.barrier()
        if me == src:
            c.ok(0 < done_in_call < K, "owned: isends done in the call",
                 f"{done_in_call} of {K} completed in their call (expected some, not all: the receiver read nothing)")
    if me == dst:
        got = [cl.irecv((size,), np.float64, src, tag=tag) for _ in range(K)]
        for k, r in enumerate(got):
            c.equal(r.wait(), data(np.float64, (size,), "owned", k), f"owned: message {k}", record=False)
    for r in reqs:
        is_none(r.wait(), "owned: isend wait()")


# -------------------------------------------------------------- 4. issend
def issend():
    """issend completes only once the receiver has matched it; a small isend completes without that."""
    x = np.arange(128, dtype=np.int64) + 1000 * me  # 1 KiB: an eager-sized message
    if n == 1:
        s = cl.issend(x, 0, tag=4001)
        c.ok(not s.test(), "issend to self: test() False before the receive is posted", "test() is True")
        time.sleep(0.2)  # the time a wrong issend would have to complete on its own: nothing to wait for
        c.ok(not s.test(), "issend to self: test() False 0.2 s later", "test() is True")
        c.equal(cl.irecv((128,), np.int64, 0, tag=4001).wait(), x, "issend to self: data", record=False)
        c.ok(poll(s.test), "issend to self completes once received", "test() stayed False")
        is_none(s.wait(), "issend to self wait()")
        s = cl.isend(x, 0, tag=4002)
        c.ok(poll(s.test), "small isend to self completes before any receive", "test() stayed False")
        is_none(s.wait(), "isend to self wait()")
        c.equal(cl.irecv((128,), np.int64, 0, tag=4002).wait(), x, "isend to self: data", record=False)
        return
    x0 = np.arange(128, dtype=np.int64)
    # Rank 1 posts its receive LATE_S after it hears from rank 0, which is after rank 0 took t0 and called
    # issend: no receive exists before t0 + LATE_S, however loaded the machine, so a test() that returned
    # True before then, or a wait() that returned sooner, is wrong (no margin needed).
    LATE_S = 0.3
    if me == 0:
        t0 = time.monotonic()
        s = cl.issend(x, 1, tag=4001)
        go = cl.isend(np.array([1], np.int64), 1, tag=4002)
        early = []
        while True:
            done = s.test()
            if time.monotonic() - t0 >= LATE_S:  # (measured after test() returned)
                break
            early.append(done)
            time.sleep(0.01)
        c.ok(not any(early), "issend: test() False while the receiver has not posted its receive",
             f"test() was True {sum(early)} of {len(early)} times within {LATE_S} s")
        is_none(s.wait(), "issend wait()")
        took = time.monotonic() - t0
        c.ok(took >= LATE_S, f"issend: wait() returns only once the receive is posted ({LATE_S} s after 'go')",
             f"issend completed after {took:.3f} s")
        is_none(go.wait(), "isend 'go' wait()")
    elif me == 1:
        cl.irecv((1,), np.int64, 0, tag=4002).wait()
        time.sleep(LATE_S)  # the late receiver under test: the issend must wait for it
        c.equal(cl.irecv((128,), np.int64, 0, tag=4001).wait(), x0, "issend: data", record=False)
    # issend to a receive that is already posted completes.
    if me == 1:
        r = cl.irecv((128,), np.int64, 0, tag=4003)
    cl.barrier()
    if me == 0:
        is_none(cl.issend(x, 1, tag=4003).wait(), "issend to an already posted receive")
    elif me == 1:
        c.equal(r.wait(), x0, "issend to an already posted receive: data", record=False)
    # Contrast: a small isend completes although the receiver posts only after hearing that it did.
    if me == 0:
        is_none(cl.isend(x, 1, tag=4004).wait(), "1 KiB isend completes before the receive is posted")
        cl.isend(np.array([2], np.int64), 1, tag=4005).wait()
    elif me == 1:
        cl.irecv((1,), np.int64, 0, tag=4005).wait()
        c.equal(cl.irecv((128,), np.int64, 0, tag=4004).wait(), x0, "eager isend: data", record=False)


# -------------------------------------------------------------- 5. cancel
def cancel():
    for label, req in (("irecv from left, tag nobody sends", cl.irecv((4,), np.int32, left, tag=5999)),
                       ("irecv ANY_SOURCE, tag nobody sends", cl.irecv((4,), np.int32, cl.ANY_SOURCE, tag=5998))):
        c.ok(req.test() is False, f"{label}: test() False", f"test() returned {req.test()!r}")
        c.ok(req.cancel() is True, f"{label}: cancel() True", "cancel() did not return True")
        c.ok(req.test() is True, f"{label}: test() True after cancel()", f"test() returned {req.test()!r}")
        is_none(req.wait(), f"{label}: wait() after cancel()")
        c.ok(cancelled(req) is True, f"{label}: .cancelled", f".cancelled is {cancelled(req)!r}")
    # A receive that has completed cannot be cancelled; its data is intact.
    r = cl.irecv((5,), np.int64, left, tag=5001)
    s = cl.isend(np.arange(5, dtype=np.int64) + 10 * me, right, tag=5001)
    c.ok(poll(r.test), "matched irecv: test() becomes True", "test() stayed False")
    c.ok(r.cancel() is False, "cancel() of a completed receive is False", "cancel() did not return False")
    c.ok(cancelled(r) is False, "completed receive: .cancelled False", f".cancelled is {cancelled(r)!r}")
    c.equal(r.wait(), np.arange(5, dtype=np.int64) + 10 * left, "completed receive keeps its data", record=False)
    c.ok(s.cancel() is False, "cancel() of a send is False", "cancel() did not return False")
    is_none(s.wait(), "send wait() after cancel()")
    # A cancelled receive does not swallow a message sent later with its tag.
    r = cl.irecv((3,), np.float64, left, tag=5002)
    c.ok(r.cancel() is True, "cancel() before the barrier", "cancel() did not return True")
    cl.barrier()
    s = cl.isend(np.full(3, me, np.float64), right, tag=5002)
    c.equal(cl.irecv((3,), np.float64, left, tag=5002).wait(), np.full(3, left, np.float64),
            "message sent after a cancel goes to the next receive", record=False)
    is_none(r.wait(), "cancelled receive wait()")
    is_none(s.wait(), "isend wait()")


# ------------------------------------------------------------ 7. blocking
def blocking():
    """Blocking calls complete while unrelated requests are pending."""
    src = 1 % n
    if me == 0:
        r = cl.irecv((5,), np.int64, src, tag=7005)  # its message is sent only after the barrier below
    xs = [data(np.int64, (1000,), "blocking", q, kind="small") for q in range(n)]
    c.equal(cl.all_reduce(xs[me]), expected_reduce(xs, "sum"), "blocking all_reduce while an irecv is pending")
    # blocking send/recv between the same pair, another tag
    if me == src:
        cl.send(np.arange(4, dtype=np.int64) * 3, 0, tag=7007)
    if me == 0:
        c.equal(cl.recv((4,), np.int64, src, tag=7007), np.arange(4, dtype=np.int64) * 3,
                "blocking recv while an irecv from the same source is pending", record=False)
        c.ok(not r.test(), "the irecv is still pending", "completed before its message was sent")
    cl.barrier()
    if me == src:
        cl.send(np.arange(5, dtype=np.int64) * 7, 0, tag=7005)
    if me == 0:
        c.equal(r.wait(), np.arange(5, dtype=np.int64) * 7, "the pending irecv completes afterwards", record=False)
    # a receive posted first takes the first message it matches, even where a blocking receive
    # that matches it too was called before the message came
    if me == 0:
        r = cl.irecv((3,), np.int64, src, tag=cl.ANY_TAG)
    cl.barrier()
    if me == src:
        for k in (1, 2):
            cl.send(np.full(3, k, np.int64), 0, tag=7011)
    if me == 0:
        c.equal(cl.recv((3,), np.int64, src, tag=7011), np.full(3, 2, np.int64),
                "a blocking recv after an irecv of any tag takes the second message", record=False)
        c.equal(r.wait(), np.full(3, 1, np.int64), "the irecv of any tag posted first takes the first message",
                record=False)
    # A large isend waiting for its receiver does not hold up blocking collectives on the sender.
    dst = 1 % n
    big = data(np.float64, (1 << 20,), "blocking-big")
    if me == 0:
        s = cl.isend(big, dst, tag=7010)
    cl.barrier()
    b = np.arange(6, dtype=np.float32) if me == 0 else np.zeros(6, np.float32)
    c.equal(cl.broadcast(b, root=0), np.arange(6, dtype=np.float32), "blocking broadcast while an 8 MB isend "
            "is pending")
    c.equal(cl.all_reduce(np.array([me], np.int64), op="max"), np.array([n - 1], np.int64),
            "blocking all_reduce while an 8 MB isend is pending")
    if me == dst:
        c.equal(cl.recv((1 << 20,), np.float64, 0, tag=7010), big, "the 8 MB message", record=False)
    if me == 0:
        is_none(s.wait(), "8 MB isend wait()")


def one_call():
    """(handoff) Blocking sends and receives keep their one call while receives are posted in other
    groups (a window's service, a pending irecv): with one posted on a group of this rank alone,
    ranks 0 and 1 ping-pong 200 round trips, and the engine reads few of those messages itself."""
    if n == 1:
        return
    alone = c.g.split(me)  # a group of this rank alone: its receive never matches anything here
    pending = cl.irecv((1,), np.float64, 0, tag=7398, group=alone)
    engine, read = c.g.engine, [0]
    header_done = engine._header_done

    def counted(conn):  # (an instance attribute: what the engine's loop calls)
        read[0] += 1
        return header_done(conn)
    engine._header_done = counted
    try:
        rounds, x = 200, np.zeros(1, np.float64)
        if me < 2:
            for _ in range(rounds):
                if me == 0:
                    cl.send(x + 1, 1, tag=7300)
                    x = cl.recv((1,), np.float64, 1, tag=7301)
                else:
                    x = cl.recv((1,), np.float64, 0, tag=7300)
                    cl.send(x + 1, 0, tag=7301)
            c.ok(x[0] == 2 * rounds - me, "handoff: the ping-pong's last value", repr(x))
            c.ok(read[0] < rounds // 10, "handoff: ping-pong messages the engine read itself",
                 f"{read[0]} of {rounds}: a blocking call took the engine's path though only another group's "
                 f"receive was posted")
    finally:
        del engine._header_done
    c.ok(pending.cancel(), "handoff: the other group's receive cancelled", repr(pending))


def tested():
    """(handoff) A receive completes though its rank never waits, only posts more receives (one
    every 0.2 ms) and tests it: posting defers the progress thread, but not for good (DEFER_MAX_S
    after the connections were last serviced), so the thread reads the message. (Before, each post
    put the thread off again and the message was never read while the posting went on.) The posting
    goes on until the receive completes, for 10 s (times the suite's scale) at most: on a loaded
    machine rank 0 may answer only after a few hundred ms. What is posted is cancelled 500 at a time
    (a cancel reads nothing: only the thread can have read the message)."""
    if n == 1:
        return
    if me == 1:
        first, more, posted = cl.irecv((1,), np.float64, 0, tag=7601), [], 0
        limit = 10.0 * SCALE
        deadline = time.monotonic() + limit
        while not first.test() and time.monotonic() < deadline:
            more.append(cl.irecv((1,), np.float64, 0, tag=7602))
            posted += 1
            if posted == 10:  # the posting under way (the thread put off): rank 0 sends once it hears this
                cl.send(np.zeros(1), 0, tag=7600)
            if len(more) == 500:
                for r in more:
                    r.cancel()
                more = []
            end = time.monotonic() + 0.0002
            while time.monotonic() < end:  # computing, no commlib call
                pass
        if posted < 10:
            cl.send(np.zeros(1), 0, tag=7600)  # (never: nothing sends the first receive's message before)
        done = first.test()
        c.ok(done, "handoff: a receive only tested completes while its rank posts others",
             f"not within {limit:g} s, {posted} more receives posted")
        for r in more:
            r.cancel()
        if done:
            c.equal(first.wait(), np.full(1, 5.0), "handoff: the tested receive's message", record=False)
    elif me == 0:
        cl.recv((1,), np.float64, 1, tag=7600)
        cl.send(np.full(1, 5.0), 1, tag=7601)


def handoff():
    """The progress thread takes over from a caller that stopped waiting: the caller that waits
    drives progress itself and the thread lets it be for a moment after (a caller that waits again
    at once keeps its messages to itself), but not for longer. Right after a receive, rank 0
    isends 4 MB (more than a ring or a socket buffer holds) and computes for 1.5 s without a
    call, a receive nobody answers posted meanwhile; rank 1's receive of the 4 MB completes long
    before the computing ends. (With one rank: the 4 MB to itself, no thread involved.)"""
    one_call()
    tested()
    big = data(np.float64, (1 << 19,), "handoff")
    if n == 1:
        s = cl.isend(big, 0, tag=7303)
        c.equal(cl.recv((1 << 19,), np.float64, 0, tag=7303), big, "handoff: 4 MB to self", record=False)
        is_none(s.wait(), "handoff: 4 MB isend wait()")
        return
    if me == 0:
        unanswered = cl.irecv((1,), np.float64, 0, tag=7399)  # nothing sends it: cancelled below
        cl.recv((1,), np.float64, 1, tag=7302)
        s = cl.isend(big, 1, tag=7303)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # computing: no commlib call
            pass
        is_none(s.wait(), "handoff: 4 MB isend wait()")
        c.ok(unanswered.cancel(), "handoff: the unanswered receive cancelled", repr(unanswered))
    elif me == 1:
        cl.send(np.zeros(1), 0, tag=7302)
        t = time.monotonic()
        got = cl.recv((1 << 19,), np.float64, 0, tag=7303)
        took = time.monotonic() - t
        c.equal(got, big, "handoff: the 4 MB message", record=False)
        c.ok(took < 0.75, "handoff: the 4 MB message came while its sender computed", f"after {took:.2f} s")


def parked():
    """A caller waiting on a receive drives progress itself, and the progress thread stays parked
    until it stops (it polled every millisecond before: 1,000 wake-ups a second for each waiting
    rank, which 400 ranks on two cores could not afford). Rank 1 waits 0.6 s for rank 0's message,
    counting the thread's wake-ups meanwhile. (With one rank: the message comes from another
    thread of its own, to itself.)"""
    waiter, sender = (1, 0) if n > 1 else (0, 0)
    if me == sender and n > 1:
        cl.recv((1,), np.float64, waiter, tag=7401)
        time.sleep(0.6)
        cl.send(np.full(2, 7.0), waiter, tag=7402)
    if me != waiter:
        return
    engine = c.g.engine
    woken, wait = [], engine._work.wait

    def counting(timeout=None):  # the progress thread's waits on its condition
        if threading.current_thread() is engine._thread:
            woken.append(time.monotonic())
        return wait(timeout)
    req = cl.irecv((2,), np.float64, sender, tag=7402)  # (the thread starts with the first receive posted)
    engine._work.wait = counting
    helper = None
    try:
        if n > 1:
            cl.send(np.zeros(1), sender, tag=7401)
        else:
            helper = threading.Timer(0.6, lambda: cl.send(np.full(2, 7.0), 0, tag=7402))
            helper.start()
        c.equal(req.wait(), np.full(2, 7.0), "parked: the message waited for", record=False)
    finally:
        engine._work.wait = wait
        if helper is not None:
            helper.join()
    c.ok(len(woken) < 20, "parked: the progress thread stays parked while the caller waits",
         f"it woke {len(woken)} times in the caller's 0.6 s wait")


def posted():
    """A wait on a posted receive takes its frame in one call where the receive is first in line for
    its sender, else through the engine's matching, with MPI's matching order either way: each rank
    receives from its left neighbour (itself with one rank). Another tag's frame first goes to its
    own receive; two receives of one (sender, tag) complete in the order posted whichever is waited
    first; a receive of any tag takes the tag that comes; an issend to a posted receive is
    acknowledged; a message of another size fails its receive (naming the sender) and the next
    receive still works; a cancelled receive's message goes to the next one posted; and in a ping-pong
    of irecv/wait the one call takes the frames."""
    t0 = 7500
    ra, rb = cl.irecv((3,), np.int64, left, tag=t0 + 1), cl.irecv((3,), np.int64, left, tag=t0 + 2)
    ra2 = cl.irecv((3,), np.int64, left, tag=t0 + 1)
    r1, r2 = cl.irecv((2,), np.int32, left, tag=t0 + 3), cl.irecv((2,), np.int32, left, tag=t0 + 3)
    cl.barrier()
    cl.send(np.full(3, 2, np.int64), right, tag=t0 + 2)  # the second receive's tag first
    cl.send(np.full(3, 1, np.int64), right, tag=t0 + 1)
    cl.send(np.full(3, 3, np.int64), right, tag=t0 + 1)
    cl.send(np.full(2, 1, np.int32), right, tag=t0 + 3)
    cl.send(np.full(2, 2, np.int32), right, tag=t0 + 3)
    c.equal(ra.wait(), np.full(3, 1, np.int64), "posted: waited first, its frame behind another tag's", record=False)
    c.equal(rb.wait(), np.full(3, 2, np.int64), "posted: the other tag's receive", record=False)
    c.equal(ra2.wait(), np.full(3, 3, np.int64), "posted: the second receive of the first one's tag", record=False)
    c.equal(r2.wait(), np.full(2, 2, np.int32), "posted: the second of one (sender, tag), waited first", record=False)
    c.equal(r1.wait(), np.full(2, 1, np.int32), "posted: the first of one (sender, tag)", record=False)
    # any tag: the wait expects the tag this sender used last, and takes another
    r = cl.irecv((1,), np.float64, left, tag=cl.ANY_TAG, status=True)
    cl.barrier()
    cl.send(np.array([4.5]), right, tag=t0 + 4)
    got, st = r.wait()
    c.ok(got[0] == 4.5 and st.tag == t0 + 4 and st.source == left, "posted: a receive of any tag",
         f"{got} {st}")
    # an issend to a posted receive: matched, so acknowledged
    r = cl.irecv((4,), np.int16, left, tag=t0 + 5)
    cl.barrier()
    s = cl.issend(np.arange(4, dtype=np.int16), right, tag=t0 + 5)
    c.equal(r.wait(), np.arange(4, dtype=np.int16), "posted: an issend's message", record=False)
    is_none(s.wait(), "posted: the issend acknowledged")
    # a message of another size than the receive's: its error, naming the sender; then the next one
    r, after = cl.irecv((5,), np.int64, left, tag=t0 + 6), cl.irecv((2,), np.int64, left, tag=t0 + 7)
    cl.barrier()
    cl.send(np.arange(3, dtype=np.int64), right, tag=t0 + 6)
    cl.send(np.arange(2, dtype=np.int64), right, tag=t0 + 7)
    c.raises(cl.MismatchError, "posted: a message of another size", r.wait, match=f"rank {left} sent 24 bytes")
    c.equal(after.wait(), np.arange(2, dtype=np.int64), "posted: the receive after the mismatch", record=False)
    # a cancelled receive's message goes to the next receive posted
    r = cl.irecv((1,), np.int64, left, tag=t0 + 8)
    c.ok(r.cancel(), "posted: cancelled before its message came", repr(r))
    nxt = cl.irecv((1,), np.int64, left, tag=t0 + 8)
    cl.barrier()
    cl.send(np.array([88]), right, tag=t0 + 8)
    c.equal(nxt.wait(), np.array([88]), "posted: the message of a cancelled receive, to the next", record=False)
    c.ok(r.wait() is None, "posted: the cancelled receive's wait returns None", repr(r))
    if n == 1:
        return
    # a ping-pong of irecv/wait between ranks 0 and 1: the waits take their frames in one call, a
    # receive of another tag from any source posted before them notwithstanding
    engine, taken = c.g.engine, [0]
    recv_posted = engine._recv_posted

    def counted(req, deadline):  # (an instance attribute: what Progress.wait calls)
        done = recv_posted(req, deadline)
        taken[0] += done
        return done
    engine._recv_posted = counted
    try:
        rounds, x = 100, np.zeros(1, np.float64)
        if me < 2:
            peer = 1 - me
            other = cl.irecv((1,), np.int64, cl.ANY_SOURCE, tag=t0 + 10)
            for _ in range(rounds):
                r = cl.irecv((1,), np.float64, peer, tag=t0 + 9)
                if me == 0:
                    cl.send(x + 1, 1, tag=t0 + 9)
                    x = r.wait()
                else:
                    x = r.wait()
                    cl.send(x + 1, 0, tag=t0 + 9)
            c.ok(x[0] == 2 * rounds - me, "posted: the irecv ping-pong's last value", repr(x))
            c.ok(taken[0] >= rounds // 4, "posted: waits that took their frame in one call",
                 f"{taken[0]} of {rounds}: the engine read (nearly) every frame of a receive first in line")
            cl.send(np.array([10 + me]), peer, tag=t0 + 10)
            c.equal(other.wait(), np.array([10 + peer]), "posted: the receive from any source, of another tag",
                    record=False)
    finally:
        del engine._recv_posted


# ------------------------------------------------------------- 10. testany
def testany():
    peer = 1 % n  # rank 0 receives from it (itself when n == 1)

    def pay(k):
        return np.arange(3, dtype=np.int64) + 100 * k

    if me == 0:
        ra, rb, rc = (cl.irecv((3,), np.int64, peer, tag=9100 + k) for k in (1, 2, 3))
        c.ok(cl.test_any([ra, rb, rc]) is None, "test_any before anything was sent is None",
             "returned something")
        c.ok(cl.test_all([ra, rb, rc]) is False, "test_all before anything was sent is False",
             "did not return False")
    cl.barrier()  # the peer sends tag 9101 only now
    if me == peer:
        s1 = cl.isend(pay(1), 0, tag=9101)
    if me == 0:
        c.ok(poll(ra.test), "irecv tag 9101 completes", "test() stayed False")
        c.ok(cl.test_all([ra, rb]) is False, "test_all([done, pending]) is False", "did not return False")
        c.ok(cl.test_any([rb, rc]) is None, "test_any([pending, pending]) is None", "returned something")
        got = cl.test_any([rb, ra, rc])
        if c.ok(isinstance(got, tuple) and len(got) == 2 and got[0] == 1, "test_any([pending, done, pending])",
                f"returned {got!r:.200}"):
            c.equal(got[1], pay(1), "test_any result", record=False)
    cl.barrier()  # the peer sends tags 9103 and 9102 only now
    if me == peer:
        s3 = cl.isend(pay(3), 0, tag=9103)
        s2 = cl.isend(pay(2), 0, tag=9102)
    if me == 0:
        c.ok(poll(lambda: cl.test_all([rb, rc])), "test_all becomes True", "stayed False")
        got = cl.wait_any([rb, rc])
        if c.ok(isinstance(got, tuple) and got[0] == 0, "wait_any with both done gives the lowest index",
                f"returned {got!r:.200}"):
            c.equal(got[1], pay(2), "wait_any result", record=False)
        res = cl.wait_all([rc])
        if c.ok(isinstance(res, list) and len(res) == 1, "wait_all of one", f"returned {res!r:.200}"):
            c.equal(res[0], pay(3), "wait_all result", record=False)
        # a completed send in a mixed list: test_any gives (index, None)
        rd = cl.irecv((3,), np.int64, peer, tag=9105)
        s4 = cl.isend(pay(4), peer, tag=9104)
        got = poll(lambda: cl.test_any([rd, s4]))
        c.ok(isinstance(got, tuple) and got[0] == 1 and got[1] is None, "test_any([pending irecv, eager isend])",
             f"returned {got!r:.200}")
    cl.barrier()  # the peer receives tag 9104 and sends tag 9105 only now
    if me == peer:
        c.equal(cl.irecv((3,), np.int64, 0, tag=9104).wait(), pay(4), "tag 9104", record=False)
        s5 = cl.isend(pay(5), 0, tag=9105)
    if me == 0:
        c.equal(rd.wait(), pay(5), "tag 9105", record=False)
        is_none(s4.wait(), "isend wait()")
    if me == peer:
        for k, s in ((1, s1), (2, s2), (3, s3), (5, s5)):
            is_none(s.wait(), f"isend tag {9100 + k} wait()")


# ---------------------------------------------------------------- 8. icoll
def icoll():
    """Every i-collective against numpy: a dozen outstanding on the world group, waited in reverse order;
    then the rooted ones with root n-1, waited with wait_all."""
    q = range(n)
    A = [data(np.int64, (1000,), "ic-a", r, kind="small") for r in q]
    A2 = [data(np.int64, (1000,), "ic-a2", r, kind="small") for r in q]
    B = [data(np.float32, (7, 3), "ic-b", r) for r in q]
    G = [data(np.int16, (3, 2), "ic-g", r) for r in q]
    RS = [data(np.float64, (4 * n, 2), "ic-rs", r, kind="small") for r in q]
    BC = data(np.complex128, (5, 2), "ic-bc")
    RD = [data(np.int32, (5,), "ic-rd", r, kind="small") for r in q]
    GA = [data(np.uint8, (4,), "ic-ga", r) for r in q]
    SC = data(np.complex64, (3 * n, 2), "ic-sc")
    AA = [data(np.int64, (2 * n, 3), "ic-aa", r) for r in q]
    PP = [data(np.float32, (6,), "ic-pp", r) for r in q]
    BIG = [data(np.float32, (1 << 20,), "ic-big", r, kind="small") for r in q]
    # (label, request, expected, same result on every rank)
    reqs = [
        ("iall_reduce sum int64", cl.iall_reduce(A[me]), expected_reduce(A, "sum"), True),
        ("iall_reduce max float32", cl.iall_reduce(B[me], op="max"), expected_reduce(B, "max"), True),
        ("iall_gather int16 (3, 2)", cl.iall_gather(G[me]), np.concatenate(G), True),
        ("ireduce_scatter float64", cl.ireduce_scatter(RS[me]), expected_reduce(RS, "sum")[4 * me:4 * me + 4],
         False),
        ("ibroadcast root 0", cl.ibroadcast(BC.copy() if me == 0 else np.zeros_like(BC), root=0), BC, True),
        ("iall_reduce 1M float32", cl.iall_reduce(BIG[me]), expected_reduce(BIG, "sum"), True),
        ("ireduce root 0", cl.ireduce(RD[me], root=0), expected_reduce(RD, "sum") if me == 0 else None, False),
        ("igather root 0", cl.igather(GA[me], root=0), np.concatenate(GA) if me == 0 else None, False),
        ("iscatter root 0", cl.iscatter(SC if me == 0 else None, root=0), SC[3 * me:3 * me + 3], False),
        ("iall_to_all", cl.iall_to_all(AA[me]), np.concatenate([AA[j][2 * me:2 * me + 2] for j in q]), False),
        ("ippermute shift +1", cl.ippermute(PP[me], [(i, (i + 1) % n) for i in q]), PP[left], False),
        ("ibarrier", cl.ibarrier(), None, False),
        ("iall_reduce sum int64, second of the same shape", cl.iall_reduce(A2[me]), expected_reduce(A2, "sum"),
         True),
    ]
    for label, req, want, record in reversed(reqs):
        got = req.wait()
        if want is None:
            is_none(got, label)
        else:
            c.equal(got, want, label, record=record)
    root = n - 1
    W = [data(np.float64, (2, 3), "ic-w", r) for r in q]
    SC2 = data(np.int32, (2 * n,), "ic-sc2")
    BC2 = data(np.uint16, (4,), "ic-bc2")
    rooted = [
        (f"ireduce max root {root}", cl.ireduce(W[me], op="max", root=root),
         expected_reduce(W, "max") if me == root else None),
        (f"igather root {root}", cl.igather(W[me], root=root), np.concatenate(W) if me == root else None),
        (f"iscatter root {root}", cl.iscatter(SC2 if me == root else np.zeros_like(SC2), root=root),
         SC2[2 * me:2 * me + 2]),
        (f"ibroadcast root {root}", cl.ibroadcast(BC2.copy() if me == root else np.zeros_like(BC2), root=root), BC2),
    ]
    results = cl.wait_all([req for _, req, _ in rooted])
    for (label, _, want), got in zip(rooted, results):
        if want is None:
            is_none(got, label + " (wait_all)")
        else:
            c.equal(got, want, label + " (wait_all)", record=False)


# --------------------------------------------------------------- 9. groups
def groups():
    """sub = split(rank % 2): sub-group i-collectives, world collectives (blocking and not) and world
    point-to-point outstanding together, waited in mixed order."""
    sub = c.g.split(me % 2)
    members = [r for r in range(n) if r % 2 == me % 2]
    sr, ss = sub.rank(), sub.size()
    if not c.ok((sr, ss) == (members.index(me), len(members)), "split rank/size",
                f"({sr}, {ss}) for members {members}"):
        return
    XS = [data(np.int64, (500,), "grp-s", r, kind="small") for r in range(n)]
    YS = [data(np.float32, (2, 3), "grp-y", r) for r in range(n)]
    XW = [data(np.int64, (300,), "grp-w", r, kind="small") for r in range(n)]
    ZW = [data(np.float64, (40,), "grp-z", r) for r in range(n)]
    P = [data(np.float64, (64,), "grp-p", r) for r in range(n)]
    early = sr == 0  # the first member of each sub group posts its sub collective before the world all_reduce,
    # the others only after it: the sub collective is pending, and cannot finish, during the blocking call.
    r = cl.irecv((64,), np.float64, left, tag=8001)
    if early:
        a = cl.iall_reduce(XS[me], group=sub)
    c.equal(cl.all_reduce(XW[me]), expected_reduce(XW, "sum"),
            "blocking world all_reduce while a sub-group iall_reduce and a world irecv are pending")
    if not early:
        a = cl.iall_reduce(XS[me], group=sub)
    s = cl.isend(P[me], right, tag=8001)
    b = cl.iall_gather(YS[me], group=sub)
    w = cl.iall_reduce(ZW[me], op="max")
    extra = cl.ibarrier(group=sub) if me % 2 else cl.ibroadcast(P[me].copy(), root=ss - 1, group=sub)
    is_none(s.wait(), "world isend wait()")
    c.equal(b.wait(), np.concatenate([YS[m] for m in members]), "sub iall_gather", record=False)
    c.equal(w.wait(), expected_reduce(ZW, "max"), "world iall_reduce max")
    c.equal(r.wait(), P[left], "world irecv", record=False)
    c.equal(a.wait(), expected_reduce([XS[m] for m in members], "sum"), "sub iall_reduce", record=False)
    if me % 2:
        is_none(extra.wait(), "sub ibarrier (odd ranks)")
    else:
        c.equal(extra.wait(), P[members[-1]], "sub ibroadcast (even ranks)", record=False)
    # Same tag, same pair of processes, one message per group: each receive gets its group's message.
    dst, src = members[(sr + 1) % ss], members[(sr - 1) % ss]
    reqs = [cl.irecv((8,), np.int64, (sr - 1) % ss, tag=8002, group=sub),
            cl.irecv((8,), np.int64, src, tag=8002),
            cl.isend(np.full(8, 100 + me, np.int64), (sr + 1) % ss, tag=8002, group=sub),
            cl.isend(np.full(8, 200 + me, np.int64), dst, tag=8002)]
    res = cl.wait_all(reqs[::-1])[::-1]
    c.equal(res[0], np.full(8, 100 + src, np.int64), "sub-group irecv, same tag as a world message", record=False)
    c.equal(res[1], np.full(8, 200 + src, np.int64), "world irecv, same tag as a sub-group message", record=False)
    c.ok(res[2] is None and res[3] is None, "isends in wait_all give None", f"{res[2:]!r:.200}")
    # A sub-group collective and a world collective outstanding together, waited world first.
    t = cl.iall_reduce(np.array([me], np.int64), group=sub)
    u = cl.iall_reduce(np.array([me], np.int64))
    c.equal(u.wait(), np.array([n * (n - 1) // 2], np.int64), "world iall_reduce behind a sub one")
    c.equal(t.wait(), np.array([sum(members)], np.int64), "sub iall_reduce", record=False)


# ------------------------------------------------------------- 11. leftover
LEFTOVER = []


def leftover():
    """A normal exchange, then receives nobody will ever match, still pending when the program ends."""
    r = cl.irecv((3,), np.float64, left, tag=9900)
    s = cl.isend(np.full(3, me, np.float64), right, tag=9900)
    c.equal(r.wait(), np.full(3, left, np.float64), "exchange before the leftovers", record=False)
    is_none(s.wait(), "isend wait()")
    LEFTOVER.append(cl.irecv((3,), np.float64, left, tag=9901))
    LEFTOVER.append(cl.irecv((1 << 16,), np.float64, cl.ANY_SOURCE, tag=9902))
    LEFTOVER.append(cl.irecv((1,), np.int8, cl.ANY_SOURCE, cl.ANY_TAG, group=c.g.split(0)))
    for label, q in zip(("left, tag 9901", "ANY_SOURCE, tag 9902", "ANY_SOURCE/ANY_TAG on a split group"), LEFTOVER):
        if not c.ok(not q.test(), f"leftover irecv ({label}) is pending", "it completed"):
            try:
                c.fail(f"leftover irecv ({label})", f"wait() returned {q.wait()!r:.200}")
            except Exception as err:
                c.fail(f"leftover irecv ({label})", f"wait() raised {type(err).__name__}: {err}")


PARTS = {"p2p": ["fanin", "ring", "halo", "many", "owned", "posted"],
         "sync": ["issend", "cancel", "blocking", "handoff", "parked", "testany"],
         "coll": ["icoll", "groups"], "exit": ["leftover"]}
SECTIONS = {name: globals()[name] for names in PARTS.values() for name in names}


def run_section(name):
    """Run one section; returns False when the group could not be resynchronised afterwards."""
    before, t = len(c.failures), time.monotonic()
    try:
        SECTIONS[name]()
    except Exception as err:
        tb = "".join(traceback.format_exception(err)[-6:])
        c.fail(f"section {name}", f"raised {type(err).__name__}: {err}\n{tb}")
    took = time.monotonic() - t
    verdict = "ok" if len(c.failures) == before else f"{len(c.failures) - before} FAILED"
    print(f"rank {me}: section {name} {verdict} in {took:.2f} s", flush=True)
    try:  # resynchronise: the next section starts together even after an error
        cl.barrier()
        return True
    except Exception as err:
        c.fail(f"section {name}", f"barrier after the section raised {type(err).__name__}: {err}")
        return False


def main():
    wanted = c.args or ["p2p", "sync", "coll"]
    names = [s for a in wanted for s in PARTS.get(a, [a])]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}; parts {PARTS}")
    for i, name in enumerate(names):
        if not run_section(name):
            rest = names[i + 1:]
            if rest:
                c.fail("skipped", f"sections {rest} not run: the group is unusable after section {name}")
            break
    if not any(f.startswith(("section ", "skipped")) for f in c.failures):
        c.finish()  # compares the digests of the same-on-every-rank results across ranks
    c._exit()  # after an exception the ranks' records differ: skip the cross-rank comparison


if __name__ == "__main__":
    main()
else:  # a batched job (_batch.py): each section is a check ("exit" leaves requests pending: its own job)
    sections({part: [SECTIONS[name] for name in names] for part, names in PARTS.items() if part != "exit"}, c)
