"""init() without commrun: torchrun-style and Slurm-style variables, and explicit
init(rank=, size=, coordinator=, secret=), rank 0 hosting the coordinator."""
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from _harness import SCALE

TRANSPORTS = ("shm",)  # what is tested is how ranks find each other from a launcher's variables (conftest.py)

pytestmark = pytest.mark.timeout(90)

CASE = textwrap.dedent("""
    import numpy as np, commlib as cl
    g = cl.init(strict=True)
    r, n = g.rank(), g.size()
    y = cl.all_reduce(np.arange(1000.0) + r)
    assert np.array_equal(y, sum(np.arange(1000.0) + k for k in range(n)))
    assert np.array_equal(cl.all_gather(np.array([r])), np.arange(n))
    print(f"rank {r} of {n} ok")
""")


def _free_port():
    from commrun.spawn import free_port  # below the ephemeral range: no other socket takes it meanwhile
    return free_port("127.0.0.1")


def _clean_env():
    prefixes = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_",
                "TORCHELASTIC", "OMPI_", "PMIX_", "PMI_", "MPI_LOCAL", "PET_", "JOB_COMPLETION_INDEX")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _run_all(envs, tmp_path, case_text=CASE, args=None):
    case = tmp_path / "case.py"
    case.write_text(case_text)
    procs = [subprocess.Popen([sys.executable, str(case)] + (args[i] if args else []), env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i, e in enumerate(envs)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


@pytest.mark.parametrize("n", [2, 3])
def test_torchrun_style_variables(n, tmp_path):
    port = _free_port()
    envs = [dict(_clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_SECRET="ab" * 32, COMMLIB_TIMEOUT="30") for r in range(n)]
    for r, (code, out, err) in enumerate(_run_all(envs, tmp_path)):
        assert code == 0, f"rank {r}: {err}"
        assert f"rank {r} of {n} ok" in out


def test_slurm_style_variables(tmp_path):
    n, port = 2, _free_port()
    base = dict(_clean_env(), SLURM_NTASKS=str(n), SLURM_NODELIST="localhost", SLURM_JOB_ID="4242",
                SLURM_STEP_ID="0", SLURM_NNODES="1", SLURM_NODEID="0", SLURM_TASKS_PER_NODE=str(n),
                COMMLIB_COORDINATOR=f"127.0.0.1:{port}", COMMLIB_TIMEOUT="30")
    envs = [dict(base, SLURM_PROCID=str(r), SLURM_LOCALID=str(r)) for r in range(n)]
    for r, (code, out, err) in enumerate(_run_all(envs, tmp_path)):
        assert code == 0, f"rank {r}: {err}"
        assert f"rank {r} of {n} ok" in out


def test_coordinator_host_waits_for_ranks_still_working(tmp_path):
    """Rank 0 (hosting the coordinator) finishes first; rank 1 keeps working with rank 2 and must not
    lose the coordinator: its later operations succeed and it exits 0."""
    case = tmp_path / "late.py"
    case.write_text(textwrap.dedent("""
        import time, numpy as np, commlib as cl
        WAIT_S = @WAIT_S@
        g = cl.init(strict=True); r = g.rank()
        cl.barrier()
        if r == 0:
            print("rank 0 done"); raise SystemExit(0)
        deadline = time.monotonic() + WAIT_S
        while not g.channel.ep.notices.finishing(0):  # rank 0's program has ended: it is in finalize()
            assert time.monotonic() < deadline, f"rank 0 was not in finalize() after {WAIT_S} s"
            time.sleep(0.005)
        peer = 3 - r
        got = cl.sendrecv(np.full(4, r), dst=peer, src=peer)
        assert (got == peer).all()
        print(f"rank {r} ok after rank 0 left")
    """).replace("@WAIT_S@", str(20 * SCALE)))
    n, port = 3, _free_port()
    envs = [dict(_clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_SECRET="cd" * 32, COMMLIB_TIMEOUT="30") for r in range(n)]
    procs = [subprocess.Popen([sys.executable, str(case)], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for e in envs]
    try:
        results = [p.communicate(timeout=60) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for r, (out, err, code) in enumerate(results):
        assert code == 0, f"rank {r}: {err}"
    assert "rank 1 ok after rank 0 left" in results[1][0] and "rank 2 ok after rank 0 left" in results[2][0]


EXPLICIT = CASE.replace("g = cl.init(strict=True)", """import sys
rank, size, coordinator = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
g = cl.init(rank=rank, size=size, coordinator=coordinator, secret=bytes.fromhex(sys.argv[4]))""")


@pytest.mark.parametrize("n", [1, 3])
def test_explicit_init_for_any_other_launcher(n, tmp_path):
    port, secret = _free_port(), os.urandom(32).hex()
    args = [[str(r), str(n), f"127.0.0.1:{port}", secret] for r in range(n)]
    for r, (code, out, err) in enumerate(_run_all([_clean_env()] * n, tmp_path, EXPLICIT, args)):
        assert code == 0, f"rank {r}: {err}"
        assert f"rank {r} of {n} ok" in out


LOCAL_CASE = textwrap.dedent("""
    import commlib as cl
    g = cl.init(strict=True)
    half = g.split(g.rank() % 2)
    print(f"rank {g.rank()} local {g.local_rank()} of {g.local_size()}; half local {half.local_rank()} of "
          f"{half.local_size()}")
""")


@pytest.mark.parametrize("n", [2, 3])
def test_local_rank_from_the_table_without_local_variables(n, tmp_path):
    # Kubeflow's PyTorchJob and Ray Train set RANK/WORLD_SIZE/MASTER_* but no LOCAL_*: every rank here is on
    # this host, so the local rank is the rank and the local size the size, from the registered table.
    port = _free_port()
    envs = [dict(_clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_SECRET="ab" * 32, COMMLIB_TIMEOUT="30") for r in range(n)]
    for r, (code, out, err) in enumerate(_run_all(envs, tmp_path, LOCAL_CASE)):
        assert code == 0, f"rank {r}: {err}"
        evens = (n + 1) // 2
        half = (r // 2, evens) if r % 2 == 0 else (r // 2, n - evens)
        assert f"rank {r} local {r} of {n}; half local {half[0]} of {half[1]}" in out, out


TORCH_FIRST_CASE = textwrap.dedent("""
    import numpy as np, torch, torch.distributed as dist, commlib as cl
    dist.init_process_group("gloo")          # rank 0's TCPStore now holds MASTER_PORT
    g = cl.init(strict=True)                 # so commlib meets through that store instead of binding it
    assert (g.rank(), g.size()) == (dist.get_rank(), dist.get_world_size())
    y = cl.all_reduce(np.arange(10.0) + g.rank())
    assert np.array_equal(y, sum(np.arange(10.0) + k for k in range(g.size())))
    t = torch.ones(3); dist.all_reduce(t); assert t.tolist() == [g.size()] * 3
    print(f"rank {g.rank()} of {g.size()} ok")
""")


@pytest.mark.parametrize("n", [2, 3])
def test_init_after_torch_gloo_group_meets_through_its_store(n, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 (CPU build)")
    port = _free_port()
    envs = [dict(_clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_TIMEOUT="30") for r in range(n)]
    for r, (code, out, err) in enumerate(_run_all(envs, tmp_path, TORCH_FIRST_CASE)):
        assert code == 0, f"rank {r}: {err}"
        assert f"rank {r} of {n} ok" in out


OWN_PROCESS = textwrap.dedent("""
    import os, signal, sys, threading, time, numpy as np, psutil, commlib as cl
    g = cl.init(strict=True); r, n = g.rank(), g.size()
    cl.barrier()
    if r == 0:
        kids = psutil.Process().children()
        port = int(os.environ["MASTER_PORT"])
        owner = [k.pid for k in kids if any(c.laddr.port == port and c.status == "LISTEN"
                                             for c in k.net_connections("tcp"))]
        threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("commlib-coordinator") and t.name != "commlib-coordinator-client")
        print(f"coordinator pid {owner} of children {[k.pid for k in kids]}; rank 0's coordinator threads {threads}")
        if sys.argv[1] == "kill":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    t = time.monotonic()
    try:
        cl.all_reduce(np.ones(4))
        print(f"rank {r} all_reduce ok")
    except cl.PeerLost as e:
        print(f"rank {r} PeerLost after {time.monotonic() - t:.1f} s: {e}")
""")


@pytest.mark.parametrize("how", ["finish", "kill"])
def test_rank_0_runs_the_coordinator_in_a_process_that_outlives_it(how, tmp_path):
    """Rank 0 starts the coordinator as a child process (not threads in its interpreter); when rank
    0 is killed, that process tells the others rank 0 was lost, then ends once they have left."""
    import psutil
    n, port = 3, _free_port()
    envs = [dict(_clean_env(), RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_SECRET="ef" * 32, COMMLIB_TIMEOUT="20") for r in range(n)]
    outs = _run_all(envs, tmp_path, OWN_PROCESS, args=[[how]] * n)
    head = outs[0][1]
    assert "coordinator pid [" in head and "rank 0's coordinator threads []" in head, outs[0]
    pid = int(head.split("coordinator pid [")[1].split("]")[0])
    if how == "finish":
        assert [code for code, _, _ in outs] == [0] * n, outs
        assert all(f"rank {r} all_reduce ok" in out for r, (_, out, _) in enumerate(outs)), outs
    else:
        assert outs[0][0] == -9, outs[0]
        for r in (1, 2):
            line = next(line for line in outs[r][1].splitlines() if line.startswith(f"rank {r} "))
            assert "PeerLost" in line and "rank 0 closed its coordinator connection without saying goodbye" in line, line
            assert float(line.split("after ")[1].split(" s")[0]) < 5, line
    deadline = time.monotonic() + 10 * SCALE
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the coordinator process {pid} outlived the job"
        time.sleep(0.05)
    with socket.socket() as s:  # nothing listens on its port any more (TIME_WAIT aside)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)


def test_a_coordinator_port_in_use_fails_rank_0_at_once(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = dict(_clean_env(), RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   COMMLIB_SECRET="ef" * 32, COMMLIB_TIMEOUT="20")
        t = time.monotonic()
        (code, out, err), = _run_all([env], tmp_path)
    assert code != 0 and time.monotonic() - t < 10
    assert f"cannot start the coordinator on 127.0.0.1:{port}: [Errno 98] Address already in use" in err, err


THREADS_CASE = textwrap.dedent("""
    import torch, torch.distributed as dist
    import commlib.torch
    before = torch.get_num_threads()
    dist.init_process_group("commlib")
    t = torch.ones(4); dist.all_reduce(t)
    print(f"rank {dist.get_rank()} threads {before} -> {torch.get_num_threads()} sum {t[0].item():g}")
    dist.destroy_process_group()
""")


@pytest.mark.parametrize("omp", [None, "2"])
def test_torch_backend_shares_the_cores_where_the_launcher_did_not(omp, tmp_path):
    """Ranks started with no thread variables (srun, Ray, a launch by hand) at torch's default of a
    thread a core: the backend sets cores // ranks each once the ranks have met, the host's first
    rank says so; an exported OMP_NUM_THREADS is the user's choice."""
    pytest.importorskip("torch", reason="torch is not installed: pip install torch==2.13.0 (CPU build)")
    import psutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if min(cores, psutil.cpu_count(logical=False) or cores) < 2:
        pytest.skip("one core: torch's default is one thread, nothing to share")
    n, port = 2, _free_port()
    base = {k: v for k, v in _clean_env().items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if omp:
        base["OMP_NUM_THREADS"] = omp
    envs = [dict(base, RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 COMMLIB_TIMEOUT="30") for r in range(n)]
    outs = _run_all(envs, tmp_path, THREADS_CASE)
    for r, (code, out, err) in enumerate(outs):
        assert code == 0, f"rank {r}: {err}"
        before, after = (int(x) for x in out.split("threads ")[1].split(" sum")[0].split(" -> "))
        assert out.endswith(f"sum {n}\n"), out
        if omp:
            assert after == before == int(omp) and "set_num_threads" not in err
        elif n * before > cores:
            assert after == max(1, cores // n), out
            assert ("torch.set_num_threads" in err) is (r == 0), (r, err)
        else:
            assert after == before, out
