"""A small step's first pass runs with the GIL held; a step that must wait lets the GIL go.

`Stepper._go` tries a step of at most ONCE_MAX bytes once without releasing the GIL (a send into
room, a frame already there), and only a step that would wait releases it. In-process over
socket pairs: what is there is taken whole in that pass, and what is not is waited for while
another Python thread runs (it sends the bytes: it needs the GIL to do so). `once_only` stops
after that pass with AGAIN, and the step resumes from where it stopped.
"""
import socket
import threading
import time

import numpy as np
import pytest

from commlib._transport import _io

pytestmark = pytest.mark.timeout(30)


def _stepper(spin_s=0.0):
    return _io.Stepper(np.zeros(4, np.int64), 256 << 10, -1, 0, 0, spin_s, 0.0, False, False)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _recv(stepper, sock, out, once_only=False, resume=False):
    return stepper.raw(-1, b"", 0, 0, sock.fileno(), out.ctypes.data, out.nbytes, time.monotonic() + 10, resume,
                       once_only=once_only)


@pytest.mark.parametrize("nbytes", [8, 4096, _io.ONCE_MAX, _io.ONCE_MAX + 1, 200_000])
def test_bytes_there_are_taken_whole_and_bytes_to_come_are_waited_for(pair, nbytes):
    a, b = pair
    data = (np.arange(nbytes) % 251).astype(np.uint8)
    out = np.zeros(nbytes, np.uint8)
    if nbytes <= 100_000:  # (a socket pair's buffer holds it)
        b.sendall(data.tobytes())
        assert _recv(_stepper(), a, out) == _io.OK
        assert (out == data).all()
        out[:] = 0
    # nothing there yet: the step must wait with the GIL let go, or this thread never sends
    sender = threading.Thread(target=lambda: (time.sleep(0.05), b.setblocking(True), b.sendall(data.tobytes())))
    sender.start()
    try:
        assert _recv(_stepper(), a, out) == _io.OK
    finally:
        sender.join()
    assert (out == data).all()


def test_once_only_stops_where_it_would_wait_and_the_step_resumes(pair):
    a, b = pair
    data = np.arange(1000, dtype=np.uint8)
    out = np.zeros(1000, np.uint8)
    s = _stepper(spin_s=1.0)  # (a spin of a second: once_only must return at once all the same)
    t = time.monotonic()
    assert _recv(s, a, out, once_only=True) == _io.AGAIN
    b.sendall(data[:300].tobytes())
    assert _recv(s, a, out, once_only=True, resume=True) == _io.AGAIN  # took the 300, would wait for more
    assert time.monotonic() - t < 0.5
    assert s.state[1] == 300
    b.sendall(data[300:].tobytes())
    assert _recv(s, a, out, resume=True) == _io.OK
    assert (out == data).all()


def test_a_large_step_never_runs_its_pass_with_the_gil(pair):
    a, b = pair
    out = np.zeros(_io.ONCE_MAX + 1, np.uint8)
    b.sendall(bytes(out.nbytes))  # all there: a pass would take it, but a step this large goes without the GIL
    s = _stepper()
    assert _recv(s, a, out, once_only=True) == _io.AGAIN
    assert s.state[1] == 0
    assert _recv(s, a, out, resume=True) == _io.OK


def test_a_send_into_a_full_buffer_waits_while_the_reader_thread_drains(pair):
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    filled = 0
    while True:  # fill the pair's buffers
        try:
            filled += a.send(bytes(4096))
        except BlockingIOError:
            break
    got = bytearray()

    def drain():  # the filling, then the step's 8 bytes
        time.sleep(0.05)
        b.setblocking(True)
        b.settimeout(10)
        while len(got) < filled + 8:
            got.extend(b.recv(1 << 16))

    reader = threading.Thread(target=drain)
    reader.start()
    payload = np.arange(1, 9, dtype=np.uint8)
    try:
        rc = _stepper().raw(a.fileno(), b"", payload.ctypes.data, payload.nbytes, -1, 0, 0, time.monotonic() + 10,
                            False)
    finally:
        reader.join()
    assert rc == _io.OK
    assert bytes(got[filled:]) == payload.tobytes()
