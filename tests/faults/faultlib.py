"""Helpers for the fault-injection tests: run rank programs through the real commrun.

A `Job` starts `python -m commrun -n N script.py` in its own session, with
stdout/stderr going to files, and a watcher thread that records every
descendant of commrun (pid + create time) while it runs, so that after the
test we can check that none of them is left. Rank programs start with
PRELUDE: `emit(**fields)` prints one `@@ {json}` line that `Job.records()`
parses back per rank; `t_wall()` is the shared clock (time.time()) used to
measure latencies across processes.

Every wait is bounded: `Job.wait()` kills the whole tree (SIGCONT, then
SIGKILL) when its deadline passes, and the `jobs` fixture does the same at
teardown for anything a failing test left running.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from _waiting import SCALE  # the suite's one setting (see tests/conftest.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STRESS = bool(os.environ.get("COMMLIB_STRESS_RUNS"))  # the long forms of the soak-like tests (README: tiers)


def stressed(usual, stress):
    """How many steps, repeats or iterations a soak-like test runs: `usual` in the suite, `stress` with
    COMMLIB_STRESS_RUNS set (the form each had before the suite had to fit in 15 minutes)."""
    return stress if STRESS else usual

PRELUDE = '''\
import json, os, signal, sys, time
import numpy as np
import commlib as cl

def emit(**fields):
    print("@@ " + json.dumps(fields), flush=True)

def t_wall():
    return time.time()

def ignore_sigterm():
    """Survive commrun's SIGTERM long enough to report (commrun SIGKILLs after --grace)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
'''

_RECORD = re.compile(r"^\[(\d+)\] @@ (.*)$")


def _alive(pid, ctime):
    """True if the process (pid, create_time) still exists and is not a zombie."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - ctime) > 0.01:
            return False  # the pid was reused
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class Job:
    """One `commrun` run in a subprocess, with its process tree watched."""

    def __init__(self, tmp_path, body, n, *, env=None, commrun_args=(), name="rank_prog.py", args=()):
        self.dir = tmp_path
        self.n = n
        self.script = tmp_path / name
        self.script.write_text(PRELUDE + textwrap.dedent(body))
        self.out_path = tmp_path / (name + ".out")
        self.err_path = tmp_path / (name + ".err")
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))}
        self.env.pop("COMMLIB_TIMEOUT", None)
        self.env.update(env or {})
        self.argv = [sys.executable, "-m", "commrun", "-n", str(n), *map(str, commrun_args), str(self.script),
                     *map(str, args)]
        self.proc = None
        self.seen = {}  # pid -> (create_time, cmdline summary): every descendant ever observed
        self._stop_watch = threading.Event()
        self._watcher = None
        self.returncode = None
        self.elapsed = None

    # ---------------------------------------------------------------- running
    def start(self):
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(self.argv, cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self._out, stderr=self._err, start_new_session=True)
        self.root = psutil.Process(self.proc.pid)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        return self

    def _watch(self):
        while not self._stop_watch.is_set():
            self._collect()
            if self.proc.poll() is not None:
                return
            self._stop_watch.wait(0.05)

    def _collect(self):
        try:
            for child in self.root.children(recursive=True):
                try:
                    self.seen.setdefault(child.pid, (child.create_time(), " ".join(child.cmdline()[-2:])))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass

    def rank_procs(self):
        """{rank: psutil.Process} of the live ranks (commrun's direct children, by COMMLIB_RANK)."""
        ranks = {}
        try:
            children = self.root.children()
        except psutil.NoSuchProcess:
            return ranks
        for child in children:
            try:
                ranks[int(child.environ()["COMMLIB_RANK"])] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError):
                pass
        return ranks

    def wait_ranks(self, timeout=30):
        """The {rank: Process} map once all n ranks exist."""
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            ranks = self.rank_procs()
            if len(ranks) == self.n:
                self._collect()
                return ranks
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"the job's {self.n} ranks did not appear within {timeout} s\n{self.output()}")

    def wait_for(self, predicate, timeout, what):
        """Poll predicate(job) until it is truthy; fail (with the output) after `timeout`."""
        deadline = time.monotonic() + timeout * SCALE
        while time.monotonic() < deadline:
            value = predicate(self)
            if value:
                return value
            if self.proc.poll() is not None:
                value = predicate(self)
                if value:
                    return value
                pytest.fail(f"commrun exited ({self.proc.returncode}) before {what}\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.output()}")

    def wait(self, timeout):
        """commrun's exit code; on timeout kill the whole tree and fail the test."""
        timeout *= SCALE
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"commrun did not finish within {timeout} s (killed)\n{self.output()}")
        finally:
            self._finish()
        self.elapsed = time.monotonic() - self.t_start
        return self.returncode

    def _finish(self):
        self._stop_watch.set()
        if self._watcher is not None:
            self._watcher.join(2)
        for f in (self._out, self._err):
            if not f.closed:
                f.close()

    def kill_all(self):
        """SIGCONT + SIGKILL every process of the job (commrun and every descendant seen)."""
        self._collect()
        procs = []
        for pid, (ctime, _) in list(self.seen.items()) + [(self.proc.pid, (self.root.create_time(), ""))]:
            if _alive(pid, ctime):
                procs.append(pid)
        for sig in (signal.SIGCONT, signal.SIGKILL):
            for pid in procs:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        if self.proc.poll() is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    # ----------------------------------------------------------------- output
    def stdout(self):
        return self.out_path.read_text(errors="replace")

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def output(self):
        return f"--- stdout ---\n{self.stdout()[-6000:]}\n--- stderr ---\n{self.stderr()[-6000:]}"

    def records(self, key=None):
        """[(rank, dict)] of the `@@` lines, optionally only those having `key`."""
        out = []
        for line in self.stdout().splitlines():
            m = _RECORD.match(line)
            if m:
                try:
                    rec = json.loads(m.group(2))
                except ValueError:
                    continue
                if key is None or key in rec:
                    out.append((int(m.group(1)), rec))
        return out

    def by_rank(self, key):
        """{rank: the last record with `key`}."""
        return {r: rec for r, rec in self.records(key)}

    # ------------------------------------------------------------ leftovers
    def leftovers(self):
        return {pid: info for pid, info in self.seen.items() if _alive(pid, info[0])}

    def assert_no_leftovers(self, timeout=5.0):
        """Every process the job ever had is gone (within `timeout`); kills and fails otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = self.leftovers()
            if not left and self.proc.poll() is not None:
                return
            time.sleep(0.05)
        left = self.leftovers()
        self.kill_all()
        pytest.fail(f"processes left behind after the job: {left} (commrun running: {self.proc.poll() is None})")


def listening_sockets(job):
    """(coordinator (host, port), {rank: [(host, port)]}, {rank: [abstract unix name]}) of a running job."""
    coord = [c.laddr[:2] for c in job.root.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN]
    tcp, unix = {}, {}
    for rank, proc in job.rank_procs().items():
        conns = proc.net_connections(kind="all")
        tcp[rank] = [c.laddr[:2] for c in conns
                     if c.family in (socket.AF_INET, socket.AF_INET6) and c.status == psutil.CONN_LISTEN]
        # psutil shows abstract names with a leading NUL or '@'; listening unix sockets have no raddr.
        unix[rank] = sorted({c.laddr for c in conns if isinstance(c.laddr, str) and "commlib-" in c.laddr and not c.raddr})
    return coord, tcp, unix


class Listener:
    """One listening socket of a running job: kind is 'coordinator', 'rank-tcp' or 'rank-unix'."""

    def __init__(self, kind, rank, family, address):
        self.kind, self.rank, self.family, self.address = kind, rank, family, address

    def __repr__(self):
        return f"{self.kind}(rank={self.rank}, {self.address!r})"

    def connect(self, timeout=5.0):
        s = socket.socket(self.family, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.address)
        return s


def listeners(job, cls=Listener):
    """Every listening socket of a running job (the coordinator's, each rank's TCP and Unix)."""
    coord, tcp, unix = listening_sockets(job)
    found = [cls("coordinator", None, socket.AF_INET, a) for a in coord]
    for rank in sorted(tcp):
        found += [cls("rank-tcp", rank, socket.AF_INET, a) for a in tcp[rank]]
        found += [cls("rank-unix", rank, socket.AF_UNIX, "\0" + name.lstrip("@\0")) for name in unix[rank]]
    return found


# Figures measured by the tests (detection latency, fuzz counts, soak rate), printed at the end of the run.
# A test's figures travel in its report (conftest.py; tests/conftest.py prints them), so an xdist
# worker's reach the summary too.
_NEW = []  # (name, value) recorded by the test now running


def record_figure(name, value):
    _NEW.append((name, value))


def take_figures():
    """The figures recorded since the last call."""
    out = list(_NEW)
    _NEW.clear()
    return out


def survivor_reports(job, victim, t_kill, *, bound, etype="PeerLost", names=None):
    """Check every rank but `victim` reported `etype` naming `victim` within `bound` s of t_kill.

    Rank programs report with emit(t=t_wall(), etype=..., msg=...). Returns {rank: latency}.
    """
    reports = job.by_rank("etype")
    survivors = [r for r in range(job.n) if r != victim]
    missing = [r for r in survivors if r not in reports]
    assert not missing, f"ranks {missing} reported nothing\n{job.output()}"
    latency = {}
    for r in survivors:
        rec = reports[r]
        assert rec["etype"] == etype, f"rank {r}: expected {etype}, got {rec['etype']}: {rec['msg']}"
        needle = names if names is not None else f"rank {victim}"
        assert re.search(rf"{re.escape(needle)}\b", rec["msg"]), f"rank {r}'s error does not name {needle!r}: {rec['msg']}"
        latency[r] = rec["t"] - t_kill
        assert latency[r] < bound, f"rank {r} took {latency[r]:.2f} s (bound {bound} s): {rec['msg']}"
    return latency
