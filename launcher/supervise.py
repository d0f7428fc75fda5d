"""Hosts the coordinator, tags output, stops everything on the first failure, picks the exit code."""
import contextlib
import math
import os
import resource
import secrets
import select
import selectors
import signal
import subprocess
import sys
import threading
import time

from commlib._debug import STACK_SIGNAL

from . import agent as agent_wire
from . import spawn

TIMEOUT_EXIT = 124
STACK_DUMP_S = 0.5  # on --timeout: how long ranks asked for their stacks have to print them before SIGTERM
NOTICE_S = 1.0  # after a rank fails, how long the others may take to notice and exit before SIGTERM
PARTIAL_LINE_LIMIT = 1 << 16  # longer unterminated output is passed on without waiting for its newline


def say(line):
    print(f"commrun: {line}", file=sys.stderr, flush=True)


def exit_status(returncode):
    """Popen returncode -> (shell-style exit code, words)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return 128 - returncode, f"killed by {name}"
    return returncode, f"exited with code {returncode}"


class _Stream:
    """One rank's stdout or stderr: whole lines, optionally tagged, to one of our streams."""

    def __init__(self, prefix, sink):
        self.prefix, self.sink = prefix, sink
        self.partial = b""
        self.at_start = True  # False after an overlong unterminated line was passed on
        self.broken = False  # our own stdout/stderr was closed by its reader

    def feed(self, data):
        buf = self.partial + data
        end = buf.rfind(b"\n") + 1
        if len(buf) - end > PARTIAL_LINE_LIMIT:
            end = len(buf)
        self.partial = buf[end:]
        if end:
            self._emit(buf[:end])

    def finish(self):
        if self.partial or not self.at_start:
            self._emit(self.partial + b"\n")
        self.partial = b""

    def _emit(self, chunk):
        out, start = bytearray(), 0
        while start < len(chunk):
            nl = chunk.find(b"\n", start)
            end = len(chunk) if nl < 0 else nl + 1
            if self.at_start:
                out += self.prefix
            out += chunk[start:end]
            self.at_start, start = nl >= 0, end
        if self.broken:
            return
        try:
            _write_all(self.sink, out)
        except BrokenPipeError:  # e.g. `commrun ... | head`: stop like a program killed by SIGPIPE
            self.broken = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.sink.fileno())  # so exit-time flushes succeed


def _write_all(sink, data):
    """Every byte of `data` to `sink`'s file descriptor.

    Not sink.write(): under PYTHONUNBUFFERED (set in many CI environments)
    sys.stdout.buffer is a raw FileIO, whose write() returns after a partial
    write when a signal lands mid-call -- and commrun takes SIGCHLD each time a
    rank exits, so the rest of a chunk (newlines included) was silently lost.
    A non-blocking sink (inherited that way) is waited on, not given up on.
    """
    sink.flush()  # anything Python buffered goes first
    view = memoryview(data)
    try:
        fd = sink.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (io.UnsupportedOperation is an OSError)
        while view:
            n = sink.write(view)
            view = view[len(view) if n is None else n:]
        sink.flush()
        return
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


def _stdin_for_rank0():
    """Our stdin for rank 0; a tty goes through a relay (rank 0 has its own process group)."""
    try:
        fd = sys.stdin.fileno()
        tty = os.isatty(fd)
    except (AttributeError, OSError, ValueError):
        return subprocess.DEVNULL, None
    if not tty:
        return fd, None
    if os.tcgetpgrp(fd) != os.getpgrp():  # we run in the background: reading would stop us
        return subprocess.DEVNULL, None
    return os.pipe()


FDS_SPARE = 64  # descriptors commrun needs besides its ranks' (its own streams, the selector, the coordinator's listener)


def _merge_outputs(n):
    """Whether each rank's stderr must share its stdout's pipe: commrun holds, for each rank, its
    stdout and stderr pipes and its coordinator connection, so with a limit of 1,024 (`ulimit -n`,
    hard) it could not start 340 ranks. Then a pipe each: 2 descriptors a rank. None (said why)
    when even that does not fit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or 3 * n + FDS_SPARE <= soft:
        return False
    if 2 * n + FDS_SPARE <= soft:
        say(f"{n} ranks need {3 * n + FDS_SPARE:,} file descriptors here but the limit is {soft:,} (ulimit -n, "
            f"RLIMIT_NOFILE): each rank's stderr goes to its stdout")
        return True
    say(f"{n} ranks need at least {2 * n + FDS_SPARE:,} file descriptors here (a pipe and a coordinator connection "
        f"each) but the limit is {soft:,} (ulimit -n, RLIMIT_NOFILE, hard limit included): raise it, or run "
        f"ranks on more hosts (--hosts)")
    return None


def _relay(src, dst):
    # A closed end (the rank exited, or our stdin closed) ends the relay.
    try:
        with contextlib.suppress(OSError):
            while data := os.read(src, 65536):
                os.write(dst, data)
    finally:
        os.close(dst)


def _signal_group(rank, sig):
    if rank.agent is not None:  # on another host: its agent signals it
        rank.proc.signal_group(sig)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(rank.proc.pid, sig)


class _Job:
    """The supervision state: live ranks, their output streams, deadlines, the exit code."""

    def __init__(self, ranks, coordinator, timeout, grace):
        self.ranks, self.coordinator = ranks, coordinator
        self.timeout, self.grace = timeout, grace
        self.live = []
        self.result = 0
        self.stopping = False
        self.kill_at = None
        self.term_at = None  # after a rank failed: when to stop the others
        self.exited = {}  # rank number -> (code, words, Rank, when reaped)
        self.blame_by = None  # after a non-zero exit: until when to wait for a rank that failed before it
        self.timeout_at = time.monotonic() + timeout if timeout else None
        self.sel = selectors.DefaultSelector()
        self.fds = {}  # rank number -> its open output fds
        self.dirty = True  # a rank may have ended since the last reap (SIGCHLD, an agent's frames)
        self.reaped_at = 0.0

    def watch(self, rank, tag_output):
        self.live.append(rank)
        prefix = f"[{rank.rank}] ".encode() if tag_output else b""
        if rank.agent is not None:  # its output comes through its agent's stream
            rank.agent.streams[rank.rank] = (_Stream(prefix, sys.stdout.buffer), _Stream(prefix, sys.stderr.buffer))
            return
        for pipe, sink in ((rank.proc.stdout, sys.stdout.buffer), (rank.proc.stderr, sys.stderr.buffer)):
            if pipe is None:  # stderr merged into stdout (short of file descriptors)
                continue
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, (rank.rank, _Stream(prefix, sink)))
            self.fds.setdefault(rank.rank, []).append(pipe.fileno())

    def watch_agent(self, agent, tag_output):
        """A host's agent: its frames (every rank's output and exit) and its own stderr, tagged by host."""
        self.sel.register(agent.proc.stdout.fileno(), selectors.EVENT_READ, (None, agent))
        prefix = f"[{agent.host}] ".encode() if tag_output else b""
        self.sel.register(agent.proc.stderr.fileno(), selectors.EVENT_READ, (None, _Stream(prefix, sys.stderr.buffer)))

    def read(self, fd, stream):
        data = os.read(fd, 65536)
        if data:
            stream.feed(data)
        else:
            stream.finish()
            self.sel.unregister(fd)
        if stream.broken and not self.stopping:
            self.stop(signal.SIGTERM, 128 + signal.SIGPIPE)

    def drain(self, rank):
        """Pass on what a finished rank wrote before reporting on it."""
        for fd in self.fds.get(rank.rank, []):
            while fd in self.sel.get_map() and select.select([fd], [], [], 0)[0]:
                self.read(fd, self.sel.get_key(fd).data[1])

    def stop(self, sig, result):
        self.stopping, self.result = True, result
        self.blame_by = None  # stopped (a signal, the timeout): the result is this one
        asked = False
        for rank in self.live:
            if sig == signal.SIGABRT and rank.agent is not None:  # its agent asks it, as below
                rank.proc.ask_stacks(sig)
                asked = True
            elif sig == signal.SIGABRT:  # the rank itself dumps its stacks
                catches = agent_wire.catches(rank.proc.pid, STACK_SIGNAL)
                asked = asked or catches
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rank.proc.pid, STACK_SIGNAL if catches else sig)
            else:
                _signal_group(rank, sig)
        if asked:  # those asked for their stacks go on: a moment to print them, then SIGTERM
            self.term_at = time.monotonic() + STACK_DUMP_S
        self.kill_at = time.monotonic() + self.grace + (STACK_DUMP_S if asked else 0.0)

    def on_signal(self, signum):
        if signum == signal.SIGCHLD:
            self.dirty = True
            return
        if self.term_at is not None:  # a rank already failed: stop the rest now, keeping its code
            self.term_at = None
            self.stop(signal.SIGINT, self.result)
            return
        if self.stopping:  # a second Ctrl-C: no more waiting
            self.kill_at = time.monotonic()
            return
        say(f"got {signal.Signals(signum).name}, stopping {len(self.live)} rank(s)")
        self.stop(signal.SIGINT, 128 + signum)

    def reap(self):
        """Take note of ranks that ended: after a SIGCHLD or an agent's frames (`dirty`), or once a
        second in any case, not on every wake-up (each is a waitpid a rank: 10,000 ranks' output
        lines would cost 10^8 of them)."""
        now = time.monotonic()
        if not self.dirty and now < self.reaped_at + 1.0:
            if self.blame_by is not None:
                self.blame()
            return
        self.dirty, self.reaped_at = False, now
        ended = [rank for rank in self.live if rank.proc.poll() is not None]
        if ended:
            gone = {rank.rank for rank in ended}
            self.live = [rank for rank in self.live if rank.rank not in gone]
        for rank in ended:
            code, words = exit_status(rank.proc.returncode)
            words = getattr(rank.proc, "words", None) or words  # a rank lost with its host's agent
            self.coordinator.notify_died(rank.rank, code, words)
            self.exited[rank.rank] = (code, words, rank, time.monotonic())
            if code != 0 and not self.stopping and self.blame_by is None:
                self.blame_by = time.monotonic() + NOTICE_S
        if self.blame_by is not None:
            self.blame()

    def blame(self, force=False):
        """Name the rank that failed first and take its exit code: first by when the job learned of
        it (its abort, goodbye or dropped connection reached the coordinator, or it was reaped),
        not by the order processes are reaped in. A rank that ends with sys.exit(7) says goodbye at
        exit, its peers fail with PeerLost and may exit before it does; so while a rank the job
        heard from earlier is still running, wait for it (up to NOTICE_S)."""
        heard = self.coordinator.departures()

        def when(r):
            return min(heard.get(r, math.inf), self.exited[r][3] if r in self.exited else math.inf)

        first = min((r for r, e in self.exited.items() if e[0] != 0), key=when)
        earlier = [rank for rank in self.live if heard.get(rank.rank, math.inf) < when(first)]
        if earlier and not force and time.monotonic() < self.blame_by:
            return
        self.blame_by = None
        # still running after that wait: one whose program announced its exit code at exit (its
        # digest) failed first all the same (a loaded host can take seconds to end an interpreter)
        announced = self.coordinator.announced_exits() if earlier else {}
        late = [rank for rank in earlier if rank.rank in announced]
        if late:
            rank = min(late, key=lambda rank: heard[rank.rank])
            code = announced[rank.rank]
            words = f"exited with code {code}"
        else:
            code, words, rank, _ = self.exited[first]
        self.drain(rank)
        say(f"{rank.describe()} {words}")
        # The others have been told (notify_died): give them a moment to raise PeerLost and
        # say so themselves, then stop them.
        self.stopping, self.result = True, code
        self.term_at = time.monotonic() + NOTICE_S

    def tick(self):
        now = time.monotonic()
        if self.blame_by is not None and now >= self.blame_by:
            self.blame(force=True)
        if self.term_at is not None and now >= self.term_at:
            self.term_at = None
            if self.live:
                self.stop(signal.SIGTERM, self.result)
        if self.timeout_at is not None and now >= self.timeout_at and self.live:
            self.timeout_at = None
            say(f"job timed out after {self.timeout:g} s; dumping stacks and stopping {len(self.live)} rank(s)")
            self.stop(signal.SIGABRT, TIMEOUT_EXIT)
        if self.kill_at is not None and now >= self.kill_at:
            for rank in self.live:
                _signal_group(rank, signal.SIGKILL)
            self.kill_at = now + 1.0

    def next_wakeup(self):
        deadlines = [d for d in (self.timeout_at, self.kill_at, self.term_at, self.blame_by) if d is not None]
        return max(0.0, min([time.monotonic() + 0.5] + deadlines) - time.monotonic())


def run(ranks, setup, *, coordinator_host="127.0.0.1", tag_output=True, timeout=None, grace=3.0, verbose=False):
    """Start and supervise `ranks` (spawn.Rank); return commrun's exit code (verbose: say how the
    ranks reached the coordinator).

    setup(ranks, coordinator_address, secret) fills in each rank's argv and env.
    Must run in the main thread (it handles SIGINT, SIGTERM, SIGHUP and SIGCHLD).
    """
    try:  # here, not at the top: --help and usage errors must not depend on commlib being built
        from commlib._rendezvous import Coordinator
    except ImportError as e:
        say(f"cannot import commlib ({e}); install it with `pip install .`, "
            "or build it in place with `python setup.py build_ext --inplace`")
        return 1
    secret = secrets.token_bytes(32)
    try:
        coordinator = Coordinator(len(ranks), secret, host=coordinator_host, log=lambda line: say(f"coordinator: {line}"))
    except OSError as e:  # e.g. --coordinator-host is not an address of this machine
        say(f"cannot start the coordinator on {coordinator_host}: {e}")
        return 1
    setup(ranks, coordinator.address, secret)
    # each rank here holds pipes; the ranks of another host share its agent's (and hold none here)
    merged = _merge_outputs(sum(rank.agent is None for rank in ranks) + len({id(r.agent) for r in ranks if r.agent}))
    if merged is None:
        coordinator.close()
        return 1
    job = _Job(ranks, coordinator, timeout, grace)
    agents = []  # hostagents.HostAgent started
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    job.sel.register(wake_r, selectors.EVENT_READ, None)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
    old_handlers = {sig: signal.signal(sig, lambda *_: None) for sig in handled}
    old_wakeup = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        stdin0, relay_w = _stdin_for_rank0()
        for rank in ranks:
            try:
                if rank.agent is None:
                    spawn.start(rank, stdin0 if rank.rank == 0 else subprocess.DEVNULL, merged)
                else:  # a remote rank: its host's agent (started with the host's first rank) starts it
                    if rank.agent.proc is None:
                        rank.agent.start()
                        agents.append(rank.agent)
                        job.watch_agent(rank.agent, tag_output)
                    rank.proc = rank.agent.procs[rank.rank]
            except OSError as e:
                say(f"cannot start rank {rank.rank} ({(rank.agent.argv if rank.agent else rank.argv)[0]}): {e}")
                job.stop(signal.SIGKILL, 127 if isinstance(e, FileNotFoundError) else 1)
                break
            job.watch(rank, tag_output)
        if ranks[0].agent is not None and ranks[0].agent.proc is not None:  # rank 0's stdin, relayed by frames
            if stdin0 == subprocess.DEVNULL:
                ranks[0].agent.order(agent_wire.STDIN_EOF, 0)
            else:
                threading.Thread(target=ranks[0].agent.relay_stdin, args=(stdin0,), daemon=True).start()
        if relay_w is not None:
            if ranks[0].agent is None:
                os.close(stdin0)
            threading.Thread(target=_relay, args=(sys.stdin.fileno(), relay_w), daemon=True).start()
        coordinator.start()  # threads only now: ranks are forked from a single-threaded process
        drain_until = None
        while True:
            for key, _ in job.sel.select(job.next_wakeup()):
                if key.data is not None:
                    job.read(key.fd, key.data[1])
                    job.dirty = job.dirty or key.data[0] is None  # an agent's stream: it reports ends
                    continue
                with contextlib.suppress(BlockingIOError):  # drained already: nothing to do
                    for signum in os.read(wake_r, 512):
                        job.on_signal(signum)
            job.reap()
            job.tick()
            if not job.live:
                if drain_until is None:  # kill whatever the ranks left behind, then drain their pipes
                    for rank in ranks:
                        if rank.proc is not None:
                            _signal_group(rank, signal.SIGKILL)
                    drain_until = time.monotonic() + 2.0
                if len(job.sel.get_map()) == 1 or time.monotonic() > drain_until:
                    return job.result
    finally:
        for rank in ranks:
            if rank.proc is not None and rank.proc.poll() is None:
                _signal_group(rank, signal.SIGKILL)
                rank.proc.wait()
        for agent in agents:
            agent.close()
            for pipe in (agent.proc.stdout, agent.proc.stderr):
                pipe.close()
        for key in list(job.sel.get_map().values()):
            if key.data is not None:
                key.data[1].finish()
        job.sel.close()
        for rank in ranks:
            if rank.proc is not None:
                for pipe in (rank.proc.stdout, rank.proc.stderr):
                    if pipe is not None:
                        pipe.close()
        signal.set_wakeup_fd(old_wakeup)
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)
        coordinator.close()
        if verbose:
            c = coordinator.connections()
            say(f"coordinator: {c['direct']} rank(s) connected directly, {c['via']} through {c['links']} host agent "
                f"link(s)")
