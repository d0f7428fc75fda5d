"""The step loop and the wake descriptor (in-process sockets, one forked child, no launcher).

A job that fails writes the wake descriptor of every rank. A rank blocked in a
step must stop then -- unless bytes it is waiting for are already there: a
peer that completed the step before failing sent them first, so the step
completes here too, and the failure is raised by the next call.
"""
import os
import signal
import socket
import time

import numpy as np
import pytest

from commlib import _kernels
from commlib._transport import _io

pytestmark = pytest.mark.timeout(30)

N = 4096


def _blocked_step_then(deliver, yield_spin=False):
    """Fork a child that runs a receive step of N bytes (no spin, or a 50 us yielding one), wait until it
    sleeps in poll, stop it, call deliver(data_sock, wake_w), let it go on.
    Returns (the step's status, whether the received bytes are the ones sent)."""
    a, b = socket.socketpair()
    wake_r, wake_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only C code and os._exit
        code = 99
        try:
            buf = np.zeros(N, np.uint8)
            stepper = _io.Stepper(np.zeros(4, np.int64), 256 << 10, wake_r, 0, 0, 50e-6 if yield_spin else 0.0,
                                  0.0, yield_spin, yield_spin)
            b.setblocking(False)
            rc = stepper.raw(-1, b"", 0, 0, b.fileno(), _kernels.address(buf), N, time.monotonic() + 20, False)
            code = rc * 2 + int(bool((buf == np.arange(N, dtype=np.uint8)).all()))
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 10
        while not _sleeping_in_poll(pid):
            assert time.monotonic() < deadline, "the child never blocked in poll"
            time.sleep(0.01)
        os.kill(pid, signal.SIGSTOP)
        os.waitpid(pid, os.WUNTRACED)
        deliver(a, wake_w)  # while it is stopped: poll sees everything at once when it resumes
        os.kill(pid, signal.SIGCONT)
        _, status = os.waitpid(pid, 0)
    finally:
        for fd in (wake_r, wake_w):
            os.close(fd)
        a.close()
        b.close()
    code = os.waitstatus_to_exitcode(status)
    assert code != 99, "the step raised in the child"
    return code // 2, bool(code % 2)


def _sleeping_in_poll(pid):
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read()
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state == "S" and ("poll" in wchan or wchan in ("", "0"))


@pytest.mark.parametrize("yield_spin", [False, True], ids=["no-spin", "yield-spin"])
def test_bytes_already_there_win_over_the_wake(yield_spin):
    def data_then_wake(sock, wake_w):
        sock.sendall(np.arange(N, dtype=np.uint8).tobytes())
        os.write(wake_w, b"x")
    rc, intact = _blocked_step_then(data_then_wake, yield_spin)
    assert rc == _io.OK and intact


@pytest.mark.parametrize("yield_spin", [False, True], ids=["no-spin", "yield-spin"])
def test_the_wake_stops_a_step_with_nothing_to_do(yield_spin):
    def wake_only(sock, wake_w):
        os.write(wake_w, b"x")
    rc, _ = _blocked_step_then(wake_only, yield_spin)
    assert rc == _io.WAKE


def test_part_of_the_bytes_then_the_wake_stops_after_taking_them():
    def half(sock, wake_w):
        sock.sendall(np.arange(N // 2, dtype=np.uint8).tobytes())
        os.write(wake_w, b"x")
    rc, _ = _blocked_step_then(half)
    assert rc == _io.WAKE  # took what was there, then found nothing left to do but wait


@pytest.mark.parametrize("nbytes", [8, 60 << 10, 1 << 20])  # latency-bound steps yield-spin, larger ones do not
def test_yield_spin_steps_deliver_late_bytes(nbytes):
    """A step that spins by sched_yield() (ranks outnumber cores) takes bytes that come while it
    spins, and after it has given up spinning, intact, whatever the step's size."""
    import threading

    a, b = socket.socketpair()
    wake_r, wake_w = os.pipe()
    try:
        b.setblocking(False)
        stepper = _io.Stepper(np.zeros(4, np.int64), 256 << 10, wake_r, 0, 0, 50e-6, 0.0, True, True)
        want = (np.arange(nbytes) % 251).astype(np.uint8)
        for delay in (0.0, 20e-6, 5e-3):  # inside the spin, at its edge, long after it
            got = np.zeros(nbytes, np.uint8)
            sender = threading.Timer(delay, a.sendall, [want.tobytes()])
            sender.start()
            rc = stepper.raw(-1, b"", 0, 0, b.fileno(), _kernels.address(got), nbytes, time.monotonic() + 10, False)
            sender.join()
            assert rc == _io.OK and (got == want).all()
    finally:
        for fd in (wake_r, wake_w):
            os.close(fd)
        a.close()
        b.close()


def test_peer_checks_back_off_over_a_long_stall():
    """The step loop reports SLOW after check_s without progress; each check that finds nothing
    wrong widens the next interval to a quarter of the stall so far (base at least, the cap at
    most), and the next operation starts again from the base."""
    a, b = socket.socketpair()
    a.setblocking(False)  # as every socket of the step loop
    wake_r, wake_w = os.pipe()
    buf = np.zeros(64, np.uint8)
    try:
        stepper = _io.Stepper(np.zeros(4, np.int64), 256 << 10, wake_r, 0, 0, 0.0, 0.05)
        assert stepper.check_s == stepper.check_base == 0.05

        def slow_after(resume):  # a receive from a peer that sends nothing: seconds until SLOW
            t0 = time.monotonic()
            rc = stepper.raw(-1, b"", 0, 0, a.fileno(), buf.ctypes.data, buf.nbytes, t0 + 10, resume)
            assert rc == _io.SLOW, rc
            return time.monotonic() - t0

        assert slow_after(False) < 0.5
        t = time.monotonic()
        assert stepper.check_later(t, 8.0) == 0.05  # 0.05 s into the stall: still the base
        assert stepper.check_later(t + 2.0, 8.0) == pytest.approx((2.0 + 0.05) / 4)
        assert stepper.check_later(t + 1000.0, 8.0) == 8.0  # capped
        stepper.check_later(t + 0.8, 8.0)  # a quarter of 0.85 s
        assert 0.15 < slow_after(True) < 2.0
        stepper.check_reset()
        assert stepper.check_s == 0.05 and slow_after(False) < 0.5
        assert stepper.check_later(time.monotonic(), 8.0) == 0.05  # a new stall starts from the base
    finally:
        for fd in (wake_r, wake_w):
            os.close(fd)
        a.close()
        b.close()
