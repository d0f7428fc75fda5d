"""Fuzzing every door of a running job: the coordinator's port and each rank's TCP and Unix
listeners take random, truncated, mutated and replayed handshakes, from a process without the
secret, from one holding a stolen old secret (a previous job's), and from one that recorded a
genuine handshake of this job's secret on another connection. None may ever be answered with a
proof (the only way in), and the job under attack must finish with every result right.

The shared-memory rings are reachable only through a Unix connection that proved the secret
(the segment is a memfd passed over it, nothing is named in /dev/shm): a client that fails the
handshake while offering a segment must not get it mapped, which the ranks' maps show.

COMMLIB_FUZZ_INPUTS inputs per target (default 500 in CI; the slow run uses 10,000: see
benchmarks/RESULTS.md, "Fuzzing the listeners").
"""
import os
import random
import re
import socket
import struct
import time

import pytest

from commlib import _auth
from commlib._rendezvous import framing
from commlib._transport import shm
from commlib._transport import sockets as _transport
from faultlib import Listener, listeners, record_figure

INPUTS = int(os.environ.get("COMMLIB_FUZZ_INPUTS", "500"))
MIB = 1 << 20

JOB = """
stop_file = sys.argv[1]
g = cl.init(); r = g.rank(); n = g.size()
bad = iters = 0
flag = np.zeros(1, np.int64)
while True:
    x = (np.arange(5000) % 7 + r + iters).astype(np.float64)
    bad += int(not np.array_equal(cl.all_reduce(x), n * (np.arange(5000) % 7 + iters) + n * (n - 1) // 2))
    z = cl.sendrecv(np.full(64, r + iters, np.int64), (r + 1) % n, (r - 1) % n)
    bad += int(not np.all(z == (r - 1) % n + iters))
    iters += 1
    if r == 0:
        flag[0] = os.path.exists(stop_file)
        if iters % 20 == 0:
            emit(progress=iters)
    cl.broadcast(flag, root=0)
    if flag[0]:
        break
emit(iters=iters, bad=bad)
sys.exit(1 if bad else 0)
"""


class Door(Listener):
    """A listener of the job, spoken to as a client of its handshake would."""

    def open(self):
        return self.connect()

    def hello(self, s):
        """Read the server's hello; its nonce."""
        if self.kind == "coordinator":
            got = _auth.recv_exact(s, len(framing.MAGIC) + _auth.NONCE_BYTES)
            assert got.startswith(framing.MAGIC), got
            return got[len(framing.MAGIC):]
        magic, nonce = _transport._SERVER_HELLO.unpack(_auth.recv_exact(s, _transport._SERVER_HELLO.size))
        assert magic == _transport._DATA_MAGIC
        return nonce

    def client_hello(self, secret, nonce, rank, rng):
        """A well-formed client hello, MACed with `secret` over the server nonce `nonce`."""
        cnonce = rng.randbytes(_auth.NONCE_BYTES)
        if self.kind == "coordinator":
            rank_bytes = struct.pack(">i", rank)
            return rank_bytes + cnonce + _auth.mac(secret, framing.CLIENT_LABEL, nonce, cnonce, rank_bytes)
        group, channel = rng.choice([(0, _transport.CH_COLL), (0, _transport.CH_P2P), (rng.randrange(1, 9), 1)])
        ident = struct.pack("<iIB", rank, group, channel)
        return _transport._CLIENT_HELLO.pack(_transport._DATA_MAGIC, rank, group, channel, cnonce,
                                             _auth.mac(secret, b"commlib/data/client", nonce, cnonce, ident))


def _secret_of(proc):
    """The job's secret, read from a rank's environment (what a process of the same user can steal)."""
    env = open(f"/proc/{proc.pid}/environ", "rb").read().split(b"\0")
    value = next(v for v in env if v.startswith(b"COMMLIB_SECRET="))
    return bytes.fromhex(value.split(b"=", 1)[1].decode())


KINDS = ["random bytes", "truncated", "mutated", "old secret", "replayed", "memfd offer"]


def _one_input(door, kind, rng, secret, old_secret, size):
    """Send one hostile input on a fresh connection. Returns what the listener answered after the
    client's hello (b"" when it hung up without a proof, which is the only right answer)."""
    with door.open() as s:
        try:
            nonce = door.hello(s)
        except (OSError, EOFError):
            return b""  # closed on us before its hello (e.g. too many pending handshakes): no proof either
        rank = rng.randrange(size + 2) if rng.random() < 0.9 else rng.choice([-1, 2**31 - 1])
        if kind == "random bytes":
            data = rng.randbytes(rng.choice([1, 7, 40, 77, 78, 79, 200, 5000]))
        elif kind == "truncated":
            full = door.client_hello(secret, nonce, rank, rng)
            data = full[:rng.randrange(1, len(full))]
        elif kind == "mutated":  # this job's secret, one byte changed anywhere: the MAC no longer holds
            full = bytearray(door.client_hello(secret, nonce, rank, rng))
            full[rng.randrange(len(full))] ^= 1 << rng.randrange(8)
            data = bytes(full)
        elif kind == "old secret":
            data = door.client_hello(old_secret, nonce, rank, rng)
        elif kind == "replayed":  # a genuine hello of this job, recorded for another connection's nonce
            with door.open() as other:
                old_nonce = door.hello(other)
            data = door.client_hello(secret, old_nonce, rank, rng)
        else:  # "memfd offer": a segment offered after a hello that proves nothing
            data = door.client_hello(old_secret, nonce, rank, rng)
        try:
            if kind == "memfd offer" and door.family == socket.AF_UNIX:
                s.sendall(data)
                memfd = os.memfd_create("commlib-link")
                try:
                    os.ftruncate(memfd, 1 << 16)
                    socket.send_fds(s, [shm._OFFER.pack(shm._MAGIC, 1, 4096)], [memfd])
                finally:
                    os.close(memfd)
            else:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(3.0)
            return s.recv(4096)
        except (OSError, EOFError):
            return b""


def _genuine(door, secret, size, rng):
    """The control: this client, given the job's secret and a fresh nonce, gets the listener's proof
    (so the refusals above are the listener's doing, not a client that speaks the protocol wrong).
    It names a group (or a rank) no part of the job uses, on a channel keyed by group (a relay lane:
    point-to-point and collective connections are one per peer for every group), so nothing of
    the job is touched."""
    with door.open() as s:
        nonce = door.hello(s)
        if door.kind == "coordinator":
            s.sendall(door.client_hello(secret, nonce, size + 5, rng))  # proof, then "out of range"
        else:
            cnonce = rng.randbytes(_auth.NONCE_BYTES)
            ident = struct.pack("<iIB", 0, 99999, _transport.CH_LANE)
            s.sendall(_transport._CLIENT_HELLO.pack(_transport._DATA_MAGIC, 0, 99999, _transport.CH_LANE, cnonce,
                                                    _auth.mac(secret, b"commlib/data/client", nonce, cnonce, ident)))
            if door.family == socket.AF_UNIX:
                s.sendall(shm._OFFER.pack(shm._MAGIC, 0, 0))  # no segment offered
        return _auth.recv_exact(s, _auth.DIGEST_BYTES)


def _mapped_segments(procs):
    """{rank: how many commlib-link memfd mappings it holds}."""
    out = {}
    for r, p in procs.items():
        with open(f"/proc/{p.pid}/maps") as f:
            out[r] = sum("memfd:commlib-link" in line for line in f)
    return out


@pytest.mark.timeout(max(120, INPUTS // 10))
def test_fuzzed_listeners_never_answer_and_the_job_stays_right(jobs, tmp_path):
    n = 2
    old = jobs(JOB, n, args=[tmp_path / "stop-old"]).start()  # a previous job: its secret gets stolen
    old_secret = _secret_of(old.wait_ranks()[0])
    (tmp_path / "stop-old").write_text("stop")
    assert old.wait(60) == 0, old.output()

    stop = tmp_path / "stop"
    job = jobs(JOB, n, args=[stop]).start()
    procs = job.wait_ranks()
    job.wait_for(lambda j: j.records("progress"), 60, "the job to make progress")
    secret = _secret_of(procs[0])
    assert secret != old_secret
    doors = listeners(job, Door)
    assert {d.kind for d in doors} == {"coordinator", "rank-tcp", "rank-unix"} and len(doors) == 1 + 2 * n, doors
    maps_before = _mapped_segments(procs)
    rss_before = {r: p.memory_info().rss for r, p in procs.items()}

    rng = random.Random(28)
    answered, sent, t0 = [], 0, time.monotonic()
    for door in doors:
        for i in range(INPUTS):
            kind = KINDS[i % len(KINDS)]
            reply = _one_input(door, kind, rng, secret, old_secret, n)
            sent += 1
            if reply:
                answered.append(f"{door}: {kind} was answered {reply[:40]!r}")
    took = time.monotonic() - t0
    record_figure("listener fuzz inputs (per door, doors, seconds)", (INPUTS, len(doors), round(took, 1)))
    assert not answered, "\n".join(answered[:20])
    assert sent == INPUTS * len(doors)

    assert _mapped_segments(procs) == maps_before, "a segment offered without the secret was mapped"
    for door in doors:
        assert len(_genuine(door, secret, n, rng)) == _auth.DIGEST_BYTES, door
    before = job.records("progress")[-1][1]["progress"]
    job.wait_for(lambda j: j.records("progress")[-1][1]["progress"] > before, 60, "progress after the fuzzing")
    for r, p in procs.items():
        assert p.memory_info().rss - rss_before[r] < 40 * MIB, f"rank {r}'s memory grew"
    stop.write_text("stop")
    assert job.wait(60) == 0, job.output()[-3000:]
    results = job.by_rank("iters")
    assert set(results) == set(range(n)) and all(rec["bad"] == 0 for rec in results.values()), results
    err = job.stderr()
    for r in range(n):
        assert re.search(rf"^\[{r}\] commlib rank {r}: refused a connection from", err, re.M), err[-2000:]
    assert "failed authentication" in err  # the coordinator's refusals
    job.assert_no_leftovers()
