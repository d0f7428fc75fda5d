"""The coordinator in a process of its own, for jobs whose rank 0 hosts it (srun, torchrun,
mpirun, Kubernetes, init(coordinator=...)).

In rank 0's interpreter the coordinator's event loop shared the GIL with rank 0's work: a rank 0
busy in Python (or holding the GIL in a long C call) delayed every rank's notices and stall
reports, and a job of thousands of ranks cost rank 0 their connections' descriptors. Here rank 0
starts it as a child process that imports only the rendezvous modules (40 ms, no NumPy), hands
it the secret on stdin and reads back the address it bound. The child serves until rank 0
closes its stdin (finalize, or rank 0's death: its end of the pipe closes with it) and then until
every rank has left, at most `linger` seconds more: a rank 0 that dies is reported to the others
as lost, by the coordinator that outlives it, instead of taking the coordinator with it.

    rank 0 -> child   stdin: the secret in hex, a line; then nothing until EOF
    child -> rank 0   stdout: "ready HOST PORT" once listening, or "error MESSAGE"
"""
import os
import subprocess
import sys
import threading

from .._errors import CommError

READY_TIMEOUT_S = 30.0

# Run by the child: `commlib` as a bare namespace over its directory, so its __init__ (NumPy, the
# transport) is not imported; only the rendezvous modules are.
_CHILD = """
import sys, types
pkg = types.ModuleType("commlib")
pkg.__path__ = [sys.argv[1]]
sys.modules["commlib"] = pkg
from commlib._rendezvous.service import serve
sys.exit(serve(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
"""


class Service:
    """Rank 0's handle on the coordinator process: `address`, `close()`; the same calls as a
    Coordinator hosted in the process (`wait_until_alone` waits for the process to end)."""

    def __init__(self, size, secret, host="127.0.0.1", port=0, linger=60.0):
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._proc = subprocess.Popen([sys.executable, "-c", _CHILD, package, str(size), host, str(port),
                                       str(linger)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      start_new_session=True)  # (a Ctrl-C to rank 0's group is rank 0's)
        self.size, self.pid = size, self._proc.pid
        try:
            self._proc.stdin.write(bytes(secret).hex().encode() + b"\n")
            self._proc.stdin.flush()
            line = self._ready()
        except BaseException:
            self._kill()
            raise
        if not line.startswith("ready "):
            self._kill()
            why = line[len("error "):] if line.startswith("error ") else f"it ended without a word ({line!r})"
            raise CommError(f"cannot start the coordinator on {host}:{port}: {why}")
        _, bound_host, bound_port = line.split()
        self.address = (bound_host, int(bound_port))

    def _ready(self):
        out = []
        reader = threading.Thread(target=lambda: out.append(self._proc.stdout.readline().decode().strip()),
                                  daemon=True)
        reader.start()
        reader.join(READY_TIMEOUT_S)
        if not out:
            raise CommError(f"the coordinator process did not start within {READY_TIMEOUT_S:g} s")
        return out[0]

    def start(self):
        """(It serves from the start: a Coordinator's start() has nothing to do here.)"""

    def wait_until_alone(self, host_rank, timeout):
        """Tell the coordinator rank 0 is done (EOF on its stdin) and wait for it to end once every
        rank has left (it names any rank still connected after its `linger` itself); False when it
        did not end within `timeout` seconds."""
        self._eof()
        try:
            self._proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def connected(self):
        """(Unknown here: the process names the ranks still connected when it gives up on them.)"""
        return None

    def close(self):
        self._eof()
        try:
            self._proc.wait(1.0)
        except subprocess.TimeoutExpired:
            self._kill()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def _eof(self):
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:  # (it ended already: the pipe is broken)
                pass

    def _kill(self):
        self._eof()
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


def serve(size, host, port, linger):
    """The child's life: bind, say where, serve until stdin ends and every rank has left (or
    `linger` seconds have passed since stdin ended); the exit code is 0, or 1 when ranks were
    still connected at the end (each named on stderr)."""
    import resource

    from .coordinator import Coordinator

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a connection a rank: no ceiling of ours
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    def log(line):
        print(f"commlib coordinator: {line}", file=sys.stderr, flush=True)

    secret = bytes.fromhex(sys.stdin.readline().strip())
    try:
        c = Coordinator(size, secret, host=host, port=port, log=log)
    except (OSError, ValueError, CommError) as e:
        print(f"error {e}", flush=True)
        return 1
    c.start()
    print(f"ready {c.address[0]} {c.address[1]}", flush=True)
    sys.stdout.close()
    while sys.stdin.buffer.read(1 << 16):  # until rank 0 closes it (or dies)
        continue
    alone = c.wait_until_alone(None, linger)
    if not alone:
        log(f"closing after {linger:g} s with ranks {c.connected()} still connected")
    c.close()
    return 0 if alone else 1
