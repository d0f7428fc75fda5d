"""commlib under a real (local) Ray: actor groups, ray.util.collective with backend "commlib",
Ray Train's TorchTrainer with TorchConfig(backend="commlib"), an actor killed mid-collective.

Each driver starts its own Ray (`ray.init` on 127.0.0.2, in a temporary directory of its own) as a plain
Python driver, bounded in time; afterwards no process of that Ray may be left. A Ray costs about 10 s of
CPU to start, so the actor groups share one driver run (one Ray, a spec after the other) and so do the
trainers: each case's driver runs once per session, started by the first of its items, with the specs of
the items this session selected, and every item checks its own spec's line in that run's output.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import psutil
import pytest

from _needs import skip_unless_installed

import _harness

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)

skip_unless_installed("ray", "Ray is not installed (pip install 'commlib[ray]')")


def _leftovers(marker):
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid != os.getpid() and any(marker in part for part in p.info["cmdline"] or ()):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _ray_run(argv_tail, timeout):
    """(returncode, output, None or why the driver was killed, what Ray left behind: its processes' command
    lines) of `python ARGV_TAIL(TEMP_DIR)`."""
    temp_dir = tempfile.mkdtemp(prefix="clray")  # short: Ray's socket paths live under it
    env = _harness.base_env({"PYTHONPATH": os.pathsep.join([_harness.REPO, _harness.CASES])})
    argv = [sys.executable, *argv_tail(temp_dir)]
    try:
        rc, out, err, killed = _harness._spawn(argv, env, timeout, cwd=temp_dir)
        left = psutil.wait_procs(_leftovers(temp_dir), timeout=20)[1]  # Ray's processes end after shutdown
        return rc, out + err, killed and f"{' '.join(argv[1:])} {killed}", [" ".join(p.cmdline()) for p in left]
    finally:
        for p in _leftovers(temp_dir):
            p.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


def run_ray(case, n, *args, timeout=200):
    """`python cases/CASE N TEMP_DIR ARGS...`: (returncode, output); fails the test past `timeout` or if
    Ray left a process behind."""
    rc, out, killed, left = _ray_run(lambda temp_dir: [os.path.join(_harness.CASES, case), str(n), temp_dir, *args],
                                     timeout)
    if killed:
        pytest.fail(f"{killed}\n--- output (tail)\n{out[-6000:]}")
    assert not left, f"left behind by Ray: {left}"
    return rc, out


_RUNS = {}  # case -> (returncode, output, killed, left behind, specs): one driver run of every selected spec


def shared_run(request, case, spec_of, timeout):
    """The run of `python cases/CASE TEMP_DIR SPEC...` over the specs (spec_of(callspec params)) of this test
    function's items that the session selected, started by the first item to ask (its time is the run's):
    (returncode, output, specs). Fails the item if Ray left a process behind; a driver killed past `timeout`
    fails the items whose spec it had not passed yet (their checks find no line of theirs)."""
    if case not in _RUNS:
        mine = [item for item in request.session.items
                if getattr(item, "originalname", None) == request.node.originalname
                and item.module is request.node.module and hasattr(item, "callspec")]
        specs = list(dict.fromkeys(spec_of(item.callspec.params) for item in mine))
        _RUNS[case] = (*_ray_run(lambda temp_dir: [os.path.join(_harness.CASES, case), temp_dir, *specs], timeout),
                       specs)
    rc, out, killed, left, specs = _RUNS[case]
    assert not left, f"left behind by Ray: {left}"
    return rc, (out + f"\n{killed}" if killed else out), specs


def exit_explained(rc, out, failed_line):
    """The driver's exit code is 0, or a spec's failure (a line starting `failed_line`) explains it."""
    return rc == 0 or re.search(rf"^{re.escape(failed_line)}", out, re.M) is not None


def spec_lines(out, spec):
    """The lines a driver printed under `[SPEC] `, without that prefix."""
    tag = f"[{spec}] "
    return [line[len(tag):] for line in out.splitlines() if line.startswith(tag)]


def _actors_spec(params):
    return f"{params['n']}:{params['over']}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n, over", [(2, "shm"), (3, "shm"), (4, "shm"), (3, "socket")])
def test_actors_form_a_group(n, over, request):
    """N actors whose COMMLIB_TRANSPORT is `over` form a group and run commlib's and ray.util.collective's
    calls; their connections must go over that transport. One driver (cases/ray_actors.py) runs every
    selected spec in one Ray; the first item runs it: over 20 s (one Ray, then four groups of actors, each
    actor a process importing torch: about 30 s on 2 cores, up to 60 s when they are busy; the four apart
    took 50-55 s)."""
    rc, out, specs = shared_run(request, "ray_actors.py", _actors_spec, timeout=200)
    spec = _actors_spec({"n": n, "over": over})
    assert re.search(rf"^ray actors ok: {n} over {over}\b", out, re.M), (
        f"spec {spec} of the run of {' '.join(specs)} (exit {rc}):\n" + "\n".join(spec_lines(out, spec))
        + f"\n--- the run's output, last lines:\n{out[-6000:]}")
    assert exit_explained(rc, out, "ray actors failed: "), f"the run of {' '.join(specs)} exited {rc}\n{out[-6000:]}"


@pytest.mark.timeout(240)
def test_actor_killed_mid_collective_then_restarted():
    """Over 20 s: a Ray cluster, an actor killed and Ray's restart of it (about 20 s on 2 cores)."""
    rc, out = run_ray("ray_actor_killed.py", 3)
    assert rc == 0 and "restarted ok: 3" in out, f"exit {rc}\n{out[-6000:]}"
    lost = [line for line in out.splitlines() if line.startswith("survivor ")]
    assert len(lost) == 2 and all("PeerLost" in line and "lost rank 1" in line for line in lost), out[-6000:]


def _train_spec(params):
    return f"{params['n']}:crash" if params["crash"] else str(params["n"])


@pytest.mark.timeout(420)
@pytest.mark.parametrize("n, crash", [(2, False), (3, True)])
def test_ray_train_torch_trainer_on_commlib(n, crash, request):
    """A Ray Train TorchTrainer whose workers' process group is commlib's (with crash: one worker dies
    mid-step and the survivors raise commlib's error). One driver (cases/ray_train.py) runs every selected
    trainer, one after the other, in one Ray; the first item runs it: over 20 s (a Ray cluster, then for
    each trainer Train's controller, torch in every worker and Train's own set-up and teardown, twice with
    crash: 75-105 s on 2 cores; the two apart took 75-90 s)."""
    pytest.importorskip("torch")
    rc, out, specs = shared_run(request, "ray_train.py", _train_spec, timeout=380)
    spec = _train_spec({"n": n, "crash": crash})
    ok = f"ray train ok: {n} workers, backend commlib" + (", after a worker died" if crash else "")
    mine = "\n".join(spec_lines(out, spec))
    assert re.search(rf"^{re.escape(ok)} \(", out, re.M), (
        f"trainer {spec} of the run of {' '.join(specs)} (exit {rc}):\n{mine[-6000:]}"
        f"\n--- the run's output, last lines:\n{out[-8000:]}")
    lost = [line for line in spec_lines(out, spec) if line.startswith("survivor ")]
    if crash:  # the survivors' error is commlib's, naming the worker that died
        assert len(lost) == n - 1 and all("PeerLost" in line and "lost rank 1" in line for line in lost), mine[-8000:]
    else:
        assert not lost, mine[-8000:]
    assert exit_explained(rc, out, "ray train failed: "), f"the run of {' '.join(specs)} exited {rc}\n{out[-8000:]}"


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
    """examples/ray/actors.py as the docs run it. About 20 s on 2 cores (over it when busy): a Ray cluster of
    its own (the example's ray.init, as written) and 3 actors, each a process importing torch."""
    rc, out = run_example("examples/ray/actors.py", "3")
    assert rc == 0 and "3 actors trained the same weights as one process" in out, f"exit {rc}\n{out[-6000:]}"


@pytest.mark.timeout(300)
def test_example_train_ddp_as_documented():
    """examples/ray/train_ddp.py as the docs run it. Over 20 s: a Ray cluster and torch in every worker."""
    pytest.importorskip("torch")
    rc, out = run_example("examples/ray/train_ddp.py", "2", timeout=260)
    assert rc == 0, f"exit {rc}\n{out[-6000:]}"
    assert sorted(set(re.findall(r"worker (\d) of 2 \(commlib\): final loss", out))) == ["0", "1"], out[-6000:]
