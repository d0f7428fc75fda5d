"""commrun's side of the per-host agents (agent.py): one remote shell per host, not per rank.

A `HostAgent` starts `python -m commrun.agent` on its host through --rsh, sends it the job's spec
on its stdin, and reads its frames: each rank's output goes to the same tagged streams a local
rank's would, and each rank's exit status to its `AgentRank`, which stands in for the rank's
process in supervise (poll, pid, signals). When the agent's stream ends before a rank's exit
status came, that rank was lost with its agent, and is reported so.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading

from . import agent as wire
from . import spawn

AGENT_WAIT_S = 2.0  # after commrun closes an agent's orders, how long it has to stop its ranks and end


class AgentRank:
    """A remote rank as its host's agent reports it: the part of Popen's surface supervise uses."""

    stdout = stderr = None  # its output arrives through the agent's stream

    def __init__(self, host_agent, rank):
        self.agent, self.rank = host_agent, rank
        self.pid = None  # its pid on its host, once the agent says
        self.returncode = None
        self.words = None  # how it ended, where the exit status alone does not say it

    def poll(self):
        return self.returncode

    def wait(self):
        if self.returncode is None:
            self.agent.close()
        return self.returncode

    def signal_group(self, sig):
        self.agent.order(wire.SIGNAL, self.rank, str(int(sig)).encode())

    def ask_stacks(self, sig):
        """--timeout: the rank's stacks if it prints them on STACK_SIGNAL, else `sig` (decided there)."""
        self.agent.order(wire.STACKS, self.rank, str(int(sig)).encode())


FANOUT = 32  # agents an agent (or commrun) starts at most: a launch tree of 1,024 hosts is 2 levels deep


def launch_tree(hosts, fanout=FANOUT):
    """[(host, its subtree)] of the agents commrun starts: every host once; at most `fanout` at any
    level, each starting (as a tree of its own) the hosts of its part of the list."""
    if fanout < 2:
        raise ValueError(f"COMMLIB_AGENT_FANOUT must be at least 2, not {fanout}")
    if len(hosts) <= fanout:
        return [(h, []) for h in hosts]
    size, extra = divmod(len(hosts), fanout)
    tree, at = [], 0
    for i in range(fanout):
        part = hosts[at:at + size + (i < extra)]
        at += len(part)
        tree.append((part[0], launch_tree(part[1:], fanout)))
    return tree


def fanout(environ=os.environ):
    """COMMLIB_AGENT_FANOUT, checked (ValueError naming it)."""
    value = environ.get("COMMLIB_AGENT_FANOUT", "").strip()
    if not value:
        return FANOUT
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 2:
        raise ValueError(f"COMMLIB_AGENT_FANOUT={value!r}: expected a whole number of at least 2")
    return n


class HostAgent:
    """The agent commrun starts on one host: its remote-shell process, its orders (stdin) and its
    frames (stdout), for the ranks of its host and of the hosts below it in the launch tree."""

    def __init__(self, host, subtree, by_host, rsh, cwd, argv, grace=3.0):
        """by_host: {host: [(spawn.Rank, env)]}, each rank with its job variables; subtree: the
        hosts this agent starts in turn (launch_tree's)."""
        self.host = host
        agent_env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}

        def agent_argv(h):
            return spawn.remote_argv(rsh, h, [sys.executable, "-m", "commrun.agent"], agent_env, cwd)

        def spec_of(h, below):
            members = by_host[h]
            envs = [env for _, env in members]
            common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs[1:])}
            spec = {"argv": list(argv), "env": common, "grace": grace, "stdin_rank": None, "host": h, "proxy": True,
                    "ranks": [{"rank": rank.rank, "local_rank": rank.local_rank, "local_size": rank.local_size,
                               "env": {k: v for k, v in env.items() if k not in common}} for rank, env in members],
                    "children": [{"host": c, "argv": agent_argv(c), "spec": spec_of(c, sub)} for c, sub in below]}
            if 0 in wire.subtree_ranks(spec):  # rank 0's stdin is relayed down to it
                spec["stdin_rank"] = 0
            return spec

        self.spec = spec_of(host, subtree)
        self.rank_host = {rank.rank: h for h, members in by_host.items() for rank, _ in members}
        self.argv = agent_argv(host)
        self.procs = {r: AgentRank(self, r) for r in sorted(wire.subtree_ranks(self.spec))}
        self.streams = {}  # rank -> (stdout _Stream, stderr _Stream), set by supervise
        self.proc = None
        self.frames = wire.Frames()
        self.lock = threading.Lock()  # orders come from the main thread and rank 0's stdin relay
        self.ended = False  # its stream ended
        self.broken = False

    def start(self):
        """Start the agent and send it the spec. Must be called before any thread exists."""
        self.proc = spawn.start(spawn.Rank(-1, self.host, 0, 1, True, argv=self.argv), subprocess.PIPE)
        self.order(wire.SPEC, wire.ALL, json.dumps(self.spec).encode())
        return self.proc

    def order(self, kind, rank, payload=b""):
        with self.lock:
            if self.proc is None or self.proc.stdin is None:
                return
            try:
                self.proc.stdin.write(wire.frame(kind, rank, payload))
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):  # the agent is gone: its stream's end says so
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
                self.proc.stdin = None

    def relay_stdin(self, fd):
        """Rank 0's stdin (this host runs it): commrun's stdin, relayed in frames (call in a thread)."""
        with contextlib.suppress(OSError):
            while data := os.read(fd, 65536):
                self.order(wire.STDIN, 0, data)
        self.order(wire.STDIN_EOF, 0)

    # the selector's reader of the agent's stdout (supervise calls feed/finish and reads broken)
    def feed(self, data):
        try:
            frames = self.frames.feed(data)
        except ValueError as e:  # not an agent talking (a remote shell's banner, say): stop reading it
            self.finish(f"its agent sent garbage ({e})")
            return
        for kind, r, payload in frames:
            streams = self.streams.get(r)
            if kind in (wire.OUT, wire.ERR) and streams is not None:
                stream = streams[kind - wire.OUT]
                stream.feed(payload)
                self.broken = self.broken or stream.broken
            elif kind == wire.STARTED and r in self.procs:
                self.procs[r].pid = int(payload)
            elif kind == wire.EXITED and r in self.procs:
                self._ended(r, int(payload))
            elif kind == wire.FAILED and r in self.procs:
                self._ended(r, 127, payload.decode(errors="replace"))
            elif kind == wire.LOST and r in self.procs:  # its host's agent, below this one, ended first
                self._ended(r, 255, payload.decode(errors="replace"))

    def _ended(self, r, code, words=None):
        proc = self.procs[r]
        if proc.returncode is None:
            for stream in self.streams.get(r, ()):
                stream.finish()
            proc.returncode, proc.words = code, words

    def finish(self, why=None):
        """The agent's stream ended: each rank it has not reported on was lost with it."""
        self.ended = True
        if why is None:
            code = None
            if self.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self.proc.wait(timeout=AGENT_WAIT_S)
            why = ("its host's agent ended" if code is None
                   else f"its host's agent on {self.host} {wire.ended_words(code)}")
        for r, proc in self.procs.items():
            if proc.returncode is None:
                below = self.rank_host.get(r, self.host) != self.host  # started by a child of the lost agent
                self._ended(r, 255, f"was lost: {why}" + (f" (it started {self.rank_host[r]}'s)" if below else ""))

    def close(self):
        """Stop the agent: its orders end (it stops its ranks), then it has AGENT_WAIT_S to exit."""
        if self.proc is None:
            return
        self.order(wire.SIGNAL, wire.ALL, str(int(signal.SIGKILL)).encode())
        with self.lock:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
                self.proc.stdin = None
        try:
            self.proc.wait(timeout=AGENT_WAIT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if not self.ended:
            self.finish("commrun stopped its host's agent")
