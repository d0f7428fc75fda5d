"""commrun's output relay (_Stream) in process: whole tagged lines, and no byte
lost when its own stdout is unbuffered and signals land mid-write."""
import io
import os
import signal
import threading
import time

import pytest

from commrun import supervise


def _slow_reader(fd, out):
    while data := os.read(fd, 4096):
        out.append(data)
        time.sleep(0.0002)  # a consumer slower than commrun: its writes block on a full pipe


def test_unbuffered_sink_with_signals_mid_write_loses_nothing():
    """Under PYTHONUNBUFFERED sys.stdout.buffer is a raw FileIO: a write that a
    signal interrupts returns short. commrun takes SIGCHLD whenever a rank exits
    (and handles SIGINT/SIGTERM/SIGHUP); a short write must be finished, not dropped."""
    r, w = os.pipe()
    sink = open(w, "wb", buffering=0)  # what sys.stdout.buffer is under PYTHONUNBUFFERED
    got, stop = [], threading.Event()
    reader = threading.Thread(target=_slow_reader, args=(r, got))
    pid = os.getpid()

    def pester():
        while not stop.is_set():
            os.kill(pid, signal.SIGUSR1)
            time.sleep(0.001)  # a signal a millisecond: the interruptions under test, not a wait

    old = signal.signal(signal.SIGUSR1, lambda *_: None)
    killer = threading.Thread(target=pester)
    try:
        reader.start()
        killer.start()
        stream = supervise._Stream(b"[3] ", sink)
        lines = [(b"%d" % (i % 10)) * (1000 + 37 * i) + b"\n" for i in range(400)]
        blob = b"".join(lines)
        for start in range(0, len(blob), 50000):  # as os.read hands it over: cut mid-line
            stream.feed(blob[start:start + 50000])
        stream.feed(b"no newline at exit")
        stream.finish()
    finally:
        stop.set()
        killer.join()
        sink.close()
        reader.join()
        signal.signal(signal.SIGUSR1, old)
        os.close(r)
    want = b"".join(b"[3] " + line for line in lines) + b"[3] no newline at exit\n"
    out = b"".join(got)
    assert len(out) == len(want), f"{len(want) - len(out)} bytes lost"
    assert out == want


def test_non_file_sink_short_writes_finished():
    class Trickle(io.RawIOBase):
        def __init__(self):
            self.data = bytearray()

        def writable(self):
            return True

        def write(self, b):
            n = min(len(b), 7)
            self.data += bytes(b[:n])
            return n

        def fileno(self):
            raise io.UnsupportedOperation("no fd")

    sink = Trickle()
    stream = supervise._Stream(b"[0] ", sink)
    stream.feed(b"a" * 100 + b"\nbb")
    stream.feed(b"b\n")
    assert bytes(sink.data) == b"[0] " + b"a" * 100 + b"\n[0] bbb\n"


@pytest.mark.parametrize("limit_hit", [False, True])
def test_overlong_partial_line_passed_on_once_tagged(monkeypatch, limit_hit):
    r, w = os.pipe()
    sink = open(w, "wb", buffering=0)
    monkeypatch.setattr(supervise, "PARTIAL_LINE_LIMIT", 10 if limit_hit else 1 << 16)
    stream = supervise._Stream(b"[1] ", sink)
    stream.feed(b"x" * 25)
    stream.feed(b"y\nz")
    stream.finish()
    sink.close()
    out = os.read(r, 1000)
    os.close(r)
    assert out == b"[1] " + b"x" * 25 + b"y\n[1] z\n"
