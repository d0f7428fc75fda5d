"""Jobs across namespace hosts: every collective on 3 hosts, interface choice, a link cut mid-job, srun.

Each test builds its own hosts (_netns.Fabric: namespaces on a bridge, a
subnet of 10.236.0.0/16 that exists only there) and removes them. Skipped
with the reason without root or iproute2. Jobs run through the real launcher
(or, for the Slurm-style start, as plain processes with SLURM_* variables)
with a hard timeout; the machine is shared and slow, so limits are generous.
"""
import os
import random
import re
import subprocess
import sys
import time

import pytest

from _netns import Fabric, Job, base_env, leftovers, run_job

pytestmark = pytest.mark.timeout(300)
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")


def _ok_ranks(out):
    return sorted(int(m) for m in re.findall(r"rank (\d+): \d+ checks ok", out))


def _routes(out):
    """{rank: (listening address, {peer: route})} from COMMLIB_VERBOSE lines."""
    got = {}
    for m in re.finditer(r"commlib rank (\d+) on \S+: listening on tcp (\S+):\d+ \(from [^)]*\); peers: (.*)", out):
        peers = dict(re.match(r"(\d+) (.*)", p).groups() for p in m[3].split("; "))
        got[int(m[1])] = (m[2], {int(k): v for k, v in peers.items()})
    return got


def test_three_hosts_two_ranks_each_every_collective():
    with Fabric(3, "10.236.1") as fab:
        hosts = ",".join(f"{h}:2" for h in fab.hosts)
        argv = fab.commrun("-v", "--hosts", hosts, "--ifname", "fab0",
                           os.path.join(CASES, "every_collective.py"))
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=90), timeout=280)
        assert rc == 0 and _ok_ranks(out) == list(range(6)), f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        routes = _routes(err)
        assert sorted(routes) == list(range(6)), err
        for r, (address, peers) in routes.items():
            assert address == fab.addr(r // 2), (r, address)
            for p, route in peers.items():  # the host's other rank by Unix socket, the rest by TCP
                want = "shared memory" if p // 2 == r // 2 else f"tcp {fab.addr(p // 2)}:"
                assert route.startswith(want), (r, p, route)


@pytest.mark.parametrize("layout,algo,subnet", [((2, 2), "rails", "10.236.13"), ((2, 1), "leaders", "10.236.14"),
                                                 ((1, 2, 1), "leaders", "10.236.15")])
def test_all_reduce_across_hosts_runs_the_host_aware_schedule(layout, algo, subnet, tmp_path):
    """Above the latency-bound sizes, all_reduce on ranks of several hosts runs `algo` (the debug
    line each rank writes says so) and every result matches NumPy, bit-identical on every rank."""
    n = sum(layout)
    with Fabric(len(layout), subnet) as fab:
        hosts = ",".join(f"{fab.hosts[i]}:{k}" for i, k in enumerate(layout))
        argv = fab.commrun("--hosts", hosts, "--ifname", "fab0", os.path.join(CASES, "hosted_collectives.py"))
        env = base_env(COMMLIB_TIMEOUT=90, COMMLIB_DEBUG="INFO", COMMLIB_DEBUG_FILE=str(tmp_path / "r%r.log"))
        rc, out, err, _ = run_job(argv, env, timeout=280)
        assert rc == 0 and _ok_ranks(out) == list(range(n)), f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
    for r in range(n):
        lines = (tmp_path / f"r{r}.log").read_text()
        chosen = {int(b): a for b, a in re.findall(rf"all_reduce of (\d+) B on {n} ranks: (\w+)", lines)}
        big = {a for b, a in chosen.items() if b >= 1 << 20}  # leaders from 1 MiB, rails from 256 KiB
        assert big == {algo}, (r, chosen)


def test_ranks_placed_round_robin_gather_on_a_ring_ordered_by_host():
    """--hosts a:1,b:1 with 6 ranks wraps round-robin (a, b, a, b, ...): a ring in rank order would
    cross between the hosts at every step; the all-gathers run host by host and match NumPy."""
    with Fabric(2, "10.236.17") as fab:
        argv = fab.commrun("--hosts", f"{fab.hosts[0]}:1,{fab.hosts[1]}:1", "-n", "6", "--oversubscribe",
                           "--ifname", "fab0", os.path.join(CASES, "round_robin.py"))
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=90), timeout=280)
        assert rc == 0 and _ok_ranks(out) == list(range(6)), f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        hosts = dict(re.findall(r"rank (\d+): \d+ checks ok \(host (\S+)\)", out))
        assert len({hosts[str(k)] for k in (0, 2, 4)}) == 1 and hosts["0"] != hosts["1"], hosts


@pytest.mark.parametrize("layout,subnet,force", [((2, 2, 2), "10.236.19", {}), ((1, 3, 2), "10.236.20", {}),
                                                 ("robin", "10.236.21", {}),
                                                 ((1, 3, 2), "10.236.22", {"BROADCAST": "scatter_gather"}),
                                                 ((3, 3), "10.236.25", {"ALL_TO_ALL": "rails"})])
def test_broadcast_reduce_and_barrier_across_hosts_through_their_leaders(layout, subnet, force, tmp_path):
    """broadcast, reduce and barrier on ranks of several hosts run the host-aware schedules (each
    rank's debug lines say so), in the one-call path too, and every result matches NumPy;
    round-robin placement keeps the dissemination barrier (its long rounds stay on a host). Forced,
    the scatter + all-gather broadcast by host (chosen from 1 MiB at 16 ranks and more) at every
    size and root, and the all_to_all by rails (chosen beyond 64 ranks)."""
    with Fabric(2 if layout == "robin" else len(layout), subnet) as fab:
        if layout == "robin":
            n, hosts = 5, f"{fab.hosts[0]}:1,{fab.hosts[1]}:1"
        else:
            n, hosts = sum(layout), ",".join(f"{fab.hosts[i]}:{k}" for i, k in enumerate(layout))
        argv = fab.commrun("--hosts", hosts, "-n", str(n), "--oversubscribe", "--ifname", "fab0",
                           os.path.join(CASES, "node_aware.py"))
        env = base_env(COMMLIB_TIMEOUT=90, COMMLIB_DEBUG="INFO", COMMLIB_DEBUG_FILE=str(tmp_path / "r%r.log"),
                       **{f"COMMLIB_ALGO_{kind}": algo for kind, algo in force.items()})
        rc, out, err, _ = run_job(argv, env, timeout=280)
        assert rc == 0 and _ok_ranks(out) == list(range(n)), f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
    for r in range(n):
        lines = (tmp_path / f"r{r}.log").read_text()
        if force:
            kind, algo = next(iter(force.items()))
            assert algo in set(re.findall(rf"{kind.lower()} of \d+ B on {n} ranks: (\w+)", lines)), (r, lines[-2000:])
            continue
        chosen = set(re.findall(rf"(broadcast|reduce|barrier) of (\d+) B on {n} ranks: (\w+)", lines))
        assert ("reduce", "160000", "leaders") in chosen, (r, chosen)  # (smaller: the one-call path's copy)
        assert ("broadcast", "160000", "leaders") in chosen, (r, chosen)  # (up to 64 KiB: linear, one hop)
        assert ("barrier", "0", "doubling" if layout == "robin" else "leaders") in chosen, (r, chosen)


def _running(pid):
    """Whether pid is a process that has not ended (a zombie waiting to be reaped has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _counting_shell(tmp_path):
    """A remote shell into namespace hosts that logs each host it is asked for and the pid it
    becomes (the agent's). (Not named *rsh/*ssh: commrun would take it for ssh.)"""
    log, stub = tmp_path / "shells.log", tmp_path / "nsshell"
    stub.write_text(f'#!/bin/sh\nhost=$1\nshift\necho "$host $$ $PPID" >> {log}\nexec ip netns exec "$host" "$@"\n')
    stub.chmod(0o755)

    def shells():
        lines = log.read_text().splitlines() if log.exists() else []
        return [(h, int(pid), int(parent)) for h, pid, parent in (line.split() for line in lines)]
    return f"{stub} {{host}}", shells


def test_eight_hosts_through_their_agents_and_one_agent_killed(tmp_path):
    """8 namespace hosts x 2 ranks: one remote shell (one agent) a host starts the job, as a launch
    tree (commrun starts 3 agents, each of those the next hosts), and carries its ranks' coordinator
    traffic on one connection (8 for 16 ranks); the host-aware all_reduce,
    broadcast (scatter + all-gather by host at 1 MiB) and reduce (by host, and by rails at 1.28 MB) are right on all 16 ranks; then, in a second job, the agent of a host at the tree's second level is killed
    mid-job: its ranks are reported lost, every other rank fails, and nothing is left behind.
    Over 20 s: two jobs of 16 ranks on 8 namespace hosts (about 45 s on 2 cores)."""
    with Fabric(8, "10.236.16") as fab:
        rsh, shells = _counting_shell(tmp_path)
        hosts = ",".join(f"{h}:2" for h in fab.hosts)
        argv = ["ip", "netns", "exec", fab.hosts[0], sys.executable, "-m", "commrun", "-v", "--rsh", rsh,
                "--hosts", hosts, "--ifname", "fab0", os.path.join(CASES, "hosted_collectives.py")]
        env = base_env(COMMLIB_TIMEOUT=120, COMMLIB_DEBUG="INFO", COMMLIB_DEBUG_FILE=str(tmp_path / "r%r.log"),
                       COMMLIB_AGENT_FANOUT=3)  # a launch tree: commrun starts 3 agents, they the other 5
        rc, out, err, _ = run_job(argv, env, timeout=280)
        assert rc == 0 and _ok_ranks(out) == list(range(16)), f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        assert sorted(h for h, _, _ in shells()) == sorted(fab.hosts)  # 8 remote shells for 16 ranks
        assert "coordinator: 0 rank(s) connected directly, 16 through 8 host agent link(s)" in err, err[-3000:]
        agents = {pid for _, pid, _ in shells()}
        assert sorted(h for h, _, parent in shells() if parent not in agents) == [fab.hosts[i] for i in (0, 3, 6)]
        for r in range(16):
            lines = (tmp_path / f"r{r}.log").read_text()
            assert f"rank {r}: " in out and re.search(r"all_reduce of \d+ B on 16 ranks: rails", lines)
            assert "broadcast of 1048576 B on 16 ranks: scatter_gather" in lines, lines[-2000:]
            assert "reduce of 160000 B on 16 ranks: leaders" in lines, lines[-2000:]
            assert "reduce of 1280000 B on 16 ranks: rails" in lines, lines[-2000:]

        (tmp_path / "shells.log").unlink()
        marker = f"agents-{fab.tag}"
        argv[argv.index(os.path.join(CASES, "hosted_collectives.py"))] = os.path.join(CASES, "collective_loop.py")
        job = Job(argv + [marker], base_env(COMMLIB_TIMEOUT=30, COMMLIB_AGENT_FANOUT=3))
        try:
            running = job.wait_for(lambda lines: len({ln for ln in lines if "looping" in ln}) == 16, 200)
            assert running, job.output()
            agent = {h: pid for h, pid, _ in shells()}[fab.hosts[5]]  # started by host 3's agent
            os.kill(agent, 9)
            killed = time.monotonic()
            rc = job.finish(120)
            took = time.monotonic() - killed
        finally:
            job.kill()
        out = job.output()
        assert rc != 0, out
        assert re.search(rf"rank 1[01] \(host {fab.hosts[5]}, pid \d+\) was lost: its host's agent on "
                         rf"{fab.hosts[5]} was killed by SIGKILL", out), out
        for r in set(range(16)) - {10, 11}:
            m = re.search(rf"rank {r}: caught (PeerLost|CommTimeout): (.*)", out)
            assert m, (r, out)
        assert took < 30, (took, out)
        assert leftovers(marker, within=10) == [], leftovers(marker)
        assert [pid for _, pid, _ in shells() if _running(pid)] == []


def test_host_with_two_interfaces_routed_choice_and_ifname():
    with Fabric(3, "10.236.2") as fab:
        fab.dead_end(2, "mgmt0", "10.236.99.3/24")  # host 2: a second interface that reaches nothing
        hosts = ",".join(f"{h}:1" for h in fab.hosts)
        case = os.path.join(CASES, "every_collective.py")
        # Without COMMLIB_IFNAME: the route to the coordinator (host 0) picks fab0 on host 2.
        argv = fab.commrun("-v", "--hosts", hosts, "--coordinator-host", fab.addr(0), case)
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=90), timeout=250)
        assert rc == 0 and _ok_ranks(out) == [0, 1, 2], f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        routes = _routes(err)
        assert routes[2][0] == fab.addr(2) and "the route to the coordinator" in err, err

        # The right interface named: the same.
        argv = fab.commrun("-v", "--hosts", hosts, "--coordinator-host", fab.addr(0), "--ifname", "fab0", case)
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=90), timeout=250)
        assert rc == 0 and _ok_ranks(out) == [0, 1, 2], f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        assert _routes(err)[2][0] == fab.addr(2) and "from COMMLIB_IFNAME=fab0" in err, err

        # A setting that leaves host 2 only its dead interface (hosts 0 and 1 keep their own address):
        # rank 2 listens where nobody can reach it: a clear error naming rank 2 and its address.
        argv = fab.commrun("--hosts", hosts, "--coordinator-host", fab.addr(0), case)
        wrong = f"10.236.99.0/24,{fab.addr(0)},{fab.addr(1)}"
        rc, out, err, took = run_job(argv, base_env(COMMLIB_TIMEOUT=12, COMMLIB_IFNAME=wrong), timeout=120)
        assert rc != 0, out + err
        assert re.search(r"could not connect to rank 2 at tcp 10\.236\.99\.3:\d+: network is unreachable "
                         r"\(ENETUNREACH\)", out + err), out + err
        assert took < 90, took

        # A name no host has: refused at init on every rank, naming the value and the interfaces.
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=30, COMMLIB_IFNAME="eth9"), timeout=120)
        assert rc != 0 and "COMMLIB_IFNAME='eth9': no interface named eth9 on this host; interfaces: lo 127.0.0.1" in out + err, out + err
        assert "fab0 10.236.2." in out + err, out + err


def test_loopback_is_never_advertised_across_hosts():
    with Fabric(2, "10.236.3") as fab:
        argv = fab.commrun("--hosts", f"{fab.hosts[0]}:1,{fab.hosts[1]}:1", "--coordinator-host", fab.addr(0),
                           os.path.join(CASES, "every_collective.py"))
        rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=30, COMMLIB_IFNAME="lo"), timeout=120)
        assert rc != 0 and "ranks span hosts, but COMMLIB_IFNAME=lo gives the loopback address 127.0.0.1" in out + err, out + err
        # commrun --ifname refuses the loopback interface itself, before starting anything
        rc, out, err, _ = run_job(fab.commrun("--hosts", f"{fab.hosts[0]}:1,{fab.hosts[1]}:1", "--ifname", "lo",
                                              os.path.join(CASES, "every_collective.py")), base_env(), timeout=60)
        assert rc == 2 and "loopback address 127.0.0.1" in err, err


@pytest.mark.waits
def test_link_down_mid_job_fails_every_rank_naming_the_unreachable_one():
    """Over 20 s (about 20 s on 2 cores): the ranks of the far host learn of the cut only by the group's
    timeout (15 s, so that a busy machine's start across two hosts never reaches it), then the job ends."""
    with Fabric(2, "10.236.4") as fab:
        case = os.path.join(CASES, "collective_loop.py")
        marker = f"loop-{fab.tag}"
        argv = fab.commrun("--hosts", f"{fab.hosts[0]}:2,{fab.hosts[1]}:2", "--ifname", "fab0", case, marker)
        job = Job(argv, base_env(COMMLIB_TIMEOUT=15))
        try:
            running = job.wait_for(lambda lines: len({ln.split()[0] for ln in lines if "looping" in ln}) == 4, 200)
            assert running, job.output()  # every rank is in its loop: the link goes down mid-job
            fab.ip(1, "link", "set", "fab0", "down")
            cut = time.monotonic()
            rc = job.finish(120)
            took = time.monotonic() - cut
        finally:
            job.kill()
        out = job.output()
        assert rc != 0, out
        # Every rank reports the failure within the timeout. Host 0's ranks (with the coordinator)
        # name host 1's ranks as not answering; host 1's ranks name a rank of host 0 they waited for,
        # or say their query to the coordinator on host 0 is not acknowledged (the link is down).
        for r in range(4):
            m = re.search(rf"rank {r}: caught (CommTimeout|PeerLost): (.*)", out)
            assert m, (r, out)
            if r < 2:
                assert re.search(r"rank [23]: no answer", m[2]) or re.search(r"(for|lost) rank [23]\b", m[2]), m[2]
            else:
                assert (re.search(r"(for|lost) rank [01]\b", m[2])
                        or f"the coordinator at {fab.addr(0)} has not acknowledged" in m[2]), m[2]
        assert took < 15 + 30, (took, out)
        assert leftovers(marker, within=10) == [], leftovers(marker)


def _srun(fab, job_id, step, *program):
    """Four tasks, two per host, started as srun would: SLURM_* variables only. (codes, out, err)"""
    procs = []
    try:
        for r in range(4):
            env = base_env(SLURM_PROCID=r, SLURM_NTASKS=4, SLURM_LOCALID=r % 2, SLURM_NODEID=r // 2,
                           SLURM_JOB_ID=job_id, SLURM_STEP_ID=step, SLURM_NODELIST=f"{fab.subnet}.[1-2]",
                           SLURM_TASKS_PER_NODE="2(x2)", COMMLIB_TIMEOUT=90, COMMLIB_VERBOSE=1)
            argv = ["ip", "netns", "exec", fab.hosts[r // 2], sys.executable, *program]
            procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, start_new_session=True))
        results = [p.communicate(timeout=250) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    return [p.returncode for p in procs], "".join(o for o, _ in results), "".join(e for _, e in results)


def test_slurm_style_start_across_two_hosts():
    """srun's variables only (no commrun): rank 0 hosts the coordinator at the node list's first host."""
    with Fabric(2, "10.236.5") as fab:
        job_id = random.randrange(10_000, 1_000_000)
        codes, out, err = _srun(fab, job_id, 0, os.path.join(CASES, "every_collective.py"))
        assert codes == [0] * 4, out + err
        assert _ok_ranks(out) == [0, 1, 2, 3], out + err
        routes = _routes(err)
        for r, (address, peers) in routes.items():
            assert address == fab.addr(r // 2), (r, address)
            assert peers[r ^ 1] == "shared memory" and peers[(r + 2) % 4].startswith(f"tcp {fab.addr(1 - r // 2)}:")
        # the doctor under the same launcher (the next job step)
        codes, out, err = _srun(fab, job_id, 1, "-m", "commlib.doctor")
        assert codes == [0] * 4, out + err
        assert "all 12 connections between 4 ranks work" in out, out + err
        assert _doctor_rows(out)[3] == (fab.addr(1), ["tcp", "tcp", "shm", "-"]), out


def _doctor_rows(out):
    """{rank: (address, [cells])} from the doctor's transport table."""
    rows = {}
    for m in re.finditer(r"^(?:\[0\] )?\s+(\d+)  \S+\s+(\d+\.\d+\.\d+\.\d+:\d+)((?:\s+(?:-|shm|unix|tcp|FAIL))+)\s*$", out, re.M):
        rows[int(m[1])] = (m[2].rsplit(":", 1)[0], m[3].split())
    return rows


def _matrix(out, title):
    """The rows of the matrix after the line starting with `title`: {rank: [cells]}."""
    lines = out.split(title, 1)[1].splitlines()[2:]
    rows = {}
    for line in lines:
        m = re.match(r"^(?:\[0\] )?\s+(\d+)((?:\s+\S+)+)\s*$", line)
        if not m:
            break
        rows[int(m[1])] = m[2].split()
    return rows


def test_doctor_table_and_matrices_across_hosts():
    with Fabric(2, "10.236.6") as fab:
        argv = fab.commrun("--doctor", "--hosts", f"{fab.hosts[0]}:2,{fab.hosts[1]}:1", "--ifname", "fab0")
        rc, out, err, took = run_job(argv, base_env(), timeout=200)
        assert rc == 0, f"exit {rc}\n{out}\n{err}"
        assert "all 6 connections between 3 ranks work" in out, out
        rows = _doctor_rows(out)
        assert rows == {0: (fab.addr(0), ["-", "shm", "tcp"]), 1: (fab.addr(0), ["shm", "-", "tcp"]),
                        2: (fab.addr(1), ["tcp", "tcp", "-"])}, out
        for title in ("latency (microseconds", "bandwidth (MB/s"):
            m = _matrix(out, title)
            assert sorted(m) == [0, 1, 2], out
            for r, cells in m.items():
                assert cells[r] == "-" and all(float(c) > 0 for i, c in enumerate(cells) if i != r), (title, out)


@pytest.mark.waits
def test_doctor_reports_an_unreachable_pair_and_checks_the_rest():
    with Fabric(3, "10.236.7") as fab:
        fab.ip(1, "route", "add", "unreachable", f"{fab.addr(2)}/32")  # host 1 cannot reach host 2
        argv = fab.commrun("--doctor", "--hosts", ",".join(f"{h}:1" for h in fab.hosts), "--ifname", "fab0")
        rc, out, err, took = run_job(argv, base_env(), timeout=200)
        assert rc != 0, out + err
        rows = _doctor_rows(out)
        assert rows[0][1] == ["-", "tcp", "tcp"] and rows[1][1] == ["tcp", "-", "FAIL"], out
        assert rows[2][1] == ["tcp", "FAIL", "-"], out
        assert re.search(rf"FAILED rank 1 -> rank 2 \(tcp {fab.addr(2)}:\d+\): .*could not connect to rank 2 at "
                         rf"tcp {fab.addr(2)}:\d+: no route to host \(EHOSTUNREACH\)", out), out
        assert re.search(rf"FAILED rank 2 -> rank 1 \(tcp {fab.addr(1)}:\d+\): .*could not connect to rank 1", out), out
        bw = _matrix(out, "bandwidth (MB/s")
        assert bw[1][2] == "x" and bw[2][1] == "x", out
        assert float(bw[0][1]) > 0 and float(bw[0][2]) > 0 and float(bw[2][0]) > 0, out
        assert "2 problem(s)" in out, out


def _netns_inode(fab, i):
    return subprocess.run(["ip", "netns", "exec", fab.hosts[i], "readlink", "/proc/self/ns/net"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("layout", ["job across hosts", "one-host job"])
def test_spawn_places_children_on_the_hosts_info_names(layout, tmp_path):
    """MPI.Spawn with info host='h1,h2' starts one child on each of those hosts, through the remote
    shell the rank was given (COMMLIB_RSH, from commrun), in info wdir; parents and children talk
    over the intercommunicator. Parents on two hosts (the coordinators listen on the root's job
    address), or one parent on a one-host job listening on loopback, whose children's hosts are
    given by address (the coordinators listen on its address on the route to them)."""
    with Fabric(3, "10.236.9" if layout == "one-host job" else "10.236.8") as fab:
        case = os.path.join(CASES, "spawn_hosts.py")
        env = base_env(COMMLIB_TIMEOUT=60)
        if layout == "job across hosts":
            where = f"{fab.hosts[1]},{fab.hosts[2]}"
            argv = fab.commrun("--hosts", f"{fab.hosts[0]}:1,{fab.hosts[1]}:1", "--ifname", "fab0", case, where,
                               str(tmp_path))
            parents = 2
        else:
            where = f"{fab.addr(1)},{fab.addr(2)}"
            nsexec = tmp_path / "nsexec"  # a remote shell that knows hosts by address
            cases = "".join(f"{fab.addr(i)}) ns={fab.hosts[i]};;\n" for i in (1, 2))
            nsexec.write_text("#!/bin/sh\ncase $1 in\n" + cases
                              + "*) echo no such host $1 >&2; exit 1;;\nesac\nshift\nexec ip netns exec $ns \"$@\"\n")
            nsexec.chmod(0o755)
            argv = ["ip", "netns", "exec", fab.hosts[0], sys.executable, "-m", "commrun", "--rsh", f"{nsexec} {{host}}",
                    "-n", "1", case, where, str(tmp_path)]
            parents = 1
        rc, out, err, _ = run_job(argv, env, timeout=200)
        assert rc == 0, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
        placed = dict(re.findall(r"parent 0: child (\d) in (\S+) at " + re.escape(str(tmp_path)), out))
        assert placed == {"0": _netns_inode(fab, 1), "1": _netns_inode(fab, 2)}, out
        want = sum(range(1, parents + 1))
        assert sorted(re.findall(r"child (\d): parents' sum (\d+), world sum 1", out)) == \
            [("0", str(want)), ("1", str(want))], out
        assert len(re.findall(r"parent \d: children's sum 300, remote size 2", out)) == parents, out
        assert not leftovers(case), leftovers(case)
