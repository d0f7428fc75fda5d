"""commrun --encrypt between namespace hosts, with the link itself watched and attacked.

The hosts are joined through `_delayer.py` (see test_bad_networks.py), which here keeps a copy of
every TCP payload that crosses between hosts (`capture`) or flips one byte of one data packet on
the way, fixing its TCP checksum so that the kernel accepts it (`tamper_after`). Without
encryption the program's bytes are on the link as they are; with it, none of them is, results are
still right, and the flipped byte ends the job with an AuthError naming the peer, on every rank,
with nothing left behind.
"""
import os
import pathlib
import re
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _netns import base_env, leftovers, run_job  # noqa: E402
from _shaped import ShapedFabric  # noqa: E402

pytestmark = pytest.mark.timeout(240)

MARKER = b"commlib-clear-text-marker:"
CASE = """
import sys, numpy as np, commlib as cl
rounds = int(sys.argv[1])
g = cl.init(); r, n = g.rank(), g.size()
pattern = np.frombuffer(%r * 40000, np.uint8)      # about 1 MB of a recognisable text
bad = 0
for it in range(rounds):
    got = cl.all_gather(pattern).reshape(n, -1)    # every rank's bytes cross to the other host
    bad += not (got == pattern).all()
    y = cl.all_reduce(np.arange(100_000, dtype=np.float64) + r + it)
    bad += not np.array_equal(y, n * (np.arange(100_000) + it) + n * (n - 1) / 2)
    z = cl.sendrecv(np.full(1000, r + it), dst=(r + 2) %% n, src=(r - 2) %% n)
    bad += not (z == (r - 2) %% n + it).all()
print(f"RESULT rank {r} bad {bad}", flush=True)
sys.exit(1 if bad else 0)
""" % MARKER


def _run(f, tmp_path, rounds, *flags, timeout_s=30):
    case = tmp_path / "case.py"
    case.write_text(CASE)
    argv = f.commrun("--hosts", f"{f.hosts[0]}:2,{f.hosts[1]}:2", "--coordinator-host", f.addr(0), *flags,
                     str(case), str(rounds))
    rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=str(timeout_s)), 200)
    assert not leftovers(str(tmp_path))
    return rc, out, err


def _right(rc, out, err):
    assert rc == 0, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
    results = re.findall(r"RESULT rank (\d+) bad (\d+)", out)
    assert sorted(int(r) for r, _ in results) == [0, 1, 2, 3] and all(b == "0" for _, b in results), out[-3000:]


def test_encrypted_bytes_between_hosts_are_not_the_programs(tmp_path):
    capture = pathlib.Path(tempfile.mkdtemp(prefix="commlib-capture-")) / "link.bin"  # (not a leftover's mark)
    with ShapedFabric(2, "10.76", capture=str(capture)) as f:
        _right(*_run(f, tmp_path, 3))                # the control: the capture sees the program's bytes
        clear = capture.stat().st_size
        _right(*_run(f, tmp_path, 3, "--encrypt", "--verbose"))
    data = capture.read_bytes()
    shutil.rmtree(capture.parent)
    assert MARKER in data[:clear]
    sealed = data[clear:]
    assert len(sealed) > 3 * 2 * 2 * 1_000_000  # the encrypted job's payloads were captured too...
    assert MARKER not in sealed and MARKER[:12] not in sealed  # ...and none of its text is in them


def test_a_changed_byte_on_the_link_ends_the_job_naming_the_peer(tmp_path):
    with ShapedFabric(2, "10.77", tamper_after=200, tamper_min=1000) as f:
        rc, out, err = _run(f, tmp_path, 100, "--encrypt")
    assert f.counters["tampered"] == 1, f.counters
    assert rc != 0, out[-3000:]
    assert "RESULT" not in out or re.search(r"bad [1-9]", out) is None  # never a wrong result
    forged = re.findall(r"^\[(\d)\] commlib\._errors\.AuthError: rank (\d): encrypted record \d+ from "
                        r"(rank \d|the coordinator) failed its integrity check", err, re.M)
    assert forged, err[-4000:]
    for shown, rank, peer in forged:
        assert shown == rank and peer != f"rank {rank}"
    said = dict(re.findall(r"^\[(\d)\] commlib\._errors\.(\w+: .*)$", err, re.M))
    assert set(said) == {"0", "1", "2", "3"}, err[-4000:]  # every rank stopped with an error...
    assert all("failed its integrity check" in text for text in said.values()), said  # ...naming the cause
