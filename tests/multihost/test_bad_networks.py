"""Bad networks between namespace hosts: delay with jitter (so reordering), loss, duplication, a
bandwidth cap, and a link that goes down for less, or for more, than the group's timeout.

The link is `_delayer.py` (a userspace emulator on the router's forwarding path: this kernel has
no netem), checked first: the round trip it adds is measured. Two hosts with two ranks each (and
three hosts in one case) run every collective and a cross-host exchange, each result checked
against NumPy: no wrong result and no false PeerLost/CommTimeout while the link is slow, lossy
or briefly down; a link down for longer than the timeout ends the job with an error naming the
unreachable rank on every rank, and nothing is left behind.
"""
import os
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _netns import Job, base_env, leftovers, run_job
from _shaped import ShapedFabric, rtt

pytestmark = [pytest.mark.timeout(240), pytest.mark.waits]  # links slow by design: ~0.35 cores

CASE = """
import sys, time, numpy as np, commlib as cl
rounds = int(sys.argv[1])
g = cl.init(); r, n = g.rank(), g.size()
bad = 0
t0 = time.monotonic()
for it in range(rounds):
    for count in (1, 4096, 200_000):
        x = (np.arange(count) % 97 + r + it).astype(np.float64)
        want = sum((np.arange(count) % 97 + k + it).astype(np.float64) for k in range(n))
        bad += not np.array_equal(cl.all_reduce(x), want)
        bad += not np.array_equal(cl.all_gather(x).reshape(n, count)[(r + 1) % n],
                                  (np.arange(count) % 97 + (r + 1) % n + it).astype(np.float64))
        bad += not np.array_equal(cl.broadcast(x.copy(), root=n - 1), (np.arange(count) % 97 + n - 1 + it))
    t = cl.all_to_all(np.full((n, 8), r * 100 + it, np.int64))
    bad += not np.array_equal(t[:, 0], np.arange(n) * 100 + it)
    got = cl.sendrecv(np.full(1000, r + it), dst=(r + 2) % n, src=(r - 2) % n)   # crosses hosts
    bad += not (got == (r - 2) % n + it).all()
    if r == 0:
        print(f"PROGRESS {it + 1}", flush=True)
cl.barrier()
print(f"RESULT rank {r} bad {bad} seconds {time.monotonic() - t0:.1f}", flush=True)
sys.exit(1 if bad else 0)
"""


def _job(f, tmp_path, rounds, timeout_s, hosts=2, per_host=2):
    case = tmp_path / "case.py"
    case.write_text(CASE)
    spec = ",".join(f"{h}:{per_host}" for h in f.hosts[:hosts])
    argv = f.commrun("--hosts", spec, "--coordinator-host", f.addr(0), str(case), str(rounds))
    return argv, base_env(COMMLIB_TIMEOUT=str(timeout_s))


def _check_right(rc, out, err, n):
    assert rc == 0, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
    results = re.findall(r"RESULT rank (\d+) bad (\d+)", out)
    assert sorted(int(r) for r, _ in results) == list(range(n)), out[-3000:]
    assert all(b == "0" for _, b in results), out[-3000:]
    assert "PeerLost" not in err and "CommTimeout" not in err, err[-3000:]


def test_the_delayer_adds_the_delay_it_claims():
    with ShapedFabric(2, "10.71", delay=0.04) as f:
        measured = rtt(f, 0, 1)
    assert 0.08 <= measured < 0.11, measured  # two crossings of 40 ms each
    assert f.counters["written"] >= 40, f.counters
    with ShapedFabric(2, "10.71", loss=0.2, dup=0.1, seed=3) as f:
        rtt(f, 0, 1, count=40)  # TCP retransmits through the loss
    assert 0.08 < f.counters["dropped"] / f.counters["read"] < 0.35, f.counters
    assert f.counters["duplicated"] > 0, f.counters


def test_the_delayer_tampers_one_byte_and_captures_payloads(tmp_path):
    """One bit of one full-size segment flipped, its TCP checksum fixed: TCP delivers the change."""
    import subprocess
    chunks, size = 10, 4000
    sent = b"".join((b"PATTERN-%d-" % i * size)[:size] for i in range(chunks))
    server = ("import socket,sys\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              "s.settimeout(30); s.bind((sys.argv[1], 5998)); s.listen(1); print('up', flush=True)\n"
              "c,_=s.accept(); c.settimeout(30); got=[]\n"
              "while (b := c.recv(65536)):\n    got.append(b)\n"
              "sys.stdout.buffer.write(b''.join(got))\n")
    client = ("import socket,sys\nc=socket.create_connection((sys.argv[1], 5998), timeout=30)\n"
              f"for i in range({chunks}):\n    c.sendall((b'PATTERN-%d-' % i * {size})[:{size}])\n"
              "c.shutdown(socket.SHUT_WR); c.recv(1); c.close()\n")
    cap = tmp_path / "cap"
    with ShapedFabric(2, "10.73", tamper_after=2, tamper_min=1000, capture=str(cap)) as f:
        srv = subprocess.Popen(["ip", "netns", "exec", f.hosts[1], sys.executable, "-c", server, f.addr(1)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert srv.stdout.readline().strip() == b"up"
            cli = subprocess.run(["ip", "netns", "exec", f.hosts[0], sys.executable, "-c", client, f.addr(1)],
                                 capture_output=True, text=True, timeout=60, check=False)
            assert cli.returncode == 0, cli.stderr
            got, err = srv.communicate(timeout=60)
            assert srv.returncode == 0, err
        finally:
            srv.kill()
            srv.wait(5)
    assert f.counters["tampered"] == 1, f.counters
    assert len(got) == len(sent), (len(got), len(sent))
    diff = [i for i, (x, y) in enumerate(zip(got, sent)) if x != y]
    assert len(diff) == 1 and got[diff[0]] ^ sent[diff[0]] == 0x01, diff[:10]
    captured = cap.read_bytes()
    assert len(captured) >= len(sent) and b"PATTERN-7-PATTERN-7-" in captured, len(captured)
    assert got[max(0, diff[0] - 32):diff[0] + 32] in captured  # the capture holds what was forwarded


SHAPES = {
    "delay 100 ms ± 50 ms": {"delay": 0.1, "jitter": 0.05},
    "delay 200 ms ± 20 ms": {"delay": 0.2, "jitter": 0.02},
    "reordering (jitter 5 ms)": {"delay": 0.002, "jitter": 0.005},
    "loss 3 %": {"loss": 0.03},
    "duplication 5 %": {"dup": 0.05},
    "loss 1 %, dup 1 %, delay 20 ± 10 ms": {"delay": 0.02, "jitter": 0.01, "loss": 0.01, "dup": 0.01},
    "50 Mbit/s and loss 2 %": {"rate": "50mbit", "loss": 0.02},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_collectives_are_right_over_a_bad_link(shape, tmp_path):
    """Over 20 s for the 200 ms link (20-25 s on 2 cores, one round): each of the round's 11 calls
    crosses the link in several steps, each step at least a 200 ms round trip; the other links 5-25 s."""
    with ShapedFabric(2, "10.72", seed=hash(shape) & 0xFFFF, **SHAPES[shape]) as f:
        argv, env = _job(f, tmp_path, 1 if "200 ms" in shape else 3, 60)
        rc, out, err, _ = run_job(argv, env, 200)
        assert not leftovers(str(tmp_path))
    _check_right(rc, out, err, 4)
    if "loss" in shape:
        assert f.counters["dropped"] > 0, f.counters
    if "dup" in shape:
        assert f.counters["duplicated"] > 0, f.counters


def test_three_hosts_over_a_jittery_lossy_link(tmp_path):
    """Over 20 s: 10 ms delay, 10 ms jitter and 2 % loss on every link make each collective slow by design."""
    with ShapedFabric(3, "10.73", delay=0.01, jitter=0.01, loss=0.02, seed=5) as f:
        argv, env = _job(f, tmp_path, 2, 60, hosts=3)
        rc, out, err, _ = run_job(argv, env, 200)
        assert not leftovers(str(tmp_path))
    _check_right(rc, out, err, 6)


def test_a_link_down_shorter_than_the_timeout_costs_time_not_an_error(tmp_path):
    """A 4 s outage of the link between two namespace hosts mid-job: the job goes on and its results are
    right. Over 20 s: the job's start across the hosts, the outage, TCP's retransmission back-off after
    it (the first resend after the link returns can come seconds later), then the remaining rounds."""
    with ShapedFabric(2, "10.74") as f:
        argv, env = _job(f, tmp_path, 40, 20)
        job = Job(argv, env)
        try:
            assert job.wait_for(lambda lines: any("PROGRESS 3" in ln for ln in lines), 90), job.output()[-3000:]
            f.link_down(True)
            time.sleep(4.0)  # the outage under test (not a wait for anything): well under COMMLIB_TIMEOUT=20
            f.link_down(False)
            rc = job.finish(150)
        finally:
            job.kill()
        assert not leftovers(str(tmp_path))
    out = job.output()
    _check_right(rc, out, out, 4)
    assert f.counters["dropped"] > 0, f.counters  # the link was down for a while


def test_a_link_down_longer_than_the_timeout_ends_the_job_on_every_rank(tmp_path):
    with ShapedFabric(2, "10.75") as f:
        argv, env = _job(f, tmp_path, 1000, 5)
        job = Job(argv, env)
        try:
            assert job.wait_for(lambda lines: any("PROGRESS 2" in ln for ln in lines), 90), job.output()[-3000:]
            f.link_down(True)
            t0 = time.monotonic()
            rc = job.finish(90)
            took = time.monotonic() - t0
        finally:
            job.kill()
            f.link_down(False)
        assert not leftovers(str(tmp_path))
    out = err = job.output()
    assert rc != 0, out[-2000:]
    assert took < 60, took
    for r in range(4):  # every rank that commrun heard from says why (a rank on the far host may be cut off)
        said = re.findall(rf"^\[{r}\] commlib\._errors\.(\w+): (.*)$", err, re.MULTILINE)
        if r < 2:  # commrun's own host: its ranks always report
            assert said, f"rank {r} said nothing\n{err[-4000:]}"
        for kind, text in said:
            assert kind in ("CommTimeout", "PeerLost"), (r, kind, text)
            assert re.search(r"rank [0-3]", text), (r, text)


THROUGHPUT = """
import sys, time, numpy as np, commlib as cl
g = cl.init(); r = g.rank()
x = np.ones(4 << 20, np.uint8)                  # 4 MiB a message
cl.barrier()
t0, sent = time.monotonic(), 0
while True:                                    # rank 0's clock decides, for both
    if r == 0:
        cl.send(x, 1)
    else:
        cl.recv_into(x, 0)
    sent += x.nbytes
    stop = cl.broadcast(np.array([time.monotonic() - t0 >= float(sys.argv[1])]), root=0)
    if stop[0]:
        break
if r == 1:
    print(f"RESULT bytes_per_s {sent / (time.monotonic() - t0):.0f}", flush=True)
"""


def _iperf3(f, seconds):
    import json
    import shutil
    import subprocess
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed (the reference for throughput over a lossy link)")
    server = subprocess.Popen(["ip", "netns", "exec", f.hosts[1], "iperf3", "-s", "-B", f.addr(1), "-p", "5301"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(20):  # until it listens, and past a run the lossy link broke off
            p = subprocess.run(["ip", "netns", "exec", f.hosts[0], "iperf3", "-c", f.addr(1), "-p", "5301", "-t",
                                str(seconds), "-J"], capture_output=True, text=True, timeout=seconds + 30,
                               check=False)
            try:
                return json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 8
            except (ValueError, KeyError):
                time.sleep(0.2)
        pytest.fail(f"iperf3 did not run: {p.stdout[-500:]} {p.stderr[-500:]}")
    finally:
        server.kill()
        server.wait(5)


@pytest.mark.parametrize("loss", [0.01, 0.03])
@pytest.mark.waits(False)  # a timing comparison: it takes a core's slot
def test_throughput_over_a_lossy_link_is_within_2x_of_iperf3(loss, tmp_path):
    """Interleaved, 3 repeats of each (2 s), medians compared. The link is capped at 200 Mbit/s (25 MB/s)
    so that both flows are bound by the link and its loss, which is what this compares: uncapped, the
    delayer, the sender and the receiver share the 2 cores at ~130 MB/s, and a CI run with the cores
    busy measured commlib's Python ranks at half of iperf3's C for want of CPU, not of loss recovery."""
    import statistics
    case = tmp_path / "tput.py"
    case.write_text(THROUGHPUT)
    ours, reference = [], []
    with ShapedFabric(2, "10.76", loss=loss, rate="200mbit", seed=9) as f:
        argv = f.commrun("--hosts", f"{f.hosts[0]}:1,{f.hosts[1]}:1", "--coordinator-host", f.addr(0),
                         str(case), "2")
        for _ in range(3):
            reference.append(_iperf3(f, 2))
            rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT="60"), 120)
            assert rc == 0, f"{out[-2000:]}\n{err[-2000:]}"
            ours.append(float(re.search(r"RESULT bytes_per_s (\d+)", out).group(1)))
        assert not leftovers(str(tmp_path))
    print(f"loss {loss:.0%}: commlib {[round(v / 1e6, 1) for v in ours]} MB/s, "
          f"iperf3 {[round(v / 1e6, 1) for v in reference]} MB/s")
    assert statistics.median(ours) >= statistics.median(reference) / 2, (ours, reference)
