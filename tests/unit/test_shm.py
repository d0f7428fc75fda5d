"""Shared-memory links in one process: a socketpair handed a segment through shm.py's own handshake.

The rings must carry any byte stream exactly (wrap-around, partial reads and writes), answer as
a socket would at the peer's end (0 from a read once the ring is empty, EPIPE from a write),
and never lose a wake-up: a side about to sleep is rung by the other.
"""
import os
import select
import socket
import threading
import time

import numpy as np
import pytest

from commlib import _dtypes, _plan
from commlib._errors import CommError
from commlib._transport import _io, shm

pytestmark = pytest.mark.timeout(60)

RING = 4096


@pytest.fixture
def link(monkeypatch):
    """(connector socket, acceptor socket), linked through shm.offer / answer / settle."""
    monkeypatch.setenv("COMMLIB_SHM_RING_KB", str(RING >> 10))
    monkeypatch.setenv("COMMLIB_SHM_SINGLE_COPY", "1")
    a, b = socket.socketpair()
    result = {}

    def acceptor():
        result["reply"] = shm.answer(b, "auto")
        b.sendall(result["reply"])

    t = threading.Thread(target=acceptor)
    t.start()
    memfd, ring = shm.offer(a, "auto")
    try:
        shm.settle(a, memfd, ring, a.recv(1))
    finally:
        os.close(memfd)
    t.join(5)
    assert result["reply"] == b"\1" and ring == RING
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    shm.close(a)
    shm.close(b)


def _write(sock, data):
    return _io.link_sendmsg(sock.fileno(), [data])


def _read(sock, n):
    buf = bytearray(n)
    got = _io.link_recv_into(sock.fileno(), buf)
    return bytes(buf[:got])


def test_both_sides_are_linked_and_a_closed_one_is_forgotten(link):
    a, b = link
    assert shm.linked(a) and shm.linked(b)
    fd = a.fileno()
    shm.close(a)
    assert not _io.shm_linked(fd)


def test_a_byte_stream_survives_wrap_around_and_partial_moves(link):
    a, b = link
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 20 * RING + 123, dtype=np.uint8).tobytes()
    sent = got = 0
    out = bytearray()
    while got < len(data):
        if sent < len(data):
            size = int(rng.integers(1, RING + 500))
            try:
                sent += _write(a, data[sent:sent + size])  # at most the room left in the ring
            except BlockingIOError:
                pass
        try:
            chunk = _read(b, int(rng.integers(1, 3 * RING)))
        except BlockingIOError:
            continue
        out += chunk
        got += len(chunk)
    assert bytes(out) == data


def test_several_buffers_go_back_to_back(link):
    a, b = link
    assert _io.link_sendmsg(a.fileno(), [b"head", memoryview(b""), np.arange(3, dtype=np.uint8), b"tail"]) == 11
    assert _read(b, 64) == b"head\x00\x01\x02tail"


def test_the_other_direction_has_its_own_ring(link):
    a, b = link
    _write(a, b"to b")
    _write(b, b"to a")
    assert _read(a, 16) == b"to a" and _read(b, 16) == b"to b"


def test_a_full_ring_refuses_then_rings_the_sleeping_writer_when_read(link):
    a, b = link
    total = 0
    with pytest.raises(BlockingIOError):
        for _ in range(100):
            n = _write(a, b"x" * (2 * RING))
            assert 0 < n <= RING // 4  # a piece at a time: the reader copies out meanwhile
            total += n
    assert total == RING
    assert _io.shm_prepare(a.fileno(), False, True) == 0  # no room: sleep on the doorbell
    assert not select.select([a], [], [], 0)[0]
    assert _read(b, 100) == b"x" * 100  # room again: the reader rings
    assert select.select([a], [], [], 5)[0]
    assert _io.shm_prepare(a.fileno(), False, True) == 1  # and the writer goes on
    assert _write(a, b"y" * 200) == 100


def test_a_sleeping_reader_is_rung_and_a_busy_one_is_not(link):
    a, b = link
    assert _io.shm_prepare(b.fileno(), True, False) == 0
    _write(a, b"wake up")
    assert select.select([b], [], [], 5)[0]
    assert _io.shm_prepare(b.fileno(), True, False) == 1
    assert _read(b, 64) == b"wake up"
    _write(a, b"again")  # b is not waiting now: no doorbell byte
    assert not select.select([b], [], [], 0.05)[0]
    assert _io.shm_pending(b.fileno())


def test_the_peers_end_comes_after_its_last_bytes(link):
    a, b = link
    _write(a, b"last words")
    shm.close(a)
    assert _io.shm_prepare(b.fileno(), True, False) == 1
    assert _read(b, 4) == b"last"
    assert _read(b, 64) == b" words"
    assert _read(b, 64) == b""  # then end of stream, as recv() gives it
    assert _io.shm_pending(b.fileno())


def test_writing_to_a_peer_that_is_gone_is_a_broken_pipe(link):
    a, b = link
    shm.close(b)
    assert _io.shm_prepare(a.fileno(), False, True) == 1  # the doorbell socket says the peer is gone
    with pytest.raises(BrokenPipeError):
        _write(a, b"anyone?")


def test_socket_mode_declines_a_segment_and_both_sides_stay_plain(monkeypatch):
    a, b = socket.socketpair()
    try:
        replies = {}
        t = threading.Thread(target=lambda: replies.setdefault("r", shm.answer(b, "socket")))
        t.start()
        memfd, ring = shm.offer(a, "auto")
        t.join(5)
        assert replies["r"] == b"\0"
        shm.settle(a, memfd, ring, replies["r"])
        os.close(memfd)
        assert not shm.linked(a) and not shm.linked(b)
    finally:
        a.close()
        b.close()


def test_settings_are_checked(monkeypatch):
    monkeypatch.setenv("COMMLIB_TRANSPORT", "pigeon")
    with pytest.raises(CommError, match="COMMLIB_TRANSPORT='pigeon'"):
        shm.mode()
    for value in ("auto", "shm", "socket", "tcp"):
        monkeypatch.setenv("COMMLIB_TRANSPORT", value)
        assert shm.mode() == value
    monkeypatch.setenv("COMMLIB_SHM_RING_KB", "100")
    with pytest.raises(CommError, match="power of two"):
        shm.ring_bytes()
    monkeypatch.delenv("COMMLIB_SHM_RING_KB")
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", "4")
    assert shm.ring_bytes() == 1 << 20
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", "64")
    assert shm.ring_bytes() == 128 << 10  # never so small that a 64 KiB send stops being eager


def test_a_large_piece_is_copied_once_straight_from_the_writers_memory(link):
    a, b = link
    assert _io.shm_single_copy(a.fileno()) == (True, True)  # one process: it may read itself
    big = np.arange(1 << 16, dtype=np.float64).view(np.uint8)  # 512 KiB, the ring holds 4 KiB
    # the header goes through the ring, the payload is offered as a region: nothing of it is
    # reported written until the reader has copied it
    assert _io.link_sendmsg(a.fileno(), [b"HDR!", big]) == 4
    with pytest.raises(BlockingIOError):
        _io.link_sendmsg(a.fileno(), [big])
    assert _io.shm_prepare(a.fileno(), False, True) == 0  # the writer sleeps until the reader copies
    out = bytearray(4 + big.nbytes)
    view = memoryview(out)
    assert _io.link_recv_into(b.fileno(), view[:2]) == 2  # partial reads: ring bytes, then the region
    assert _io.link_recv_into(b.fileno(), view[2:100]) == 2  # a read stops where the region begins
    got = 4 + _io.link_recv_into(b.fileno(), view[4:100])
    assert got == 100  # the region's first 96 bytes, copied from the writer's array
    assert select.select([a], [], [], 5)[0]  # the sleeping writer was rung
    assert _io.link_sendmsg(a.fileno(), [big]) == 96
    while got < len(out):
        got += _io.link_recv_into(b.fileno(), view[got:got + 200_000])
    assert bytes(out) == b"HDR!" + big.tobytes()
    assert _io.link_sendmsg(a.fileno(), [big[96:]]) == big.nbytes - 96  # the rest, reported at once
    _write(a, b"after")  # and the ring carries on behind the region
    assert _read(b, 16) == b"after"


def _pair_with(monkeypatch, setting, local):
    if setting is None:
        monkeypatch.delenv("COMMLIB_SHM_SINGLE_COPY", raising=False)
    else:
        monkeypatch.setenv("COMMLIB_SHM_SINGLE_COPY", setting)
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", str(local))
    monkeypatch.setenv("COMMLIB_SHM_RING_KB", "4")
    a, b = socket.socketpair()
    t = threading.Thread(target=lambda: b.sendall(shm.answer(b, "auto")))
    t.start()
    memfd, ring = shm.offer(a, "auto")
    shm.settle(a, memfd, ring, a.recv(1))
    os.close(memfd)
    t.join(5)
    return a, b


CORES = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("setting,local", [(None, 1), (None, CORES), ("0", 2 * CORES + 1)])
def test_single_copy_is_off_with_a_core_a_rank_or_when_refused(monkeypatch, setting, local):
    a, b = _pair_with(monkeypatch, setting, local)
    try:
        assert _io.shm_single_copy(a.fileno()) == (False, False)
        big = np.zeros(1 << 16, np.uint8)
        assert _io.link_sendmsg(a.fileno(), [big]) == 1024  # a ring piece, not a region
    finally:
        shm.close(a)
        shm.close(b)


def test_single_copy_is_on_for_large_pieces_where_ranks_outnumber_cores(monkeypatch):
    """Unset, with more local ranks than cores: pieces above 8 MiB go as regions, smaller ones
    through the ring."""
    a, b = _pair_with(monkeypatch, None, CORES + 1)
    try:
        assert _io.shm_single_copy(a.fileno()) == (True, True)
        assert _io.link_sendmsg(a.fileno(), [np.zeros(8 << 20, np.uint8)]) == 1024  # not above 8 MiB
        _read(b, 1024)
        big = np.arange((8 << 20) + 16, dtype=np.uint8)
        with pytest.raises(BlockingIOError):
            _io.link_sendmsg(a.fileno(), [big])  # offered as a region: reported as the reader copies
        out = bytearray(big.nbytes)
        assert _io.link_recv_into(b.fileno(), memoryview(out)) == big.nbytes  # one read, the whole region
        assert bytes(out) == big.tobytes()
        assert _io.link_sendmsg(a.fileno(), [big]) == big.nbytes
    finally:
        shm.close(a)
        shm.close(b)
        _io.shm_single_copy_min(shm.SINGLE_COPY_MIN)


def test_single_copy_settings_are_checked(monkeypatch):
    monkeypatch.setenv("COMMLIB_SHM_SINGLE_COPY", "lots")
    with pytest.raises(CommError, match="COMMLIB_SHM_SINGLE_COPY='lots'"):
        shm.single_copy()
    monkeypatch.setenv("COMMLIB_SHM_SINGLE_COPY", "")
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", "four")
    with pytest.raises(CommError, match="COMMLIB_LOCAL_SIZE='four'"):
        shm.single_copy()


def _plan_rows(**step):
    b = _plan.Builder("t", 1)
    b.step(**step)
    return b.plan().rows


def _run_rows(fd_send, fd_recv, rows, x, res, dtype_code, op_code):
    ring = np.empty(1 << 14, np.uint8)
    stepper = _io.Stepper(np.zeros(4, np.int64), 4096, -1, ring.ctypes.data, ring.nbytes, 0.0, 0.0)
    sfd = np.array([fd_send], np.int32)
    rfd = np.array([fd_recv], np.int32)
    slots = _plan.slots(x=x.ctypes.data, res=0 if res is None else res.ctypes.data)
    return _io.execute(stepper, rows, 1, slots, _plan.even(x.size, x.itemsize), sfd, rfd, b"\7" * 56,
                       dtype_code, op_code, time.monotonic() + 20, 0, False)


@pytest.mark.parametrize("dtype,count,skew", [
    ("float32", 3000, 0), ("float64", 2001, 0), ("complex128", 999, 0), ("int8", 5001, 0),
    ("int16", 4099, 0), ("float32", 3000, 3), ("complex128", 999, 8)])
@pytest.mark.parametrize("swap,init", [(False, False), (True, False), (False, True)])
def test_a_reduction_reads_the_ring_in_place_and_matches_numpy(link, dtype, count, skew, swap, init):
    """A reduce step over a link reduces from the ring itself: payloads longer than the 4 KiB ring,
    elements across its wrap, a stream skewed off the element size (then through the scratch
    ring), each operand order; every result equal to NumPy's."""
    a, b = link
    if skew:  # bytes ahead of the message shift its payload off the element alignment in the ring
        assert _write(a, b"s" * skew) == skew and _read(b, skew) == b"s" * skew
    rng = np.random.default_rng(count + skew)
    sent = (rng.integers(-50, 50, count) + (1j * rng.integers(-5, 5, count) if "complex" in dtype else 0)).astype(dtype)
    mine = (rng.integers(-50, 50, count) + (1j * rng.integers(-5, 5, count) if "complex" in dtype else 0)).astype(dtype)
    res = np.zeros_like(mine) if init else mine.copy()
    code, op = _dtypes.dtype_code(np.dtype(dtype)), _dtypes.op_code("sum")
    recv_rows = _plan_rows(src=0, recv=(_plan.RES, 0, 1), reduce=True, swap=swap,
                           init=(_plan.X, 0, 1) if init else None)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("send", _run_rows(
        a.fileno(), -1, _plan_rows(dst=1, send=(_plan.X, 0, 1)), sent, None, code, op)))
    t.start()
    got = _run_rows(-1, b.fileno(), recv_rows, mine, res, code, op)
    t.join(20)
    assert out["send"] == (_io.OK, 1) and got == (_io.OK, 1)
    np.testing.assert_array_equal(res, mine + sent)
