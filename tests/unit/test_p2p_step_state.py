"""A blocking receive that stops midway resumes from its own state, not another thread's.

The blocking point-to-point path has one stepper per process, used under the engine's lock; a
receive that stops midway (a slow sender) lets the lock go between its steps, and a blocking send
or receive of another thread may step meanwhile. In-process over socket pairs: the receive resumes
correctly once its saved state is put back (`PointToPoint.save_step`/`restore_step`), and reads a
payload byte as a header byte without it (what two threads' receives did before: a frame "from
another rank" on a connection).
"""
import socket
import time

import numpy as np
import pytest

from commlib._transport import _io
from commlib._transport.p2p import PointToPoint
from commlib._wire import message_header

pytestmark = pytest.mark.timeout(30)


class _Conn:
    def __init__(self, sock):
        self.sock, self.fd = sock, sock.fileno()


def _p2p():
    p2p = PointToPoint.__new__(PointToPoint)
    p2p.rank, p2p.ep = 0, None
    p2p.state = np.zeros(4, dtype=np.int64)
    # a slice of 20 ms without progress ends a step (FAST_PATH_SLICE_S)
    p2p.stepper = _io.Stepper(p2p.state, 256 << 10, -1, 0, 0, 0.0, 0.02, False, False)
    return p2p


def _pair():
    mine, theirs = socket.socketpair()
    mine.setblocking(False)
    return _Conn(mine), theirs


def _frame(source, data):
    return message_header(group=7, source=source, tag=3, dtype=255, count=data.nbytes, nbytes=data.nbytes)


def _interrupted(p2p, size, first):
    """Rank 1's frame of `size` bytes arrives in two parts; between them another thread's receive of
    rank 2's frame runs on the same stepper. Returns (what the first step got, the state it saved,
    a function receiving the rest and returning the step's result and whether the bytes are right)."""
    big = np.arange(size, dtype=np.uint8) % 251
    small = np.full(64, 9, dtype=np.uint8)
    conn1, end1 = _pair()
    conn2, end2 = _pair()
    hdr1, hdr2 = _frame(1, big), _frame(2, small)
    out1, out2 = np.zeros_like(big), np.zeros_like(small)
    deadline = time.monotonic() + 10
    end1.sendall(hdr1 + big[:first].tobytes())
    got = p2p.recv_step(conn1, hdr1, out1.ctypes.data, big.nbytes, deadline, "recv", 1, False)
    assert got == len(hdr1) + first  # stopped midway: the sender is slow
    saved = p2p.save_step()  # (as _io.P2PFast does before letting the lock go)
    end2.sendall(hdr2 + small.tobytes())  # another thread's whole receive, on the shared stepper
    assert p2p.recv_step(conn2, hdr2, out2.ctypes.data, small.nbytes, deadline, "recv", 2, False) is None
    assert np.array_equal(out2, small)

    def rest(step):
        end1.sendall(big[first:].tobytes())
        result = step(conn1, hdr1, out1.ctypes.data, big.nbytes, deadline)
        for sock in (conn1.sock, end1, conn2.sock, end2):
            sock.close()
        return result, np.array_equal(out1, big)
    return got, saved, rest


def _resume(p2p):
    return lambda conn, hdr, addr, nbytes, deadline: p2p.recv_step(conn, hdr, addr, nbytes, deadline, "recv", 1, True)


def test_a_receive_resumes_from_its_saved_state():
    p2p = _p2p()
    _, saved, rest = _interrupted(p2p, 4000, 1500)
    p2p.restore_step(saved)
    assert rest(_resume(p2p)) == (None, True)


def test_without_it_the_other_receive_state_misreads_the_frame():
    p2p = _p2p()
    _, _, rest = _interrupted(p2p, 4000, 1500)
    assert rest(_resume(p2p)) != (None, True)  # (the hazard the saved state removes)


def test_the_engine_resumes_a_blocking_receive_from_the_state_it_saved():
    import threading
    import types

    from commlib._engine.fastpath import FastPaths

    class _Engine(FastPaths):
        def __init__(self, p2p):
            self.lock, self.p2p = threading.RLock(), p2p

        def idle(self):
            return True

    p2p = _p2p()
    p2p.ep = types.SimpleNamespace(notices=types.SimpleNamespace(current=None))
    got, saved, rest = _interrupted(p2p, 3000, 1000)
    engine = _Engine(p2p)
    assert rest(lambda conn, hdr, addr, nbytes, deadline: engine._step_frame(
        conn, hdr, addr, nbytes, deadline, "recv", 1, first=got, saved=saved)) == (None, True)
