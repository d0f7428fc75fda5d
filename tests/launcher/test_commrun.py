"""commrun end to end: programs, environment, output, stdin, hosts, bad invocations."""
import json
import os
import re
import sys

import pytest

pytestmark = pytest.mark.timeout(60)
# ranks exec'd as new interpreters (the default) and forked from commrun (--fork)
both_launches = pytest.mark.parametrize("commrun", ["exec", "fork"], indirect=True)

DUMP_ENV = """
    import json, os, sys
    names = ["COMMLIB_RANK", "COMMLIB_SIZE", "COMMLIB_LOCAL_RANK", "COMMLIB_LOCAL_SIZE", "COMMLIB_COORDINATOR",
             "COMMLIB_SECRET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "COMMRUN_FAKE_HOST", "MASTER_ADDR", "MASTER_PORT"]
    print(json.dumps({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in names}}))
"""


def untag(stdout):
    """'[r] json' lines -> {r: parsed}."""
    out = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert m, f"untagged line {line!r}"
        out[int(m[1])] = json.loads(m[2])
    return out


def cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

@both_launches
def test_environment_and_program_arguments(commrun):
    script = commrun.script("dump.py", DUMP_ENV)
    n = cores() + 1
    r = commrun.run("-n", n, script, "-n", "5", "--flag", "a b", env={"OMP_NUM_THREADS": ""})
    assert r.returncode == 0, r.stderr
    ranks = untag(r.stdout)
    assert sorted(ranks) == list(range(n))
    secrets = {ranks[i]["env"]["COMMLIB_SECRET"] for i in ranks}
    assert len(secrets) == 1 and re.fullmatch("[0-9a-f]{64}", secrets.pop())
    for i, got in ranks.items():
        env = got["env"]
        assert got["argv"] == ["-n", "5", "--flag", "a b"]
        assert env["COMMLIB_RANK"] == env["RANK"] == env["COMMLIB_LOCAL_RANK"] == env["LOCAL_RANK"] == str(i)
        assert env["COMMLIB_SIZE"] == env["WORLD_SIZE"] == env["COMMLIB_LOCAL_SIZE"] == env["LOCAL_WORLD_SIZE"] == str(n)
        assert re.fullmatch(r"127\.0\.0\.1:\d+", env["COMMLIB_COORDINATOR"])
        assert env["PYTHONUNBUFFERED"] == env["PYTHONFAULTHANDLER"] == "1"
        # torch's env:// rendezvous (init_process_group) works under commrun unchanged: a port of its own
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == ranks[0]["env"]["MASTER_PORT"]
        assert env["MASTER_PORT"] != env["COMMLIB_COORDINATOR"].rsplit(":", 1)[1]
        # OMP_NUM_THREADS was set (to empty) by the user, so commrun leaves it alone
        assert env["OMP_NUM_THREADS"] == ""
    assert "OMP_NUM_THREADS" not in r.stderr


def test_master_addr_and_port_the_user_exported_are_kept(commrun):
    script = commrun.script("dump.py", DUMP_ENV)
    r = commrun.run("-n", 2, script, env={"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29555"})
    assert r.returncode == 0, r.stderr
    assert all((got["env"]["MASTER_ADDR"], got["env"]["MASTER_PORT"]) == ("10.1.2.3", "29555")
               for got in untag(r.stdout).values())


THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_compute_threads_per_rank(commrun, n):
    """Each rank's thread variables, read in the rank: the host's cores shared among its ranks (at
    least one each) where more than one runs, nothing set for one rank alone; --threads-per-rank wins."""
    script = commrun.script("dump.py", DUMP_ENV)
    commrun.env = {k: v for k, v in commrun.env.items() if k not in THREADS}
    r = commrun.run("-n", n, script)
    assert r.returncode == 0, r.stderr
    want = None if n == 1 else str(max(1, cores() // n))
    for got in untag(r.stdout).values():
        assert [got["env"].get(v) for v in THREADS] == [want] * 3, (n, got["env"].get("OMP_NUM_THREADS"))
    assert r.stderr.count("compute thread") == (0 if n == 1 else 1), r.stderr
    assert all(got["env"]["OMP_WAIT_POLICY"] is None for got in untag(r.stdout).values())  # a thread each: no team
    r = commrun.run("-n", n, "--threads-per-rank", "2", script)
    assert r.returncode == 0, r.stderr
    assert all([got["env"].get(v) for v in THREADS] == ["2"] * 3 for got in untag(r.stdout).values())
    # more compute threads than cores, more than one a rank: a waiting OpenMP thread sleeps
    passive = "PASSIVE" if 1 < n and 2 * n > cores() else None
    assert all(got["env"]["OMP_WAIT_POLICY"] == passive for got in untag(r.stdout).values()), r.stdout
    assert ("OMP_WAIT_POLICY=PASSIVE" in r.stderr) is (passive is not None), r.stderr
    r = commrun.run("-n", n, "--threads-per-rank", "2", script, env={"OMP_WAIT_POLICY": "ACTIVE"})
    assert all(got["env"]["OMP_WAIT_POLICY"] == "ACTIVE" for got in untag(r.stdout).values())  # the user's


AFFINITY = """
    import json, os, threading
    got = {}
    t = threading.Thread(target=lambda: got.update(thread=sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    print(json.dumps({"rank": sorted(os.sched_getaffinity(0)), **got}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this system")
@both_launches
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_ranks_bound_to_their_cores(commrun, n):
    """Each rank's CPUs, and a thread's it starts, read in the rank: with --bind-to core blocks of
    whole cores that split the host's CPUs evenly (disjoint, the same size) where ranks do not
    outnumber the cores, every CPU where they do; --report-bindings names the same CPUs; by default
    the same on a host of several sockets, nothing bound on one socket; --bind-to none binds
    nothing."""
    script = commrun.script("aff.py", AFFINITY)
    every = sorted(os.sched_getaffinity(0))
    topo = [tuple(int(open(f"/sys/devices/system/cpu/cpu{c}/topology/{f}").read()) for f in
                  ("physical_package_id", "core_id")) for c in every]
    ncores, nsockets = len(set(topo)), len({socket for socket, _ in topo})
    r = commrun.run("-n", n, "--bind-to", "core", "--report-bindings", script)
    assert r.returncode == 0, r.stderr
    got = untag(r.stdout)
    assert all(g["thread"] == g["rank"] for g in got.values()), got  # the rank's threads stay in its CPUs
    cpus = [set(got[i]["rank"]) for i in range(n)]
    first = cpus[:ncores]  # where ranks outnumber cores, rank i shares core i mod cores
    assert all(not (a & b) for i, a in enumerate(first) for b in first[i + 1:]), cpus
    assert len({len(c) for c in first}) == 1 and len(first[0]) >= len(every) // len(first) // 2, cpus
    assert all(c == cpus[i % ncores] for i, c in enumerate(cpus)), cpus
    for i, c in enumerate(cpus):
        listed = ",".join(map(str, sorted(c)))
        assert re.search(rf"commrun: rank {i} bound to CPUs? {listed} \[", r.stderr), r.stderr
    bound = [g["rank"] for g in untag(r.stdout).values()]
    r = commrun.run("-n", n, script)
    assert r.returncode == 0, r.stderr
    by_default = [g["rank"] for g in untag(r.stdout).values()]
    if nsockets > 1 and n <= ncores:
        assert sorted(by_default) == sorted(bound)
    else:
        assert by_default == [every] * n
        assert "not bound" not in r.stderr  # said only with --report-bindings
    r = commrun.run("-n", n, "--bind-to", "none", script)
    assert r.returncode == 0, r.stderr
    assert all(g["rank"] == every for g in untag(r.stdout).values())


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_children_a_bound_rank_spawns_run_on_the_jobs_cpus(commrun):
    """MPI.Spawn's children of a rank bound to a block of cores get the job's CPUs on the host, not
    their parent's block (they would all share it)."""
    script = commrun.script("spawner.py", """
        import json, os, sys
        from commlib import MPI
        if len(sys.argv) > 1:
            parent = MPI.Comm.Get_parent()
            parent.send(sorted(os.sched_getaffinity(0)), dest=0)
            parent.Disconnect()
        else:
            comm = MPI.COMM_WORLD
            inter = comm.Spawn(sys.executable, [__file__, "child"], maxprocs=1, root=0)
            child = inter.recv(source=0) if comm.Get_rank() == 0 else None
            inter.Disconnect()
            print(json.dumps({"rank": sorted(os.sched_getaffinity(0)), "child": child}))
    """)
    r = commrun.run("-n", 2, "--bind-to", "core", script)
    assert r.returncode == 0, r.stderr
    got = untag(r.stdout)
    every = sorted(os.sched_getaffinity(0))
    assert got[0]["rank"] != every and got[0]["child"] == every, got


@both_launches
def test_module(commrun):
    (commrun.cwd / "mypkg").mkdir()
    (commrun.cwd / "mypkg" / "__init__.py").write_text("")
    (commrun.cwd / "mypkg" / "mod.py").write_text(DUMP_ENV.replace("\n    ", "\n"))
    r = commrun.run("-n", 2, "-m", "mypkg.mod", "-n", "7")
    assert r.returncode == 0, r.stderr
    assert untag(r.stdout)[1]["argv"] == ["-n", "7"]


def test_direct_executable(commrun):
    r = commrun.run("-n", 3, "--", "sh", "-c", 'echo "$RANK/$WORLD_SIZE $0"', "arg0")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] 0/3 arg0", "[1] 1/3 arg0", "[2] 2/3 arg0"]

@both_launches
def test_whole_lines_tagged_and_never_interleaved(commrun):
    script = commrun.script("noisy.py", """
        import os, sys
        rank = os.environ["RANK"]
        for i in range(300):
            half = rank * 1000
            sys.stdout.write(half); sys.stdout.flush()          # a line in two writes
            sys.stdout.write(half + "\\n")
            sys.stderr.write("E" * 1500 + rank + "\\n")
        sys.stdout.write("tail" + rank)                           # no newline at exit
    """)
    # commrun's own stdout unbuffered, as CI runners often set it: a write cut short by
    # SIGCHLD (a rank exiting) once lost the rest of its chunk and merged two lines
    r = commrun.run("-n", 3, script, env={"PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stderr
    counts = {0: 0, 1: 0, 2: 0}
    lines = r.stdout.split("\n")
    assert lines.pop() == ""
    for line in lines:
        m = re.fullmatch(r"\[(\d)\] (?:(\d)\2{1999}|tail(\d))", line)
        assert m, f"mangled line: {line[:60]!r}... ({len(line)} chars)"
        rank = int(m[1])
        if m[2] is not None:
            assert int(m[2]) == rank
            counts[rank] += 1
        else:
            assert int(m[3]) == rank
    assert counts == {0: 300, 1: 300, 2: 300}
    err = [line for line in r.stderr.splitlines() if not line.startswith("commrun:")]
    assert len(err) == 900
    assert all(re.fullmatch(r"\[(\d)\] E{1500}\1", line) for line in err)


def test_no_tag_output(commrun):
    r = commrun.run("-n", 2, "--no-tag-output", "--", "sh", "-c", "echo out; echo err >&2")
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["out", "out"]
    assert [line for line in r.stderr.splitlines() if "compute thread" not in line] == ["err", "err"]

@both_launches
def test_stdin_goes_to_rank_0_only(commrun):
    script = commrun.script("stdin.py", """
        import json, os, sys
        print(json.dumps(sys.stdin.read()))
    """)
    r = commrun.run("-n", 3, script, input="line one\nline two\n")
    assert r.returncode == 0, r.stderr
    assert untag(r.stdout) == {0: "line one\nline two\n", 1: "", 2: ""}

@both_launches
def test_hello_example(commrun):
    r = commrun.run("-n", 4, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hello.py"))
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert len(lines) == 4 and all(line.startswith(f"[{i}] hello from rank {i} of 4") for i, line in enumerate(lines))


def test_ranks_register_with_the_coordinator_and_hear_deaths(commrun):
    script = commrun.script("rendezvous.py", """
        import os, queue
        from commlib import _rendezvous as rv
        job = rv.discover()
        client = rv.Client.connect(job.coordinator, job.secret, job.rank, timeout=20)
        table = client.register({"pid": os.getpid()}, timeout=20)
        print("table", [entry["pid"] > 0 for entry in table])
        if job.rank == 0:
            inbox = queue.Queue()
            client.start_listener(inbox.put)
            while (msg := inbox.get(timeout=20))["kind"] != "died":
                pass
            print("notice", msg["rank"], msg["code"], msg["message"])
            client.close()
        # rank 1 just exits: commrun tells the others
    """)
    r = commrun.run("-n", 2, script)
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == ["[0] notice 1 0 exited with code 0", "[0] table [True, True]", "[1] table [True, True]"]


def test_hosts_with_a_custom_remote_shell(commrun):
    script = commrun.script("dump.py", DUMP_ENV)
    r = commrun.run("--hosts", "localhost:1,fakehost:2", "--rsh", "env COMMRUN_FAKE_HOST={host}",
                    "--coordinator-host", "127.0.0.1", script, "x y")
    assert r.returncode == 0, r.stderr
    ranks = untag(r.stdout)
    assert [(g["env"]["COMMRUN_FAKE_HOST"], g["env"]["LOCAL_RANK"], g["env"]["LOCAL_WORLD_SIZE"]) for _, g in
            sorted(ranks.items())] == [(None, "0", "1"), ("fakehost", "0", "2"), ("fakehost", "1", "2")]
    assert all(g["argv"] == ["x y"] for g in ranks.values())


def test_hostfile_remote_failure_names_the_host(commrun, tmp_path):
    (tmp_path / "hosts").write_text("# two fake hosts\nhosta slots=1\nhostb:1\n")
    script = commrun.script("fail.py", """
        import os, sys
        sys.exit(4 if os.environ["RANK"] == "1" else 0)
    """)
    r = commrun.run("--hostfile", "hosts", "--rsh", "env COMMRUN_FAKE_HOST={host}", "--coordinator-host",
                    "127.0.0.1", script)
    assert r.returncode == 4
    assert re.search(r"commrun: rank 1 \(host hostb, pid \d+\) exited with code 4", r.stderr)


@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "0", "marker.py"], "0 is not in the range"),
        (["-n", "-1", "marker.py"], "-1 is not in the range"),
        (["-n", "2", "missing.py"], "missing.py: no such script"),
        (["-n", "2", "--unknown", "marker.py"], "No such option"),
        (["-n", "2"], "no program given"),
    ],
)
def test_bad_invocations_start_nothing(commrun, args, message):
    commrun.script("marker.py", "open('started', 'w').close()\n")
    r = commrun.run(*args)
    assert r.returncode == 2 and message in r.stderr and r.stdout == ""
    assert not (commrun.cwd / "started").exists()


def test_version_and_help(commrun):
    r = commrun.run("--version")
    assert r.returncode == 0 and r.stdout.startswith("commrun, version")
    r = commrun.run("--help")
    assert r.returncode == 0 and "Usage: commrun" in r.stdout


def test_mpirun_style_command_line(commrun):
    """`commrun -np 3 --oversubscribe python script.py`, as users call mpirun: every rank joins the job."""
    commrun.script("who.py", """
        import commlib as cl
        g = cl.init()
        print(f"{g.rank()}/{g.size()} sum={int(cl.all_reduce([g.rank()])[0])}")
    """)
    r = commrun.run("-np", 3, "--oversubscribe", "--allow-run-as-root", sys.executable, "who.py")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["[0] 0/3 sum=3", "[1] 1/3 sum=3", "[2] 2/3 sum=3"]
