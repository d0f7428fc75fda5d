"""mpi4py-compatible point-to-point and requests (commlib.MPI), checked on every rank.

usage: mpi_p2p.py SEED PART [PART ...]      (a section name runs that section alone)

Parts (one launch each in test_mpi_p2p.py):
  bufspec     every message-argument form of Send/Recv, in-place receives, zero-length messages,
              Sendrecv / Sendrecv_replace, messages to self on COMM_WORLD
  errors      ERR_TRUNCATE, ERR_RANK, BufferError (non-contiguous / read-only), continuing after
              an error; PROC_NULL in every p2p call; Status objects
  objects     send/recv family, standard mode never waits (1 MiB, to self), isend/irecv,
              ssend/issend, sendrecv, wildcards, non-overtaking, shared tag space, probes
  requests    Isend/Irecv, Wait/Test/Waitall/Waitany/Testany/Testall/Waitsome/Testsome,
              Request(), Get_status, Cancel, Free; Ssend order; COMM_SELF; Dup isolation
  persistent  (tier B) Send_init/Recv_init, Start/Startall, restart, Free

Each rank sends to `right` and receives from `left` (with one rank: itself). A
message's payload is a pure function of (seed, sender, tag), so the receiver
rebuilds the expected data with numpy. Every section uses its own tags; a
section that raises is recorded with its traceback, then all ranks meet at a
barrier and go on. Polling loops are bounded by POLL_S; blocking calls are
bounded by COMMLIB_TIMEOUT under commrun.

Run against the real mpi4py (reference) with COMMLIB_TEST_MPI=mpi4py under mpirun.
"""
import array
import os
import pickle
import signal
import sys
import threading
import time
import traceback

import numpy as np

from _batch import sections
from _mpicase import MPI, USING_MPI4PY, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 0
P = MPI.PROC_NULL
c = Checker()
POLL_S = 5.0
# Standard-mode sends must never wait for the receiver (spec: unbounded eager buffering), so
# commlib.MPI gets 1 MiB messages in the "everybody sends first" patterns. Open MPI's ob1 uses a
# rendezvous protocol above its eager limit (64 KiB over TCP, under 1 KiB for a send to self),
# where a blocking send waits for the matching receive, as MPI permits; under the mpi4py
# reference run the payload stays below both limits.
BIG = 256 if USING_MPI4PY else 1 << 20
ERRS = {getattr(MPI, k): k for k in ("SUCCESS", "ERR_BUFFER", "ERR_COUNT", "ERR_TYPE", "ERR_TAG", "ERR_COMM",
                                      "ERR_RANK", "ERR_ROOT", "ERR_OP", "ERR_ARG", "ERR_TRUNCATE", "ERR_OTHER")
        if hasattr(MPI, k)}


# ------------------------------------------------------------------ helpers
def vals(src, tag, k, dt="d"):
    """Payload of the message `src` sends with `tag`: k small integers as dtype dt."""
    rng = np.random.default_rng([SEED & 0xFFFFFFFF, src + 11, tag])
    return rng.integers(0, 250, k).astype(dt)


def obj_for(src, tag):
    """An object payload of `src` for `tag`: nested containers, a string and an ndarray."""
    return {"src": src, "tag": tag, "list": list(range(src, src + tag % 7)), "tuple": (src, "x" * (tag % 5), 2.5),
            "arr": vals(src, tag, 4), "none": None}


def same(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and bool(np.array_equal(a, b)))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def short(x, limit=160):
    s = repr(x)
    return s if len(s) <= limit else s[:limit] + "..."


def eq(got, want, label):
    return c.ok(same(got, want), label, f"got {short(got)}, want {short(want)}")


def arr(got, want, label):
    """got (an ndarray or buffer) holds exactly want's values."""
    g = np.asarray(got)
    return c.ok(g.shape == np.shape(want) and bool(np.array_equal(g, want)), label,
                f"got {short(g.tolist())}, want {short(np.asarray(want).tolist())}")


def ename(cls):
    return f"{ERRS.get(cls, '?')}({cls!r})"


def raises(fn, exc, label, err_class=None):
    """fn() must raise exc (with MPI error class err_class when given) on this rank."""
    try:
        fn()
    except exc as e:
        if err_class is not None:
            got = e.Get_error_class() if hasattr(e, "Get_error_class") else None
            c.ok(got == err_class, label, f"error class {ename(got)}, want {ename(err_class)}: {e}")
        else:
            c.ok(True, label)
        return e
    except Exception as e:  # noqa: BLE001 - any other exception is the failure being reported
        c.ok(False, label, f"raised {type(e).__name__}: {e} instead of {exc.__name__}")
        return e
    c.ok(False, label, f"no {exc.__name__} raised")
    return None


def status_is(st, label, source=None, tag=None, count=None, datatype=None):
    if source is not None:
        c.ok(st.Get_source() == source and st.source == source, f"{label} status source",
             f"Get_source()={st.Get_source()!r} .source={st.source!r}, want {source!r}")
    if tag is not None:
        c.ok(st.Get_tag() == tag and st.tag == tag, f"{label} status tag",
             f"Get_tag()={st.Get_tag()!r} .tag={st.tag!r}, want {tag!r}")
    if count is not None:
        got = st.Get_count() if datatype is None else st.Get_count(datatype)
        c.ok(got == count, f"{label} status Get_count", f"{got!r}, want {count!r}")
    c.ok(st.Get_error() == MPI.SUCCESS and st.error == MPI.SUCCESS, f"{label} status error",
         f"{st.Get_error()!r}")


def complete(req, label, status=None, secs=POLL_S):
    """Test req until it completes (bounded): True, or a failure and False."""
    end = time.monotonic() + secs
    while True:
        if req.Test(status):
            return True
        if time.monotonic() > end:
            c.ok(False, label, f"request still incomplete after {secs} s")
            return False
        time.sleep(0.001)


def inactive(req, label):
    c.ok(req == MPI.REQUEST_NULL and not req, f"{label} request inactive",
         f"== REQUEST_NULL: {req == MPI.REQUEST_NULL}, bool: {bool(req)}")


# ------------------------------------------------------------------ bufspec
def bare_buffers():
    T = 100
    st = MPI.Status()
    x = vals(me, T, 12).reshape(3, 4)
    y = np.full((3, 4), -1.0)
    comm.Send(x, right, T)
    comm.Recv(y, left, T, st)
    arr(y, vals(left, T, 12).reshape(3, 4), "bare C-order float64 2-D")
    status_is(st, "bare C-order", left, T, 12, MPI.DOUBLE)

    xf = np.asfortranarray(vals(me, T + 1, 12, "i").reshape(3, 4))
    yf = np.zeros((3, 4), "i", order="F")
    comm.Send(xf, right, T + 1)
    comm.Recv(yf, left, T + 1)
    arr(yf, vals(left, T + 1, 12, "i").reshape(3, 4), "bare Fortran-order int32 into Fortran-order")
    c.ok(yf.flags.f_contiguous and not yf.flags.c_contiguous, "Fortran receive buffer keeps its layout")
    comm.Send(xf, right, T + 2)  # memory order travels: a Fortran array's bytes are column-major
    z = np.zeros(12, "i")
    comm.Recv(z, left, T + 2)
    arr(z, vals(left, T + 1, 12, "i").reshape(3, 4).ravel(order="F"), "bare Fortran-order into flat C buffer")

    x0 = np.array(me * 10 + 7, "i")
    y0 = np.array(-1, "i")
    comm.Send(x0, right, T + 3)
    comm.Recv(y0, left, T + 3, st)
    c.ok(y0.shape == () and int(y0) == left * 10 + 7, "0-d int32 array", f"{y0!r}")
    status_is(st, "0-d", left, T + 3, 1, MPI.INT)

    aa = array.array("d", vals(me, T + 4, 5).tolist())
    ab = array.array("d", [0.0] * 5)
    comm.Send(aa, right, T + 4)
    comm.Recv(ab, left, T + 4)
    eq(list(ab), vals(left, T + 4, 5).tolist(), "array.array('d')")
    ai = array.array("i", vals(me, T + 5, 3, "i").tolist())
    aj = np.zeros(3, "i")
    comm.Send(ai, right, T + 5)
    comm.Recv(aj, left, T + 5)
    arr(aj, vals(left, T + 5, 3, "i"), "array.array('i') into int32 ndarray")

    ba = bytearray(vals(me, T + 6, 9, "B").tobytes())
    rb = bytearray(9)
    comm.Send(ba, right, T + 6)
    comm.Recv(rb, left, T + 6, st)
    eq(bytes(rb), vals(left, T + 6, 9, "B").tobytes(), "bytearray")
    status_is(st, "bytearray", left, T + 6, 9)

    comm.Send(bytes(vals(me, T + 7, 7, "B")), right, T + 7)
    rb2 = bytearray(7)
    comm.Recv(memoryview(rb2), left, T + 7)
    eq(bytes(rb2), vals(left, T + 7, 7, "B").tobytes(), "bytes sent, received into memoryview(bytearray)")

    # rank-to-self on COMM_WORLD (with any n)
    comm.Send(vals(me, T + 8, 4), me, T + 8)
    ys = np.zeros(4)
    comm.Recv(ys, me, T + 8, st)
    arr(ys, vals(me, T + 8, 4), "Send/Recv to self on COMM_WORLD")
    status_is(st, "self", me, T + 8, 32)


def datatype_forms():
    T = 200
    st = MPI.Status()
    x = vals(me, T, 6, "i")
    y = np.zeros(6, "i")
    comm.Send([x, MPI.INT], right, T)
    comm.Recv([y, MPI.INT], left, T)
    arr(y, vals(left, T, 6, "i"), "[buf, MPI.INT]")

    xd = vals(me, T + 1, 4)
    yd = np.zeros(4)
    comm.Send((xd, "d"), right, T + 1)
    comm.Recv((yd, "d"), left, T + 1)
    arr(yd, vals(left, T + 1, 4), "(buf, 'd') tuple with typecode")

    # the datatype wins over the buffer's own format: bytes reinterpreted
    comm.Send([vals(me, T + 2, 5, "i").tobytes(), "i"], right, T + 2)
    yi = np.zeros(5, "i")
    comm.Recv(yi, left, T + 2, st)
    arr(yi, vals(left, T + 2, 5, "i"), "[bytes, 'i'] sent, int32 received")
    status_is(st, "[bytes, 'i']", left, T + 2, 5, MPI.INT)

    comm.Send([xd, MPI.DOUBLE], right, T + 3)
    rb = bytearray(32)
    comm.Recv([rb, "d"], left, T + 3, st)
    arr(np.frombuffer(rb, "d"), vals(left, T + 1, 4), "[bytearray, 'd'] receive")
    status_is(st, "[bytearray, 'd']", left, T + 3, 4, MPI.DOUBLE)
    c.equal(st.Get_count(), 32, "[bytearray, 'd'] Get_count() in bytes")

    comm.Send([x, "B"], right, T + 4)  # 6 int32 as 24 unsigned chars
    u8 = np.zeros(24, "B")
    comm.Recv([u8, "B"], left, T + 4, st)
    arr(u8, vals(left, T, 6, "i").view("B"), "[int32 array, 'B'] as bytes")
    status_is(st, "[int32, 'B']", left, T + 4, 24, MPI.UNSIGNED_CHAR)

    comm.Send([xd, "B"], right, T + 5)  # 4 doubles as 32 bytes into an int32 buffer seen as bytes
    i8 = np.zeros(8, "i")
    comm.Recv([i8, "B"], left, T + 5)
    arr(i8.view("d"), vals(left, T + 1, 4), "[float64, 'B'] into [int32 buf, 'B']")

    xc = vals(me, T + 6, 8)
    yc = np.full(8, -1.0)
    comm.Send([xc, 3], right, T + 6)
    comm.Recv([yc, 5], left, T + 6, st)
    ex = vals(left, T + 6, 8)
    arr(yc, np.r_[ex[:3], [-1.0] * 5], "[buf, count]: prefix sent, prefix received")
    status_is(st, "[buf, count]", left, T + 6, 3, MPI.DOUBLE)

    yc = np.full(8, -1.0)
    comm.Send([xc, 4, MPI.DOUBLE], right, T + 7)
    comm.Recv([yc, 4, "d"], left, T + 7)
    arr(yc, np.r_[ex[:4], [-1.0] * 4], "[buf, count, datatype]")

    yc = np.full(8, -1.0)
    comm.Send([xc, (3, 2), MPI.DOUBLE], right, T + 8)
    comm.Recv([yc, (3, 4), MPI.DOUBLE], left, T + 8, st)
    arr(yc, np.r_[[-1.0] * 4, ex[2:5], [-1.0]], "[buf, (count, displ), datatype]")
    status_is(st, "[buf, (count, displ), datatype]", left, T + 8, 3, MPI.DOUBLE)

    yc = np.full(8, -1.0)
    comm.Send([xc, 2, 5, "d"], right, T + 9)
    comm.Recv([yc, 2, 1, MPI.DOUBLE], left, T + 9)
    arr(yc, np.r_[[-1.0], ex[5:7], [-1.0] * 5], "[buf, count, displ, datatype]")

    # count and displacement are in elements of the datatype, not of the buffer
    xi = vals(me, T + 10, 8, "i")
    yi = np.full(8, -1, "i")
    comm.Send([xi, (2, 1), "d"], right, T + 10)  # bytes 8..24 = int32 elements 2..5
    comm.Recv([yi, (2, 2), "d"], left, T + 10)  # into bytes 16..32 = int32 elements 4..7
    arr(yi, np.r_[[-1] * 4, vals(left, T + 10, 8, "i")[2:6]].astype("i"), "count/displ in datatype units")

    # the list forms Send/Recv take in one compiled call ([array, datatype], [array, count, datatype] of
    # the datatype's own base type), beside what must still go the long way
    m2 = vals(me, T + 11, 6).reshape(2, 3)
    y2 = np.full((3, 2), -1.0)
    comm.Send([m2, MPI.DOUBLE], right, T + 11)
    comm.Recv([y2, MPI.DOUBLE], left, T + 11, st)
    arr(y2.reshape(-1), vals(left, T + 11, 6), "[2-D array, MPI.DOUBLE] into another shape")
    status_is(st, "[2-D array, MPI.DOUBLE]", left, T + 11, 6, MPI.DOUBLE)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        y8 = np.full(8, -1.0)
        comm.Send([vals(me, T + 12, 8), 3, pair], right, T + 12)  # 3 pairs of an 8-element buffer
        comm.Recv([y8, 4, pair], left, T + 12, st)  # room for 4: the 3 that came
        arr(y8, np.r_[vals(left, T + 12, 8)[:6], [-1.0] * 2], "[buf, count, contiguous pair type]")
        status_is(st, "[buf, count, pair]", left, T + 12, 3, pair)
    finally:
        pair.Free()
    y5 = np.full(5, -1.0)
    comm.Send([vals(me, T + 13, 3), MPI.DOUBLE], right, T + 13)
    comm.Recv([y5, MPI.DOUBLE], left, T + 13, st)  # a larger buffer than the message
    arr(y5, np.r_[vals(left, T + 13, 3), [-1.0] * 2], "[buf, MPI.DOUBLE] receiving fewer elements")
    status_is(st, "[larger buf, MPI.DOUBLE]", left, T + 13, 3, MPI.DOUBLE)
    f4 = vals(me, T + 14, 4).astype("f")
    y4 = np.zeros(2)
    comm.Send([f4, MPI.DOUBLE], right, T + 14)  # float32 memory sent as 2 doubles (reinterpreted)
    comm.Recv([y4, 2, MPI.DOUBLE], left, T + 14)
    arr(y4, vals(left, T + 14, 4).astype("f").view("d"), "[float32 array, MPI.DOUBLE] reinterpreted")

    # bytearray and mmap buffers (mpi4py's OSU benchmarks allocate with mmap): taken by the one call too
    import mmap
    sm, rm = mmap.mmap(-1, 64), mmap.mmap(-1, 64)
    sm[:64] = vals(me, T + 15, 8).tobytes()
    comm.Send([sm, 24, MPI.BYTE], right, T + 15)  # the first 3 doubles' bytes
    comm.Recv([rm, 40, MPI.BYTE], left, T + 15, st)  # room for 40
    eq(bytes(rm[:24]), vals(left, T + 15, 8).tobytes()[:24], "[mmap, count, MPI.BYTE]")
    eq(bytes(rm[24:40]), bytes(16), "[mmap, count, MPI.BYTE]: nothing past the message")
    status_is(st, "[mmap, count, MPI.BYTE]", left, T + 15, 24, MPI.BYTE)
    ba = bytearray(vals(me, T + 16, 4).tobytes())
    rb4 = bytearray(32)
    comm.Send([ba, MPI.DOUBLE], right, T + 16)
    comm.Recv([rb4, MPI.DOUBLE], left, MPI.ANY_TAG, st)
    arr(np.frombuffer(rb4, "d"), vals(left, T + 16, 4), "[bytearray, MPI.DOUBLE], received with ANY_TAG")
    status_is(st, "[bytearray, MPI.DOUBLE] ANY_TAG", left, T + 16, 4, MPI.DOUBLE)
    # more than the connection holds, to a rank busy sending itself (even ranks send first, odd ones
    # receive first: no cycle of waits, so also safe MPI): sends that stall midway go on from the
    # engine's queue, which writes the message's bytes only (the buffer is longer)
    big = mmap.mmap(-1, 65536)
    big[:] = bytes(range(256)) * 256
    back = mmap.mmap(-1, 65536)
    ok = True

    def receive_all():
        good = True
        for k in range(40):
            comm.Recv([back, 60000 - k, MPI.BYTE], left, T + 17, st)
            good = good and st.Get_count(MPI.BYTE) == 60000 - k and back[:60000 - k] == big[:60000 - k]
        return good

    if n > 1:
        if me % 2:
            ok = receive_all()
        for k in range(40):
            comm.Send([big, 60000 - k, MPI.BYTE], right, T + 17)
        if me % 2 == 0:
            ok = receive_all()
    c.ok(ok, "40 blocking sends of [mmap, count, MPI.BYTE] to a busy rank: every message whole, of its own length")
    for m in (sm, rm, big, back):
        m.close()  # (nothing holds their buffers after the calls)


def in_place():
    T = 300
    a = np.full(8, -5, "i")
    comm.Send(vals(me, T, 3, "i"), right, T)
    comm.Recv(a[2:5], left, T)
    arr(a, np.r_[[-5] * 2, vals(left, T, 3, "i"), [-5] * 3].astype("i"), "Recv into slice view a[2:5]")

    f = np.full((4, 3), -1.0, order="F")
    comm.Send(vals(me, T + 1, 4), right, T + 1)
    comm.Recv(f[:, 1], left, T + 1)
    want = np.full((4, 3), -1.0)
    want[:, 1] = vals(left, T + 1, 4)
    arr(f, want, "Recv into Fortran column view f[:, 1]")

    g = np.full((4, 3), -1.0)
    comm.Send(vals(me, T + 2, 6).reshape(2, 3), right, T + 2)
    comm.Recv(g[1:3], left, T + 2)
    want = np.full((4, 3), -1.0)
    want[1:3] = vals(left, T + 2, 6).reshape(2, 3)
    arr(g, want, "Recv into row block g[1:3]")

    st = MPI.Status()
    h = np.full(10, -1.0)
    comm.Send(vals(me, T + 3, 4), right, T + 3)
    comm.Recv(h, left, T + 3, st)
    arr(h, np.r_[vals(left, T + 3, 4), [-1.0] * 6], "shorter message fills a prefix, rest untouched")
    status_is(st, "shorter message", left, T + 3, 4, MPI.DOUBLE)

    b = np.full(6, -2.0)
    r = comm.Irecv(b[1:4], left, T + 4)
    comm.Send(vals(me, T + 4, 3), right, T + 4)
    r.Wait()
    arr(b, np.r_[[-2.0], vals(left, T + 4, 3), [-2.0] * 2], "Irecv into slice view, data by Wait")

    z = np.array(-1.0)
    comm.Send(buf=np.array(float(me)), dest=right, tag=T + 5)
    comm.Recv(buf=z, source=left, tag=T + 5, status=st)
    c.ok(float(z) == float(left), "Send/Recv by keyword into 0-d array", f"{z!r}")


def zero_length():
    T = 400
    st = MPI.Status()
    y = np.full(3, 9, "i")
    comm.Send([None, MPI.INT], right, T)
    comm.Recv([y, MPI.INT], left, T, st)
    arr(y, np.full(3, 9, "i"), "[None, INT] message leaves the receive buffer untouched")
    status_is(st, "[None, INT]", left, T, 0, MPI.INT)

    comm.Send([None, 0, MPI.INT], right, T + 1)
    comm.Recv([None, 0, MPI.INT], left, T + 1, st)
    status_is(st, "[None, 0, INT]", left, T + 1, 0)

    comm.Send([None, "d"], right, T + 2)
    comm.Recv([None, "d"], left, T + 2, st)
    status_is(st, "[None, 'd']", left, T + 2, 0, MPI.DOUBLE)

    comm.Send([None, (0, None), MPI.INT], right, T + 3)
    comm.Recv([None, (0, None), MPI.INT], left, T + 3, st)
    status_is(st, "[None, (0, None), INT]", left, T + 3, 0)

    comm.Send(np.empty(0), right, T + 4)
    e = np.empty(0)
    comm.Recv(e, left, T + 4, st)
    status_is(st, "empty ndarray", left, T + 4, 0)

    comm.Send(b"", right, T + 5)
    comm.Recv(bytearray(), left, T + 5, st)
    status_is(st, "empty bytes", left, T + 5, 0)

    r = comm.Irecv([None, MPI.INT], left, T + 6)
    s = comm.Isend([None, MPI.INT], right, T + 6)
    sts = [MPI.Status(), MPI.Status()]
    MPI.Request.Waitall([r, s], sts)
    status_is(sts[0], "zero-length Irecv", left, T + 6, 0)

    got = comm.sendrecv(None, right, T + 7, None, left, T + 7)
    c.ok(got is None, "sendrecv of the object None", short(got))


def sendrecv():
    T = 500
    st = MPI.Status()
    y = np.zeros(5)
    comm.Sendrecv(vals(me, T, 5), right, T, y, left, T, st)
    arr(y, vals(left, T, 5), "Sendrecv positional")
    status_is(st, "Sendrecv", left, T, 5, MPI.DOUBLE)

    y = np.zeros(5)
    comm.Sendrecv(sendbuf=vals(me, T + 1, 5), dest=right, sendtag=T + 1, recvbuf=y, source=left,
                  recvtag=T + 1, status=st)
    arr(y, vals(left, T + 1, 5), "Sendrecv keywords")
    status_is(st, "Sendrecv keywords", left, T + 1)

    y = np.full(6, -1.0)
    comm.Sendrecv([vals(me, T + 2, 5), 3, MPI.DOUBLE], right, T + 2, [y, (3, 2), "d"], left, T + 2)
    arr(y, np.r_[[-1.0] * 2, vals(left, T + 2, 5)[:3], [-1.0]], "Sendrecv with counted message forms")

    y = np.full(5, -1.0)
    comm.Sendrecv(vals(me, T + 3, 2), right, T + 3, y[1:4], MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    arr(y, np.r_[[-1.0], vals(left, T + 3, 2), [-1.0] * 2], "Sendrecv shorter into slice view, wildcards")
    status_is(st, "Sendrecv wildcards", left, T + 3, 2, MPI.DOUBLE)

    buf = vals(me, T + 4, 6)
    keep = buf
    comm.Sendrecv_replace(buf, right, T + 4, left, T + 4, st)
    c.ok(buf is keep, "Sendrecv_replace keeps the array object")
    arr(buf, vals(left, T + 4, 6), "Sendrecv_replace")
    status_is(st, "Sendrecv_replace", left, T + 4, 6, MPI.DOUBLE)

    buf = vals(me, T + 5, 4, "i")
    comm.Sendrecv_replace([buf, MPI.INT], dest=right, sendtag=T + 5, source=left, recvtag=T + 5, status=st)
    arr(buf, vals(left, T + 5, 4, "i"), "Sendrecv_replace keywords [buf, INT]")

    # both directions at once (n == 2: the same peer twice, distinct tags)
    a, b = np.zeros(3), np.zeros(3)
    comm.Sendrecv(vals(me, T + 6, 3), right, T + 6, a, left, T + 6)
    comm.Sendrecv(vals(me, T + 7, 3), left, T + 7, b, right, T + 7)
    arr(a, vals(left, T + 6, 3), "Sendrecv shift right")
    arr(b, vals(right, T + 7, 3), "Sendrecv shift left")


# ------------------------------------------------------------------ errors
def truncate():
    T = 600
    # (a) the message has already arrived when the receive is posted
    comm.Send(vals(me, T, 5), right, T)
    comm.Probe(left, T)
    e = raises(lambda: comm.Recv(np.zeros(3), left, T), MPI.Exception,
               "Recv of an arrived longer message: ERR_TRUNCATE", MPI.ERR_TRUNCATE)
    if e is not None:
        c.ok(isinstance(e, RuntimeError), "MPI.Exception is a RuntimeError", type(e).__mro__)
        c.ok(isinstance(e.Get_error_code(), int) and isinstance(e.Get_error_string(), str),
             "MPI.Exception Get_error_code()/Get_error_string()")

    comm.Send(vals(me, T + 1, 5), right, T + 1)
    comm.Probe(left, T + 1)
    raises(lambda: comm.Recv([np.zeros(8), 4], left, T + 1), MPI.Exception,
           "Recv [buf, 4] of 5 arrived elements: ERR_TRUNCATE (count, not buffer size)", MPI.ERR_TRUNCATE)

    comm.Send(vals(me, T + 2, 5), right, T + 2)
    comm.Probe(left, T + 2)
    try:
        r = comm.Irecv(np.zeros(2), left, T + 2)
    except Exception as e:  # noqa: BLE001 - the reference reports it at completion
        c.ok(False, "Irecv of an arrived longer message returns a request (the error belongs to Wait)",
             f"Irecv raised {type(e).__name__}: {e}")
    else:
        raises(lambda: r.Wait(), MPI.Exception, "Irecv of an arrived longer message: Wait raises ERR_TRUNCATE",
               MPI.ERR_TRUNCATE)

    # (b) the receive is posted before the message is sent
    r = comm.Irecv(np.zeros(2), left, T + 3)
    comm.Barrier()
    comm.Send(vals(me, T + 3, 5), right, T + 3)
    if USING_MPI4PY and n == 1:
        # Open MPI 4.1 (ob1, self BTL) completes a pre-posted receive of a longer message sent to
        # self without an error; the spec requires ERR_TRUNCATE, which commlib.MPI is held to.
        r.Wait()
    else:
        raises(lambda: r.Wait(), MPI.Exception, "Irecv posted before a longer message: Wait raises ERR_TRUNCATE",
               MPI.ERR_TRUNCATE)
    if n >= 2 and me < 2:  # a blocking Recv waiting when the longer message comes in
        if me == 0:
            time.sleep(0.2)  # a late sender, what is tested: rank 1 is already blocked in Recv when it comes
            comm.Send(vals(me, T + 4, 5), 1, T + 4)
        else:
            raises(lambda: comm.Recv(np.zeros(3), 0, T + 4), MPI.Exception,
                   "blocking Recv posted before a longer message: ERR_TRUNCATE", MPI.ERR_TRUNCATE)

    # the program goes on: further messages on the same peers
    y = np.zeros(5)
    comm.Send(vals(me, T + 5, 5), right, T + 5)
    comm.Recv(y, left, T + 5)
    arr(y, vals(left, T + 5, 5), "Send/Recv after ERR_TRUNCATE")
    eq(comm.sendrecv(obj_for(me, T + 6), right, T + 6, None, left, T + 6), obj_for(left, T + 6),
       "sendrecv after ERR_TRUNCATE")


def bad_rank():
    T = 700
    x = vals(me, T, 3)
    y = np.zeros(3)
    for bad in (n, -7, n + 5):
        raises(lambda: comm.Send(x, bad, T), MPI.Exception, f"Send dest={bad}", MPI.ERR_RANK)
    raises(lambda: comm.send("x", n, T), MPI.Exception, "send dest=size", MPI.ERR_RANK)
    raises(lambda: comm.Isend(x, n, T), MPI.Exception, "Isend dest=size", MPI.ERR_RANK)
    raises(lambda: comm.isend("x", -7, T), MPI.Exception, "isend dest=-7", MPI.ERR_RANK)
    raises(lambda: comm.Ssend(x, n, T), MPI.Exception, "Ssend dest=size", MPI.ERR_RANK)
    raises(lambda: comm.Recv(y, n, T), MPI.Exception, "Recv source=size", MPI.ERR_RANK)
    raises(lambda: comm.recv(None, -7, T), MPI.Exception, "recv source=-7", MPI.ERR_RANK)
    raises(lambda: comm.Irecv(y, n + 1, T), MPI.Exception, "Irecv source=size+1", MPI.ERR_RANK)
    raises(lambda: comm.Sendrecv(x, n, T, y, left, T), MPI.Exception, "Sendrecv dest=size", MPI.ERR_RANK)
    raises(lambda: comm.Probe(n, T), MPI.Exception, "Probe source=size", MPI.ERR_RANK)
    raises(lambda: comm.Iprobe(-7, T), MPI.Exception, "Iprobe source=-7", MPI.ERR_RANK)
    comm.Send(x, right, T)
    comm.Recv(y, left, T)
    arr(y, vals(left, T, 3), "Send/Recv after ERR_RANK errors")


def buffer_errors():
    T = 800
    a = np.zeros(10)
    raises(lambda: comm.Recv(a[::2], left, T), BufferError, "Recv into non-contiguous a[::2]")
    raises(lambda: comm.Irecv(a[::2], left, T), BufferError, "Irecv into non-contiguous a[::2]")
    raises(lambda: comm.Recv(np.zeros((4, 3))[:, 1], left, T), BufferError, "Recv into C-array column view")
    raises(lambda: comm.Send(a[::2], right, T), BufferError, "Send of non-contiguous a[::2]")
    raises(lambda: comm.Recv(bytes(16), left, T), BufferError, "Recv into bytes (read-only)")
    ro = np.zeros(4)
    ro.flags.writeable = False
    raises(lambda: comm.Recv(ro, left, T), BufferError, "Recv into read-only ndarray")
    raises(lambda: comm.Recv([ro, MPI.DOUBLE], left, T), BufferError, "Recv into [read-only ndarray, DOUBLE]")
    raises(lambda: comm.Irecv(bytes(8), left, T), BufferError, "Irecv into bytes")
    c.equal(a.tolist(), [0.0] * 10, "buffer untouched by the failed receives")
    # a read-only buffer is fine to send; the tag T is still free (nothing was posted)
    ro2 = vals(me, T, 4)
    ro2.flags.writeable = False
    comm.Send(ro2, right, T)
    y = np.zeros(4)
    comm.Recv(y, left, T)
    arr(y, vals(left, T, 4), "Send of a read-only buffer, after BufferErrors")


def proc_null():
    T = 900
    x = vals(me, T, 4)
    c.ok(comm.Send(x, P, T) is None, "Send to PROC_NULL")
    c.ok(comm.send(obj_for(me, T), P, T) is None, "send to PROC_NULL")
    c.ok(comm.Ssend(x, P, T) is None, "Ssend to PROC_NULL")
    c.ok(comm.ssend("s", dest=P, tag=T) is None, "ssend to PROC_NULL")
    r = comm.Isend(x, P, T)
    c.ok(r.Test() is True, "Isend to PROC_NULL completes at once")
    inactive(r, "Isend PROC_NULL")
    c.ok(comm.isend("o", P, T).wait() is None, "isend to PROC_NULL, wait() -> None")
    r = comm.Issend(x, P, T)
    c.ok(r.Test() is True, "Issend to PROC_NULL completes at once")
    eq(comm.issend("o", P, T).test(), (True, None), "issend to PROC_NULL test()")

    def null_status(st, label):
        status_is(st, label, P, MPI.ANY_TAG, 0)
        c.equal(st.Get_count(MPI.DOUBLE), 0, f"{label} Get_count(DOUBLE)")

    y = np.full(4, 3.0)
    st = MPI.Status()
    st.source, st.tag = 1, 5
    c.ok(comm.Recv(y, P, T, st) is None, "Recv from PROC_NULL returns")
    arr(y, np.full(4, 3.0), "Recv from PROC_NULL leaves the buffer untouched")
    null_status(st, "Recv PROC_NULL")
    comm.Recv([y, 2, MPI.DOUBLE], source=P)
    st = MPI.Status()
    c.ok(comm.recv(None, P, T, st) is None, "recv from PROC_NULL -> None")
    null_status(st, "recv PROC_NULL")
    st = MPI.Status()
    r = comm.Irecv(y, P, T)
    c.ok(r.Test(st) is True, "Irecv from PROC_NULL completes at once")
    null_status(st, "Irecv PROC_NULL")
    inactive(r, "Irecv PROC_NULL")
    st = MPI.Status()
    c.ok(comm.Irecv(y, source=P).Wait(st) is True, "Irecv PROC_NULL Wait")
    null_status(st, "Irecv PROC_NULL Wait")
    c.ok(comm.irecv(source=P, tag=T).wait() is None, "irecv from PROC_NULL wait() -> None")
    reqs = [comm.Irecv(y, P, T), comm.Isend(x, P, T), comm.irecv(None, P, T)]
    c.ok(MPI.Request.Waitall(reqs) is True, "Waitall over PROC_NULL requests")
    arr(y, np.full(4, 3.0), "buffer untouched by PROC_NULL receives")

    st = MPI.Status()
    comm.Sendrecv(x, P, T, y, P, T, st)
    arr(y, np.full(4, 3.0), "Sendrecv PROC_NULL/PROC_NULL untouched")
    null_status(st, "Sendrecv PROC_NULL")
    c.ok(comm.sendrecv("z", dest=P, source=P) is None, "sendrecv PROC_NULL -> None")
    comm.Sendrecv_replace(y, P, T, P, T, st)
    arr(y, np.full(4, 3.0), "Sendrecv_replace PROC_NULL untouched")
    null_status(st, "Sendrecv_replace PROC_NULL")
    st = MPI.Status()
    c.ok(comm.Probe(P, T, st) is True, "Probe PROC_NULL returns at once")
    null_status(st, "Probe PROC_NULL")
    c.ok(comm.Iprobe(P) is True, "Iprobe PROC_NULL is True")

    # halo exchange along a non-periodic line: the ends talk to PROC_NULL
    lo = me - 1 if me > 0 else P
    hi = me + 1 if me < n - 1 else P
    gl, gh = np.full(3, -1.0), np.full(3, -1.0)
    st = MPI.Status()
    comm.Sendrecv(vals(me, T + 1, 3), dest=hi, sendtag=T + 1, recvbuf=gl, source=lo, recvtag=T + 1, status=st)
    arr(gl, vals(lo, T + 1, 3) if lo != P else np.full(3, -1.0), "halo: ghost from the lower neighbour")
    c.equal(st.source, lo, "halo: status source (PROC_NULL at the edge)")
    comm.Sendrecv(vals(me, T + 2, 3), lo, T + 2, gh, hi, T + 2)
    arr(gh, vals(hi, T + 2, 3) if hi != P else np.full(3, -1.0), "halo: ghost from the upper neighbour")
    buf = vals(me, T + 3, 3)
    comm.Sendrecv_replace(buf, hi, T + 3, lo, T + 3)
    arr(buf, vals(lo if lo != P else me, T + 3, 3), "line shift with Sendrecv_replace")


def status_object():
    T = 1000
    s = MPI.Status()
    c.ok(s.source == MPI.ANY_SOURCE and s.Get_source() == MPI.ANY_SOURCE, "fresh Status source ANY_SOURCE",
         f"{s.source!r}")
    c.ok(s.tag == MPI.ANY_TAG and s.Get_tag() == MPI.ANY_TAG, "fresh Status tag ANY_TAG", f"{s.tag!r}")
    c.ok(s.error == MPI.SUCCESS and s.Get_error() == MPI.SUCCESS, "fresh Status error SUCCESS", f"{s.error!r}")
    c.equal(s.Get_count(), 0, "fresh Status Get_count()")
    c.equal(s.Get_count(MPI.DOUBLE), 0, "fresh Status Get_count(DOUBLE)")
    c.equal(s.Get_elements(MPI.BYTE), 0, "fresh Status Get_elements(BYTE)")
    c.equal(s.Is_cancelled(), False, "fresh Status Is_cancelled()")
    s.source, s.tag, s.error = 2, 33, MPI.ERR_OTHER
    c.ok((s.Get_source(), s.Get_tag(), s.Get_error()) == (2, 33, MPI.ERR_OTHER), "Status fields set",
         f"{(s.Get_source(), s.Get_tag(), s.Get_error())}")
    s2 = MPI.Status(s)
    c.ok(s2 is not s and (s2.source, s2.tag, s2.error) == (2, 33, MPI.ERR_OTHER), "Status(other) copies",
         f"{(s2.source, s2.tag, s2.error)}")
    s2.tag = 5
    c.equal(s.tag, 33, "Status(other) is an independent copy")

    st = MPI.Status()
    comm.Send(vals(me, T, 6), right, T)
    comm.Recv(np.zeros(6), left, T, st)
    status_is(st, "Recv", left, T, 48)
    c.equal(st.Get_count(MPI.DOUBLE), 6, "Get_count(DOUBLE)")
    c.equal(st.Get_count(MPI.INT), 12, "Get_count(INT) of 48 bytes")
    c.equal(st.Get_count(MPI.BYTE), 48, "Get_count(BYTE)")
    c.equal(st.Get_elements(MPI.DOUBLE), 6, "Get_elements(DOUBLE)")
    cp = MPI.Status(st)
    c.ok(cp.Get_count(MPI.DOUBLE) == 6 and cp.source == left and cp.tag == T, "Status(filled) copies the count")

    comm.Send(vals(me, T + 1, 2, "i"), right, T + 1)
    comm.Recv(np.zeros(4, "i"), MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    status_is(st, "Recv ANY_SOURCE/ANY_TAG", left, T + 1, 2, MPI.INT)

    r = comm.Irecv(np.zeros(3), left, T + 2)
    comm.Send(vals(me, T + 2, 3), right, T + 2)
    st = MPI.Status()
    r.Wait(st)
    status_is(st, "Wait", left, T + 2, 3, MPI.DOUBLE)

    comm.send(obj_for(me, T + 3), right, T + 3)
    st = MPI.Status()
    got = comm.recv(None, left, T + 3, st)
    eq(got, obj_for(left, T + 3), "recv object")
    status_is(st, "recv object", left, T + 3, len(MPI.pickle.dumps(obj_for(left, T + 3))))


# ------------------------------------------------------------------ objects
def obj_basic():
    T = 1100
    comm.send(obj_for(me, T), right, T)
    eq(comm.recv(None, left, T), obj_for(left, T), "send/recv(None, src, tag)")
    comm.send(obj_for(me, T + 1), dest=right, tag=T + 1)
    st = MPI.Status()
    eq(comm.recv(source=left, tag=T + 1, status=st), obj_for(left, T + 1), "send/recv keywords")
    status_is(st, "recv keywords", left, T + 1, len(MPI.pickle.dumps(obj_for(left, T + 1))))
    comm.send(("default tag", me), right)
    eq(comm.recv(source=left), ("default tag", left), "send default tag, recv(source=) ANY_TAG")
    comm.send(obj_for(me, T + 2), me, T + 2)
    eq(comm.recv(None, me, T + 2), obj_for(me, T + 2), "send to self then recv")
    items = [None, 3.5, "text", b"raw", (1, [2, 3]), {"k": {1, 2}}, np.arange(5, dtype="i"), 10 ** 30, me]
    for it in items:
        comm.send(it, right, T + 3)
    got = [comm.recv(None, left, T + 3) for _ in items]
    eq(got[:-1], items[:-1], "assorted objects in order")
    eq(got[-1], left, "assorted objects: sender's rank")


def obj_standard_mode():
    T = 1200
    big = [np.full(BIG // 8, float(me)), "big", me]
    # everybody sends first (to both neighbours and to itself), then receives
    comm.send(big, right, T)
    comm.send(["l", np.full(BIG // 8, float(me))], left, T + 1)
    comm.send(("self", np.arange(BIG // 8, dtype="d")), me, T + 2)
    comm.Send(np.full(BIG // 8, float(me)), right, T + 3)
    got = comm.recv(None, left, T)
    c.ok(isinstance(got, list) and got[1:] == ["big", left] and got[0].shape == (BIG // 8,)
         and bool(np.all(got[0] == left)), "large object: send before recv", short(got))
    got = comm.recv(None, right, T + 1)
    c.ok(got[0] == "l" and bool(np.all(got[1] == right)), "large object to the left neighbour")
    got = comm.recv(None, me, T + 2)
    c.ok(got[0] == "self" and bool(np.array_equal(got[1], np.arange(BIG // 8, dtype="d"))),
         "large object to self")
    y = np.zeros(BIG // 8)
    comm.Recv(y, left, T + 3)
    c.ok(bool(np.all(y == left)), "large buffer Send before Recv")
    # a send to self with nobody receiving yet, then a blocking recv
    comm.send(big, me, T + 4)
    got = comm.recv(source=me, tag=T + 4)
    c.ok(got[1:] == ["big", me] and bool(np.all(got[0] == me)), "large send to self")


def obj_nonblocking():
    T = 1300
    r = comm.irecv(source=left, tag=T)
    s = comm.isend(obj_for(me, T), right, T)
    c.ok(s.wait() is None, "isend wait() -> None")
    eq(r.wait(), obj_for(left, T), "irecv posted first, wait() returns the object")
    inactive(r, "irecv after wait")

    s = comm.isend(obj_for(me, T + 1), right, T + 1)
    r = comm.irecv(None, left, T + 1)
    res = MPI.Request.waitall([r, s])
    eq(res, [obj_for(left, T + 1), None], "isend before irecv, waitall")

    r = comm.irecv(source=MPI.ANY_SOURCE, tag=T + 2)
    comm.send(obj_for(me, T + 2), right, T + 2)
    st = MPI.Status()
    eq(r.wait(st), obj_for(left, T + 2), "irecv ANY_SOURCE")
    status_is(st, "irecv wait(status)", left, T + 2)

    r = comm.irecv(source=left, tag=T + 3)
    comm.isend(obj_for(me, T + 3), right, T + 3).wait()
    end, res = time.monotonic() + POLL_S, (False, None)
    while not res[0] and time.monotonic() < end:
        res = r.test()
        time.sleep(0.001)
    c.ok(res[0] is True and same(res[1], obj_for(left, T + 3)), "irecv test() -> (True, obj)", short(res))

    big = ("big", np.full(BIG // 8, float(me)))
    r = comm.irecv(source=left, tag=T + 4)
    s = comm.isend(big, right, T + 4)
    got, _ = MPI.Request.waitall([r, s])
    c.ok(got[0] == "big" and bool(np.all(got[1] == left)), "large object isend/irecv")


def obj_sync():
    T = 1400
    r = comm.irecv(source=left, tag=T)
    comm.ssend(obj_for(me, T), right, T)
    eq(r.wait(), obj_for(left, T), "ssend matched by a posted irecv")

    reqs = [comm.issend(obj_for(me, T + 1), right, T + 1)]
    time.sleep(0.05)  # time a wrong issend would have to complete: no receive is posted before the barrier
    c.equal(MPI.Request.Testall(reqs), False, "Testall on issend before the receive is posted")
    c.ok(bool(reqs[0]), "issend request still active before the receive")
    comm.Barrier()  # only now does anyone post the receive
    eq(comm.recv(None, left, T + 1), obj_for(left, T + 1), "issend received")
    MPI.Request.Waitall(reqs)
    inactive(reqs[0], "issend after Waitall")

    st = MPI.Status()
    eq(comm.sendrecv(obj_for(me, T + 2), dest=right, sendtag=T + 2, source=left, recvtag=T + 2, status=st),
       obj_for(left, T + 2), "sendrecv keywords")
    status_is(st, "sendrecv", left, T + 2, len(MPI.pickle.dumps(obj_for(left, T + 2))))
    eq(comm.sendrecv(obj_for(me, T + 3), right, T + 3, None, left, T + 3), obj_for(left, T + 3),
       "sendrecv positional")


def obj_one_call():
    """How a blocking recv() of an object meets its frame, each way the one-call receive can go: the
    frame came first (read in one call), comes late (the header's step hands over to the engine's
    loop), a frame of another tag or another communicator comes first (taken over by the engine,
    then matched), an issend's (acknowledged by the engine), one larger than a shared-memory ring
    (the payload in many ring-fulls), ANY_TAG."""
    T = 1450
    comm.send(obj_for(me, T + 1), right, T + 1)
    comm.send(obj_for(me, T + 2), right, T + 2)
    eq(comm.recv(source=left, tag=T + 2), obj_for(left, T + 2), "recv of a tag sent second")
    eq(comm.recv(source=left, tag=T + 1), obj_for(left, T + 1), "then of the tag sent first")

    dup = comm.Dup()
    dup.send(("dup", me), right, T + 3)
    comm.send(("world", me), right, T + 3)
    eq(comm.recv(source=left, tag=T + 3), ("world", left), "recv on the world after a frame of its copy")
    eq(dup.recv(source=left, tag=T + 3), ("dup", left), "then on the copy")
    dup.Free()

    if me % 2 == 0 and n > 1:  # (connected by now) the odd ranks' receives wait for their frames, which
        time.sleep(0.1)  # come after the one call's first slice: the engine's loop goes on with it
    comm.send(obj_for(me, T), right, T)
    eq(comm.recv(source=left, tag=T), obj_for(left, T), "recv of a late send")

    r = comm.issend(obj_for(me, T + 4), right, T + 4)
    eq(comm.recv(source=left, tag=T + 4), obj_for(left, T + 4), "recv of an issend")
    c.ok(r.wait() is None, "the issend completes once received")

    big = bytes(range(256)) * (3 << 12) + bytes([me % 256])  # 3 MiB + 1: three shared-memory rings and more
    got = None
    if me % 2 == 1:
        got = comm.recv(source=left, tag=T + 5)
    comm.send(big, right, T + 5)
    if me % 2 == 0:
        got = comm.recv(source=left, tag=T + 5)
    c.ok(isinstance(got, bytes) and len(got) == len(big) and got[:-1] == big[:-1] and got[-1] == left % 256,
         "recv of an object larger than a ring", short(got))

    comm.send(obj_for(me, T + 6), right, T + 6)
    st = MPI.Status()
    eq(comm.recv(source=left, status=st), obj_for(left, T + 6), "recv ANY_TAG")
    status_is(st, "recv ANY_TAG", left, T + 6, len(MPI.pickle.dumps(obj_for(left, T + 6))))

    # a receive that finds its frame's header and part of its payload, the sender stopped mid-frame
    # (SIGSTOP by itself 2 ms into writing it, SIGCONT from the receiver 0.1 s after the receive starts):
    # the receive's step stops after its slice without progress, and the engine's loop reads the rest
    pids = comm.allgather(os.getpid())
    if n > 1 and me in (0, 1):
        huge = np.arange(6 << 20, dtype=np.int64)  # 48 MiB: still being written 2 ms after it starts
        if me == 0:
            pickled = threading.Event()
            helper = threading.Thread(target=_stop_self, args=(pickled,), daemon=True)
            helper.start()
            MPI.pickle.__init__(lambda obj: _dumps_then(obj, pickled), pickle.loads)
            try:
                comm.send(huge, 1, T + 7)
            finally:
                MPI.pickle.__init__()
        else:
            _stopped(pids[0])
            helper = threading.Timer(0.1, os.kill, (pids[0], signal.SIGCONT))
            helper.start()
            got = comm.recv(source=0, tag=T + 7)
            c.ok(isinstance(got, np.ndarray) and np.array_equal(got, huge), "recv from a sender stopped mid-frame")
        helper.join(POLL_S)


def _dumps_then(obj, event):
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    event.set()
    return data


def _stop_self(pickled):
    if pickled.wait(POLL_S):
        time.sleep(0.002)
        os.kill(os.getpid(), signal.SIGSTOP)


def _stopped(pid):
    """Once process `pid` is seen stopped (or POLL_S passed)."""
    end = time.monotonic() + POLL_S
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
        except OSError:
            return
        time.sleep(0.001)


def wildcards():
    T = 1500
    for k in range(3):
        comm.send((me, k), 0, T + me)
    if me == 0:
        seen = {s: [] for s in range(n)}
        for _ in range(3 * n):
            st = MPI.Status()
            got = comm.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            src = st.Get_source()
            if not c.ok(src in seen and st.Get_tag() == T + src and got[0] == src, "ANY_SOURCE/ANY_TAG status",
                        f"source {src!r} tag {st.Get_tag()!r} payload {got!r}"):
                continue
            seen[src].append(got[1])
        c.equal(seen, {s: [0, 1, 2] for s in range(n)}, "ANY_SOURCE: every sender, in order per sender")
    comm.Barrier()  # rank 0's ANY_TAG receives are done before anything else is sent to it
    comm.send(obj_for(me, T + 50), right, T + 50)
    st = MPI.Status()
    eq(comm.recv(None, MPI.ANY_SOURCE, T + 50, st), obj_for(left, T + 50), "recv ANY_SOURCE fixed tag")
    status_is(st, "recv ANY_SOURCE", left, T + 50)


def order():
    T = 1600
    K = 30
    for k in range(K):
        comm.send(k, right, T)
        comm.send(100 + k, right, T + 1)
    c.equal([comm.recv(None, left, T + 1) for _ in range(K)], list(range(100, 100 + K)),
            "non-overtaking on the later tag, received first")
    c.equal([comm.recv(None, left, T) for _ in range(K)], list(range(K)), "non-overtaking on the first tag")
    for k in range(10):  # buffers and objects interleaved on one tag
        if k % 2:
            comm.send(k, right, T + 2)
        else:
            comm.Send(np.array([k], "i"), right, T + 2)
    got = []
    for k in range(10):
        if k % 2:
            got.append(comm.recv(None, left, T + 2))
        else:
            b = np.zeros(1, "i")
            comm.Recv(b, left, T + 2)
            got.append(int(b[0]))
    c.equal(got, list(range(10)), "buffers and objects in send order on one tag")
    for t in (T + 3, T + 4, T + 3, T + 4, T + 4):
        comm.send(t, right, t)
    st = MPI.Status()
    got = []
    for _ in range(5):
        v = comm.recv(None, left, MPI.ANY_TAG, st)
        got.append((v, st.Get_tag()))
    c.equal(got, [(t, t) for t in (T + 3, T + 4, T + 3, T + 4, T + 4)], "ANY_TAG receives in send order")


def shared_tags():
    T = 1700
    comm.Send([MPI.pickle.dumps(obj_for(me, T)), "B"], right, T)
    eq(comm.recv(None, left, T), obj_for(left, T), "Send([pickle bytes, 'B']) received by recv()")
    comm.Send([MPI.pickle.dumps(obj_for(me, T + 1)), MPI.BYTE], right, T + 1)
    r = comm.irecv(source=left, tag=T + 1)
    eq(r.wait(), obj_for(left, T + 1), "Send([pickle bytes, BYTE]) received by irecv()")
    comm.send(obj_for(me, T + 2), right, T + 2)
    st = MPI.Status()
    comm.Probe(left, T + 2, st)
    nb = st.Get_count()
    want = MPI.pickle.dumps(obj_for(left, T + 2))
    c.equal(nb, len(want), "Probe of an object message: Get_count() is the pickle length")
    buf = bytearray(max(nb, 0))
    comm.Recv([buf, "B"], left, T + 2)
    eq(MPI.pickle.loads(bytes(buf)), obj_for(left, T + 2), "send() received by Recv([bytearray, 'B'])")


def probes():
    T = 1800
    comm.Send(vals(me, T, 7), right, T)
    st = MPI.Status()
    c.ok(comm.Probe(left, T, st) is True, "Probe returns True")
    status_is(st, "Probe", left, T, 56)
    c.equal(st.Get_count(MPI.DOUBLE), 7, "Probe Get_count(DOUBLE)")
    st = MPI.Status()
    comm.Probe(MPI.ANY_SOURCE, MPI.ANY_TAG, st)  # not consumed by the first probe
    status_is(st, "Probe wildcards", left, T, 7, MPI.DOUBLE)
    c.ok(comm.Iprobe(left, T) is True, "Iprobe of a pending message")
    y = np.zeros(7)
    comm.Recv(y, left, T)
    arr(y, vals(left, T, 7), "Recv after probes")

    comm.send(obj_for(me, T + 1), right, T + 1)
    st = MPI.Status()
    c.ok(comm.probe(left, T + 1, st) is True, "probe returns True")
    status_is(st, "probe object", left, T + 1, len(MPI.pickle.dumps(obj_for(left, T + 1))))
    c.ok(comm.iprobe(source=left, tag=T + 1) is True, "iprobe of a pending object")
    eq(comm.recv(None, left, T + 1), obj_for(left, T + 1), "recv after probe")

    comm.Send(vals(me, T + 2, 3, "i"), right, T + 2)
    st = MPI.Status()
    end, flag = time.monotonic() + POLL_S, False
    while not flag and time.monotonic() < end:
        flag = comm.Iprobe(left, T + 2, st)
        time.sleep(0.001)
    c.ok(flag is True, "Iprobe polling finds the message")
    status_is(st, "Iprobe", left, T + 2, 3, MPI.INT)
    comm.Recv(np.zeros(3, "i"), left, T + 2)

    # nothing pending to this rank now: iprobe is False and the status is left alone
    st = MPI.Status()
    c.equal(comm.Iprobe(left, T + 99, st), False, "Iprobe on nothing")
    c.ok((st.source, st.tag, st.error, st.Get_count()) == (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS, 0),
         "Iprobe on nothing leaves a fresh status untouched", f"{(st.source, st.tag, st.error, st.Get_count())}")
    st.source, st.tag = 3, 44
    c.equal(comm.iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st), False, "iprobe ANY/ANY on nothing")
    c.ok((st.source, st.tag) == (3, 44), "iprobe on nothing leaves set fields", f"{(st.source, st.tag)}")


# ------------------------------------------------------------------ requests
def isend_irecv():
    T = 2000
    y = np.zeros(6)
    r = comm.Irecv(y, left, T)
    c.ok(isinstance(r, MPI.Request) and bool(r) and r != MPI.REQUEST_NULL, "Irecv request active")
    s = comm.Isend(vals(me, T, 6), right, T)
    st = MPI.Status()
    c.ok(r.Wait(st) is True, "Wait returns True")
    arr(y, vals(left, T, 6), "Irecv data by Wait")
    status_is(st, "Wait", left, T, 6, MPI.DOUBLE)
    inactive(r, "Irecv after Wait")
    c.ok(s.Wait() is True, "Isend Wait")
    inactive(s, "Isend after Wait")

    y = np.zeros(3, "i")
    r = comm.Irecv([y, MPI.INT], source=left, tag=T + 1)
    s = comm.Isend([vals(me, T + 1, 3, "i"), MPI.INT], dest=right, tag=T + 1)
    c.ok(s.wait() is None, "Isend wait() -> None")
    r.wait()
    arr(y, vals(left, T + 1, 3, "i"), "Irecv data by wait()")
    inactive(r, "Irecv after wait()")

    y = np.zeros(4)
    r = comm.Irecv(y, left, T + 2)
    s = comm.Isend(vals(me, T + 2, 4), right, T + 2)
    st = MPI.Status()
    if complete(r, "Irecv by Test", st):
        arr(y, vals(left, T + 2, 4), "Irecv data by Test")
        status_is(st, "Test", left, T + 2, 4, MPI.DOUBLE)
        inactive(r, "Irecv after Test")
    complete(s, "Isend by Test")
    c.ok(r.Test() is True, "Test of an inactive request is True")


def waitall():
    T = 2100
    rb = [np.zeros(4) for _ in range(3)]
    reqs = [comm.Irecv(rb[k], left, T + k) for k in range(3)]
    reqs += [comm.Isend(vals(me, T + k, 4), right, T + k) for k in range(3)]
    orig = list(reqs)
    sts = [MPI.Status() for _ in reqs]
    orig_sts = list(sts)
    c.ok(MPI.Request.Waitall(reqs, sts) is True, "Waitall returns True")
    c.ok(len(reqs) == 6 and all(a is b for a, b in zip(reqs, orig)), "Waitall keeps the same request objects")
    c.ok(all(r == MPI.REQUEST_NULL and not r for r in reqs), "Waitall: every request inactive",
         f"{[bool(r) for r in reqs]}")
    c.ok(len(sts) == 6 and all(a is b for a, b in zip(sts, orig_sts)), "Waitall fills the given Status objects")
    for k in range(3):
        arr(rb[k], vals(left, T + k, 4), f"Waitall recv {k}")
        status_is(sts[k], f"Waitall status {k}", left, T + k, 4, MPI.DOUBLE)
    c.ok(MPI.Request.Waitall(reqs) is True, "Waitall of inactive requests")
    c.ok(MPI.Request.Waitall([]) is True, "Waitall([])")

    reqs = [comm.irecv(source=left, tag=T + 10 + k) for k in range(3)]
    reqs += [comm.isend(obj_for(me, T + 10 + k), right, T + 10 + k) for k in range(3)]
    sts = []
    res = MPI.Request.waitall(reqs, sts)
    eq(res, [obj_for(left, T + 10 + k) for k in range(3)] + [None] * 3, "waitall returns objects, None for sends")
    c.ok(all(not r for r in reqs), "waitall: requests inactive")
    c.ok(len(sts) == 6 and all(isinstance(s, MPI.Status) for s in sts), "waitall fills an empty statuses list",
         f"len {len(sts)}")
    if len(sts) == 6:
        status_is(sts[1], "waitall status", left, T + 11)


def waitany():
    T = 2200
    bufs = [np.zeros(3) for _ in range(n)]
    reqs = [comm.Irecv(bufs[s], s, T) for s in range(n)]
    sreqs = [comm.Isend(vals(me, T, 3), d, T) for d in range(n)]
    seen = []
    for _ in range(n):
        st = MPI.Status()
        i = MPI.Request.Waitany(reqs, st)
        if not c.ok(isinstance(i, int) and 0 <= i < n and i not in seen, "Waitany index", f"{i!r} seen {seen}"):
            break
        seen.append(i)
        inactive(reqs[i], "Waitany completed request")
        status_is(st, "Waitany", i, T, 3, MPI.DOUBLE)
        arr(bufs[i], vals(i, T, 3), f"Waitany data from {i}")
    c.equal(MPI.Request.Waitany(reqs), MPI.UNDEFINED, "Waitany on all-inactive list")
    MPI.Request.Waitall(sreqs)

    reqs = [comm.irecv(source=s, tag=T + 1) for s in range(n)]
    for d in range(n):
        comm.send(obj_for(me, T + 1), d, T + 1)
    got = set()
    for _ in range(n):
        i, obj = MPI.Request.waitany(reqs)
        c.ok(isinstance(i, int) and 0 <= i < n and same(obj, obj_for(i, T + 1)), "waitany (index, obj)",
             f"{i!r} {short(obj)}")
        got.add(i)
    c.equal(got, set(range(n)), "waitany completes every request once")
    eq(MPI.Request.waitany(reqs), (MPI.UNDEFINED, None), "waitany on all-inactive list")

    a, b = np.zeros(2), np.zeros(2)
    reqs = [comm.Irecv(a, left, T + 2), comm.Irecv(b, left, T + 3)]
    eq(MPI.Request.Testany(reqs), (MPI.UNDEFINED, False), "Testany before anything is sent")
    c.ok(all(reqs), "Testany False leaves the requests active")
    comm.Barrier()
    comm.Send(vals(me, T + 3, 2), right, T + 3)
    done = []
    end = time.monotonic() + POLL_S
    while len(done) < 1 and time.monotonic() < end:
        i, flag = MPI.Request.Testany(reqs)
        if flag:
            done.append(i)
        else:
            time.sleep(0.001)
    c.equal(done, [1], "Testany reports the request whose message arrived")
    arr(b, vals(left, T + 3, 2), "Testany data")
    comm.Barrier()  # T + 2 is sent only after every rank has seen T + 3 alone
    comm.Send(vals(me, T + 2, 2), right, T + 2)
    st = MPI.Status()
    c.ok(MPI.Request.Waitany(reqs, st) == 0, "Waitany skips inactive entries")
    arr(a, vals(left, T + 2, 2), "Waitany data")
    eq(MPI.Request.Testany(reqs), (MPI.UNDEFINED, True), "Testany on all-inactive list")
    res = MPI.Request.testany([MPI.Request(), MPI.Request()])
    c.ok(res[0] == MPI.UNDEFINED and res[1] is True, "testany on null requests", short(res))


def testall_some():
    T = 2300
    a, b = np.zeros(3), np.zeros(3)
    ra = comm.Irecv(a, left, T)
    comm.Send(vals(me, T, 3), right, T)
    st = MPI.Status()
    end, flag = time.monotonic() + POLL_S, False
    while not flag and time.monotonic() < end:
        flag = ra.Get_status(st)
        time.sleep(0.001)
    c.ok(flag is True, "Get_status reports the arrived message")
    status_is(st, "Get_status", left, T)
    c.ok(bool(ra) and ra != MPI.REQUEST_NULL, "Get_status does not free the request")
    rb = comm.Irecv(b, left, T + 1)  # its message is sent only after the barrier below
    reqs = [ra, MPI.Request(), rb]
    c.equal(MPI.Request.Testall(reqs), False, "Testall on a mixed list (one complete, one pending)")
    c.ok(bool(ra) and bool(rb), "Testall False leaves every request active")
    c.equal(MPI.Request.testall(reqs)[0], False, "testall on a mixed list")
    idx = MPI.Request.Testsome(reqs)
    c.equal(idx, [0], "Testsome completes the arrived request only")
    arr(a, vals(left, T, 3), "Testsome data")
    inactive(ra, "Testsome completed request")
    c.equal(MPI.Request.Testsome(reqs), [], "Testsome with nothing new")
    comm.Barrier()
    comm.Send(vals(me, T + 1, 3), right, T + 1)
    sts = [MPI.Status() for _ in reqs]
    idx = MPI.Request.Waitsome(reqs, sts)
    c.equal(idx, [2], "Waitsome completes the pending request")
    if idx:
        status_is(sts[0], "Waitsome status", left, T + 1, 3, MPI.DOUBLE)
    arr(b, vals(left, T + 1, 3), "Waitsome data")
    c.equal(MPI.Request.Waitsome(reqs), None, "Waitsome on all-inactive list")
    c.equal(MPI.Request.Testsome(reqs), None, "Testsome on all-inactive list")
    eq(MPI.Request.waitsome(reqs), (None, None), "waitsome on all-inactive list")
    eq(MPI.Request.testsome(reqs), (None, None), "testsome on all-inactive list")

    reqs = [comm.irecv(source=left, tag=T + 2), comm.isend(obj_for(me, T + 2), right, T + 2)]
    got, end = {}, time.monotonic() + POLL_S
    while len(got) < 2 and time.monotonic() < end:
        idx, objs = MPI.Request.testsome(reqs)
        for i, o in zip(idx or [], objs or []):
            got[i] = o
        time.sleep(0.001)
    eq(got, {0: obj_for(left, T + 2), 1: None}, "testsome (indices, objects)")
    reqs = [comm.isend("t", me, T + 3), comm.irecv(source=me, tag=T + 3)]
    res, end = (False, None), time.monotonic() + POLL_S
    while not res[0] and time.monotonic() < end:
        res = MPI.Request.testall(reqs)
        time.sleep(0.001)
    eq(res, (True, [None, "t"]), "testall polling returns (True, objects)")


def null_and_cancel():
    T = 2400
    r = MPI.Request()
    c.ok(r == MPI.REQUEST_NULL and not r, "Request() is null and falsy")
    st = MPI.Status()
    st.source, st.tag = 1, 2
    c.ok(r.Wait(st) is True, "Wait on Request()")
    c.ok((st.source, st.tag, st.error, st.Get_count()) == (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS, 0),
         "Wait on Request() gives an empty status", f"{(st.source, st.tag, st.error, st.Get_count())}")
    c.ok(r.Test() is True, "Test on Request()")
    c.ok(r.wait() is None, "wait() on Request()")
    eq(r.test(), (True, None), "test() on Request()")
    c.ok(r.Get_status() is True, "Get_status on Request()")
    c.ok(MPI.Request.Waitall([MPI.Request(), MPI.Request()]) is True, "Waitall on null requests")
    c.ok(MPI.Request.Testall([MPI.Request()]) is True, "Testall on null requests")

    y = np.full(3, 7.0)
    r = comm.Irecv(y, left, T + 99)  # nobody sends this yet
    r.Cancel()
    st = MPI.Status()
    r.Wait(st)
    c.ok(st.Is_cancelled() is True, "Cancel of an unmatched Irecv: Is_cancelled()")
    arr(y, np.full(3, 7.0), "cancelled Irecv leaves the buffer untouched")
    inactive(r, "cancelled Irecv after Wait")
    comm.Barrier()  # every rank has cancelled before anyone sends on that tag
    comm.Send(vals(me, T + 99, 3), right, T + 99)  # a later message on the same tag is not eaten
    z = np.zeros(3)
    comm.Recv(z, left, T + 99)
    arr(z, vals(left, T + 99, 3), "message after a cancelled receive on the same tag")
    c.ok(not MPI.Status().Is_cancelled(), "fresh Status not cancelled")

    s = comm.Isend(vals(me, T + 1, 4), right, T + 1)
    s.Free()
    inactive(s, "Free of an active Isend")
    z = np.zeros(4)
    comm.Recv(z, left, T + 1)
    arr(z, vals(left, T + 1, 4), "freed Isend still delivers")
    r = comm.Irecv(np.zeros(1), left, T + 2)
    comm.Send(vals(me, T + 2, 1), right, T + 2)
    r.Wait()
    r2 = comm.isend(obj_for(me, T + 3), right, T + 3)
    eq(comm.recv(None, left, T + 3), obj_for(left, T + 3), "object isend")
    r2.wait()
    c.ok(r2.Test() is True, "Test of a completed isend")


def ssend_order():
    T = 2500
    r = comm.Issend(vals(me, T, 4), right, T)
    time.sleep(0.05)  # time a wrong Issend would have to complete: no receive is posted before the barrier
    c.equal(r.Test(), False, "Issend incomplete before the receive is posted")
    c.equal(MPI.Request.Testall([r]), False, "Testall on Issend before the receive")
    c.ok(bool(r), "Issend request still active")
    comm.Barrier()
    y = np.zeros(4)
    comm.Recv(y, left, T)
    arr(y, vals(left, T, 4), "Issend data")
    complete(r, "Issend completes after the receive")

    x = np.zeros(2)
    rr = comm.Irecv(x, me, T + 1)
    comm.Ssend(vals(me, T + 1, 2), me, T + 1)  # to self: the receive is already posted
    rr.Wait()
    arr(x, vals(me, T + 1, 2), "Ssend to self with a posted Irecv")

    if n >= 2:
        # The receiver posts its receive `delay` after it hears from the sender, which is after the
        # sender took t0: the Ssend cannot complete before t0 + delay, however loaded the machine.
        delay = 0.25
        if me % 2 == 0 and me + 1 < n:
            t0 = time.monotonic()
            comm.send("go", me + 1, T + 3)  # a small standard-mode send: never waits for the receiver
            comm.Ssend(vals(me, T + 2, 3), me + 1, T + 2)
            dt = time.monotonic() - t0
            c.ok(dt >= delay, f"Ssend waits for the receive (posted {delay} s later)", f"returned after {dt:.3f} s")
        elif me % 2 == 1:
            comm.recv(None, me - 1, T + 3)
            time.sleep(delay)  # the late receiver under test: the Ssend must wait for it
            y = np.zeros(3)
            comm.Recv(y, me - 1, T + 2)
            arr(y, vals(me - 1, T + 2, 3), "Ssend data")


def comm_self():
    T = 2600
    s = MPI.COMM_SELF
    c.ok(s.Get_size() == 1 and s.Get_rank() == 0 and s.size == 1 and s.rank == 0, "COMM_SELF size 1 rank 0")
    r = s.isend(obj_for(me, T), 0, T)
    eq(s.recv(None, 0, T), obj_for(me, T), "COMM_SELF isend to self then recv")
    c.ok(r.wait() is None, "COMM_SELF isend wait")
    s.Send(vals(me, T + 1, 3), 0, T + 1)
    y = np.zeros(3)
    s.Recv(y, 0, T + 1)
    arr(y, vals(me, T + 1, 3), "COMM_SELF Send/Recv")
    s.send("any", 0, T + 2)
    st = MPI.Status()
    c.equal(s.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG, st), "any", "COMM_SELF recv wildcards")
    status_is(st, "COMM_SELF wildcards", 0, T + 2)
    y = np.zeros(2)
    r = s.Irecv(y, 0, T + 3)
    s.Send(vals(me, T + 3, 2), 0, T + 3)
    r.Wait()
    arr(y, vals(me, T + 3, 2), "COMM_SELF Irecv then Send")
    s.send("iso", 0, T + 4)
    s.Probe(0, T + 4)
    c.equal(comm.Iprobe(MPI.ANY_SOURCE, T + 4), False, "COMM_SELF message invisible on COMM_WORLD")
    c.equal(s.recv(source=0, tag=T + 4), "iso", "COMM_SELF message received on COMM_SELF")


def dup_isolation():
    T = 2700
    d = comm.Dup()
    d.send(obj_for(me, T), right, T)
    d.Send(vals(me, T + 1, 3), right, T + 1)
    st = MPI.Status()
    d.Probe(left, T, st)
    d.Probe(left, T + 1)  # both dup messages have arrived
    c.equal(comm.Iprobe(left, T), False, "dup message invisible to Iprobe on COMM_WORLD (same tag)")
    c.equal(comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG), False, "dup messages invisible to Iprobe ANY/ANY")
    comm.Barrier()  # nobody sends on COMM_WORLD before everybody has probed
    comm.send(("world", me), right, T)
    comm.Send(-vals(me, T + 1, 3), right, T + 1)
    eq(comm.recv(None, left, T), ("world", left), "COMM_WORLD recv gets the world message, not the dup's")
    y = np.zeros(3)
    comm.Recv(y, left, T + 1)
    arr(y, -vals(left, T + 1, 3), "COMM_WORLD Recv gets the world buffer")
    eq(d.recv(None, left, T), obj_for(left, T), "dup recv gets the dup message")
    d.Recv(y, left, T + 1)
    arr(y, vals(left, T + 1, 3), "dup Recv gets the dup buffer")
    r = d.Irecv(y, MPI.ANY_SOURCE, MPI.ANY_TAG)
    comm.Send(vals(me, T + 2, 3), right, T + 2)
    comm.Probe(left, T + 2)  # the COMM_WORLD message has arrived
    c.equal(r.Test(), False, "ANY_SOURCE/ANY_TAG Irecv on the dup ignores COMM_WORLD traffic")
    comm.Recv(np.zeros(3), left, T + 2)
    comm.Barrier()  # nobody sends on the dup before every rank has tested
    d.Send(vals(me, T + 3, 3), right, T + 3)
    r.Wait()
    arr(y, vals(left, T + 3, 3), "dup Irecv wildcards complete with the dup message")
    d.Free()
    c.ok(d == MPI.COMM_NULL, "freed dup == COMM_NULL")


# ------------------------------------------------------------------ persistent (tier B)
def persistent():
    T = 3000
    sbuf, rbuf = np.zeros(5), np.zeros(5)
    sreq = comm.Send_init(sbuf, right, T)
    rreq = comm.Recv_init(rbuf, left, T)
    c.ok(isinstance(sreq, MPI.Prequest) and isinstance(rreq, MPI.Prequest), "Send_init/Recv_init -> Prequest")
    for it in range(3):
        sbuf[:] = vals(me, T + it, 5)  # the persistent send reads the buffer at each Start
        MPI.Prequest.Startall([rreq, sreq])
        sts = [MPI.Status(), MPI.Status()]
        MPI.Request.Waitall([rreq, sreq], sts)
        arr(rbuf, vals(left, T + it, 5), f"Startall/Waitall round {it}")
        status_is(sts[0], f"persistent round {it}", left, T, 5, MPI.DOUBLE)
        c.ok(rreq != MPI.REQUEST_NULL and sreq != MPI.REQUEST_NULL, f"persistent requests survive round {it}")
    sbuf[:] = vals(me, T + 10, 5)
    rreq.Start()
    sreq.Start()
    if complete(rreq, "persistent Start/Test"):
        arr(rbuf, vals(left, T + 10, 5), "Start/Test round")
    sreq.Wait()
    sbuf[:] = vals(me, T + 11, 5)
    sreq.Start()
    rreq.Start()
    rreq.Wait()
    sreq.Wait()
    arr(rbuf, vals(left, T + 11, 5), "Start send before receive")
    rreq.Free()
    sreq.Free()
    inactive(rreq, "freed Recv_init")
    inactive(sreq, "freed Send_init")

    # a ring in both directions with four persistent requests, restarted
    a, b = np.zeros(2, "i"), np.zeros(2, "i")
    out_r, out_l = np.zeros(2, "i"), np.zeros(2, "i")
    reqs = [comm.Recv_init(a, left, T + 20), comm.Recv_init(b, right, T + 21),
            comm.Send_init(out_r, right, T + 20), comm.Send_init(out_l, left, T + 21)]
    for it in range(4):
        out_r[:] = vals(me, T + 20 + 2 * it, 2, "i")
        out_l[:] = vals(me, T + 21 + 2 * it, 2, "i")
        MPI.Prequest.Startall(reqs)
        MPI.Request.Waitall(reqs)
        arr(a, vals(left, T + 20 + 2 * it, 2, "i"), f"persistent ring right round {it}")
        arr(b, vals(right, T + 21 + 2 * it, 2, "i"), f"persistent ring left round {it}")
    for r in reqs:
        r.Free()

    y = np.full(2, 5.0)
    pr = comm.Recv_init(y, P, T + 30)
    ps = comm.Send_init(vals(me, T + 30, 2), P, T + 30)
    st = MPI.Status()
    pr.Start()
    ps.Start()
    pr.Wait(st)
    ps.Wait()
    arr(y, np.full(2, 5.0), "persistent PROC_NULL receive leaves the buffer")
    c.equal(st.source, P, "persistent PROC_NULL status source")
    pr.Free()
    ps.Free()



def any_tag_buffers():
    """Recv of a buffer from a named source with ANY_TAG (the default tag of Recv): the tags change from
    message to message, the layers' own point-to-point messages (a scan's, on negative tags) come in
    between, and a message of another size takes the long way; each status names its message's tag."""
    T = 1700
    tags = (T, T + 3, T + 3, T + 1, T, T + 9)
    for k, t in enumerate(tags):
        comm.Send(vals(me, t + k, 2), right, t)
        if k == 2:
            comm.scan(me)  # (its messages are the layers' own, on negative tags: no ANY_TAG receive takes them)
    st = MPI.Status()
    for k, t in enumerate(tags):
        y = np.zeros(2)
        comm.Recv(y, left, MPI.ANY_TAG, st)
        arr(y, vals(left, t + k, 2), f"Recv(ANY_TAG) message {k}")
        c.equal(st.Get_tag(), t, f"Recv(ANY_TAG) message {k}: its status's tag")
        c.equal(st.Get_source(), left, f"Recv(ANY_TAG) message {k}: its status's source")
        if k == 2:
            c.equal(comm.scan(me), sum(range(me + 1)), "a scan between ANY_TAG receives")
    comm.Send(vals(me, T + 20, 3), right, T + 20)  # 3 doubles into a receive of 5: the long way, same result
    y5 = np.full(5, -1.0)
    comm.Recv([y5, MPI.DOUBLE], left, status=st)
    arr(y5, np.r_[vals(left, T + 20, 3), [-1.0] * 2], "Recv(ANY_TAG) of fewer elements than the buffer")
    status_is(st, "Recv(ANY_TAG) of fewer elements", left, T + 20, 3, MPI.DOUBLE)


PARTS = {
    "bufspec": [bare_buffers, datatype_forms, in_place, zero_length, sendrecv],
    "errors": [truncate, bad_rank, buffer_errors, proc_null, status_object],
    "objects": [obj_basic, obj_standard_mode, obj_nonblocking, obj_sync, obj_one_call, wildcards, order, shared_tags,
                probes, any_tag_buffers],
    "requests": [isend_irecv, waitall, waitany, testall_some, null_and_cancel, ssend_order, comm_self,
                 dup_isolation],
    "persistent": [persistent],
}
SECTIONS = {f.__name__: f for fs in PARTS.values() for f in fs}


def main():
    names = sys.argv[2:] or [p for p in PARTS]
    todo = []
    for name in names:
        if name in PARTS:
            todo += PARTS[name]
        elif name in SECTIONS:
            todo.append(SECTIONS[name])
        else:
            c.ok(False, "usage", f"unknown part or section {name!r}")
    for fn in todo:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - recorded, then the ranks resynchronise
            c.ok(False, f"{fn.__name__} raised", f"{type(e).__name__}: {e}")
            traceback.print_exc()
            sys.stdout.flush()
        try:
            comm.Barrier()
        except Exception as e:  # noqa: BLE001
            c.ok(False, f"barrier after {fn.__name__}", f"{type(e).__name__}: {e}")
            break
    c.finish()


if __name__ == "__main__":
    main()
else:  # a batched job (_batch.py): each section is a check
    sections(PARTS, c)
