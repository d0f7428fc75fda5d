"""Per-rank environment and argv; local Popen or the configurable remote shell."""
import ctypes
import dataclasses
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys

DEFAULT_RSH = "ssh -o BatchMode=yes {host}"
_PR_SET_PDEATHSIG = 1

# Resolved before any fork: the child only calls it.
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None


@dataclasses.dataclass
class Rank:
    rank: int
    host: str
    local_rank: int
    local_size: int
    local: bool
    argv: list = None  # what Popen runs (the remote shell command for remote ranks)
    env: dict = None  # the whole environment for local ranks, None for remote ones
    proc: subprocess.Popen = None

    def describe(self):
        pid = self.proc.pid if self.proc else "?"
        return f"rank {self.rank} (pid {pid})" if self.local else f"rank {self.rank} (host {self.host}, pid {pid})"


def program_argv(program, module, direct, python=sys.executable):
    """The words that run the user's program on a rank."""
    if direct:
        return list(program)
    if module:
        return [python, "-m", *program]
    return [python, *program]


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def job_vars(rank, size, local_rank, local_size, coordinator, secret):
    host, port = coordinator
    host = f"[{host}]" if ":" in host else host
    return {
        "COMMLIB_RANK": str(rank),
        "COMMLIB_SIZE": str(size),
        "COMMLIB_LOCAL_RANK": str(local_rank),
        "COMMLIB_LOCAL_SIZE": str(local_size),
        "COMMLIB_COORDINATOR": f"{host}:{port}",
        "COMMLIB_SECRET": secret.hex(),
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(local_size),
        # Unbuffered so lines reach the tagger promptly; faulthandler so the
        # SIGABRT sent on --timeout prints every thread's stack.
        "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
    }


def master_vars(rank0, coordinator, environ):
    """MASTER_ADDR/MASTER_PORT for programs that call torch's init_process_group (env://): rank 0's
    host and a port free there (a local rank 0: a port the OS just handed out; a remote one: the
    port after commrun's coordinator). Values the user exported are kept."""
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        return {}
    if rank0.local:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(s.getsockname()[1])}
    return {"MASTER_ADDR": rank0.host, "MASTER_PORT": str(coordinator[1] % 65535 + 1)}


def remote_argv(rsh, host, argv, env, cwd):
    """The remote-shell command that runs `argv` with `env` in `cwd` on `host`.

    ssh-like templates get the command as one shell string; anything else
    (`ip netns exec {host}`, `docker exec {host}`) gets `sh -c <string>`.
    `exec` keeps the program in the remote shell's process, so signals reach it.
    """
    words = [w.replace("{host}", host) for w in shlex.split(rsh)]
    if "{host}" not in rsh:
        words.append(host)
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    command = f"cd {shlex.quote(cwd)} && exec env {assignments} {shlex.join(argv)}"
    if os.path.basename(words[0]).endswith(("ssh", "rsh")):
        return words + [command]
    return words + ["sh", "-c", command]


def forwarded_env(environ=os.environ):
    """The local variables remote ranks also get: PYTHONPATH and the user's COMMLIB_* settings."""
    return {k: v for k, v in environ.items() if k == "PYTHONPATH" or (k.startswith("COMMLIB_") and k != "COMMLIB_RSH")}


def _child_setup(parent_pid):
    os.setpgid(0, 0)  # own process group: commrun signals the rank and its children together
    for sig in (signal.SIGINT, signal.SIGTERM):  # un-ignore (e.g. started with `&` from a script)
        signal.signal(sig, signal.SIG_DFL)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # commrun died before prctl took effect
            os._exit(1)


# setpriv (util-linux) sets the parent-death signal between exec and the rank's program, so no Python
# runs in the forked child and Popen can vfork. With a preexec_fn each spawn forks the whole launcher
# and waits until the child is scheduled to run it: with 64 ranks importing numpy on 2 cores that was
# 0.4 s a rank, 25 s for the spawn loop. Caught signals (commrun handles SIGINT/SIGTERM before it
# spawns) are reset to the default by exec itself; process_group=0 replaces setpgid.
_SETPRIV = (shutil.which("setpriv") if sys.version_info >= (3, 11) and sys.platform.startswith("linux")
            else None)


def start(rank, stdin):
    """Start one rank with piped stdout/stderr. Must be called before any thread exists."""
    pipes = dict(env=rank.env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    path = (rank.env or os.environ).get("PATH", os.defpath)
    if _SETPRIV and shutil.which(rank.argv[0], path=path):  # a missing program: the preexec path says so
        rank.proc = subprocess.Popen([_SETPRIV, "--pdeathsig", "KILL", "--", *rank.argv], process_group=0, **pipes)
    else:
        parent = os.getpid()
        rank.proc = subprocess.Popen(rank.argv, preexec_fn=lambda: _child_setup(parent), **pipes)
    return rank.proc
