"""A rank of a torch.distributed job dies mid-training; the survivors must get a RuntimeError.

The job runs torch_kill_case.py on the backend under test (TORCH_TEST_BACKEND, default "commlib";
"gloo" validates the tests themselves). One rank SIGKILLs itself (or calls os._exit(3)) at
iteration 5 of a loop of dist.all_reduce, of all_reduce(async_op=True) + work.wait(), or of DDP
training steps, half a second after the survivors blocked on it. Every survivor must:
  * raise a RuntimeError (a subclass such as DistBackendError counts) -- not hang, not segfault --
    within DETECT_BOUND_S of the kill, in the call it was waiting in (work.wait(), loss.backward());
  * with commlib, name the dead rank in the message ("rank V"; gloo's messages name an address);
  * stay failed (the next all_reduce raises too), get through destroy_process_group(), and exit
    through the normal interpreter exit with the case's survivor code (a segfault, 139/-11, or an
    abort fails the test) within EXIT_BOUND_S of the kill;
and no process of the job may be left afterwards (psutil).

commrun stops every rank when one dies, so the main tests start the ranks themselves, with
RANK/WORLD_SIZE/MASTER_ADDR=127.0.0.1/MASTER_PORT/LOCAL_RANK/LOCAL_WORLD_SIZE (as torchrun or a
PyTorchJob would): that is also the launcher-less path. Their ranks are forks of one process that
imported torch (forked_ranks.py, as torch.multiprocessing's fork start method makes them: torch's
import costs 2-3 CPU-s a process on 2 cores); rank 0's death is tested with plain `python` processes.
The commrun tests run the same case under commrun (its ranks forked from a commrun that imported
torch, but for one) with survivors that ignore its SIGTERM (--grace 10), so that they can still
report what they saw.
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from _needs import skip_unless_installed

TRANSPORTS = ("shm",)  # a front-end on the API: the transports' own faults are the rest of this suite's

skip_unless_installed("torch", "torch is not installed: the torch.distributed backend tests need it")

from faultlib import REPO, record_figure  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "torch_kill_case.py")
FORKER = os.path.join(HERE, "forked_ranks.py")
BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")
SURVIVOR_CODE = 17  # torch_kill_case.py: caught a RuntimeError and exited normally
DETECT_BOUND_S = 10.0
EXIT_BOUND_S = 20.0
STICKY_BOUND_S = 5.0
KILL_AT, SETTLE_S = 5, 0.5  # as in torch_kill_case.py
WHERE = {"sync": "dist.all_reduce", "async": "work.wait()", "ddp": "loss.backward()"}
VICTIM_RC = {"sigkill": -signal.SIGKILL, "exit": 3}
_SCRUB = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "TORCHELASTIC", "OMPI_", "PMIX_", "PMI_", "MPI_LOCAL", "PET_", "JOB_COMPLETION_INDEX", "GROUP_RANK",
          "ROLE_", "TORCH_TEST_BACKEND")


def _free_port():
    from commrun.spawn import free_port  # below the ephemeral range: no other socket takes it meanwhile
    return free_port("127.0.0.1")


def _alive(pid, ctime):
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - ctime) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _records(text):
    out = []
    for line in text.splitlines():
        m = re.match(r"^(?:\[\d+\] )?@@ (.*)$", line)
        if m:
            try:
                out.append(json.loads(m.group(1)))
            except ValueError:
                pass
    return out


class _ForkedRank:
    """A rank forked by forked_ranks.py, as much of a Popen as PlainRanks uses: its returncode and when
    it ended come from the file the forking process writes when it reaps the rank."""

    def __init__(self, pid, path):
        self.pid, self._path, self.returncode, self.ended = pid, path, None, None

    def poll(self):
        if self.returncode is None and self._path.exists():
            self.returncode, self.ended = json.loads(self._path.read_text())
        return self.returncode

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


class PlainRanks:
    """N `python torch_kill_case.py ...` ranks with torchrun-style variables and no launcher; a watcher
    thread records every process they start (pid, create time) and when each rank exits.
    forked: the ranks are forks of one process that imported torch (forked_ranks.py: 2-3 CPU-s of torch's
    import a rank less on 2 cores), as `torch.multiprocessing` with the fork start method makes them;
    else plain `python` processes, as torchrun or a PyTorchJob starts them."""

    def __init__(self, tmp_path, n, args, forked=True):
        self.dir, self.n, self.args, self.forked = tmp_path, n, [str(a) for a in args], forked
        self.procs, self.files, self.seen, self.exited = [], [], {}, {}
        self.parent = None  # forked: the process the ranks were forked from
        self._stop = threading.Event()
        self._watcher = None

    def start(self):
        port = _free_port()
        base = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
        base.update(PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
                    PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", COMMLIB_TIMEOUT="30", TORCH_TEST_BACKEND=BACKEND,
                    MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(self.n),
                    LOCAL_WORLD_SIZE=str(self.n))
        (self._fork if self.forked else self._exec)(base)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        return self

    def _exec(self, env):
        for r in range(self.n):
            out, err = open(self.dir / f"rank{r}.out", "wb"), open(self.dir / f"rank{r}.err", "wb")
            self.files += [out, err]
            p = subprocess.Popen([sys.executable, CASE, *self.args], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                 cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
            self.procs.append(p)
            self.seen[p.pid] = (psutil.Process(p.pid).create_time(), f"rank {r}")

    def _fork(self, env):
        out, err = open(self.dir / "parent.out", "wb"), open(self.dir / "parent.err", "wb")
        self.files += [out, err]
        preload = "torch,torch.distributed" + (",commlib.torch" if BACKEND == "commlib" else "")
        self.parent = subprocess.Popen([sys.executable, FORKER, str(self.dir), str(self.n), preload, CASE, *self.args],
                                       env=env, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                       start_new_session=True)
        self.seen[self.parent.pid] = (psutil.Process(self.parent.pid).create_time(), "the ranks' parent")
        pids, deadline = self.dir / "pids.json", time.monotonic() + 60
        while not pids.exists():
            if self.parent.poll() is not None or time.monotonic() > deadline:
                self.kill_all()
                pytest.fail(f"forked_ranks.py started no ranks (exit {self.parent.poll()}):\n"
                            f"{(self.dir / 'parent.err').read_text(errors='replace')[-3000:]}")
            time.sleep(0.02)
        for r, pid in sorted((int(r), pid) for r, pid in json.loads(pids.read_text()).items()):
            self.procs.append(_ForkedRank(pid, self.dir / f"exit.{r}"))
            try:
                self.seen[pid] = (psutil.Process(pid).create_time(), f"rank {r}")
            except psutil.NoSuchProcess:  # (ended already: its exit file says how)
                pass

    def _watch(self):
        while not self._stop.is_set():
            self._collect()
            for r, p in enumerate(self.procs):
                if r not in self.exited and p.poll() is not None:
                    self.exited[r] = getattr(p, "ended", None) or time.time()
            if len(self.exited) == self.n:
                return
            self._stop.wait(0.02)

    def _collect(self):
        for p in self.procs:
            try:
                for child in psutil.Process(p.pid).children(recursive=True):
                    try:
                        self.seen.setdefault(child.pid, (child.create_time(), " ".join(child.cmdline()[-2:])))
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        pass
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    def wait(self, timeout):
        """{rank: returncode}; on timeout every process is killed and the test fails."""
        deadline = time.monotonic() + timeout
        try:
            for p in self.procs:
                p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"the ranks did not all finish within {timeout} s (killed): "
                        f"{[p.poll() for p in self.procs]}\n{self.output()}")
        finally:
            self._stop.set()
            if self._watcher is not None:
                self._watcher.join(2)
            if self.parent is not None:  # (it ends once it has reaped every rank)
                try:
                    self.parent.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            for f in self.files:
                f.close()
        for r, p in enumerate(self.procs):  # the watcher's last look may have been before the exit
            self.exited.setdefault(r, getattr(p, "ended", None) or time.time())
        return {r: p.returncode for r, p in enumerate(self.procs)}

    def kill_all(self):
        self._collect()
        for pid, (ctime, _) in list(self.seen.items()):
            if _alive(pid, ctime):
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
        for p in [self.parent] if self.parent is not None else self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def leftovers(self):
        return {pid: info for pid, info in self.seen.items() if _alive(pid, info[0])}

    def assert_no_leftovers(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.leftovers():
                return
            time.sleep(0.05)
        left = self.leftovers()
        self.kill_all()
        pytest.fail(f"processes left behind after the job: {left}")

    def stdout(self, r):
        return (self.dir / f"rank{r}.out").read_text(errors="replace")

    def stderr(self, r):
        return (self.dir / f"rank{r}.err").read_text(errors="replace")

    def records(self, r):
        return _records(self.stdout(r))

    def output(self):
        return "\n".join(f"--- rank {r} stdout ---\n{self.stdout(r)[-3000:]}\n--- rank {r} stderr ---\n"
                         f"{self.stderr(r)[-3000:]}" for r in range(self.n))


@pytest.fixture
def plain_ranks(tmp_path):
    started = []

    def make(n, args, forked=True):
        sub = tmp_path / f"job{len(started)}"
        sub.mkdir()
        job = PlainRanks(sub, n, args, forked)
        started.append(job)
        return job

    yield make
    for job in started:
        if job.leftovers():
            job.kill_all()


def check_survivor(r, recs, victim, mode, t_kill, output):
    """One survivor's records: a RuntimeError naming the victim, in time, where it waited; sticky;
    destroy_process_group returned. Returns the detection latency."""
    caught = [rec for rec in recs if "etype" in rec]
    assert caught, f"rank {r} reported no error\n{output}"
    rec = caught[-1]
    assert rec["etype"] != "none", f"rank {r}: {rec['msg']}\n{output}"
    assert rec["runtime_error"], (f"rank {r} raised {rec['etype']} (MRO {rec['mro']}), not a RuntimeError: "
                                  f"{rec['msg']}\n{rec.get('traceback', '')}")
    if BACKEND != "gloo":  # gloo's messages name the peer's address, never its rank
        assert re.search(rf"\brank {victim}\b", rec["msg"], re.IGNORECASE), \
            f"rank {r}'s error does not name the dead rank {victim}: {rec['etype']}: {rec['msg']!r}"
    latency = rec["t"] - t_kill
    assert latency < DETECT_BOUND_S, f"rank {r} took {latency:.2f} s (bound {DETECT_BOUND_S} s): {rec['msg']}"
    assert rec["i"] == KILL_AT and rec["where"] == WHERE[mode], \
        (f"rank {r} raised in {rec['where']!r} at iteration {rec['i']}; expected it blocked in {WHERE[mode]!r} "
         f"at iteration {KILL_AT} (the victim died {SETTLE_S} s after the survivors got there)")
    assert rec.get("sticky_runtime_error"), \
        f"rank {r}: after the failure, the next all_reduce gave {rec['sticky']!r} (not a RuntimeError)"
    assert rec["sticky_s"] < STICKY_BOUND_S, f"rank {r}: the next all_reduce took {rec['sticky_s']:.2f} s to fail"
    done = [x for x in recs if "destroy_s" in x]
    assert done, f"rank {r} never returned from destroy_process_group()\n{output}"
    assert done[-1]["destroyed"], f"rank {r}: destroy_process_group() raised {done[-1]['destroy_error']}"
    assert done[-1]["destroy_s"] < DETECT_BOUND_S, \
        f"rank {r}: destroy_process_group() took {done[-1]['destroy_s']:.1f} s"
    return latency


def run_plain(plain_ranks, n, mode, victim, how, forked=True):
    job = plain_ranks(n, [mode, victim, how], forked).start()
    rcs = job.wait(90)
    out = job.output()
    assert rcs[victim] == VICTIM_RC[how], f"victim rank {victim} exited with {rcs[victim]}\n{out}"
    kills = [rec for rec in job.records(victim) if "t_kill" in rec]
    assert kills, f"rank {victim} never reached the kill\n{out}"
    t_kill = kills[-1]["t_kill"]
    latency = {}
    for r in range(n):
        if r == victim:
            continue
        rc = rcs[r]
        assert rc not in (139, -signal.SIGSEGV, 134, -signal.SIGABRT), f"rank {r} crashed: exit status {rc}\n{out}"
        latency[r] = check_survivor(r, job.records(r), victim, mode, t_kill, out)
        assert rc == SURVIVOR_CODE, f"survivor rank {r} exited with {rc}, expected {SURVIVOR_CODE}\n{out}"
        assert f"SURVIVOR rank {r} caught " in job.stdout(r)
        took = job.exited[r] - t_kill
        assert took < EXIT_BOUND_S, f"survivor rank {r} exited {took:.1f} s after the kill (bound {EXIT_BOUND_S} s)"
    job.assert_no_leftovers()
    record_figure(f"torch {BACKEND} {how} detection latency, {mode}, n={n}, victim {victim} (s)",
                  {r: round(v, 3) for r, v in latency.items()})
    return job


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("mode", ["sync", "async", "ddp"])
def test_sigkill_mid_loop_without_launcher(plain_ranks, mode, n):
    """SIGKILL one rank in the middle of an all_reduce loop, while the others wait on work.wait(),
    or while they are inside a DDP backward."""
    run_plain(plain_ranks, n, mode, victim=1 if n == 3 else 2, how="sigkill")


@pytest.mark.timeout(120)
def test_rank0_killed_without_launcher(plain_ranks):
    """Rank 0 hosts the rendezvous (MASTER_PORT: torch's store and the commlib coordinator): its
    death must still reach the survivors as an error, not a hang. The ranks are plain `python`
    processes, as torchrun starts them (the other tests fork theirs from one that imported torch)."""
    run_plain(plain_ranks, 3, "async", victim=0, how="sigkill", forked=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["sync", "ddp"])
def test_os_exit_mid_loop_without_launcher(plain_ranks, mode):
    run_plain(plain_ranks, 4, mode, victim=3, how="exit")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n,mode,victim,forked", [(4, "sync", 2, True), (3, "async", 1, False), (3, "ddp", 2, True)])
def test_sigkill_under_commrun(jobs, n, mode, victim, forked):
    """The same under commrun, whose ranks ignore its SIGTERM so that they report what they saw;
    commrun exits 137 naming the victim and leaves nothing behind. forked: the ranks are forks of a
    commrun that imported torch (`--fork --preload torch`), else exec'd."""
    with open(CASE) as f:
        body = f.read()
    job = jobs(body, n, env={"TORCH_TEST_BACKEND": BACKEND, "COMMLIB_TIMEOUT": "30"}, name="torch_kill_case.py",
               args=[mode, victim, "sigkill", "--ignore-sigterm"], commrun_args=["--grace", "10", *(("--fork", "--preload", "torch") if forked else ())]).start()
    rc = job.wait(90)
    out = job.output()
    assert rc == 137, f"commrun exited {rc}\n{out}"
    assert re.search(rf"commrun: rank {victim} \(pid \d+\) killed by SIGKILL", job.stderr()), out
    kills = [rec for r, rec in job.records("t_kill") if r == victim]
    assert kills, f"rank {victim} never reached the kill\n{out}"
    latency = {}
    for r in range(n):
        if r == victim:
            continue
        recs = [rec for rr, rec in job.records() if rr == r]
        latency[r] = check_survivor(r, recs, victim, mode, kills[-1]["t_kill"], out)
        assert f"[{r}] SURVIVOR rank {r} caught " in job.stdout()
    for line in job.stderr().splitlines():
        assert not re.search(r"killed by SIG(SEGV|ABRT|BUS)|Segmentation fault|Fatal Python error", line), out
    job.assert_no_leftovers()
    record_figure(f"torch {BACKEND} SIGKILL detection latency under commrun, {mode}, n={n} (s)",
                  {r: round(v, 3) for r, v in latency.items()})
