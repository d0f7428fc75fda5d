"""commlib under a real (local) Ray: actor groups, ray.util.collective with backend "commlib",
Ray Train's TorchTrainer with TorchConfig(backend="commlib"), an actor killed mid-collective.

Each case starts its own Ray (`ray.init` on 127.0.0.2, in a temporary directory of its own) as
a plain Python driver, bounded in time; afterwards no process of that Ray may be left.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import psutil
import pytest

import _harness

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

pytest.importorskip("ray", reason="Ray is not installed (pip install 'commlib[ray]')")


def _leftovers(marker):
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid != os.getpid() and any(marker in part for part in p.info["cmdline"] or ()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def run_ray(case, n, *args, timeout=200):
    temp_dir = tempfile.mkdtemp(prefix="clray")  # short: Ray's socket paths live under it
    env = _harness.base_env({"PYTHONPATH": os.pathsep.join([_harness.REPO, _harness.CASES])})
    argv = [sys.executable, os.path.join(_harness.CASES, case), str(n), temp_dir, *args]
    try:
        rc, out, err = _harness._communicate(argv, env, timeout, cwd=temp_dir)  # fails the test past timeout
        left = psutil.wait_procs(_leftovers(temp_dir), timeout=20)[1]  # Ray's processes end after shutdown
        assert not left, f"left behind by Ray: {[' '.join(p.cmdline()) for p in left]}"
        return rc, out + err
    finally:
        for p in _leftovers(temp_dir):
            p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n, over", [(2, "shm"), (3, "shm"), (4, "shm"), (3, "socket")])
def test_actors_form_a_group(n, over, monkeypatch):
    monkeypatch.setenv("COMMLIB_TRANSPORT", over)
    rc, out = run_ray("ray_actors.py", n)
    assert rc == 0 and f"ray actors ok: {n}" in out, f"exit {rc}\n{out[-6000:]}"


@pytest.mark.timeout(240)
def test_actor_killed_mid_collective_then_restarted():
    """Over 20 s: a Ray cluster, an actor killed and Ray's restart of it (about 20 s on 2 cores)."""
    rc, out = run_ray("ray_actor_killed.py", 3)
    assert rc == 0 and "restarted ok: 3" in out, f"exit {rc}\n{out[-6000:]}"
    lost = [line for line in out.splitlines() if line.startswith("survivor ")]
    assert len(lost) == 2 and all("PeerLost" in line and "lost rank 1" in line for line in lost), out[-6000:]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n, crash", [(2, False), (3, True)])
def test_ray_train_torch_trainer_on_commlib(n, crash):
    """A Ray Train TorchTrainer whose workers' process group is commlib's (with crash: one worker dies
    mid-step and the survivors raise commlib's error). Over 20 s: a Ray cluster, torch in every worker and
    Train's own set-up and teardown (30-50 s on 2 cores)."""
    pytest.importorskip("torch")
    rc, out = run_ray("ray_train.py", n, *(["crash"] if crash else []), timeout=260)
    assert rc == 0 and f"ray train ok: {n} workers, backend commlib" in out, f"exit {rc}\n{out[-8000:]}"
    if crash:  # the survivors' error is commlib's, naming the worker that died
        lost = [line for line in out.splitlines() if line.startswith("survivor ")]
        assert len(lost) == n - 1 and all("PeerLost" in line and "lost rank 1" in line for line in lost), out[-8000:]


# The examples of docs/ray.md, run as written: only their ray.init() is pointed at loopback
# (Ray's default node address is this machine's routed one, which tests must not use).
_AS_WRITTEN = ("import ray, runpy, sys; _init, _tmp = ray.init, sys.argv[2]; "
               "ray.init = lambda *a, **k: _init(*a, _node_ip_address='127.0.0.2', _temp_dir=_tmp, "
               "include_dashboard=False, **k); "
               "sys.argv = [sys.argv[1]] + sys.argv[3:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def run_example(path, *args, timeout=200):
    temp_dir = tempfile.mkdtemp(prefix="clray")
    env = _harness.base_env()
    argv = [sys.executable, "-c", _AS_WRITTEN, os.path.join(_harness.REPO, path), temp_dir, *args]
    try:
        p = subprocess.run(argv, env=env, cwd=temp_dir, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout, start_new_session=True)
        left = psutil.wait_procs(_leftovers(temp_dir), timeout=20)[1]
        assert not left, f"left behind by Ray: {[' '.join(p.cmdline()) for p in left]}"
        return p.returncode, p.stdout + p.stderr
    finally:
        for proc in _leftovers(temp_dir):
            proc.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.timeout(240)
def test_example_actors_as_documented():
    rc, out = run_example("examples/ray/actors.py", "3")
    assert rc == 0 and "3 actors trained the same weights as one process" in out, f"exit {rc}\n{out[-6000:]}"


@pytest.mark.timeout(300)
def test_example_train_ddp_as_documented():
    """examples/ray/train_ddp.py as the docs run it. Over 20 s: a Ray cluster and torch in every worker."""
    pytest.importorskip("torch")
    rc, out = run_example("examples/ray/train_ddp.py", "2", timeout=260)
    assert rc == 0, f"exit {rc}\n{out[-6000:]}"
    assert sorted(set(re.findall(r"worker (\d) of 2 \(commlib\): final loss", out))) == ["0", "1"], out[-6000:]
