"""Authentication and hostile input against a running job.

A job loops on verified all_reduces (small: recursive doubling, large: ring)
and a sendrecv ring until the test drops a stop file. Meanwhile the test
attacks every listening socket of the job -- the coordinator's TCP port, each
rank's TCP port and each rank's abstract Unix socket -- with random bytes,
truncated handshakes, huge declared lengths, a slow-loris of idle
connections, a port scan, clients that speak the protocol with a wrong
secret, and pickles whose unpickling would create a file. The job must finish
with every result correct and exit 0, the ranks' memory must stay flat, the
refusals must be logged, and the file must never appear.
"""
import os
import pickle
import random
import re
import socket
import struct
import time

import pytest

import commlib as cl
from commlib import _auth, _rendezvous, _wire as _protocol
from commlib._transport import sockets as _transport
from faultlib import listeners, record_figure

MIB = 1 << 20
RSS_GROWTH_LIMIT = 40 * MIB

JOB = """
stop_file, max_s = sys.argv[1], float(sys.argv[2])
g = cl.init(); r = g.rank(); n = g.size()
t0 = time.monotonic()
bad = iters = 0
flag = np.zeros(1, np.int64)
while True:
    for nelem, dt in ((1000, np.float64), (1 << 18, np.float32), (37, np.int64)):
        x = (np.arange(nelem) % 13 + r + iters).astype(dt)
        y = cl.all_reduce(x)
        expect = n * (np.arange(nelem) % 13 + iters) + n * (n - 1) // 2
        bad += int(not np.array_equal(y, expect.astype(dt)))
    z = cl.sendrecv(np.full(100, r * 1000 + iters, np.int32), (r + 1) % n, (r - 1) % n)
    bad += int(not np.all(z == ((r - 1) % n) * 1000 + iters))
    iters += 1
    if r == 0:
        flag[0] = os.path.exists(stop_file) or time.monotonic() - t0 > max_s
        if iters % 20 == 0:
            emit(progress=iters, t=t_wall())
    cl.broadcast(flag, root=0)
    if flag[0]:
        break
emit(iters=iters, bad=bad, seconds=time.monotonic() - t0)
sys.exit(1 if bad else 0)
"""


def _quietly(fn, *args):
    """Run one attack step; the job closing the connection on us is the expected outcome."""
    try:
        return fn(*args)
    except (OSError, EOFError):
        return None


def _send_and_close(target, data, read_first=True):
    with target.connect() as s:
        if read_first:
            _quietly(s.recv, 4096)
        _quietly(s.sendall, data)
        _quietly(s.shutdown, socket.SHUT_WR)  # the listener sees EOF instead of waiting for more
        s.settimeout(2.0)
        _quietly(s.recv, 4096)


def _random_bytes(target, rng):
    for size in (1, 3, 55, 56, 57, 100, 4096, 70_000):
        _quietly(_send_and_close, target, rng.randbytes(size), size % 2 == 0)


def _truncated_handshakes(target, rng):
    if target.kind == "coordinator":
        full = struct.pack(">I", 0) + rng.randbytes(_auth.NONCE_BYTES + _auth.DIGEST_BYTES)
    else:
        full = _transport._CLIENT_HELLO.pack(_transport._DATA_MAGIC, 0, 0, 0, rng.randbytes(32), rng.randbytes(32))
    for cut in (1, 4, len(full) // 2, len(full) - 1):
        _quietly(_send_and_close, target, full[:cut])


def _huge_lengths(target, rng):
    frame = _protocol.encode(_protocol.KIND_P2P, 0, 255, 0, _protocol.FLAG_OBJECT, 0, 0, 0, 1, 0,
                             (1 << 63) - 1, _protocol.MAX_FRAME_NBYTES)
    frame_over = frame[:-8] + struct.pack("<Q", (1 << 64) - 1)
    for data in (frame, frame_over, struct.pack(">I", 0xFFFFFFFF) + b"{", b"\xff" * 72 + frame):
        _quietly(_send_and_close, target, data)
        _quietly(_send_and_close, target, data, False)


def _wrong_secret_data_client(target, rank):
    """Emulate Endpoint.outgoing with a wrong secret: the acceptor must drop us without a proof."""
    with target.connect() as s:
        magic, nonce = _transport._SERVER_HELLO.unpack(_auth.recv_exact(s, _transport._SERVER_HELLO.size))
        assert magic == _transport._DATA_MAGIC
        cnonce = os.urandom(32)
        ident = struct.pack("<iIB", rank, 0, _transport.CH_COLL)
        wrong = os.urandom(32)
        s.sendall(_transport._CLIENT_HELLO.pack(_transport._DATA_MAGIC, rank, 0, _transport.CH_COLL, cnonce,
                                                _auth.mac(wrong, b"commlib/data/client", nonce, cnonce, ident)))
        try:
            answer = s.recv(64)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", f"{target}: answered {answer!r} to a client with the wrong secret"


class _Evil:
    """Unpickling this creates a file: the canary for 'nothing is unpickled before authentication'."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _pickles(target, canary):
    payload = pickle.dumps(_Evil(canary), protocol=4)
    frame = _protocol.encode(_protocol.KIND_P2P, 0, 255, 0, _protocol.FLAG_OBJECT, 0, 0, 0, 1, 0,
                             len(payload), len(payload)) + payload
    coord_msg = struct.pack(">I", len(payload)) + payload
    hello = _transport._CLIENT_HELLO.pack(_transport._DATA_MAGIC, 0, 0, _transport.CH_P2P, os.urandom(32),
                                          os.urandom(32))
    for data in (payload, frame, hello + frame, coord_msg, frame * 4):
        _quietly(_send_and_close, target, data)
        _quietly(_send_and_close, target, data, False)


def _slow_loris(targets, per_target, hold_s):
    socks = []
    try:
        for t in targets:
            for _ in range(per_target):
                try:
                    socks.append(t.connect(timeout=2.0))
                except OSError:
                    pass
        time.sleep(hold_s)
        return len(socks)
    finally:
        for s in socks:
            s.close()


def _port_scan(targets, count):
    done = 0
    deadline = time.monotonic() + 20
    while done < count and time.monotonic() < deadline:
        t = targets[done % len(targets)]
        try:
            s = t.connect(timeout=2.0)
            s.close()
        except OSError:
            pass
        done += 1
    return done


def _rss(procs):
    return {r: p.memory_info().rss for r, p in procs.items()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 4])
def test_hostile_clients_do_not_harm_a_running_job(jobs, tmp_path, n):
    stop_file = tmp_path / "stop"
    canary = tmp_path / "unpickled-canary"
    job = jobs(JOB, n, args=[stop_file, 60], commrun_args=["--grace", "2"]).start()
    procs = job.wait_ranks()
    job.wait_for(lambda j: j.records("progress"), 60, "the job to make progress")
    targets = listeners(job)
    kinds = {t.kind for t in targets}
    assert kinds == {"coordinator", "rank-tcp", "rank-unix"}, targets
    assert len([t for t in targets if t.kind == "rank-tcp"]) == n, targets
    for t in targets:  # a local job never listens on a wildcard address
        if t.family == socket.AF_INET:
            assert t.address[0] == "127.0.0.1", t
    rss_before = _rss(procs)
    rng = random.Random(6)

    for t in targets:
        _random_bytes(t, rng)
        _truncated_handshakes(t, rng)
        _huge_lengths(t, rng)
        _pickles(t, str(canary))
        if t.kind != "coordinator":
            _wrong_secret_data_client(t, t.rank)
    # The coordinator client with a wrong secret, doing the real protocol, for every rank number.
    coord = next(t for t in targets if t.kind == "coordinator")
    for rank in list(range(n)) + [n, 2**31 - 1]:
        with pytest.raises(cl.AuthError):
            _rendezvous.Client.connect(coord.address, os.urandom(32), rank, timeout=5)

    # Slow-loris: 100 idle connections on every listener (more than the 64 pending handshakes
    # allowed), held while the job must keep making progress.
    before = job.records("progress")[-1][1]["progress"]
    held = _slow_loris(targets, 100, hold_s=3.0)
    assert held >= len(targets) * 64, f"only {held} idle connections could be opened"
    after = job.records("progress")[-1][1]["progress"]
    assert after > before, f"the job made no progress during the slow-loris ({before} -> {after})"
    scanned = _port_scan(targets, 500)
    assert scanned == 500

    time.sleep(1.0)  # let the ranks drop what is still pending
    rss_after = _rss(procs)
    for r in procs:
        growth = rss_after[r] - rss_before[r]
        assert growth < RSS_GROWTH_LIMIT, f"rank {r}'s RSS grew by {growth / MIB:.1f} MiB"
    record_figure(f"hostile-input RSS growth per rank n={n} (MiB)",
                  {r: round((rss_after[r] - rss_before[r]) / MIB, 1) for r in procs})

    stop_file.write_text("stop")
    assert job.wait(60) == 0, job.output()
    results = job.by_rank("iters")
    assert set(results) == set(range(n)), job.output()
    for r, rec in results.items():
        assert rec["bad"] == 0, f"rank {r}: {rec['bad']} wrong results"
        assert rec["iters"] > 20, rec
    assert not canary.exists(), "a pickle from an unauthenticated connection was unpickled"
    err = job.stderr()
    for r in range(n):
        assert re.search(rf"^\[{r}\] commlib rank {r}: refused a connection from", err, re.M), \
            f"rank {r} logged no refusal\n{err[-3000:]}"
    assert "commrun: coordinator: dropped connection from" in err
    assert "too many pending handshakes" in err  # the slow-loris hit the handshake limit, and was logged
    assert "failed authentication" in err
    job.assert_no_leftovers()
