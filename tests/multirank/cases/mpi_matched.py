"""Matched probes (Mprobe / Improbe / mprobe / improbe, MPI.Message), checked on every rank.

usage: mpi_matched.py

Sections:
  sized       the program matched probes exist for: probe any source, size the buffer from the
              status, receive exactly that message (small, and 4 MiB still arriving when probed)
  threads     two threads each mprobe + Recv from any source: every message received once
  claimed     a claimed message is invisible to Probe and Recv; they see the next one, in order
  forms       Improbe polling, Irecv / irecv, Message.Probe class methods, Message(m) copies,
              MESSAGE_NULL / MESSAGE_NO_PROC, PROC_NULL, receiving twice is ERR_REQUEST,
              truncation

Each rank sends to `right` and receives from `left` (one rank: itself). Run against the real mpi4py
with COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py 4.1.2 + the MPICH 5.0.2 wheel).
"""
import threading
import time

import numpy as np

from _mpicase import MPI, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()
POLL_S = 10.0


def payload(src, tag, k):
    return np.arange(k, dtype=np.float64) * (src + 1) + tag


def sized():
    reqs = [comm.Isend(payload(me, 10, 5), right, 10), comm.Isend(payload(me, 11, 1 << 19), right, 11)]
    for tag, k in ((10, 5), (11, 1 << 19)):
        st = MPI.Status()
        m = comm.Mprobe(MPI.ANY_SOURCE, tag, st)
        c.equal((st.Get_source(), st.Get_tag()), (left, tag), f"sized: status of tag {tag}")
        buf = np.empty(st.Get_count(MPI.DOUBLE))
        st2 = MPI.Status()
        m.Recv([buf, MPI.DOUBLE], st2)
        c.equal(buf, payload(left, tag, k), f"sized: {k} doubles with tag {tag}")
        c.equal((st2.Get_source(), st2.Get_count(MPI.DOUBLE)), (left, k), f"sized: receive status of tag {tag}")
        c.ok(m == MPI.MESSAGE_NULL and not m, f"sized: the message of tag {tag} is MESSAGE_NULL once received")
    MPI.Request.Waitall(reqs)


def threads():
    k = 8
    reqs = [comm.isend((me, i), right, 20) for i in range(k)]
    got, lock = [], threading.Lock()

    def take(count):
        for _ in range(count):
            m = comm.mprobe(left, 20)
            obj = m.recv()
            with lock:
                got.append(obj)

    ts = [threading.Thread(target=take, args=(k // 2,)) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(POLL_S * 3)
    c.equal(sorted(got), [(left, i) for i in range(k)], "threads: every message once, none twice")
    MPI.Request.Waitall(reqs)


def claimed():
    reqs = [comm.Isend(payload(me, 30 + i, 3), right, 30) for i in range(3)]  # one tag, three messages
    st = MPI.Status()
    first = comm.Mprobe(left, 30, st)
    peek = MPI.Status()
    comm.Probe(left, 30, peek)
    buf = np.empty(3)
    comm.Recv(buf, left, 30)  # the second message: the first is claimed
    c.equal(buf, payload(left, 31, 3), "claimed: Recv gets the message after the claimed one")
    first.Recv(buf)
    c.equal(buf, payload(left, 30, 3), "claimed: the claimed message, received later")
    third = MPI.Message.probe(comm)  # the defaults: any source, any tag
    third.Recv(buf)
    c.equal(buf, payload(left, 32, 3), "claimed: a probe of any source and tag gets the last one")
    MPI.Request.Waitall(reqs)


def forms():
    # Improbe polls; nothing there yet is None
    c.ok(comm.Improbe(left, 99) is None, "forms: Improbe with nothing sent is None")
    r = comm.Isend(payload(me, 40, 4), right, 40)
    m, t0 = None, time.monotonic()
    while m is None and time.monotonic() - t0 < POLL_S:
        m = comm.Improbe(left, 40)
    c.ok(m is not None, "forms: Improbe finds the message")
    copy = MPI.Message(m)
    c.ok(copy == m and bool(copy), "forms: Message(m) is the same message")
    buf = np.empty(4)
    q = m.Irecv(buf)
    q.Wait()
    c.equal(buf, payload(left, 40, 4), "forms: Irecv of a matched message")
    c.ok(m == MPI.MESSAGE_NULL, "forms: Irecv leaves MESSAGE_NULL")
    err = c.raises(MPI.Exception, lambda: m.Recv(buf), "forms: receiving twice raises")
    if err is not None:
        c.equal(err.Get_error_class(), MPI.ERR_REQUEST, "forms: receiving twice is ERR_REQUEST")
    r.Wait()
    # class methods and object forms
    r = comm.isend({"from": me}, right, 41)
    m = MPI.Message.probe(comm, left, 41)
    c.equal(m.irecv().wait(), {"from": left}, "forms: Message.probe + irecv")
    r.wait()
    r = comm.isend([me] * 3, right, 42)
    m, t0 = None, time.monotonic()
    while m is None and time.monotonic() - t0 < POLL_S:
        m = MPI.Message.iprobe(comm, left, 42)
    st = MPI.Status()
    c.equal(m.recv(st), [left] * 3, "forms: Message.iprobe + recv")
    c.equal(st.Get_source(), left, "forms: recv status source")
    r.wait()
    # PROC_NULL
    st = MPI.Status()
    m = comm.Mprobe(MPI.PROC_NULL, 0, st)
    c.ok(m == MPI.MESSAGE_NO_PROC and bool(m), "forms: Mprobe(PROC_NULL) is MESSAGE_NO_PROC")
    c.equal(st.Get_source(), MPI.PROC_NULL, "forms: its status names PROC_NULL")
    m.Recv(buf, st)
    c.ok(m == MPI.MESSAGE_NULL and bool(MPI.MESSAGE_NO_PROC) and not MPI.MESSAGE_NULL,
         "forms: receiving MESSAGE_NO_PROC leaves MESSAGE_NULL, the constants unchanged")
    c.ok(comm.Improbe(MPI.PROC_NULL) == MPI.MESSAGE_NO_PROC, "forms: Improbe(PROC_NULL)")
    c.ok(MPI.Message() == MPI.MESSAGE_NULL, "forms: Message() is MESSAGE_NULL")
    # truncation: the message is consumed, the receive reports it
    r = comm.Isend(payload(me, 43, 6), right, 43)
    m = comm.Mprobe(left, 43)
    small = np.empty(2)
    err = c.raises(MPI.Exception, lambda: m.Recv(small), "forms: a short buffer raises")
    if err is not None:
        c.equal(err.Get_error_class(), MPI.ERR_TRUNCATE, "forms: ... ERR_TRUNCATE")
    r.Wait()
    c.ok(comm.Iprobe(left, 43) is False, "forms: the truncated message is gone")
    c.ok(comm.improbe() is None and MPI.Message.Iprobe(comm) is None, "forms: nothing left for the defaults")


for fn in (sized, threads, claimed, forms):
    c.run([fn])
    comm.Barrier()
c.finish()
