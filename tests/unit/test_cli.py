"""The commrun command line through click's CliRunner: nothing is started here."""
import os
import sys

import pytest
from click.testing import CliRunner

from commrun import binding, cli, spawn, supervise

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def invoke(monkeypatch, tmp_path):
    """Run the CLI with supervise.run replaced; return (result, the job it would start or None)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "script.py").write_text("print('hi')\n")

    def go(*args, env=None):
        calls = []

        def fake_run(ranks, setup, **options):
            setup(ranks, ("127.0.0.1", 4242), b"\x01" * 32)
            calls.append((ranks, options))
            return 7

        monkeypatch.setattr(supervise, "run", fake_run)
        result = CliRunner().invoke(cli.main, list(args), env=env)
        return result, (calls[0] if calls else None)

    return go


def test_script_and_its_own_options_pass_through(invoke):
    result, (ranks, options) = invoke("-n", "3", "script.py", "-n", "5", "--lr", "0.1", "--", "x")
    assert result.exit_code == 7  # supervise.run's code becomes commrun's
    assert len(ranks) == 3
    assert ranks[1].argv == [sys.executable, "script.py", "-n", "5", "--lr", "0.1", "--", "x"]
    assert options == {"coordinator_host": "127.0.0.1", "tag_output": True, "timeout": None, "grace": 3.0,
                       "verbose": False}


def test_module_and_direct(invoke):
    _, (ranks, _) = invoke("-n", "2", "-m", "pkg.mod", "-n", "1")
    assert ranks[0].argv == [sys.executable, "-m", "pkg.mod", "-n", "1"]
    _, (ranks, _) = invoke("-n", "2", "--", "sh", "-c", "echo hi")
    assert ranks[0].argv == ["sh", "-c", "echo hi"]


def test_rank_environment(invoke, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    _, (ranks, _) = invoke("-n", "2", "script.py")
    env = ranks[1].env
    assert {k: env[k] for k in spawn.job_vars(0, 1, 0, 1, ("h", 1), b"").keys()} == {
        "COMMLIB_RANK": "1", "COMMLIB_SIZE": "2", "COMMLIB_LOCAL_RANK": "1", "COMMLIB_LOCAL_SIZE": "2",
        "COMMLIB_COORDINATOR": "127.0.0.1:4242", "COMMLIB_SECRET": "01" * 32,
        "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1",
    }
    assert env["OMP_NUM_THREADS"] == "3" and env["PATH"] == os.environ["PATH"]


THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@pytest.mark.parametrize("cores, n, want", [(2, 1, None), (2, 2, "1"), (2, 3, "1"), (8, 2, "4"), (8, 3, "2"),
                                            (16, 4, "4"), (3, 2, "1")])
def test_compute_threads_share_the_cores(invoke, monkeypatch, cores, n, want):
    """Ranks sharing a host share its cores: OpenMP, MKL and OpenBLAS get cores // ranks threads
    (at least one) each, said once; one rank alone is left as it is."""
    for v in THREADS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(spawn, "cpu_count", lambda: cores)
    result, (ranks, _) = invoke("-n", str(n), "script.py")
    for rank in ranks:
        assert [rank.env.get(v) for v in THREADS] == [want] * 3, (cores, n, rank.env.get("OMP_NUM_THREADS"))
    notice = f"{n} ranks on {cores} cores: {want} compute thread"
    assert (notice in result.output) is (want is not None), result.output
    assert result.output.count("compute thread") == (0 if want is None else 1)
    if want is not None:
        with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "launcher.md")) as f:
            assert "compute thread" in f.read()  # the notice is explained where commrun is


@pytest.mark.parametrize("user", THREADS)
def test_compute_threads_the_user_set_are_kept(invoke, monkeypatch, user):
    for v in THREADS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(user, "3")
    monkeypatch.setattr(spawn, "cpu_count", lambda: 8)
    result, (ranks, _) = invoke("-n", "4", "script.py")
    assert {v: ranks[0].env.get(v) for v in THREADS} == {v: "3" if v == user else None for v in THREADS}
    assert "compute thread a rank" not in result.output
    # 4 ranks of 3 (or, where OMP_NUM_THREADS is unset, OpenMP's 8) threads on 8 cores: they sleep to wait
    assert ranks[0].env["OMP_WAIT_POLICY"] == "PASSIVE" and result.output.count("OMP_WAIT_POLICY") == 1


def test_threads_per_rank_overrides(invoke, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setattr(spawn, "cpu_count", lambda: 2)
    result, (ranks, _) = invoke("-n", "1", "--threads-per-rank", "3", "script.py")
    assert [ranks[0].env[v] for v in THREADS] == ["3"] * 3 and "compute thread" not in result.output
    result, _ = invoke("-n", "2", "--threads-per-rank", "0", "script.py")
    assert result.exit_code == 2 and "--threads-per-rank" in result.output


@pytest.mark.parametrize("n, per_rank, environ, want", [
    (2, "2", {}, "PASSIVE"),  # 4 threads on 2 cores
    (2, "auto", {}, None),  # commrun's 1 a rank: no OpenMP team waits
    (3, "auto", {}, None),
    (2, "auto", {"OMP_NUM_THREADS": "2"}, "PASSIVE"),  # the user's threads, still too many
    (2, "auto", {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}, None),  # the user chose
    (1, "4", {}, None),  # one rank: OpenMP's own rule
    (2, "1", {}, None)])
def test_oversubscribed_openmp_threads_sleep_when_they_wait(n, per_rank, environ, want):
    chosen, notice = spawn.thread_vars(n, 2, environ, per_rank)
    assert chosen.get("OMP_WAIT_POLICY") == want
    assert ("OMP_WAIT_POLICY=PASSIVE" in (notice or "")) is (want is not None), notice


def test_host_agents_apply_the_thread_rule_with_their_own_cores(monkeypatch):
    for v in THREADS:
        monkeypatch.delenv(v, raising=False)
    assert spawn.thread_vars(3, 12, {}, "auto")[0] == dict.fromkeys(THREADS, "4")
    assert spawn.thread_vars(3, 12, {"OMP_NUM_THREADS": "4"}, "auto") == ({}, None)
    assert spawn.thread_vars(1, 12, {}, "2") == (dict.fromkeys(THREADS, "2"), None)


@pytest.fixture
def four_cores(monkeypatch):
    """A host of two sockets of two one-thread cores, whatever this one has."""
    monkeypatch.setattr(binding, "allowed_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(binding, "topology", lambda cpus: [(c // 2, (c,)) for c in cpus])
    monkeypatch.setattr(spawn, "cpu_count", lambda: 4)
    monkeypatch.setattr(binding, "SUPPORTED", True)
    for v in THREADS:
        monkeypatch.delenv(v, raising=False)


@pytest.mark.parametrize("args, n, want", [
    ((), 2, [{0, 1}, {2, 3}]), ((), 4, [{0}, {1}, {2}, {3}]), ((), 1, [{0, 1, 2, 3}]), ((), 5, [None] * 5),
    (("--bind-to", "none"), 2, [None, None]), (("--bind-to", "core"), 6, [{0}, {1}, {2}, {3}, {0}, {1}]),
    (("--threads-per-rank", "3"), 2, [None, None]), (("--threads-per-rank", "3", "--bind-to", "core"), 2,
                                                     [{0, 1}, {2, 3}])])
def test_local_ranks_are_bound_to_blocks_of_the_cores(invoke, four_cores, args, n, want):
    result, (ranks, _) = invoke("-n", str(n), *args, "script.py")
    assert result.exit_code == 7, result.output
    assert [rank.cpus for rank in ranks] == want
    assert "bound" not in result.output  # said only with --report-bindings


def test_a_one_socket_host_is_bound_only_when_asked(invoke, four_cores, monkeypatch):
    monkeypatch.setattr(binding, "topology", lambda cpus: [(0, (c,)) for c in cpus])
    result, (ranks, _) = invoke("-n", "2", "--report-bindings", "script.py")
    assert [rank.cpus for rank in ranks] == [None, None]
    assert result.output.count("not bound (one socket: --bind-to core binds)") == 2
    _, (ranks, _) = invoke("-n", "2", "--bind-to", "core", "script.py")
    assert [rank.cpus for rank in ranks] == [{0, 1}, {2, 3}]


def test_report_bindings_says_each_ranks_cpus(invoke, four_cores):
    result, _ = invoke("-n", "2", "--report-bindings", "script.py")
    assert "commrun: rank 0 bound to CPUs 0,1 [BB..]" in result.output
    assert "commrun: rank 1 bound to CPUs 2,3 [..BB]" in result.output
    result, _ = invoke("-n", "5", "--report-bindings", "script.py")
    assert result.output.count("not bound (5 ranks on 4 cores)") == 5


def test_bind_to_from_the_environment_and_bad_values(invoke, four_cores):
    _, (ranks, _) = invoke("-n", "2", "script.py", env={binding.BIND_VAR: "none"})
    assert [rank.cpus for rank in ranks] == [None, None]
    result, _ = invoke("-n", "2", "--bind-to", "hwthread", "script.py")
    assert result.exit_code == 2 and "--bind-to" in result.output


def test_remote_hosts_get_the_binding_to_plan_with_their_own_cores(invoke, four_cores):
    _, (ranks, _) = invoke("--hosts", "localhost:1,nodeb:2", "--rsh", "sh -c", "--coordinator-host", "10.1.0.1",
                           "--bind-to", "socket", "--report-bindings", "script.py")
    assert ranks[0].cpus == {0, 1, 2, 3} and ranks[1].cpus is None  # planned here for local ranks only
    spec = ranks[1].agent.spec
    env = {**spec["env"], **spec["ranks"][0]["env"]}
    assert env[binding.BIND_VAR] == "socket" and env[binding.REPORT_VAR] == "1"


def test_options_reach_supervise(invoke):
    _, (_, options) = invoke("-n", "1", "--no-tag-output", "--timeout", "2.5", "--grace", "0.5", "-v", "script.py")
    assert options == {"coordinator_host": "127.0.0.1", "tag_output": False, "timeout": 2.5, "grace": 0.5,
                       "verbose": True}


def test_hosts_place_ranks_and_start_remote_ones_over_rsh(invoke):
    result, (ranks, options) = invoke(
        "--hosts", "localhost:1,nodeb:2", "--rsh", "ip netns exec {host}", "--coordinator-host", "10.1.0.1",
        "script.py", "a b",
    )
    assert [(r.host, r.local, r.local_rank, r.local_size) for r in ranks] == [
        ("localhost", True, 0, 1), ("nodeb", False, 0, 2), ("nodeb", False, 1, 2)]
    assert options["coordinator_host"] == "10.1.0.1"
    agent = ranks[1].agent  # one remote shell for the host, running its agent, which starts both ranks
    assert agent is ranks[2].agent and ranks[0].agent is None
    argv = agent.argv
    assert argv[:6] == ["ip", "netns", "exec", "nodeb", "sh", "-c"]
    assert f"cd {os.getcwd()} && exec env " in argv[6]
    assert argv[6].endswith(f"{sys.executable} -m commrun.agent")
    assert "COMMLIB_" not in argv[6]  # the job's variables (its secret among them) go on the agent's stdin
    spec = agent.spec
    assert spec["argv"] == [sys.executable, "script.py", "a b"]
    assert [(e["rank"], e["local_rank"], e["local_size"]) for e in spec["ranks"]] == [(1, 0, 2), (2, 1, 2)]
    assert [e["env"]["COMMLIB_RANK"] for e in spec["ranks"]] == ["1", "2"]
    assert [e["env"]["COMMLIB_LOCAL_RANK"] for e in spec["ranks"]] == ["0", "1"]
    assert spec["env"]["COMMLIB_COORDINATOR"] == "127.0.0.1:4242" and len(spec["env"]["COMMLIB_SECRET"]) == 64


def test_rsh_from_the_environment_and_ssh_style(invoke):
    _, (ranks, _) = invoke("--hosts", "nodeb", "--coordinator-host", "1.2.3.4", "script.py",
                           env={"COMMLIB_RSH": "ssh -p 2222 {host}"})
    argv = ranks[0].agent.argv
    assert argv[:4] == ["ssh", "-p", "2222", "nodeb"] and len(argv) == 5  # one string for the remote shell
    env = ranks[0].agent.spec["env"]
    assert env["COMMLIB_COORDINATOR"] == "127.0.0.1:4242"
    assert env["COMMLIB_RSH"] == "ssh -p 2222 {host}"  # MPI.Spawn on that rank starts children the same way


def test_inside_a_slurm_allocation_ranks_go_to_its_nodes_by_srun(invoke):
    alloc = {"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "localhost,nodeb", "SLURM_TASKS_PER_NODE": "1,2"}
    result, (ranks, _) = invoke("-v", "--coordinator-host", "10.1.0.1", "script.py", env=alloc)
    assert [(r.host, r.local, r.local_rank, r.local_size) for r in ranks] == [
        ("localhost", True, 0, 1), ("nodeb", False, 0, 2), ("nodeb", False, 1, 2)]
    assert ranks[1].agent.argv[:9] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=nodeb",
                                       "--kill-on-bad-exit=1", "--mpi=none", "--quiet", "sh"]
    assert "commrun: Slurm job 41: localhost:1, nodeb:2; ranks on other nodes started by `srun" in result.output
    _, (ranks, _) = invoke("-n", "2", "--coordinator-host", "10.1.0.1", "script.py", env=alloc)
    assert [r.host for r in ranks] == ["localhost", "nodeb"]  # -n fills the allocation's slots in order
    # the user's --rsh and --hosts win over the allocation's
    _, (ranks, _) = invoke("--rsh", "ip netns exec {host}", "--coordinator-host", "10.1.0.1", "script.py", env=alloc)
    assert ranks[1].agent.argv[:4] == ["ip", "netns", "exec", "nodeb"]
    _, (ranks, _) = invoke("--hosts", "localhost:2", "script.py", env=alloc)
    assert [(r.host, r.local) for r in ranks] == [("localhost", True)] * 2


def test_malformed_slurm_allocation_is_a_usage_error(invoke):
    result, job = invoke("script.py", env={"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "n[1-",
                                           "SLURM_TASKS_PER_NODE": "1"})
    assert job is None and result.exit_code == 2
    assert "inside Slurm job 41: malformed SLURM_JOB_NODELIST='n[1-'" in result.output


def test_hostfile_and_default_n(invoke, tmp_path):
    (tmp_path / "hosts.txt").write_text("localhost slots=2\n127.0.0.1:1\n")
    _, (ranks, _) = invoke("--hostfile", "hosts.txt", "script.py")
    assert len(ranks) == 3 and all(r.local for r in ranks)


def test_remote_only_job_needs_a_reachable_coordinator_address(invoke):
    result, job = invoke("--hosts", "no-such-host.invalid:2", "script.py")
    assert result.exit_code == 2 and job is None
    assert "--coordinator-host" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "0", "script.py"], "0 is not in the range x>=1"),
        (["-n", "-2", "script.py"], "-2 is not in the range x>=1"),
        (["-n", "2", "missing.py"], "missing.py: no such script"),
        (["-n", "2", "--bogus", "script.py"], "No such option"),
        (["-n", "2"], "no program given"),
        (["-n", "2", "--"], "no program given"),
        (["-n", "2", "--", "./missing-program"], "no such executable"),
        (["-n", "2", "--", "no-such-command-anywhere"], "no such executable"),
        (["--hosts", "a:0", "script.py"], "bad host entry"),
        (["--hosts", "a", "--hostfile", "script.py", "script.py"], "not both"),
        (["--timeout", "0", "script.py"], "--timeout"),
    ],
)
def test_bad_invocations_start_nothing(invoke, args, message):
    result, job = invoke(*args)
    assert result.exit_code == 2 and job is None
    assert message in result.output


def test_version_and_help(invoke):
    result, job = invoke("--version")
    assert result.exit_code == 0 and result.output.startswith("commrun, version ") and job is None
    result, job = invoke("--help")
    assert result.exit_code == 0 and "--no-tag-output" in result.output and "-m package.module" in result.output


# ------------------------------------------------------------- mpirun habits
def test_np_and_mpirun_flags_are_accepted(invoke):
    result, (ranks, _) = invoke("-np", "3", "--oversubscribe", "--allow-run-as-root", "script.py")
    assert result.exit_code == 7, result.output
    assert len(ranks) == 3 and ranks[0].argv == [sys.executable, "script.py"]


def test_an_interpreter_given_first_runs_as_is(invoke):
    # `mpirun -n 4 python script.py`: the interpreter is the program, not a script to feed Python.
    result, (ranks, _) = invoke("-n", "2", "python3", "script.py", "--lr", "1")
    assert result.exit_code == 7, result.output
    assert ranks[0].argv == ["python3", "script.py", "--lr", "1"]
    result, (ranks, _) = invoke("-n", "2", "python3", "-m", "commlib.bench")
    assert ranks[1].argv == ["python3", "-m", "commlib.bench"]


def test_an_executable_file_runs_as_is_and_a_plain_file_under_python(invoke, tmp_path):
    prog = tmp_path / "run.sh"
    prog.write_text("#!/bin/sh\necho hi\n")
    prog.chmod(0o755)
    (tmp_path / "plain").write_text("print('hi')\n")
    result, (ranks, _) = invoke("-n", "2", "./run.sh", "a")
    assert ranks[0].argv == ["./run.sh", "a"], result.output
    result, (ranks, _) = invoke("-n", "2", "plain")
    assert ranks[0].argv == [sys.executable, "plain"], result.output
    (tmp_path / "exec.py").write_text("print('hi')\n")
    (tmp_path / "exec.py").chmod(0o755)
    result, (ranks, _) = invoke("-n", "2", "exec.py")
    assert ranks[0].argv == [sys.executable, "exec.py"], result.output  # .py: always under Python


def test_help_says_the_mpirun_flags_are_ignored(invoke):
    result, _ = invoke("--help")
    assert "-np" in result.output and "--oversubscribe" in result.output
    assert "Accepted and ignored" in result.output


def test_doctor_takes_the_pair_timeout_the_docs_name(invoke):
    _, (ranks, _) = invoke("-n", "2", "--doctor", "--pair-timeout", "2")
    assert ranks[0].argv == [sys.executable, "-m", "commlib.doctor", "--pair-timeout", "2.0"]
    _, (ranks, _) = invoke("-n", "2", "--doctor")
    assert ranks[0].argv == [sys.executable, "-m", "commlib.doctor"]
    result, job = invoke("-n", "2", "--pair-timeout", "2", "script.py")
    assert job is None and "--pair-timeout is an option of --doctor" in result.output


@pytest.mark.parametrize("exported", [{}, {"MASTER_PORT": "29555"}, {"MASTER_ADDR": "10.1.2.3"},
                                      {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29555"}])
def test_exported_master_addr_or_port_is_kept_alone(invoke, monkeypatch, exported):
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    for var, value in exported.items():
        monkeypatch.setenv(var, value)
    _, (ranks, _) = invoke("-n", "2", "script.py")
    for env in (ranks[0].env, ranks[1].env):
        assert env["MASTER_ADDR"] == exported.get("MASTER_ADDR", "127.0.0.1")
        assert env["MASTER_PORT"] == exported.get("MASTER_PORT", env["MASTER_PORT"])
        assert 0 < int(env["MASTER_PORT"]) < 65536
    assert ranks[0].env["MASTER_PORT"] == ranks[1].env["MASTER_PORT"]


def test_a_local_rank_0_of_a_job_across_hosts_gives_torch_a_reachable_master_addr():
    """Remote ranks reach rank 0's torch store at the coordinator's address, never at loopback."""
    from commrun import spawn
    local, remote = spawn.Rank(0, "localhost", 0, 1, True), spawn.Rank(0, "node2", 0, 1, False)
    assert spawn.master_vars(local, ("127.0.0.1", 5000), {})["MASTER_ADDR"] == "127.0.0.1"
    across = spawn.master_vars(local, ("127.0.0.1", 5000), {}, spans_hosts=True)
    assert across["MASTER_ADDR"] == "127.0.0.1"  # (the coordinator's address: here a loopback one)
    assert spawn.master_vars(local, ("127.0.0.2", 5000), {}, spans_hosts=True)["MASTER_ADDR"] == "127.0.0.2"
    assert spawn.master_vars(remote, ("10.0.0.1", 5000), {}) == {"MASTER_ADDR": "node2", "MASTER_PORT": "5001"}


def test_a_bad_ifname_is_one_usage_error_before_any_rank_starts(invoke):
    result, job = invoke("-n", "3", "--ifname", "nosuch0", "script.py")
    assert job is None and result.exit_code == 2
    assert "--ifname" in result.output and "no interface named nosuch0 on this host" in result.output
    _, job = invoke("-n", "2", "--ifname", "lo", "script.py")
    assert job is not None and job[0][0].env["COMMLIB_IFNAME"] == "lo"


def test_torch_store_port_is_below_the_kernels_ephemeral_range(tmp_path):
    """The port handed to torch as MASTER_PORT is one the OS never numbers a socket with itself,
    and free when chosen; with no free port there, the OS's choice."""
    import socket

    from commrun import spawn
    ranges = tmp_path / "range"
    ranges.write_text("40000\t60999\n")
    for _ in range(20):
        port = spawn.free_port("127.0.0.1", ranges=str(ranges))
        assert 40000 - 12_000 <= port < 40000
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    try:  # a port in use is never chosen
        low = taken.getsockname()[1] + 1
        ranges.write_text(f"{low}\t{low + 1}\n")
        assert all(spawn.free_port("127.0.0.1", ranges=str(ranges)) != low - 1 for _ in range(50))
    finally:
        taken.close()
    assert spawn.free_port("127.0.0.1", tries=0, ranges=str(ranges)) > 0  # none drawn: the OS's choice
    env_port = spawn.master_vars(spawn.Rank(0, "localhost", 0, 1, True), ("127.0.0.1", 5000), {})["MASTER_PORT"]
    assert 1024 <= int(env_port) < 65536
