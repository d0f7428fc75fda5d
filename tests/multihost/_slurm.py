"""A real Slurm cluster on this machine, for tests: Debian's slurm-wlm and munge, one node a namespace.

`SlurmCluster(nodes, subnet)` builds a Fabric (namespace hosts on a bridge)
whose host 0 is the controller and submit host (`slurmctld`, and where srun,
sbatch and salloc run) and whose other hosts are compute nodes, one `slurmd`
each. Every daemon runs in its own UTS and mount namespaces as well, so a
node's processes see the node's own host name, as on a real cluster, and an
/etc/hosts that names all nodes. `nodes` maps node names to CPU counts, in order: for example
{"sn1": 2, "sn2": 2, "sn3": 2, "sn5": 1} makes Slurm print `sn[1-3,5]` and
`2(x3),1`. munged runs with a fresh key and a private socket; every file
(configuration, state, logs) lives in one temporary directory, removed on exit
with every daemon, step and namespace.

Skips (with the reason) without root, iproute2, unshare or the Slurm
daemons and commands.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import psutil
import pytest

from _netns import REPO, Fabric, base_env, sh

_PROGRAMS = ("slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "salloc", "scancel", "sinfo", "squeue",
             "munged", "unshare", "nsenter")


def _find(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")


def missing_programs():
    return [p for p in _PROGRAMS if _find(p) is None]


class SlurmCluster:
    """See the module docstring. `run(argv)` runs a command on the submit host (env with SLURM_CONF)."""

    def __init__(self, nodes, subnet, slurmd_timeout=6):
        missing = missing_programs()
        if missing:
            pytest.skip(f"Slurm is not installed here (no {', '.join(missing)}): "
                        "apt-get install slurm-wlm munge (.ci/run does)")
        self.nodes = dict(nodes)
        self.names = list(self.nodes)
        self.fabric = Fabric(1 + len(self.nodes), subnet)
        self.ctl_name = f"ctl{self.fabric.tag}"
        self.dir = tempfile.mkdtemp(prefix="commlib-slurm-")
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self._daemons = []
        try:
            self._start(slurmd_timeout)
        except BaseException:
            self.close()
            raise

    # -- set-up --

    def _write_hosts(self):
        names = [self.ctl_name] + self.names
        lines = ["127.0.0.1 localhost"] + [f"{self.fabric.addr(i)} {n}" for i, n in enumerate(names)]
        self._hosts_file = os.path.join(self.dir, "hosts")
        with open(self._hosts_file, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _write_conf(self, slurmd_timeout):
        d = self.dir
        for sub in ["state", "log"] + [f"spool/{n}" for n in self.names]:
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        nodes = "\n".join(f"NodeName={n} NodeAddr={self.fabric.addr(i + 1)} NodeHostname={n} CPUs={c} "
                          f"State=UNKNOWN" for i, (n, c) in enumerate(self.nodes.items()))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=commlibtest
SlurmctldHost={self.ctl_name}({self.fabric.addr(0)})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout={slurmd_timeout}
SlurmctldTimeout=10
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=30
SchedulerType=sched/builtin
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")

    def _on(self, at, hostname, argv):
        """argv that runs ARGV on host `at` as a node named `hostname`: its network namespace, and
        a mount and UTS namespace of its own where /etc/hosts names every node and the host name is
        `hostname` (as on a real node). Not `ip netns exec`: it mounts a fresh /sys, hiding the
        cgroup file system slurmd needs."""
        return ["nsenter", f"--net=/run/netns/{self.fabric.hosts[at]}", "unshare", "--mount", "--uts", "sh", "-c",
                'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"', self._hosts_file,
                hostname, *argv]

    def _daemon(self, at, hostname, argv, name):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        proc = subprocess.Popen(self._on(at, hostname, argv), env=self.env(), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._daemons.append(proc)
        return proc

    def _start(self, slurmd_timeout):
        self._write_hosts()
        self._write_conf(slurmd_timeout)
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sh(_find("munged"), "--force", f"--key-file={key}", f"--socket={self.dir}/munge.sock",
           f"--pid-file={self.dir}/munged.pid", f"--log-file={self.dir}/log/munged.log",
           f"--seed-file={self.dir}/munged.seed")
        self._munged_pid = int(open(f"{self.dir}/munged.pid").read())
        self._daemon(0, self.ctl_name, [_find("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
        for i, n in enumerate(self.names):
            self._daemon(i + 1, n, [_find("slurmd"), "-D", "-f", self.conf], f"slurmd.{n}")
        self.wait_idle(60)

    # -- use --

    def env(self, **extra):
        return base_env(SLURM_CONF=self.conf, **extra)

    def argv(self, *args):
        """argv that runs ARGS on the submit host (the controller's node)."""
        return self._on(0, self.ctl_name, args)

    def run(self, *args, timeout=30, env=None):
        """ARGS run on the submit host from the repository's directory; CompletedProcess."""
        return subprocess.run(self.argv(*args), env=env or self.env(), cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)

    def daemon_pid(self, node):
        with open(os.path.join(self.dir, f"slurmd.{node}.pid")) as f:
            return int(f.read())

    def node_states(self):
        p = self.run(_find("sinfo"), "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in p.stdout.split("\n") if line.strip())

    def wait_idle(self, timeout):
        deadline = time.monotonic() + timeout
        states = {}
        while time.monotonic() < deadline:
            for proc in self._daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited ({proc.args[-4:]}):\n{self.logs()}")
            try:
                states = self.node_states()
            except subprocess.TimeoutExpired:
                states = {}
            if sorted(states) == sorted(self.names) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        raise RuntimeError(f"Slurm nodes not idle within {timeout} s: {states}\n{self.logs()}")

    def logs(self, tail=3000):
        out = []
        for root, _, files in os.walk(os.path.join(self.dir, "log")):
            for f in sorted(files):
                with open(os.path.join(root, f), errors="replace") as fh:
                    out.append(f"--- {f}\n{fh.read()[-tail:]}")
        return "\n".join(out)

    @staticmethod
    def _pids(ns):
        """The processes in network namespace `ns` (`ip netns pids`)."""
        return [int(pid) for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split()]

    def processes(self):
        """Processes in any of the cluster's namespaces other than its daemons (slurmctld, its
        slurmscriptd, slurmd): job steps and their tasks, which must be gone after a job."""
        found = []
        for ns in self.fabric.hosts:
            for pid in self._pids(ns):
                try:
                    cmd = psutil.Process(pid).cmdline()
                except psutil.NoSuchProcess:
                    continue
                if cmd and os.path.basename(cmd[0]).split(":")[0] in ("slurmctld", "slurmd"):
                    continue
                found.append(f"{pid} {' '.join(cmd)}")
        return found

    def wait_gone(self, timeout):
        """[] once no step or task is left within `timeout` s, else what is left."""
        deadline = time.monotonic() + timeout
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.25)
        return left

    def close(self):
        for proc in self._daemons:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Steps and their tasks run in the daemons' namespaces but not their process groups.
        for ns in getattr(self.fabric, "hosts", []):
            for pid in self._pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
        for proc in self._daemons:
            proc.wait()
        if getattr(self, "_munged_pid", None):
            try:
                os.kill(self._munged_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.fabric.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
