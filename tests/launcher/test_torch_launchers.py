"""torch.distributed.init_process_group on the commlib backend, started by every launcher a torch
user has: torchrun (--standalone), plain processes with only RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
(how Kubeflow's PyTorchJob and Ray Train start workers), and commrun (env:// rendezvous on the
MASTER_ADDR/MASTER_PORT it exports; also with torch's own gloo backend).

The backend is TORCH_TEST_BACKEND ("commlib" by default, which imports commlib.torch; "gloo" to
validate the tests), except in test_commrun_with_gloo, which is always gloo. Each rank checks its
rank/size against the launcher's variables and an all_reduce result, and prints a RESULT line;
the tests check every rank's line and the exit codes. All traffic stays on 127.0.0.1/localhost.
"""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from _needs import skip_unless_installed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "multirank"))
import _harness  # noqa: E402

skip_unless_installed("torch", "torch is not installed: the torch.distributed backend tests need it")

pytestmark = pytest.mark.timeout(120)

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")
_SCRUB = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC", "OMPI_", "PMIX_", "PMI_", "MPI_LOCAL", "PET_", "JOB_COMPLETION_INDEX", "GROUP_RANK",
          "ROLE_", "TORCH_TEST_BACKEND")

CASE = """
    import datetime, faulthandler, json, os, sys
    # a rank still running after 75 s (of _run's 90) prints every thread's stack and exits: a hang
    # shows where it is, whichever launcher started the rank (torchrun's in sessions of their own)
    faulthandler.dump_traceback_later(75 * float(os.environ.get("COMMLIB_TEST_TIMEOUT_SCALE") or 1), exit=True)
    import torch
    import torch.distributed as dist

    backend = sys.argv[1]
    if backend == "commlib":
        import commlib.torch  # registers the backend
    kwargs = {"timeout": datetime.timedelta(seconds=60)}
    if "--env-init-method" in sys.argv:
        kwargs["init_method"] = "env://"
    dist.init_process_group(backend, **kwargs)
    r, n = dist.get_rank(), dist.get_world_size()
    result = {"rank": r, "size": n, "backend": str(dist.get_backend()),
              "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}}
    assert (r, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), (r, n, result["env"])

    x = torch.arange(10, dtype=torch.float32) * (r + 1)
    dist.all_reduce(x)
    expected = torch.arange(10, dtype=torch.float32) * (n * (n + 1) // 2)
    assert torch.equal(x, expected), (x, expected)
    big = torch.full((100003,), float(r), dtype=torch.float64)
    dist.all_reduce(big, op=dist.ReduceOp.MAX)
    assert bool((big == n - 1).all()), big[:4]
    result["all_reduce"] = "ok"

    if "--commlib-init" in sys.argv:
        # commlib's own API in the same process: the same ranks, and a working collective
        import numpy as np
        import commlib
        g = commlib.init()
        result["commlib"] = [g.rank(), g.size()]
        assert (g.rank(), g.size()) == (r, n), ("commlib.init()", g.rank(), g.size(), "torch", r, n)
        y = commlib.all_reduce(np.full(5, r + 1, dtype=np.int64))
        assert np.array_equal(y, np.full(5, n * (n + 1) // 2, dtype=np.int64)), y
        result["commlib_all_reduce"] = "ok"

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os.write(1, ("RESULT " + json.dumps(result) + "\\n").encode())  # one write: whole even on a shared pipe
    if backend == "gloo":
        # torch 2.13's ProcessGroupGloo worker threads can abort the process during the interpreter's
        # finalization (pytorch/pytorch#179291, see tests/multirank/cases/torch_train.py): skip it
        sys.stderr.flush()
        os._exit(0)
"""


def _free_port():
    from commrun.spawn import free_port  # below the ephemeral range: no other socket takes it meanwhile
    return free_port("127.0.0.1")


def _clean(env):
    return {k: v for k, v in env.items() if not k.startswith(_SCRUB)}


def _run(argv, env, cwd, timeout=90):
    """(returncode, stdout, stderr); the whole process group is killed if it outlives `timeout`."""
    return _harness._communicate([str(a) for a in argv], env, timeout, cwd=cwd)


def results(stdout):
    """{rank: RESULT dict} from the ranks' output (tagged by commrun or not)."""
    found = {}
    for line in stdout.splitlines():
        m = re.search(r"RESULT (\{.*\})\s*$", line)
        if m:
            rec = json.loads(m.group(1))
            found[rec["rank"]] = rec
    return found


def check_results(stdout, stderr, n, backend, what):
    found = results(stdout)
    assert sorted(found) == list(range(n)), (f"{what}: ranks reporting: {sorted(found)} of {n}\n--- stdout\n"
                                             f"{stdout[-4000:]}\n--- stderr\n{stderr[-6000:]}")
    for r, rec in found.items():
        assert rec["size"] == n and rec["backend"] == backend and rec["all_reduce"] == "ok", rec
    return found


@pytest.fixture
def case(commrun):
    return commrun.script("torch_case.py", CASE)


@pytest.mark.parametrize("n", [2, 3])
def test_torchrun_standalone(commrun, case, n):
    """(a) torchrun --standalone --nproc-per-node N: the agent's store holds MASTER_PORT. About 6 s on 2 idle
    cores, over 20 s beside the suite's other jobs: torchrun's agent and N workers, each importing torch
    (~1.5 s of CPU) as torchrun starts them."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), case, BACKEND]
    rc, out, err = _run(argv, _clean(commrun.env), commrun.cwd)
    assert rc == 0, f"torchrun exited {rc}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-6000:]}"
    found = check_results(out, err, n, BACKEND, "torchrun")
    assert all(rec["env"]["LOCAL_RANK"] == str(r) for r, rec in found.items())


@pytest.mark.parametrize("n", [2, 3])
def test_plain_processes_rank_world_size_master(commrun, case, n):
    """(b) N plain processes with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT only (no LOCAL_*), as
    Kubeflow's PyTorchJob and Ray Train start them; the script also uses commlib's own API."""
    port = _free_port()
    base = dict(_clean(commrun.env), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n))
    procs = [subprocess.Popen([sys.executable, case, BACKEND, "--commlib-init"], env=dict(base, RANK=str(r)),
                              cwd=commrun.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) for r in range(n)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=90)
            outs.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        pytest.fail(f"the {n} plain processes did not finish within 90 s: {[p.poll() for p in procs]}")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    for r, (rc, out, err) in enumerate(outs):
        assert rc == 0, f"rank {r} exited {rc}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-6000:]}"
        found = results(out)
        assert list(found) == [r], f"rank {r} printed {found}\n{out[-3000:]}\n{err[-3000:]}"
        rec = found[r]
        assert rec["size"] == n and rec["backend"] == BACKEND and rec["all_reduce"] == "ok", rec
        assert rec["env"]["LOCAL_RANK"] is None and rec["env"]["LOCAL_WORLD_SIZE"] is None
        assert rec["commlib"] == [r, n] and rec["commlib_all_reduce"] == "ok", rec


@pytest.mark.parametrize("init_method", ["env://", "default"])
def test_commrun_env_init(commrun, case, init_method):
    """(c) commrun -n 2 and init_process_group(backend, init_method="env://") (or no init_method:
    env:// is the default) on the MASTER_ADDR/MASTER_PORT commrun exports."""
    args = ["--env-init-method"] if init_method == "env://" else []
    rc, out, err = _run(commrun.argv(["-n", 2, case, BACKEND, *args]), _clean(commrun.env), commrun.cwd)
    assert rc == 0, f"commrun exited {rc}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-6000:]}"
    check_results(out, err, 2, BACKEND, "commrun")


@pytest.mark.parametrize("n", [2, 3])
def test_commrun_with_gloo(commrun, case, n):
    """(d) torch's own gloo backend under commrun: its MASTER_ADDR/MASTER_PORT export is enough."""
    rc, out, err = _run(commrun.argv(["-n", n, case, "gloo", "--env-init-method"]), _clean(commrun.env), commrun.cwd)
    assert rc == 0, f"commrun exited {rc}\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-6000:]}"
    check_results(out, err, n, "gloo", "commrun + gloo")
