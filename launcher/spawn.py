"""Per-rank environment and argv; local Popen or the configurable remote shell."""
import ctypes
import dataclasses
import gc
import importlib
import io
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading

from commlib._hosts import DEFAULT_RSH, forwarded_env, remote_argv  # noqa: F401 -- commrun's names for them

from . import binding

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
    proc: subprocess.Popen = None  # or a Forked
    forked: tuple = None  # (module, program) when the rank is forked from commrun (--fork)
    agent: object = None  # hostagents.HostAgent: what starts a remote rank on its host
    cpus: set = None  # the CPUs a local rank is bound to (binding.plan), None: unbound

    def describe(self):
        pid = self.proc.pid if self.proc and self.proc.pid is not None else "?"
        return f"rank {self.rank} (pid {pid})" if self.local else f"rank {self.rank} (host {self.host}, pid {pid})"


def program_argv(program, module, direct, python=sys.executable):
    """The words that run the user's program on a rank."""
    if direct:
        return list(program)
    if module:
        return [python, "-m", *program]
    return [python, *program]


def cpu_count():
    return len(binding.allowed_cpus())


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
THREADS_VAR = "COMMLIB_THREADS_PER_RANK"  # commrun's --threads-per-rank, for the host agents: N or "auto"


def threads_set(environ):
    """Whether the environment sets any of the compute-thread variables (then commrun sets none)."""
    return any(v in environ for v in THREAD_VARS)


def thread_vars(local_size, cores, environ, per_rank="auto"):
    """The compute-thread variables of the ranks of one host (OpenMP, and so torch, MKL, OpenBLAS):
    per_rank threads each where it is a number; with "auto", the host's cores shared among its
    ranks (at least one each) where more than one rank runs there and the environment sets none of
    them. ({variable: value}, the notice to print once or None)."""
    if per_rank != "auto":
        chosen, notice = dict.fromkeys(THREAD_VARS, str(per_rank)), None
    elif local_size <= 1 or threads_set(environ):
        chosen, notice = {}, None
    else:
        n = max(1, cores // local_size)
        chosen, notice = dict.fromkeys(THREAD_VARS, str(n)), (
            f"{local_size} ranks on {cores} cores: {n} compute thread{'s' if n > 1 else ''} a rank "
            f"(OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS={n}; set one of them, or --threads-per-rank, "
            f"to choose)")
    ranks_env = {**environ, **chosen}
    wait = wait_policy(local_size, cores, ranks_env)
    if wait:
        chosen.update(wait)
        notice = "; ".join(filter(None, (notice, f"{local_size} ranks of {_threads(ranks_env, cores)} compute "
                                                   f"threads on {cores} cores: OMP_WAIT_POLICY=PASSIVE (a waiting "
                                                   f"OpenMP thread sleeps instead of spinning; set it to choose)")))
    return chosen, notice


WAIT_VAR = "OMP_WAIT_POLICY"


def _threads(environ, cores):
    """The compute threads of a rank with this environment: OpenMP's default of a thread a core where unset."""
    return binding.threads_of(environ) or cores


def wait_policy(local_size, cores, environ):
    """OMP_WAIT_POLICY=PASSIVE where a host's ranks run more compute threads than it has cores,
    more than one each, and the environment does not choose: {variable: value} or {}.

    An idle OpenMP thread (torch's, MKL's) spins before it sleeps, and a thread that waits at the
    end of a parallel loop spins for one that is not running. OpenMP itself stops spinning when
    one process's threads outnumber its cores, but it sees one rank, not the host: two ranks of
    torch's two threads on two cores spin for each other's cores, and every wake-up of a
    communication thread (any backend's) lands behind a spinning one. Measured with torch's
    threads (2 a rank, 2 ranks on 2 cores), a DDP step of a 1 M-parameter MLP took 50 ms with
    commlib and 34 with gloo; both 6-11 ms with PASSIVE (benchmarks/RESULTS.md)."""
    threads = _threads(environ, cores)
    if WAIT_VAR in environ or local_size <= 1 or threads <= 1 or local_size * threads <= cores:
        return {}  # (one rank: OpenMP's own rule; one thread a rank: no team waits)
    return {WAIT_VAR: "PASSIVE"}


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


def master_vars(rank0, coordinator, environ, spans_hosts=False):
    """MASTER_ADDR/MASTER_PORT for programs that call torch's init_process_group (env://): rank 0's
    host and a port free there (a local rank 0: a port the OS just handed out, on loopback for a job
    on this host alone, else on the coordinator's address, which the other hosts reach; a remote
    rank 0: its host and the port after commrun's coordinator). Each value the user exported is
    kept, alone or with the other."""
    chosen = {}
    local_host = coordinator[0] if spans_hosts else "127.0.0.1"
    if "MASTER_ADDR" not in environ:
        chosen["MASTER_ADDR"] = local_host if rank0.local else rank0.host
    if "MASTER_PORT" not in environ:
        if rank0.local:
            chosen["MASTER_PORT"] = str(free_port(local_host))
        else:
            chosen["MASTER_PORT"] = str(coordinator[1] % 65535 + 1)
    return chosen


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_SPAN = 12_000  # the ports below the kernel's ephemeral range a free port is drawn from


def free_port(host, tries=64, ranges=EPHEMERAL_RANGE):
    """A TCP port free on `host` now, for a listener a rank opens later (torch's store): drawn at
    random below the kernel's ephemeral range, so no socket the OS numbers itself (every other
    process's bind to port 0 and outgoing connection) can take it in between, as one the OS
    handed out here could be taken (seen under CI: torch's ranks found another job's listener on
    their MASTER_PORT). Falls back to the OS's choice when none of `tries` is free."""
    try:
        with open(ranges) as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    rng = random.SystemRandom()
    top = max(low, 1024 + 64)
    for port in [rng.randrange(max(1024, top - _SPAN), top) for _ in range(tries)] + [0]:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free TCP port on {host}")


def mpi4py_standin():
    """The directory whose `mpi4py` package is commlib's stand-in (commrun --mpi4py puts it first on
    PYTHONPATH), found without importing commlib."""
    import importlib.util

    spec = importlib.util.find_spec("commlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("--mpi4py: commlib is not importable from this Python")
    return os.path.join(list(spec.submodule_search_locations)[0], "MPI", "_mpi4py")


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


def start(rank, stdin, merged=False):
    """Start one rank with piped stdout/stderr (one pipe for both where `merged`: commrun short of
    file descriptors), bound to its CPUs. Must be called before any thread exists."""
    with binding.bound(rank.cpus):
        return _start(rank, stdin, merged)


def _start(rank, stdin, merged):
    if rank.forked is not None:
        return fork_start(rank, stdin, merged)
    pipes = dict(env=rank.env, stdin=stdin, stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT if merged else subprocess.PIPE)
    path = (rank.env or os.environ).get("PATH", os.defpath)
    if _SETPRIV and shutil.which(rank.argv[0], path=path):  # a missing program: the preexec path says so
        rank.proc = subprocess.Popen([_SETPRIV, "--pdeathsig", "KILL", "--", *rank.argv], process_group=0, **pipes)
    else:
        parent = os.getpid()
        rank.proc = subprocess.Popen(rank.argv, preexec_fn=lambda: _child_setup(parent), **pipes)
    return rank.proc


# ---------------------------------------------------------------- --fork: ranks forked from commrun
#
# 64 Python interpreters that each import NumPy take 7 s on two cores before
# any rank code runs. With --fork commrun imports NumPy and commlib once and
# forks each local rank from itself, so a rank costs a fork. The child becomes
# what `python script.py` (or `python -m module`) would have been: its own
# process group, parent-death signal, the rank's environment, stdio on the
# rank's pipes, default signal handlers, sys.argv and sys.path[0], then the
# program through runpy, then interpreter-exit work (non-daemon threads
# joined, atexit) and os._exit with Python's exit code.

PRELOAD = ("numpy", "commlib")
_KEPT = []  # in a forked rank: commrun's objects that must never be finalized there


class PreloadError(Exception):
    """A module given to --preload failed to import, or left what commrun cannot fork after."""


def preload(extra=()):
    """Import what forked ranks share (NumPy, commlib, and the modules in `extra`, --preload's); call
    before the first fork, with no thread running. PreloadError names a module of `extra` whose import
    failed, left a thread running (a forked copy of it would hold that thread's locks with no thread to
    release them) or started commlib (each forked rank would inherit a world of one rank)."""
    for name in PRELOAD:
        __import__(name)
    __import__("commlib").__all__  # noqa: B018 -- its layers, which its public names load on first use
    for name in extra:
        before = _running_threads()
        try:
            importlib.import_module(name)
        except ImportError:
            raise
        except Exception as e:  # the module's own error at import: commrun says which, and stops
            raise PreloadError(f"importing {name} raised {type(e).__name__}: {e}") from e
        after = _running_threads()
        if after > before:
            raise PreloadError(f"importing {name} started {after - before} thread(s); run without --preload {name}")
        if _commlib_started():
            raise PreloadError(f"importing {name} started commlib (as mpi4py's MPI_Init at import does) in commrun, "
                               f"where it is a job of one rank; each rank must start its own: run without "
                               f"--preload {name}")


def _commlib_started():
    """Whether commlib's world exists in this process (ranks forked from it would inherit a world of one)."""
    lifecycle = sys.modules.get("commlib._api.lifecycle")
    return lifecycle is not None and lifecycle._world is not None


def _running_threads():
    """Threads of this process: the kernel's count where it gives one (native threads too), else Python's."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc (macOS)
        return threading.active_count()


class Forked:
    """A forked rank, with the part of Popen's surface that supervise uses."""

    def __init__(self, pid, stdout, stderr):
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self.returncode = None

    def _reaped(self, flags):
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: nothing more to learn
            pid, status = self.pid, 255 << 8
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self):
        return self.returncode if self.returncode is not None else self._reaped(os.WNOHANG)

    def wait(self):
        return self.returncode if self.returncode is not None else self._reaped(0)


class _Prompt(io.BufferedWriter):
    """stdout/stderr of a forked rank: every write goes out at once (as under
    PYTHONUNBUFFERED, which commrun sets for exec'd ranks), but through
    BufferedWriter, which finishes a write that a signal cuts short."""

    def write(self, b):
        n = super().write(b)
        self.flush()
        return n


def _text_stream(fd, mode, like):
    raw = io.FileIO(fd, mode, closefd=False)
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), encoding=like.encoding, errors=like.errors)
    return io.TextIOWrapper(_Prompt(raw), encoding=like.encoding, errors=like.errors, write_through=True)


def _user_frames(tb):
    """The traceback from the program's first frame on (without this module's and runpy's)."""
    while tb is not None and tb.tb_next is not None and (
            tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")
            or tb.tb_frame.f_code.co_filename.endswith("runpy.py")):
        tb = tb.tb_next
    return tb


def _run_script(path):
    """`python path` in this process: a fresh __main__ module as Python builds it (absolute
    __file__, the builtins module, a SourceFileLoader, no __spec__ or __package__), sys.argv
    untouched. A zip file or directory with a __main__.py goes through runpy, as Python does."""
    import builtins
    import importlib.machinery
    import runpy
    import types
    import zipfile

    full = os.path.abspath(path)
    if os.path.isdir(full) or zipfile.is_zipfile(full):
        runpy.run_path(full, run_name="__main__")
        return
    with open(full, "rb") as f:
        code = compile(f.read(), full, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=full, __cached__=None, __builtins__=builtins, __spec__=None, __package__=None,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", full))
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _become_rank(rank, stdin, out_w, err_w, parent_pid):
    """In the forked child: turn commrun's copy into the rank's program, run it, never return."""
    import atexit
    import faulthandler
    import runpy
    import threading
    import traceback

    code = 1
    try:
        os.setpgid(0, 0)
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent_pid:
                os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if stdin == subprocess.DEVNULL:
            stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 20)  # commrun's sockets, pipes and the other ranks' pipes
        # commrun's own stdio objects own descriptors 0-2 (closefd): kept alive, so that no
        # finalizer ever closes what are now the rank's streams
        _KEPT.extend(x for x in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)
                     if x is not None)
        sys.stdin = sys.__stdin__ = _text_stream(0, "r", sys.__stdin__ or sys.stdin)
        sys.stdout = sys.__stdout__ = _text_stream(1, "w", sys.__stdout__ or sys.stdout)
        sys.stderr = sys.__stderr__ = _text_stream(2, "w", sys.__stderr__ or sys.stderr)
        os.environ.clear()
        os.environ.update(rank.env)
        if "commlib._trace" in sys.modules:  # imported before the rank's environment: record if it asks
            sys.modules["commlib._trace"].configure()
        if os.environ.get("PYTHONFAULTHANDLER"):
            faulthandler.enable(sys.stderr, all_threads=True)  # the stack dump on --timeout
        elif faulthandler.is_enabled():
            faulthandler.disable()
        module, program = rank.forked
        if module:
            sys.argv = list(program)  # runpy puts the module's path in sys.argv[0]
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(program[0], alter_argv=True)
        else:
            sys.argv = list(program)
            sys.path[0] = os.path.dirname(os.path.realpath(program[0]))
            _run_script(program[0])
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt as e:
        e.__traceback__ = _user_frames(e.__traceback__)
        traceback.print_exception(e)
        code = -signal.SIGINT  # Python dies of SIGINT here
    except BaseException as e:  # noqa: B036 -- the rank's uncaught error: print it as Python would, exit 1
        e.__traceback__ = _user_frames(e.__traceback__)
        sys.excepthook(type(e), e, e.__traceback__)
        code = 1
    try:  # what interpreter exit does: join non-daemon threads, run atexit, flush
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BaseException:  # noqa: B036 -- reported, and the exit code says so
        traceback.print_exc()
        code = code or 1
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def fork_start(rank, stdin, merged=False):
    """Start one local rank by forking this process (its stderr into its stdout's pipe where
    `merged`). Must be called before any thread exists."""
    out_r, out_w = os.pipe()
    err_r, err_w = (None, out_w) if merged else os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()
    gc.freeze()  # commrun's objects: never collected (so never finalized) in the rank, nor copied by the GC
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        _become_rank(rank, stdin, out_w, err_w, parent)
    os.close(out_w)
    if not merged:
        os.close(err_w)
    rank.proc = Forked(pid, open(out_r, "rb", buffering=0), None if merged else open(err_r, "rb", buffering=0))
    return rank.proc
