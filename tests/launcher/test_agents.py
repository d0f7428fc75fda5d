"""Ranks on other hosts are started by one agent per host (commrun.agent), over one remote shell.

The "hosts" here are names that a logging remote shell (--rsh) runs on this machine: it records
each host it is asked for and the pid it becomes (the agent's), then runs the command. So these
tests count remote shells, kill agents, and check what survives, without a second machine. The
same path across real network namespaces is in tests/multihost.
"""
import os
import re
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest

from commrun import agent as wire

from _tagged import by_rank
from _waiting import settled

pytestmark = pytest.mark.timeout(90)

STUB = """#!/bin/sh
host=$1
shift
echo "$host $$ $PPID" >> {log}
exec "$@"
"""


@pytest.fixture
def hostshell(tmp_path):
    log = tmp_path / "shells.log"
    stub = tmp_path / "hostshell"  # (a name ending in "rsh" or "ssh" would be taken for ssh)
    stub.write_text(STUB.format(log=log))
    stub.chmod(0o755)

    def shells():
        if not log.exists():
            return []
        return [(h, int(pid), int(parent)) for h, pid, parent in (line.split() for line in log.read_text().splitlines())]

    return [f"--rsh={stub} {{host}}", "--coordinator-host=127.0.0.1"], shells


def left_behind(marker, within=5.0):
    """The processes whose command line mentions `marker` still there after up to `within` seconds
    (times SCALE) of waiting for them to go: what a job leaves behind."""
    return settled(lambda: [p for p in psutil.process_iter(["cmdline"])
                            if any(marker in w for w in (p.info["cmdline"] or []))], within)


def running(pids, within=5.0):
    """Those of `pids` still running (not zombies) after up to `within` seconds (times SCALE)."""
    def alive():
        found = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    found.append(pid)
            except psutil.NoSuchProcess:
                pass
        return found
    return settled(alive, within)


SUM = """
    import os, sys
    import numpy as np
    import commlib as cl
    g = cl.init()
    x = np.arange(6, dtype=np.float64) * (g.rank() + 1)
    cl.all_reduce(x, out=x)
    print(g.rank(), g.size(), os.environ["COMMLIB_LOCAL_RANK"], os.environ["COMMLIB_LOCAL_SIZE"],
          *x.tolist(), flush=True)
    print("stderr of", g.rank(), file=sys.stderr)
"""


LOOP = """
    import time
    import numpy as np
    import commlib as cl
    g = cl.init()
    x = np.ones(1000)
    print("ready", flush=True)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        cl.all_reduce(x, out=x)
        time.sleep(0.01)  # the job's pace (a busy job, not a spinning one) until it is killed
"""


def wait_ready(proc, count, within=40.0):
    """Whether `count` ranks printed "ready" within `within` seconds."""
    deadline, ready = time.monotonic() + within, 0
    while ready < count and time.monotonic() < deadline:
        ready += proc.stdout.readline().endswith("ready\n")
    return ready == count


@pytest.mark.parametrize("fanout", [32, 4])
def test_sixteen_hosts_take_sixteen_remote_shells(commrun, hostshell, fanout):
    rsh, shells = hostshell
    script = commrun.script("sum.py", SUM)
    hosts = ",".join(f"h{i}:{1 + i % 2}" for i in range(16)) + ",localhost:2"  # 24 ranks, 16 remote hosts
    r = commrun.run("--hosts", hosts, *rsh, script, timeout=80, env={"COMMLIB_AGENT_FANOUT": str(fanout)})
    assert r.returncode == 0, r.stderr
    assert sorted(h for h, _, _ in shells()) == sorted(f"h{i}" for i in range(16))  # one shell a host
    agents = {pid for _, pid, _ in shells()}
    by_commrun = [h for h, _, parent in shells() if parent not in agents]
    assert len(by_commrun) == min(16, fanout)  # the rest started by agents: a launch tree
    out = by_rank(r.stdout)
    n = sum(1 + i % 2 for i in range(16)) + 2
    assert sorted(out) == list(range(n))
    want = np.arange(6) * sum(range(1, n + 1))
    placed = [(1 + i % 2) for i in range(16) for _ in range(1 + i % 2)] + [2, 2]
    for rank, lines in out.items():
        words = lines[0].split()
        assert int(words[1]) == n and int(words[3]) == placed[rank]
        np.testing.assert_array_equal(np.array(words[4:], dtype=float), want)
    errs = [line for line in r.stderr.splitlines() if line.startswith("[")]
    assert sorted(errs) == sorted(f"[{i}] stderr of {i}" for i in range(n))


def test_remote_rank_exit_code_and_stdin(commrun, hostshell):
    rsh, shells = hostshell
    script = commrun.script("exit.py", """
        import sys
        import commlib as cl
        g = cl.init()
        if g.rank() == 0:
            print("read", repr(sys.stdin.read()), flush=True)
        cl.barrier()
        if g.rank() == 2:
            sys.exit(7)
        cl.barrier()
    """)
    r = commrun.run("--hosts", "h1:2,h2:2", *rsh, script, input="lines\nfor rank 0\n")
    assert r.returncode == 7, r.stderr
    assert re.search(r"rank 2 \(host h2, pid \d+\) exited with code 7", r.stderr), r.stderr
    assert "[0] read 'lines\\nfor rank 0\\n'" in r.stdout
    assert len(shells()) == 2
    r = commrun.run("--hosts", "h1:2", *rsh, script, env={"COMMLIB_AGENT_FANOUT": "1"})
    assert r.returncode == 2 and "COMMLIB_AGENT_FANOUT='1': expected a whole number of at least 2" in r.stderr

def test_a_remote_shell_that_cannot_start_fails_the_job_at_once(commrun, tmp_path):
    marker = f"noshell{os.getpid()}"
    script = commrun.script(f"{marker}.py", LOOP)
    r = commrun.run("--rsh", f"{tmp_path}/no-such-shell {{host}}", "--coordinator-host", "127.0.0.1",
                    "--hosts", "localhost:1,h1:2", script, timeout=30)
    assert r.returncode == 127, r.stderr
    assert re.search(r"cannot start rank 1 \(\S*no-such-shell\): .*No such file", r.stderr), r.stderr
    assert "Traceback" not in r.stderr
    assert left_behind(marker) == []


def test_killed_agent_fails_every_rank_and_leaves_nothing(commrun, hostshell, tmp_path):
    rsh, shells = hostshell
    marker = f"agentkill{os.getpid()}"
    script = commrun.script(f"{marker}.py", LOOP)
    shm_before = set(os.listdir("/dev/shm"))
    proc = commrun.popen("--hosts", "localhost:1,h1:2,h2:2", *rsh, script)
    assert wait_ready(proc, 5)
    agent = {h: pid for h, pid, _ in shells()}["h2"]
    assert "commrun.agent" in " ".join(psutil.Process(agent).cmdline())
    killed = time.monotonic()
    os.kill(agent, signal.SIGKILL)
    out, err = proc.communicate(timeout=40)
    took = time.monotonic() - killed
    assert proc.returncode != 0
    assert took < 15, err
    assert re.search(r"rank [34] \(host h2, pid \d+\) was lost: its host's agent on h2 was killed by SIGKILL", err), err
    for rank in (0, 1, 2):  # every surviving rank raised, naming the lost rank
        assert re.search(rf"\[{rank}\] .*PeerLost", err), err
    assert left_behind(marker) == []
    assert set(os.listdir("/dev/shm")) <= shm_before


def test_an_agent_killed_mid_tree_loses_its_subtree_and_nothing_is_left(commrun, hostshell):
    """Fan-out 2 over 5 hosts: commrun starts h1 and h4; h1 starts h2 and h3. h1's agent killed:
    the ranks of h1, h2 and h3 are reported lost with it, h4's and h5's raise PeerLost."""
    rsh, shells = hostshell
    marker = f"agenttree{os.getpid()}"
    script = commrun.script(f"{marker}.py", LOOP)
    commrun.env = {**commrun.env, "COMMLIB_AGENT_FANOUT": "2"}
    proc = commrun.popen("--hosts", "h1:1,h2:1,h3:1,h4:1,h5:1", *rsh, script)
    assert wait_ready(proc, 5)
    logged = {h: (pid, parent) for h, pid, parent in shells()}
    assert logged["h2"][1] == logged["h1"][0] and logged["h3"][1] == logged["h1"][0]  # h1 started them
    assert logged["h5"][1] == logged["h4"][0]
    os.kill(logged["h1"][0], signal.SIGKILL)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode != 0
    assert re.search(r"rank [012] \(host h[123], pid \d+\) was lost: its host's agent on h1 was killed by SIGKILL", err), err
    for rank in (3, 4):
        assert re.search(rf"\[{rank}\] .*PeerLost", err), err
    assert left_behind(marker) == []
    assert running([pid for pid, _ in logged.values()]) == []


@pytest.mark.waits
def test_timeout_dumps_remote_stacks_and_interrupt_stops_agents(commrun, hostshell):
    rsh, shells = hostshell
    marker = f"agentstop{os.getpid()}"
    script = commrun.script(f"{marker}.py", """
        import time
        import commlib as cl
        g = cl.init()
        cl.barrier()
        print("ready", flush=True)
        time.sleep(60)  # stuck: --timeout, then SIGINT, is what ends it
    """)
    # 10 s: two ranks and their agents start from a fresh checkout (every module compiled as it is
    # imported) on a loaded machine; at 5 s a rank was once still importing commlib
    r = commrun.run("--timeout", 10, "--hosts", "h1:1,h2:1", *rsh, script)
    assert r.returncode == 124, r.stderr
    for rank in (0, 1):  # the stack each remote rank printed, carried by its agent
        assert re.search(rf"\[{rank}\]   File .*{marker}.py\", line 7", r.stderr), r.stderr
    assert left_behind(marker) == []

    proc = commrun.popen("--hosts", "h1:1,h2:1", *rsh, script)
    assert proc.stdout.readline().endswith("ready\n")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert left_behind(marker) == []
    assert running([pid for _, pid, _ in shells()]) == []  # the agents too


def test_agent_stops_its_ranks_when_commrun_is_gone(tmp_path, commrun_env):
    """The agent's orders end (commrun killed, the connection lost): its ranks are stopped."""
    marker = f"orphan{os.getpid()}"
    (tmp_path / f"{marker}.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")  # until stopped
    spec = {"argv": [os.sys.executable, str(tmp_path / f"{marker}.py")], "env": {}, "grace": 1.0,
            "stdin_rank": None, "ranks": [{"rank": r, "local_rank": r, "local_size": 2, "env": {}} for r in (0, 1)]}
    agent = subprocess.Popen([os.sys.executable, "-m", "commrun.agent"], env=commrun_env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import json
    agent.stdin.write(wire.frame(wire.SPEC, wire.ALL, json.dumps(spec).encode()))
    agent.stdin.flush()
    frames, got, said = wire.Frames(), [], {0: b"", 1: b""}
    while any(v != b"up\n" for v in said.values()):  # (output frames split where the rank's writes did)
        new = frames.feed(os.read(agent.stdout.fileno(), 65536))
        got += new
        for kind, r, payload in new:
            if kind == wire.OUT:
                said[r] += payload
    agent.stdin.close()  # commrun is gone
    rest = agent.stdout.read()
    assert agent.wait(timeout=10) == 0
    exits = {r: int(p) for k, r, p in got + frames.feed(rest) if k == wire.EXITED}
    assert exits == {0: -signal.SIGTERM, 1: -signal.SIGTERM}
    assert left_behind(marker) == []


def test_frames_read_across_any_split_and_refuse_garbage():
    stream = b"".join(wire.frame(k, r, p) for k, r, p in [(wire.OUT, 3, b"abc"), (wire.EXITED, -1, b""),
                                                           (wire.ERR, 70000, bytes(range(256)) * 3)])
    for step in (1, 2, 7, 9, 100, len(stream)):
        frames, got = wire.Frames(), []
        for at in range(0, len(stream), step):
            got += frames.feed(stream[at:at + step])
        assert got == [(wire.OUT, 3, b"abc"), (wire.EXITED, -1, b""), (wire.ERR, 70000, bytes(range(256)) * 3)]
        assert not frames.buf
    with pytest.raises(ValueError, match="not a commrun agent stream"):
        wire.Frames().feed(b"SSH-2.0-OpenSSH banner text\n")


THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def test_each_host_shares_its_cores_among_its_ranks(commrun, hostshell):
    """The compute-thread rule runs on each host with its own ranks (and cores): a host of one rank
    keeps the libraries' defaults; --threads-per-rank reaches every host."""
    rsh, _ = hostshell
    script = commrun.script("threads.py", """
        import os
        import commlib as cl
        g = cl.init()
        print(os.environ["COMMLIB_LOCAL_SIZE"], *[os.environ.get(v, "-") for v in %r], flush=True)
        cl.barrier()
    """ % (THREADS,))
    commrun.env = {k: v for k, v in commrun.env.items() if k not in THREADS}
    cores = len(os.sched_getaffinity(0))
    r = commrun.run("--hosts", "h1:1,h2:3,localhost:2", *rsh, script)
    assert r.returncode == 0, r.stderr
    for rank, lines in by_rank(r.stdout).items():
        local, *got = lines[0].split()
        assert got == ["-"] * 3 if local == "1" else got == [str(max(1, cores // int(local)))] * 3, (rank, lines)
    r = commrun.run("--hosts", "h1:1,h2:3", "--threads-per-rank", "2", *rsh, script)
    assert r.returncode == 0, r.stderr
    assert all(lines[0].split()[1:] == ["2"] * 3 for lines in by_rank(r.stdout).values()), r.stdout


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this system")
def test_each_host_binds_its_own_ranks_and_reports_them(commrun, hostshell):
    """--bind-to reaches each host's agent, which splits that host's cores among that host's ranks
    (a host of one rank: all of them) and, with --report-bindings, says so tagged by its host."""
    rsh, _ = hostshell
    script = commrun.script("aff.py", """
        import os
        import commlib as cl
        g = cl.init()
        print(os.environ["COMMLIB_LOCAL_RANK"], ",".join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)
        cl.barrier()
    """)
    every = sorted(os.sched_getaffinity(0))
    r = commrun.run("--hosts", "h1:1,h2:2", "--bind-to", "core", "--report-bindings", *rsh, script)
    assert r.returncode == 0, r.stderr
    got = {rank: lines[0].split() for rank, lines in by_rank(r.stdout).items()}
    assert got[0] == ["0", ",".join(map(str, every))]
    h2 = [set(map(int, got[rank][1].split(","))) for rank in (1, 2)]
    if len(every) >= 2:
        assert not (h2[0] & h2[1]) and h2[0] | h2[1] <= set(every), got
    assert re.search(r"agent on h2: rank 1 bound to CPUs? [0-9,]+ \[", r.stderr), r.stderr
    assert re.search(r"agent on h1: rank 0 bound to CPUs? " + ",".join(map(str, every)), r.stderr), r.stderr
    r = commrun.run("--hosts", "h1:1,h2:2", "--bind-to", "none", *rsh, script)
    assert r.returncode == 0, r.stderr
    assert all(lines[0].split()[1] == ",".join(map(str, every)) for lines in by_rank(r.stdout).values())
    assert "bound" not in r.stderr
