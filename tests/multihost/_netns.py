"""Hosts made of network namespaces, for tests that need more than one machine.

`Fabric(n, subnet)` makes a switch namespace holding a bridge and n host
namespaces, each joined to the bridge by a veth pair whose host end is
renamed `fab0` and carries `{subnet}.{i+1}/24`. Names carry a random suffix
(tests of other engineers run beside these); every namespace is deleted on
exit, which removes its links with it. Traffic never leaves the namespaces:
the subnet exists only there.

`run_job` starts a command in its own session and kills the whole session if
it outlives its timeout; `leftovers` lists processes whose command line holds
a marker (psutil), for "no process left behind" (waiting a while, if asked, for
them to go). Waits end on what they wait for; their limits scale with
COMMLIB_TEST_TIMEOUT_SCALE, the suite's one setting for slow or busy machines.
"""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import psutil
import pytest

from _waiting import SCALE, settled

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SCRUB = ("COMMLIB_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
          "MASTER_PORT", "OMPI_", "PMIX_", "PMI_", "PET_", "JOB_COMPLETION_INDEX")


def sh(*args, check=True):
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {p.stderr.strip()}")
    return p


def base_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Fabric:
    """n namespace hosts on one bridge; see the module docstring."""

    def __init__(self, n, subnet):
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        if shutil.which("ip") is None:
            pytest.skip("iproute2 (`ip`) is not installed")
        self.subnet = subnet
        tag = uuid.uuid4().hex[:6]
        self.tag = tag
        self.switch = f"cls{tag}"
        self.hosts = [f"cl{i}{tag}" for i in range(n)]
        self._made = []
        try:
            self._build()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            self.close()
            pytest.skip(f"cannot build namespace hosts here: {exc}")

    def _build(self):
        for ns in [self.switch] + self.hosts:
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sw = self.switch
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for i, ns in enumerate(self.hosts):
            h, s = f"h{i}{self.tag}", f"s{i}{self.tag}"
            sh("ip", "link", "add", h, "type", "veth", "peer", "name", s)
            sh("ip", "link", "set", h, "netns", ns)
            sh("ip", "link", "set", s, "netns", sw)
            sh("ip", "-n", ns, "link", "set", h, "name", "fab0")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "fab0")
            sh("ip", "-n", ns, "link", "set", "fab0", "up")
            sh("ip", "-n", sw, "link", "set", s, "master", "br0")
            sh("ip", "-n", sw, "link", "set", s, "up")

    def addr(self, i):
        return f"{self.subnet}.{i + 1}"

    def ip(self, i, *args, check=True):
        """`ip -n host_i ARGS`."""
        return sh("ip", "-n", self.hosts[i], *args, check=check)

    def dead_end(self, i, name, cidr):
        """A second interface `name` with address `cidr` on host i that reaches no other host
        (a veth pair whose other end stays in host i, unaddressed)."""
        x, y = f"x{i}{self.tag}", f"y{i}{self.tag}"
        sh("ip", "link", "add", x, "type", "veth", "peer", "name", y)
        for dev in (x, y):
            sh("ip", "link", "set", dev, "netns", self.hosts[i])
        self.ip(i, "link", "set", x, "name", name)
        self.ip(i, "addr", "add", cidr, "dev", name)
        for dev in (name, y):
            self.ip(i, "link", "set", dev, "up")

    def cut(self, i):
        """Take host i off the switch (its switch-side port down): packets to and from it vanish."""
        sh("ip", "-n", self.switch, "link", "set", f"s{i}{self.tag}", "down")

    def commrun(self, *args, at=0):
        """argv of commrun started inside host `at`, ranks started over `ip netns exec`."""
        return ["ip", "netns", "exec", self.hosts[at], sys.executable, "-m", "commrun",
                "--rsh", "ip netns exec {host}", *args]

    def close(self):
        for ns in reversed(self._made):
            sh("ip", "netns", "del", ns, check=False)
        self._made = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_job(argv, env, timeout, cwd=REPO):
    """(returncode, stdout, stderr, seconds); the session is killed and the test failed past `timeout`."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv)} did not finish within {timeout} s\n--- stdout\n{out[-4000:]}\n"
                    f"--- stderr\n{err[-4000:]}")
    return proc.returncode, out, err, time.monotonic() - start


class Job:
    """A running job whose output lines are collected as they come (to act on one mid-job)."""

    def __init__(self, argv, env, cwd=REPO):
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, predicate, timeout):
        """True once predicate(lines) holds; False at the timeout or when the job ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    return predicate(self.lines)
                self._cond.wait(min(left, 0.2))
            return True

    def finish(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"the job did not finish within {timeout} s\n{self.output()[-4000:]}")
        self._reader.join(10 * SCALE)  # its last lines: read once no process holds the output open
        if self._reader.is_alive():
            pytest.fail(f"the job ended but its output was still open {10 * SCALE:g} s later (a process left "
                        f"behind?)\n{self.output()[-4000:]}")
        return self.proc.returncode

    def output(self):
        with self._cond:
            return "".join(self.lines)

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def leftovers(marker, within=0.0):
    """Processes (other than this one) whose command line mentions `marker`, still there after up to
    `within` seconds (times SCALE) of waiting for them to go."""
    def find():
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.pid != os.getpid() and any(marker in part for part in p.info["cmdline"] or ()):
                    found.append(f"{p.pid} {' '.join(p.info['cmdline'])}")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found
    return settled(find, within)
