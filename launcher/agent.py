"""One agent per remote host: commrun starts it with one remote-shell command, and it starts and
watches that host's ranks.

commrun used to run one ssh (or srun, or `ip netns exec`) per remote rank: 10,000 ranks meant
10,000 ssh clients, and sshd refuses bursts beyond its MaxStartups. Now each host gets one
remote shell running `python -m commrun.agent`, which

- reads its orders from stdin (one SPEC frame: the program, the environment common to the host's
  ranks, and each rank's own variables; the job's secret travels here, never on a command line);
- starts the host's ranks, each in its own process group with a parent-death signal, so that an
  agent killed outright takes its ranks with it;
- carries each rank's stdout and stderr back as frames on its stdout (commrun tags them as it
  tags a local rank's lines), then the rank's exit status once its output is all sent;
- takes signals (SIGINT, SIGTERM, SIGKILL, the stack-dump request on --timeout) and rank 0's
  stdin from commrun as frames on its stdin;
- on stdin's end (commrun gone, or the connection lost) stops its ranks: SIGTERM, then SIGKILL
  after the grace period; so does SIGTERM, SIGHUP or SIGINT sent to the agent itself;
- holds its host's ranks' one connection to the coordinator (proxy.py), when the spec asks and the
  job is not encrypted: the ranks connect to it on loopback (COMMLIB_COORDINATOR_VIA);
- starts the agents of the hosts its spec lists as its children (a launch tree: commrun starts a
  few agents, each of which starts a few more), passes their frames up unchanged and orders for
  their ranks down, and reports each rank of a child's subtree that the child never reported on
  as LOST when the child's stream ends.

A frame is a header (kind: 1 byte, rank: int32, length: uint32, big-endian) and `length` bytes.
The agent imports nothing of commlib that its ranks would not (spawn's rank start and the
parent-death signal are shared with commrun's own).
"""
import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import time

from commlib._debug import STACK_SIGNAL
from commlib._rendezvous.framing import LinkFrames, link_frame as frame  # a host link's frames, the same wire

MAX_FRAME = 1 << 26  # a SPEC frame carries environments: generous, but bounded

# agent -> commrun
OUT, ERR, STARTED, EXITED, FAILED, LOST = 1, 2, 3, 4, 5, 6
# commrun -> agent
SPEC, SIGNAL, STACKS, STDIN, STDIN_EOF = 16, 17, 18, 19, 20
ALL = -1  # the rank field of a frame meant for every rank of the host


class Frames(LinkFrames):
    """Incremental reader of frames from a byte stream: feed(bytes) -> [(kind, rank, payload)]."""

    def __init__(self):
        super().__init__(MAX_FRAME, "a commrun agent stream")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            selectors.DefaultSelector().select(0.05)  # commrun reads: it will drain


def catches(pid, sig):
    """Whether process `pid` has a handler for `sig` (Linux: SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def subtree_ranks(spec):
    """Every rank a spec's agent and the agents below it run."""
    return {e["rank"] for e in spec["ranks"]} | {r for c in spec.get("children", ()) for r in subtree_ranks(c["spec"])}


class _Child:
    """An agent this one started (a launch tree): its process, its frames, the ranks below it."""

    def __init__(self, host, proc, ranks):
        self.host, self.proc, self.ranks = host, proc, ranks
        self.frames = Frames()
        self.reported = set()  # ranks whose end it reported
        self.err_partial = b""
        self.done = False


class Agent:
    def __init__(self, spec, out_fd=1, in_fd=0):
        self.spec, self.out_fd, self.in_fd = spec, out_fd, in_fd
        self.procs = {}  # rank -> Popen, while it runs or its output is still being read
        self.pipes = {}  # fd -> (rank, kind)
        self.stdin_w = None  # rank 0's stdin, where this host runs it and commrun relays its own
        self.sel = selectors.DefaultSelector()
        self.frames = Frames()
        self.kill_at = None
        self.grace = float(spec.get("grace", 3.0))
        self.children = []  # _Child: the agents this one started
        self.kill_rounds = 0
        self.proxy = None  # proxy.Proxy: this host's ranks' coordinator connection
        self.binding = None  # (binding.plan of this host's ranks, the host's CPUs, their variable): with the first

    def send(self, kind, rank, payload=b""):
        if self.out_fd is None:  # commrun no longer reads: the ranks are being stopped
            return
        try:
            _write_all(self.out_fd, frame(kind, rank, payload))
        except BrokenPipeError:
            self.out_fd = None
            self.stop_all()

    def log(self, line):
        _write_all(2, f"commrun agent on {self.spec.get('host', '?')}: {line}\n".encode())

    def start_proxy(self):
        """The coordinator link this host's ranks share (proxy.py), when the spec asks for it and the
        job is not encrypted (sealed connections go straight to the coordinator); the ranks'
        variables naming it, or {} (they connect directly) when there is none."""
        job = {**self.spec["env"], **(self.spec["ranks"][0]["env"] if self.spec["ranks"] else {})}
        if not self.spec.get("proxy") or not self.spec["ranks"] or os.environ.get("COMMLIB_ENCRYPT", "").strip() \
                or job.get("COMMLIB_ENCRYPT", "").strip():
            return {}
        from commlib._rendezvous.discovery import parse_address

        from . import proxy
        link = None
        try:
            secret = bytes.fromhex(job["COMMLIB_SECRET"])
            link = proxy.connect_link(parse_address(job["COMMLIB_COORDINATOR"]), secret, self.spec.get("host", "?"))
            self.proxy = proxy.Proxy(self.sel, link, secret, [e["rank"] for e in self.spec["ranks"]], self.log)
        except (KeyError, ValueError, OSError) as e:  # (no loopback to listen on, say)
            self.log(f"{e}: this host's ranks connect to the coordinator each")
            if link is not None:
                link.close()
            return {}
        return {"COMMLIB_COORDINATOR_VIA": "%s:%d for %s" % (*self.proxy.address, job["COMMLIB_COORDINATOR"])}

    def start(self):
        from . import spawn  # the same start (own group, parent-death signal) as commrun's local ranks

        common = {**os.environ, **self.spec["env"], **self.start_proxy()}
        for entry in self.spec["ranks"]:
            r = entry["rank"]
            env = {**common, **entry["env"]}
            per_rank = env.pop(spawn.THREADS_VAR, None)
            if per_rank is not None:  # commrun's rule for compute threads, with this host's cores
                env.update(spawn.thread_vars(entry["local_size"], spawn.cpu_count(), env, per_rank)[0])
            rank = spawn.Rank(r, "", entry["local_rank"], entry["local_size"], True, argv=self.spec["argv"], env=env)
            rank.cpus = self.bind(rank, env)
            stdin = subprocess.PIPE if r == self.spec.get("stdin_rank") else subprocess.DEVNULL
            try:
                proc = spawn.start(rank, stdin)
            except OSError as e:
                self.send(FAILED, r, f"cannot start rank {r} ({rank.argv[0]}): {e}".encode())
                continue
            if proc.stdin is not None:
                self.stdin_w = proc.stdin.fileno()
            self.procs[r] = proc
            for kind, pipe in ((OUT, proc.stdout), (ERR, proc.stderr)):
                os.set_blocking(pipe.fileno(), False)
                self.pipes[pipe.fileno()] = (r, kind)
                self.sel.register(pipe.fileno(), selectors.EVENT_READ, (r, kind))
            self.send(STARTED, r, str(proc.pid).encode())
        for child in self.spec.get("children", ()):
            self.start_child(spawn, child)

    def bind(self, rank, env):
        """The CPUs of this host a rank is bound to, by commrun's --bind-to (binding.plan with this
        host's cores), reported on stderr where --report-bindings asks; a bound rank's env gets the
        host's CPUs for the processes it starts."""
        from . import binding

        bind_to = env.pop(binding.BIND_VAR, "auto")
        report = env.pop(binding.REPORT_VAR, "") == "1"
        if bind_to not in binding.CHOICES:
            bind_to = "auto"
        if self.binding is None:
            self.binding = (*binding.plan(rank.local_size, bind_to, binding.threads_of(env)),
                            binding.allowed_cpus(), binding.host_cpus_env())
        blocks, why, every, host_cpus = self.binding
        cpus = blocks[rank.local_rank] if rank.local_rank < len(blocks) else None
        if report:
            self.log(binding.report(rank.rank, cpus, why, every))
        if cpus is not None:
            env.update(host_cpus)
        return cpus

    def start_child(self, spawn, child):
        ranks = subtree_ranks(child["spec"])
        try:
            proc = spawn.start(spawn.Rank(-1, child["host"], 0, 1, True, argv=child["argv"]), subprocess.PIPE)
            proc.stdin.write(frame(SPEC, ALL, json.dumps(child["spec"]).encode()))
            proc.stdin.flush()
        except OSError as e:
            for r in sorted(ranks):
                self.send(LOST, r, f"was lost: the agent on {child['host']} could not be started ({e})".encode())
            return
        c = _Child(child["host"], proc, ranks)
        self.children.append(c)
        for pipe, what in ((proc.stdout, "child-out"), (proc.stderr, "child-err")):
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, (what, c))

    def read_child(self, what, c, fd):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if what == "child-err":  # its own complaints (a remote shell's, Python's): tagged by its host
            if data:
                lines = (c.err_partial + data).split(b"\n")
                c.err_partial = lines.pop()
                for line in lines:
                    _write_all(2, f"[{c.host}] ".encode() + line + b"\n")
            else:
                self.sel.unregister(fd)
                if c.err_partial:
                    _write_all(2, f"[{c.host}] ".encode() + c.err_partial + b"\n")
            return
        if data:
            try:
                frames = c.frames.feed(data)
            except ValueError as e:
                self.child_ended(c, fd, f"its agent sent garbage ({e})")
                return
            for kind, r, payload in frames:  # passed up unchanged; its ranks' ends noted
                if kind in (EXITED, FAILED, LOST):
                    c.reported.add(r)
                self.send(kind, r, payload)
            return
        self.child_ended(c, fd)

    def child_ended(self, c, fd, why=None):
        """A child's stream ended: each rank below it that it did not report on was lost with it."""
        self.sel.unregister(fd)
        if why is None:
            try:
                code = c.proc.wait(timeout=2.0)
                why = f"its host's agent on {c.host} {ended_words(code)}"
            except subprocess.TimeoutExpired:
                why = f"its host's agent on {c.host} stopped answering"
        for r in sorted(c.ranks - c.reported):
            self.send(LOST, r, f"was lost: {why}".encode())
        c.done = True
        self._order_child(c, None)  # its orders end: what is left of it stops

    def _order_child(self, c, data):
        """Pass an order down to child c (None: close its orders)."""
        if c.proc.stdin is None:
            return
        try:
            if data is None:
                c.proc.stdin.close()
                c.proc.stdin = None
            else:
                c.proc.stdin.write(data)
                c.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):  # gone: its stream's end says so
            with contextlib.suppress(OSError):
                c.proc.stdin.close()
            c.proc.stdin = None

    def forward(self, kind, r, payload):
        """An order for a rank below this agent, or for all (r == ALL): to the children concerned."""
        for c in self.children:
            if not c.done and (r == ALL or r in c.ranks):
                self._order_child(c, frame(kind, r, payload))

    def read_pipe(self, fd):
        r, kind = self.pipes[fd]
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if data:
            self.send(kind, r, data)
            return True
        self.sel.unregister(fd)
        del self.pipes[fd]
        os.close(fd)
        return False

    def drain(self, r):
        for fd, (rr, _) in list(self.pipes.items()):
            while rr == r and fd in self.pipes and _readable(fd) and self.read_pipe(fd):
                pass

    def reap(self):
        for r, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            self.drain(r)  # what the rank wrote goes out before its exit status
            for fd, (rr, _) in list(self.pipes.items()):
                if rr == r:  # held open by something the rank started: it is the rank's no longer
                    self.sel.unregister(fd)
                    del self.pipes[fd]
                    os.close(fd)
            del self.procs[r]
            self.send(EXITED, r, str(proc.returncode).encode())

    def signal(self, r, sig, stacks=False):
        targets = self.procs.items() if r == ALL else [(r, self.procs[r])] if r in self.procs else []
        for _, proc in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if stacks:
                    os.kill(proc.pid, STACK_SIGNAL if catches(proc.pid, STACK_SIGNAL) else sig)
                else:
                    os.killpg(proc.pid, sig)

    def stop_all(self):
        """commrun is gone: stop the ranks (the children's, by ending their orders), then kill what is
        left after the grace period."""
        if self.kill_at is None:
            self.signal(ALL, signal.SIGTERM)
            for c in self.children:
                self._order_child(c, None)
            self.kill_at = time.monotonic() + self.grace

    def on_command(self, kind, r, payload):
        if r != ALL and r not in self.procs and any(r in c.ranks for c in self.children):
            self.forward(kind, r, payload)  # a rank below this agent
            return
        if kind in (SIGNAL, STACKS) and r == ALL:
            self.forward(kind, r, payload)
        if kind == SIGNAL:
            self.signal(r, int(payload))
        elif kind == STACKS:
            self.signal(r, int(payload), stacks=True)
        elif kind == STDIN and self.stdin_w is not None:
            try:
                _write_all(self.stdin_w, payload)
            except OSError:  # the rank closed its stdin: what follows has no reader
                self._close_stdin()
        elif kind == STDIN_EOF:
            self._close_stdin()

    def _close_stdin(self):
        if self.stdin_w is not None:
            with contextlib.suppress(OSError):
                os.close(self.stdin_w)
            self.stdin_w = None
            for proc in self.procs.values():
                if proc.stdin is not None:
                    proc.stdin = None  # closed above; Popen must not close it again

    def run(self, pending=b""):
        """Start the ranks, then carry their output and commrun's orders (`pending`: bytes of
        orders that came with the spec) until every rank has ended and its output is sent."""
        wake_r, wake_w = os.pipe()
        for fd in (wake_r, wake_w):
            os.set_blocking(fd, False)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self.sel.register(wake_r, selectors.EVENT_READ, "wake")
        os.set_blocking(self.in_fd, False)
        self.sel.register(self.in_fd, selectors.EVENT_READ, "commrun")
        self.start()
        for kind, r, payload in self.frames.feed(pending):
            self.on_command(kind, r, payload)
        while self.procs or self.pipes or any(not c.done for c in self.children):
            timeout = 0.5 if self.kill_at is None else max(0.0, self.kill_at - time.monotonic())
            for key, events in self.sel.select(timeout):
                if isinstance(key.data, tuple) and key.data[0] == "proxy":
                    key.data[1](events)
                elif isinstance(key.data, tuple) and key.data[0] in ("child-out", "child-err"):
                    self.read_child(*key.data, key.fd)
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        for signum in os.read(wake_r, 512):
                            if signum != signal.SIGCHLD:
                                self.stop_all()
                elif key.data == "commrun":
                    try:
                        data = os.read(self.in_fd, 65536)
                    except BlockingIOError:
                        continue
                    if not data:
                        self.sel.unregister(self.in_fd)
                        self.stop_all()
                        continue
                    for kind, r, payload in self.frames.feed(data):
                        self.on_command(kind, r, payload)
                else:
                    self.read_pipe(key.fd)
            self.reap()
            if self.proxy is not None:
                self.proxy.tick()
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.signal(ALL, signal.SIGKILL)
                self.kill_rounds += 1
                for c in self.children:  # a child 2 s past its grace: its remote shell goes
                    if not c.done and self.kill_rounds >= 3:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(c.proc.pid, signal.SIGKILL)
                self.kill_at = time.monotonic() + 1.0
        if self.proxy is not None:  # what the ranks sent before they ended goes up before the link closes
            for _ in range(16):
                ready = [(k, ev) for k, ev in self.sel.select(0) if isinstance(k.data, tuple) and k.data[0] == "proxy"]
                for key, events in ready:
                    key.data[1](events)
                if not ready:
                    break
            self.proxy.finish()


def ended_words(code):
    """How a process that ended with Popen's `code` ended, in words."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _readable(fd):
    sel = selectors.DefaultSelector()
    try:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(0))
    finally:
        sel.close()


def read_spec(fd=0):
    """The SPEC frame, read whole from `fd` before anything else."""
    frames = Frames()
    while True:
        data = os.read(fd, 65536)
        if not data:
            raise SystemExit("commrun agent: stdin ended before the job's spec arrived")
        got = frames.feed(data)
        if got:
            kind, _, payload = got[0]
            if kind != SPEC:
                raise SystemExit(f"commrun agent: expected the job's spec first, got a frame of kind {kind}")
            rest = b"".join(frame(k, r, p) for k, r, p in got[1:]) + bytes(frames.buf)
            return json.loads(payload), rest


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # two pipes a rank, as in commrun
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    spec, pending = read_spec(0)
    Agent(spec).run(pending)


if __name__ == "__main__":
    main()
