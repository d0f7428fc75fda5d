"""The step loop on a connection shared by every group's collectives, in-process over socketpairs.

Each message's header carries its payload length; another group's header stops a step before a
byte of its payload (even a reducing step, which otherwise reads payload with the header); the
row then reads that payload aside while its own send goes on (DRAINED); a message parked since a
step last looked makes it ask (BUSY); a parked message is read from memory (FD_MEM); a message in
flight holds its descriptor's direction, so another group's step there waits instead of reading
the middle of it.
"""
import socket
import time

import numpy as np
import pytest

from commlib import _plan
from commlib._dtypes import dtype_code, op_code
from commlib._plan import RES, X
from commlib._transport import _io
from commlib._wire import HEADER_NBYTES, collective_header, decode

F64, SUM = dtype_code(np.float64), op_code("sum")


def header(group, count, coll="all_reduce"):
    return collective_header(coll=coll, group=group, seq=1, dtype=F64, op=SUM, count=count)


_RINGS = []  # the steppers' scratch rings, alive for the session


def stepper(shared=True):
    ring = np.empty(1 << 12, np.uint8)
    _RINGS.append(ring)
    return _io.Stepper(np.zeros(4, np.int64), 1 << 10, -1, ring.ctypes.data, ring.nbytes, 0.0, 0.0, shared=shared)


def receive_plan(reduce):
    b = _plan.Builder("t", 1)
    b.step(src=0, recv=(RES, 0, 1), reduce=reduce, init=(X, 0, 1) if reduce else None)
    return b.plan()


def send_plan():
    b = _plan.Builder("t", 1)
    b.step(dst=0, send=(X, 0, 1))
    return b.plan()


def run(st, plan, x, res, hdr, sfd=-1, rfd=-1, at=0, resume=False, wait=2.0):
    rows = len(plan.rows)
    s, r = np.full(rows, sfd, np.int32), np.full(rows, rfd, np.int32)
    return _io.execute(st, plan.rows, plan.parts, _plan.slots(x=x.ctypes.data, res=res.ctypes.data),
                       _plan.even(x.size, 8), s, r, hdr, F64, SUM, time.monotonic() + wait, at, resume)


def message(group, payload):
    h = bytearray(header(group, payload.size))
    h[48:56] = payload.nbytes.to_bytes(8, "little")
    return bytes(h) + payload.tobytes()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    b.setblocking(False)  # the step loop's descriptors never block
    yield a, b
    a.close()
    b.close()


def test_each_message_header_carries_its_payload_length(pair):
    a, b = pair
    x = np.arange(5.0)
    hdr = header(7, x.size)
    rc, _ = run(stepper(), send_plan(), x, x, hdr, sfd=a.fileno())
    assert rc == _io.OK
    got = b.recv(1000)
    h = decode(got[:HEADER_NBYTES])
    assert h.nbytes == x.nbytes and got[:48] == hdr[:48]
    assert np.frombuffer(got[HEADER_NBYTES:], np.float64).tolist() == x.tolist()


@pytest.mark.parametrize("theirs", [2, 0], ids=["2 elements", "empty"])
@pytest.mark.parametrize("reduce", [False, True])
def test_another_groups_message_is_read_aside_then_ours(pair, reduce, theirs):
    """An empty message of another group (a barrier's: its header alone) is DRAINED too, not taken
    for the end of the row's own receive."""
    a, b = pair
    ours, theirs = np.arange(8.0), np.full(theirs, 9.0)
    a.sendall(message(5, theirs) + message(7, ours))
    st = stepper()
    gen = _io.park_gen()
    st.set_clean(gen, b.fileno(), gen)  # nothing parked for this step's group so far
    x, res = np.ones(8), np.zeros(8)
    plan = receive_plan(reduce)
    rc, at = run(st, plan, x, res, header(7, 8), rfd=b.fileno())
    assert rc == _io.MISMATCH and int(st.state[1]) == HEADER_NBYTES  # not a byte of its payload
    assert decode(bytes(st.rhdr)).group == 5 and _io.claimed_by(b.fileno(), 0) == st.token
    aside = np.zeros(theirs.nbytes, np.uint8)
    st.drain_into(aside)
    rc, at = run(st, plan, x, res, header(7, 8), rfd=b.fileno(), at=at, resume=True)
    assert rc == _io.DRAINED and aside.view(np.float64).tolist() == theirs.tolist()
    st.drain_into(None)
    st.state[1:] = 0
    _io.bump_park_gen()
    st.release(send=False)
    assert _io.claimed_by(b.fileno(), 0) == 0
    rc, at = run(st, plan, x, res, header(7, 8), rfd=b.fileno(), at=at, resume=True)
    assert rc == _io.BUSY  # a message was parked since this step last looked
    gen = _io.park_gen()
    st.set_clean(gen, b.fileno(), gen)
    rc, at = run(st, plan, x, res, header(7, 8), rfd=b.fileno(), at=at, resume=True)
    assert rc == _io.OK and res.tolist() == (ours + 1 if reduce else ours).tolist()
    assert _io.claimed_by(b.fileno(), 0) == 0


@pytest.mark.parametrize("reduce", [False, True])
def test_a_parked_message_is_read_from_memory(reduce):
    st = stepper()
    x, res = np.full(4, 2.0), np.zeros(4)
    plan = receive_plan(reduce)
    parked = np.frombuffer(message(7, np.arange(4.0)), np.uint8).copy()
    fd = st.take_parked(parked)
    assert fd == _io.FD_MEM
    rc, _ = run(st, plan, x, res, header(7, 4), rfd=fd)
    assert rc == _io.OK and res.tolist() == (np.arange(4.0) + 2 if reduce else np.arange(4.0)).tolist()
    st.take_parked(np.frombuffer(message(7, np.arange(3.0)), np.uint8).copy())
    rc, _ = run(st, receive_plan(reduce), x, res, header(7, 4), rfd=_io.FD_MEM)
    assert rc == _io.MISMATCH  # a parked message is checked like any other
    st.drop_parked()


def test_a_message_in_flight_holds_its_descriptor(pair):
    a, b = pair
    whole = message(7, np.arange(8.0))
    a.sendall(whole[:HEADER_NBYTES + 20])
    first, second = stepper(), stepper()
    for st in (first, second):
        gen = _io.park_gen()
        st.set_clean(gen, b.fileno(), gen)
    x, res = np.zeros(8), np.zeros(8)
    rc, _ = run(first, receive_plan(False), x, res, header(7, 8), rfd=b.fileno(), wait=0.05)
    assert rc == _io.TIMEOUT and int(first.state[1]) == HEADER_NBYTES + 20
    assert _io.claimed_by(b.fileno(), 0) == first.token
    other = np.zeros(8)
    rc, _ = run(second, receive_plan(False), x, other, header(9, 8), rfd=b.fileno(), wait=0.05)
    assert rc == _io.TIMEOUT and int(second.state[1]) == 0  # waited, read nothing
    a.sendall(whole[HEADER_NBYTES + 20:])
    rc, _ = run(first, receive_plan(False), x, res, header(7, 8), rfd=b.fileno(), resume=True)
    assert rc == _io.OK and res.tolist() == list(range(8)) and _io.claimed_by(b.fileno(), 0) == 0


def test_a_step_that_has_not_begun_holds_nothing(pair):
    a, b = pair
    st = stepper()
    gen = _io.park_gen()
    st.set_clean(gen, b.fileno(), gen)
    x, res = np.zeros(2), np.zeros(2)
    rc, _ = run(st, receive_plan(False), x, res, header(7, 2), rfd=b.fileno(), wait=0.02)
    assert rc == _io.TIMEOUT and _io.claimed_by(b.fileno(), 0) == 0
    assert st.held_fds() == (-1, -1)


def test_point_to_point_steppers_claim_nothing():
    assert stepper(shared=False).token == 0 and stepper().token > 0
