"""COMMLIB_ENCRYPT / commrun --encrypt through the real launcher, on one host.

Same-host ranks use shared memory in clear, so these jobs force TCP (COMMLIB_TRANSPORT=tcp): then
every connection is sealed, as between hosts (tests/multihost/test_encryption_hosts.py runs the
same across namespace hosts, with the bytes on the link captured and tampered with). Results are
checked against NumPy by the cases; a rank killed mid-job is still reported as lost, and a job
whose ranks disagree about encryption stops with one clear error.
"""
import socket
import subprocess
import sys

import pytest

from _harness import base_env, batched

pytestmark = pytest.mark.timeout(150)
SEALED = {"COMMLIB_TRANSPORT": "tcp", "COMMLIB_ENCRYPT": "1"}
TRANSPORTS = ("tcp",)  # sealing applies to TCP only: one parameter, not the suite's shm and socket


@pytest.fixture(autouse=True)
def transport(monkeypatch):
    """(Instead of the suite's shm/socket parameter: sealing applies to TCP only.)"""
    monkeypatch.setenv("COMMLIB_TRANSPORT", "tcp")
    return "tcp"


test_collectives_are_right_encrypted = batched(
    "collectives.py", [2, 3, 4], env=SEALED, only=["all_gather", "reduce_scatter", "broadcast", "barrier"],
    doc="all_gather, reduce_scatter, broadcast and barrier over sealed TCP (cases/collectives.py).")


test_point_to_point_is_right_encrypted = batched(
    "p2p_programs.py", [2, 3], env=SEALED, only=["p2p", "send_first"],
    doc="send/recv/probe and 16 MiB blocking sends over sealed TCP (cases/p2p.py, cases/send_first.py).")


ROUTES = """
import threading, numpy as np, commlib as cl
g = cl.init()
x = cl.all_reduce(np.ones(300_000))
assert (x == g.size()).all()
pumps = sum(t.name.startswith("commlib-seal") for t in threading.enumerate())
print(f"rank {g.rank()} pumps {pumps}", flush=True)
"""


@pytest.mark.parametrize("flag", ["--encrypt", "env"])
def test_commrun_encrypt_seals_every_tcp_connection(flag, tmp_path):
    script = tmp_path / "routes.py"
    script.write_text(ROUTES)
    env = {"COMMLIB_TRANSPORT": "tcp", "COMMLIB_VERBOSE": "1"}
    if flag == "env":
        env["COMMLIB_ENCRYPT"] = "1"
    argv = [sys.executable, "-m", "commrun", "-n", "3", *([flag] if flag != "env" else []), str(script)]
    res = subprocess.run(argv, env=base_env(env), capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr[-3000:]
    routes = [line for line in res.stdout.splitlines() + res.stderr.splitlines() if "peers:" in line]
    assert len(routes) == 3 and all(line.count(" encrypted") == 2 for line in routes), routes
    pumps = [line for line in res.stdout.splitlines() if " pumps " in line]
    assert len(pumps) == 3 and all(int(line.split()[-1]) >= 2 for line in pumps), res.stdout


def test_without_encrypt_nothing_is_sealed(tmp_path):
    script = tmp_path / "routes.py"
    script.write_text(ROUTES)
    argv = [sys.executable, "-m", "commrun", "-n", "2", str(script)]
    res = subprocess.run(argv, env=base_env({"COMMLIB_TRANSPORT": "tcp", "COMMLIB_VERBOSE": "1"}),
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr[-3000:]
    assert " encrypted" not in res.stdout + res.stderr
    assert all(line.endswith("pumps 0") for line in res.stdout.splitlines() if " pumps " in line)


DISAGREE = """
import os
if os.environ["COMMLIB_RANK"] == "1":
    os.environ["COMMLIB_ENCRYPT"] = "1"
import commlib as cl
cl.init()
cl.barrier()
"""


def test_ranks_that_disagree_about_encryption_stop_with_one_clear_error(tmp_path):
    script = tmp_path / "disagree.py"
    script.write_text(DISAGREE)
    res = subprocess.run([sys.executable, "-m", "commrun", "-n", "3", str(script)],
                         env=base_env({"COMMLIB_TRANSPORT": "tcp"}), capture_output=True, text=True, timeout=90)
    assert res.returncode != 0
    said = "rank 1 has COMMLIB_ENCRYPT on but the coordinator has it off: set it alike for the whole job"
    assert said in res.stderr, res.stderr[-3000:]  # the coordinator's refusal, and rank 1's AuthError:
    assert "refused our credentials (is COMMLIB_SECRET the job's secret, and COMMLIB_ENCRYPT set alike" in res.stderr


def test_a_junk_value_names_the_variable(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import commlib as cl\ncl.init()\ncl.barrier()\n")
    res = subprocess.run([sys.executable, "-m", "commrun", "-n", "2", str(script)],
                         env=base_env({"COMMLIB_ENCRYPT": "maybe"}), capture_output=True, text=True, timeout=90)
    assert res.returncode != 0 and "COMMLIB_ENCRYPT='maybe': use 1" in res.stderr, res.stderr[-3000:]


KILLED = """
import os, signal, time, numpy as np, commlib as cl
g = cl.init()
t = time.monotonic()
try:
    cl.barrier()  # (rank 1 may be gone before another rank's barrier returned)
    if g.rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        cl.all_reduce(np.ones(100_000))
except cl.PeerLost as exc:
    print(f"rank {g.rank()} lost after {time.monotonic() - t:.1f} s: {exc}", flush=True)
"""


def test_a_killed_rank_is_still_reported_lost_through_the_pumps(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    res = subprocess.run([sys.executable, "-m", "commrun", "-n", "3", str(script)],
                         env=base_env(SEALED), capture_output=True, text=True, timeout=90)
    lost = [line for line in res.stdout.splitlines() if " lost after " in line]
    assert len(lost) == 2 and all("rank 1" in line for line in lost), res.stdout + res.stderr[-3000:]
    assert all(float(line.split(" lost after ")[1].split()[0]) < 10 for line in lost), lost
    assert "killed by SIGKILL" in res.stderr or "signal 9" in res.stderr or res.returncode != 0


def test_the_last_bytes_of_a_finishing_rank_arrive(tmp_path):
    """A rank sends and leaves at once: what its pump had not yet sealed is sent before it exits."""
    script = tmp_path / "last.py"
    script.write_text("""
import numpy as np, commlib as cl
g = cl.init(); r, n = g.rank(), g.size()
if r == 0:
    for k in range(1, n):
        cl.send(np.full(4_000_000, k, np.float32), dst=k)
else:
    x = cl.recv((4_000_000,), np.float32, src=0)
    assert (x == r).all()
    print(f"rank {r} got it", flush=True)
""")
    res = subprocess.run([sys.executable, "-m", "commrun", "-n", "4", str(script)],
                         env=base_env(SEALED), capture_output=True, text=True, timeout=90)
    assert res.returncode == 0 and res.stdout.count("got it") == 3, res.stdout + res.stderr[-3000:]



def _ranks(envs, code, timeout=60):
    procs = [subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for e in envs]
    try:
        return [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=timeout)]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PLAIN = "import numpy as np, commlib as cl\ng = cl.init()\nassert (cl.all_reduce(np.ones(4)) == g.size()).all()\nprint('ok')"
TORCH = """
import torch, torch.distributed as dist, commlib.torch
dist.init_process_group("commlib")
t = torch.ones(3); dist.all_reduce(t); assert t.tolist() == [dist.get_world_size()] * 3
print("ok")
"""


def _unlaunched(extra, n=2):
    port = _port()
    scrub = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "TORCHELASTIC")
    env = {k: v for k, v in base_env().items() if not k.startswith(scrub)}
    return [dict(env, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_TIMEOUT="30", COMMLIB_TRANSPORT="tcp", COMMLIB_ENCRYPT="1", **extra) for r in range(n)]


@pytest.mark.parametrize("how", ["derived from the job's identity", "through torch's store"])
def test_encryption_refuses_a_secret_others_can_know(how):
    """Without COMMLIB_SECRET a job's secret is derived from its identity (MASTER_ADDR:PORT) or
    travels through torch's TCPStore in clear: keys made from it would protect nothing."""
    if "torch" in how:
        pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 (CPU build)")
    results = _ranks(_unlaunched({}), TORCH if "torch" in how else PLAIN)
    for code, out, err in results:
        assert code != 0 and "COMMLIB_ENCRYPT=1 needs a secret only the job knows" in err, err[-2000:]
        assert "export the same COMMLIB_SECRET to every rank" in err
    words = "derived from its identity" if "derived" in how else "launcher's key-value store, in clear"
    assert any(words in err for _, _, err in results)


@pytest.mark.parametrize("code_text", [PLAIN, TORCH], ids=["init", "torch"])
def test_encryption_with_an_exported_secret_needs_no_commrun(code_text):
    if code_text is TORCH:
        pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 (CPU build)")
    for code, out, err in _ranks(_unlaunched({"COMMLIB_SECRET": "cd" * 32}, n=3), code_text):
        assert code == 0 and out.strip().endswith("ok"), err[-2000:]
