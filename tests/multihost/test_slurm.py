"""Under a real Slurm: srun alone, an sbatch script, commrun inside salloc, scancel, a node's slurmd killed.

The cluster (_slurm.SlurmCluster) is Debian's slurm-wlm and munge on this
machine: slurmctld on a namespace host that is also the submit host, one
slurmd per compute node, each node a network namespace with its own address
and host name. The nodes are named sn1, sn2, sn3, sn5 with 2, 2, 2 and 1 CPUs,
so Slurm itself hands out the compressed forms `sn[1-3,5]` and `2(x3),1`.
Skipped, with the reason, where Slurm or namespaces are not available
(.ci/run installs slurm-wlm).
"""
import os
import re
import signal
import sys
import time

import pytest

from _netns import REPO, Job, leftovers
from _slurm import SlurmCluster

pytestmark = pytest.mark.timeout(300)
NODES = {"sn1": 2, "sn2": 2, "sn3": 2, "sn5": 1}
BLOCK = ["sn1", "sn1", "sn2", "sn2", "sn3", "sn3", "sn5"]  # rank -> node, as Slurm and commrun place 7
HELLO = os.path.join(REPO, "examples", "slurm", "hello_nodes.py")
LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases", "collective_loop.py")


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster(NODES, "10.236.11") as c:
        yield c


def _env(cluster, **extra):
    env = cluster.env(**extra)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", os.defpath)])
    return env


def _run(cluster, *args, timeout=150, **extra):
    p = cluster.run(*args, timeout=timeout, env=_env(cluster, **extra))
    return p.returncode, p.stdout, p.stderr


def _hosts(out):
    """{rank: host} from hello_nodes.py's lines."""
    return {int(m[1]): m[3] for m in re.finditer(r"rank (\d+) of (\d+) on (\S+): all_reduce ok", out)}


def _routes(err):
    """{rank: {peer: route}} from COMMLIB_VERBOSE lines."""
    got = {}
    for m in re.finditer(r"commlib rank (\d+) on \S+: listening on [^;]*?; peers: (.*)", err):
        got[int(m[1])] = {int(p.split(" ", 1)[0]): p.split(" ", 1)[1] for p in m[2].split("; ")}
    return got


def _job_id(cluster, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ids = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.split()
        if ids:
            return ids[0]
        time.sleep(0.2)
    pytest.fail("no running job in squeue")


def test_srun_alone_forms_one_world(cluster):
    rc, out, err = _run(cluster, "srun", "-n", "7", sys.executable, HELLO, COMMLIB_VERBOSE=1)
    assert rc == 0, f"exit {rc}\n{out}\n{err}\n{cluster.logs()}"
    assert _hosts(out) == dict(enumerate(BLOCK)), out
    routes = _routes(err)
    assert sorted(routes) == list(range(7)), err
    for r, peers in routes.items():  # one node's ranks by shared memory, the others' by TCP
        for p, route in peers.items():
            assert route.startswith("shared memory" if BLOCK[p] == BLOCK[r] else "tcp 10.236.11."), (r, p, route)


def test_sbatch_script_as_documented(cluster, tmp_path):
    """examples/slurm/job.sbatch, as docs/slurm.md shows it: srun, then commrun, in one batch job."""
    out_file = tmp_path / "job.out"
    os.chmod(tmp_path, 0o755)
    rc, out, err = _run(cluster, "sbatch", "--wait", f"--output={out_file}",
                        os.path.join(REPO, "examples", "slurm", "job.sbatch"))
    text = out_file.read_text() if out_file.exists() else "(no output file)"
    assert rc == 0, f"exit {rc}\n{out}\n{err}\n{text}\n{cluster.logs()}"
    assert re.search(r"Submitted batch job \d+", out), out
    lines = [line for line in text.splitlines() if "all_reduce ok" in line]
    assert len(lines) == 8, text  # 4 by srun, then 4 by commrun
    assert _hosts("\n".join(lines[:4])) == dict(enumerate(BLOCK[:4])), text
    assert _hosts(re.sub(r"^\[\d+\] ", "", "\n".join(lines[4:]), flags=re.M)) == dict(enumerate(BLOCK[:4])), text
    assert "COMMLIB_SECRET is not set" not in text


def test_commrun_in_salloc_uses_the_allocation(cluster):
    rc, out, err = _run(cluster, "salloc", "-n", "7", "commrun", "-v", HELLO)
    assert rc == 0, f"exit {rc}\n{out}\n{err}\n{cluster.logs()}"
    assert re.search(r"commrun: Slurm job \d+: sn1:2, sn2:2, sn3:2, sn5:1; ranks on other nodes started by "
                     r"`srun ", err), err
    assert _hosts(re.sub(r"^\[\d+\] ", "", out, flags=re.M)) == dict(enumerate(BLOCK)), out
    # -n below the allocation fills its slots in order
    rc, out, err = _run(cluster, "salloc", "-n", "7", "commrun", "-n", "3", HELLO)
    assert rc == 0, f"exit {rc}\n{out}\n{err}"
    assert _hosts(re.sub(r"^\[\d+\] ", "", out, flags=re.M)) == dict(enumerate(BLOCK[:3])), out


def test_torch_batch_script_as_documented(cluster, tmp_path):
    """examples/slurm/torch_job.sbatch as the docs submit it (sbatch --wait). Over 20 s (about 40 s on 2
    cores): Slurm schedules the batch step, then four ranks each import torch on two cores."""
    pytest.importorskip("torch")
    out_file = tmp_path / "torch.out"
    rc, out, err = _run(cluster, "sbatch", "--wait", f"--output={out_file}",
                        os.path.join(REPO, "examples", "slurm", "torch_job.sbatch"))
    text = out_file.read_text() if out_file.exists() else "(no output file)"
    assert rc == 0, f"exit {rc}\n{out}\n{err}\n{text}\n{cluster.logs()}"
    got = {int(m[1]): m[2] for m in re.finditer(r"torch rank (\d+) of 4 on (\S+): all_reduce ok", text)}
    assert got == dict(enumerate(BLOCK[:4])), text


@pytest.mark.parametrize("launch", ["srun", "commrun"])
def test_a_failing_rank_is_named_on_every_other(cluster, launch):
    marker = f"slurm-exit-{launch}-{os.getpid()}"
    case = os.path.join(os.path.dirname(LOOP), "rank_exits.py")
    argv = ["srun", "-n", "4", sys.executable, case, marker] if launch == "srun" else \
        ["salloc", "-n", "4", "commrun", case, marker]
    rc, out, err = _run(cluster, *argv, COMMLIB_TIMEOUT=60)
    text = out + err
    caught = re.findall(r"rank (\d): caught PeerLost: (.*)", text)
    assert sorted(int(r) for r, _ in caught) == [0, 2, 3], text
    assert all("lost rank 1 (exited with code 7)" in why for _, why in caught), text
    assert rc != 0, text
    if launch == "commrun":  # the first failure wins: rank 1's code, not a survivor's
        assert rc == 7, text
        assert re.findall(r"commrun: rank (\d) \(host sn\d, pid \d+\) (exited with code \d+)", text)[:1] == \
            [("1", "exited with code 7")], text
    assert cluster.wait_gone(30) == [], cluster.processes()
    assert leftovers(marker) == []


def _interrupted(cluster, argv, act, timeout):
    """Run argv (4 ranks of collective_loop.py) on the submit host; once every rank loops, act();
    (exit code, output, seconds from act() to the end)."""
    job = Job(cluster.argv(*argv), _env(cluster, COMMLIB_TIMEOUT=60))
    try:
        assert job.wait_for(lambda lines: sum("looping" in line for line in lines) == 4, 90), job.output()
        start = time.monotonic()
        act()
        rc = job.finish(timeout)
        return rc, job.output(), time.monotonic() - start
    finally:
        job.kill()


@pytest.mark.parametrize("launch", ["srun", "commrun"])
def test_scancel_ends_the_job(cluster, launch):
    marker = f"slurm-scancel-{launch}-{os.getpid()}"
    if launch == "srun":
        argv = ["srun", "-n", "4", sys.executable, LOOP, marker]
    else:
        argv = ["salloc", "-n", "4", "commrun", LOOP, marker]
    jid = []

    def cancel():
        jid.append(_job_id(cluster))
        assert cluster.run("scancel", jid[0]).returncode == 0

    rc, out, took = _interrupted(cluster, argv, cancel, 60)
    jid = jid[0]
    assert rc != 0 and took < 30, f"exit {rc} after {took:.1f} s\n{out}"
    if launch == "srun":
        assert re.search(rf"STEP {jid}\.0 ON sn\d CANCELLED", out), out
    else:
        assert re.search(r"commrun: rank \d .*(killed by|exited)", out), out
    assert cluster.wait_gone(30) == [], cluster.processes()
    assert leftovers(marker) == []


def test_slurmd_killed_mid_job_ends_it():
    """A node's slurmd SIGKILLed under a running srun job: Slurm declares the node failed after
    SlurmdTimeout and cancels the step; the ranks on the other node are terminated, the ranks on
    the lost node (their slurmstepd outlives slurmd) lose their peers and end by commlib's PeerLost.
    Nothing is left on any node. Over 20 s: a cluster of its own to start, and Slurm's SlurmdTimeout
    (5 s, the shortest that runs reliably here) and node-failure handling are what is under test."""
    marker = f"slurm-slurmd-{os.getpid()}"
    with SlurmCluster({"sn1": 2, "sn2": 2}, "10.236.12", slurmd_timeout=5) as c:
        rc, out, took = _interrupted(c, ["srun", "-n", "4", sys.executable, LOOP, marker],
                                     lambda: os.kill(c.daemon_pid("sn2"), signal.SIGKILL), 120)
        assert rc != 0 and took < 90, f"exit {rc} after {took:.1f} s\n{out}"
        assert "Node failure on sn2" in out, out
        assert re.search(r"sn1: tasks 0-1: (Terminated|Exited)", out), out
        assert c.wait_gone(60) == [], c.processes()
        assert c.node_states().get("sn2", "").startswith("down"), c.node_states()
        assert leftovers(marker) == []

