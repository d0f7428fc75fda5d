"""COMMLIB_DEBUG=INFO|TRACE: what commlib decides and meets, one line per event (like NCCL_DEBUG).

INFO: joining the world (how, how many ranks, the spin policy), each connection made or accepted
(peer, group, channel, route, shared memory, milliseconds, attempts), each collective algorithm
the first time a (collective, algorithm, size class) is chosen, with the numbers it was chosen by,
every failure with its cause, and at finalize() how the waits for peers ended (spinning, or asleep
in poll). TRACE: also every algorithm choice. Each line:

    [commlib rank 3 +12.345678s] connected to rank 0 (collectives of every group) over unix ...

on stderr, or appended to COMMLIB_DEBUG_FILE, whose `%r`, `%p` and `%h` become the rank, the pid
and the host. Off (unset, empty or 0) every call site costs one test of LEVEL.
"""
import faulthandler
import os
import signal
import socket
import sys
import threading
import time

LEVELS = {"": 0, "0": 0, "OFF": 0, "INFO": 1, "1": 1, "TRACE": 2, "2": 2}
_raw = os.environ.get("COMMLIB_DEBUG", "").strip().upper()
LEVEL = LEVELS.get(_raw)
if LEVEL is None:
    print(f"[commlib] COMMLIB_DEBUG={os.environ.get('COMMLIB_DEBUG')!r} is not one of INFO, TRACE (or empty): "
          "debug lines are off", file=sys.stderr)
    LEVEL = 0
INFO, TRACE = 1, 2
# commrun --timeout asks every rank for its threads' stacks with this signal (a rank that joined
# a job catches it: faulthandler prints the stacks and the rank goes on until commrun stops it);
# a rank that does not catch it gets SIGABRT, and PYTHONFAULTHANDLER's dump of a "fatal error".
STACK_SIGNAL = signal.SIGRTMIN + 2

_start = time.monotonic()
_rank = None
_lock = threading.Lock()
_out = None
_seen = set()


def set_rank(rank):
    """The rank the lines name from now on (before the world exists: the launcher's variable)."""
    global _rank
    _rank = rank


def env_rank():
    for name in ("COMMLIB_RANK", "RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        v = os.environ.get(name, "")
        if v.isdigit():
            return int(v)
    return None


def _stream():
    global _out
    if _out is None:
        path = os.environ.get("COMMLIB_DEBUG_FILE", "")
        if path:
            rank = _rank if _rank is not None else env_rank()
            path = (path.replace("%r", "?" if rank is None else str(rank)).replace("%p", str(os.getpid()))
                    .replace("%h", socket.gethostname()))
            try:
                _out = open(path, "a", buffering=1)
            except OSError as e:
                print(f"[commlib] COMMLIB_DEBUG_FILE={path!r}: {e}; debug lines go to stderr", file=sys.stderr)
                _out = sys.stderr
        else:
            _out = sys.stderr
    return _out


def log(level, text):
    """Write `text` (a str, or a callable making it: formatted only when written) at `level`."""
    if LEVEL < level:
        return
    if callable(text):
        text = text()
    rank = _rank if _rank is not None else env_rank()
    line = f"[commlib rank {'?' if rank is None else rank} +{time.monotonic() - _start:.6f}s] {text}\n"
    with _lock:
        out = _stream()
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):  # a closed stream at exit: the line is lost, the program is not
            return


def once(key, text):
    """log(INFO, text) the first time `key` is seen in this process, log(TRACE, text) after."""
    if key in _seen:
        log(TRACE, text)
    else:
        _seen.add(key)
        log(INFO, text)


def size_class(nbytes):
    for limit, label in ((8, "≤ 8 B"), (1 << 10, "≤ 1 KiB"), (64 << 10, "≤ 64 KiB"), (1 << 20, "≤ 1 MiB"),
                         (16 << 20, "≤ 16 MiB")):
        if nbytes <= limit:
            return label
    return "> 16 MiB"


def catch_stack_signal():
    """Print every thread's stack on STACK_SIGNAL (unless the program handles that signal itself)."""
    if signal.getsignal(STACK_SIGNAL) == signal.SIG_DFL:
        faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True)
