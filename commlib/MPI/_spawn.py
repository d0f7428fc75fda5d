"""Dynamic processes: `Intracomm.Spawn` / `Spawn_multiple` and `Comm.Get_parent`.

The spawning root starts the children itself, as its child processes: on its own host, or on the
hosts its info names (MPI's reserved keys `host` and `hostfile`, in commrun's --hosts and
--hostfile forms), through the remote shell commrun uses (COMMLIB_RSH, which commrun passes to its
ranks; ssh by default), with `wdir` as their working directory when given. They form
a job of their own (their COMM_WORLD, whose coordinator the root hosts), and parents and children
together join a second job, this spawn's "universe" (its coordinator also hosted by the root): the
parents are its ranks 0..p-1 in their communicator's order, the children p..p+k-1. The
intercommunicator both sides get is built over the universe's world group as Create_intercomm's is
over the job's (`_intercomm._Inter`). Each job has a fresh secret, which the children learn from
their environment (COMMLIB_PARENT*).

Both coordinators listen on 127.0.0.1 when parents and children share the root's host, else on the
address the root's own job reaches it by (or, for a one-host job spawning elsewhere, its address on
the route to the first remote host).

A child that dies is PeerLost on the parents (the universe's coordinator sees it go); every child
(for a remote one, its remote shell) is started with PR_SET_PDEATHSIG, so none outlives the root's
process, and the root, at exit, waits for its children (bounded by the job's timeout) before
stopping any left.
"""
import atexit
import collections
import contextlib
import ctypes
import functools
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

from .. import _api
from .._api.lifecycle import default_timeout
from .._hosts import (DEFAULT_RSH, forwarded_env, is_local, parse_hostfile, parse_hosts, place, remote_argv,
                      route_address)
from .._errors import CommError
from .._engine import world as _world
from .._rendezvous import Coordinator
from .._rendezvous.discovery import JobEnv
from ._comm import _group, _root, _root_decides, provide
from ._constants import ERR_ARG, ERR_INFO, ERR_SPAWN, MPIException

_PARENT = "COMMLIB_PARENT"  # host:port of the universe's coordinator, in a child's environment
_lock = threading.Lock()
_universes = []  # (world group, client) of every universe this process joined: closed at exit
_children = []  # (Popen, child-world Coordinator) this process started as a root
_parent = None  # the intercommunicator to the parents, in a spawned child (None elsewhere)


def _host_cpus():
    """The CPUs of the job on this host where commrun bound this rank to some of them (its
    COMMLIB_HOST_CPUS), else None: children run on all of them, not on their parent's block."""
    text = os.environ.get("COMMLIB_HOST_CPUS", "")
    try:
        cpus = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        return None
    return cpus if cpus and hasattr(os, "sched_setaffinity") else None


def _child_setup(cpus):
    """In the child, before exec: a SIGKILL when the spawning process dies (Linux), and the job's
    CPUs on this host instead of the parent's block."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if cpus is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


def _commands(what, command, args, maxprocs, info=None):
    """(argv, maxprocs, hosts, wdir) of one Spawn (or each of Spawn_multiple's), checked on the root."""
    if isinstance(command, os.PathLike):
        command = os.fspath(command)
    if not isinstance(command, str) or not command:
        raise MPIException(ERR_SPAWN, f"{what}: command must be a non-empty str, got {command!r}")
    if args is None:
        args = []
    elif isinstance(args, str):
        args = [args]
    args = [str(a) for a in args]
    if isinstance(maxprocs, bool) or not isinstance(maxprocs, int) or maxprocs < 0:
        raise MPIException(ERR_ARG, f"{what}: maxprocs must be an int >= 0, got {maxprocs!r}")
    return ([command, *args], maxprocs, *_placement(what, info))


def _info_items(info):
    """An info argument's keys and values: MPI.Info (INFO_NULL: none), a mapping, or None."""
    if info is None:
        return {}
    d = getattr(info, "_d", info)  # MPI.Info keeps its items in _d (None for INFO_NULL)
    if d is None:
        return {}
    if not hasattr(d, "get"):
        raise MPIException(ERR_INFO, f"info must be an MPI.Info or a mapping, got {type(info).__name__}")
    return d


def _placement(what, info):
    """(hosts [(host, slots)] or None for the root's own host, working directory or None) from the
    reserved info keys `host`, `hostfile` and `wdir`; the other keys are hints, taken and ignored."""
    items = _info_items(info)
    host, hostfile, wdir = items.get("host"), items.get("hostfile"), items.get("wdir")
    if host is not None and hostfile is not None:
        raise MPIException(ERR_INFO, f"{what}: info gives both 'host' and 'hostfile'; give one")
    try:
        if host is not None:
            hosts = parse_hosts(str(host))
        elif hostfile is not None:
            try:
                with open(hostfile) as f:
                    text = f.read()
            except OSError as exc:
                raise ValueError(f"cannot read hostfile {hostfile!r}: {exc.strerror}") from None
            hosts = parse_hostfile(text)
        else:
            hosts = None
    except ValueError as exc:
        raise MPIException(ERR_INFO, f"{what}: info {'host' if host is not None else 'hostfile'}: {exc}") from None
    if wdir is not None and not os.path.isdir(wdir) and (hosts is None or all(is_local(h) for h, _n in hosts)):
        raise MPIException(ERR_SPAWN, f"{what}: info wdir {wdir!r} is not a directory")
    return hosts, wdir


def _listen_host(g, remote):
    """Where the coordinators listen: 127.0.0.1 when every parent and child is on this host, else
    the address the root's job reaches it by, or this host's address on the route to the first
    remote child's host (CommError-free: an unroutable host fails the spawn with ERR_SPAWN)."""
    ep = getattr(g.transport, "ep", None)
    mine = getattr(ep, "tcp_address", None)
    job_address = mine[0] if mine else "127.0.0.1"
    if job_address not in ("127.0.0.1", "::1", "localhost") or not remote:
        return job_address
    try:
        return route_address(remote[0])
    except OSError as exc:
        raise MPIException(ERR_SPAWN, f"Spawn: no route from this host to {remote[0]!r}: {exc}") from None


def _child_env(rank, k, local_rank, local_size, coordinator, secret, universe, universe_secret, p, root, timeout):
    host = f"[{coordinator[0]}]" if ":" in coordinator[0] else coordinator[0]
    uhost = f"[{universe[0]}]" if ":" in universe[0] else universe[0]
    return {
        "COMMLIB_RANK": str(rank), "COMMLIB_SIZE": str(k), "COMMLIB_LOCAL_RANK": str(local_rank),
        "COMMLIB_LOCAL_SIZE": str(local_size), "COMMLIB_COORDINATOR": f"{host}:{coordinator[1]}",
        "COMMLIB_SECRET": secret.hex(), "RANK": str(rank), "WORLD_SIZE": str(k),
        "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_size),
        _PARENT: f"{uhost}:{universe[1]}", _PARENT + "_SECRET": universe_secret.hex(), _PARENT + "_SIZE": str(p),
        _PARENT + "_ROOT": str(root), "COMMLIB_TIMEOUT": str(timeout)}


def _launch(g, programs, p, root, timeout):
    """The root's part: the children's job and the universe, their coordinators, the processes.
    Returns (universe address, universe secret, universe coordinator)."""
    k = sum(prog[1] for prog in programs)
    slots = []  # per child: (argv, its host, None for this one, wdir)
    for argv, n, hosts, wdir in programs:
        where = [None if is_local(h) else h for h, _lr, _ls in place(n, hosts)] if hosts else [None] * n
        slots += [(argv, host, wdir) for host in where]
    listen = _listen_host(g, [host for _a, host, _w in slots if host is not None])
    per_host = collections.Counter(host for _a, host, _w in slots)  # children a host runs, of every program
    child_secret, universe_secret = secrets.token_bytes(32), secrets.token_bytes(32)
    children_coord = Coordinator(k, child_secret, host=listen)
    universe_coord = Coordinator(p + k, universe_secret, host=listen)
    children_coord.start()
    universe_coord.start()
    rsh = os.environ.get("COMMLIB_RSH") or DEFAULT_RSH
    cpus = _host_cpus()
    started, seen = [], {}
    try:
        for rank, (argv, host, wdir) in enumerate(slots):
            local_rank = seen[host] = seen.get(host, -1) + 1
            job = _child_env(rank, k, local_rank, per_host[host], children_coord.address, child_secret,
                             universe_coord.address, universe_secret, p, root, timeout)
            if host is None:
                run, env, cwd = argv, {**os.environ, **job}, wdir
            else:
                run = remote_argv(rsh, host, argv, {**forwarded_env(), **job}, wdir or os.getcwd())
                env, cwd = None, None
            try:
                proc = subprocess.Popen(run, env=env, cwd=cwd,  # noqa: PLW1509
                                        preexec_fn=functools.partial(_child_setup, cpus))
            except OSError as exc:
                on = "" if host is None else f" on {host} (through {run[0]!r})"
                raise MPIException(ERR_SPAWN, f"Spawn: cannot start {argv[0]!r}{on}: {exc}") from None
            started.append(proc)
    except BaseException:
        for proc in started:
            proc.kill()
            proc.wait()
        universe_coord.close()
        children_coord.close()
        raise
    with _lock:
        _at_exit()
        _children.extend((proc, children_coord) for proc in started)
    return universe_coord.address, universe_secret, universe_coord


def _join_universe(rank, size, address, secret, coordinator, host_rank, timeout):
    env = JobEnv(rank=rank, size=size, local_rank=rank, local_size=size, coordinator=tuple(address),
                 secret=secret, host_coordinator=False, source="spawn")
    group, client = _world.join(env, timeout, coordinator, eager=False)  # children may come and go quickly
    group.transport.ep.notices.coordinator_rank = host_rank  # its coordinator lives in the spawning root
    with _lock:
        _at_exit()
        _universes.append((group, client))
    return group


def _intercomm(universe, mine, remote):
    from ._intercomm import Intercomm, _Inter
    local = universe.subgroup(list(mine), ("MPI.Spawn.local", min(mine)))
    lo, ro = (0, len(mine)) if min(mine) == 0 else (len(remote), 0)
    return Intercomm._of(_Inter(local, universe, lo, ro, list(remote)))


def programs_of(command, args, maxprocs, info):
    """Spawn_multiple's arguments (on the root) as [(command, args, maxprocs, info)]: one entry per
    command; args None or one list per command, maxprocs None (1 each), an int (each) or one per
    command, info None / one info (each) or one per command."""
    if isinstance(command, str) or not isinstance(command, (list, tuple)):
        raise ValueError(f"Spawn_multiple: command must be a sequence of str, got {type(command).__name__}")
    n = len(command)

    def per_command(value, name, default):
        if value is None or (name != "args" and not isinstance(value, (list, tuple))):
            return [default if value is None else value] * n
        if isinstance(value, str) or len(value) != n:
            raise ValueError(f"Spawn_multiple: {name} must have one entry per command ({n})")
        return list(value)
    return list(zip(command, per_command(args, "args", None), per_command(maxprocs, "maxprocs", 1),
                    per_command(info, "info", None)))


def spawn(comm, programs, root, what):
    """Intracomm.Spawn / Spawn_multiple: (the intercommunicator to the children, the number started
    for each program), collective over comm. `programs` matters on the root only:
    [(command, args, maxprocs)]."""
    g = _group(comm)
    root = _root(g, root, what)
    p, me, timeout = g.size(), g.rank(), default_timeout()
    coordinator = None

    def launch():  # on the root
        nonlocal coordinator
        if isinstance(programs, Exception):
            raise MPIException(ERR_ARG, f"{what}: {programs}")
        checked = [_commands(what, *prog) for prog in programs]
        if sum(c[1] for c in checked) < 1:
            raise MPIException(ERR_SPAWN, f"{what}: maxprocs adds up to 0: there is nothing to start")
        address, secret, coordinator = _launch(g, checked, p, root, timeout)
        return tuple(address), secret.hex(), [c[1] for c in checked]
    try:
        address, secret, counts = _root_decides(g, root, what, launch)
    except MPIException:
        if isinstance(programs, Exception):  # the root's own argument error, as the caller made it
            raise programs from None
        raise
    k = sum(counts)
    watch = _Watch(_children[-k:], coordinator) if me == root else None
    try:
        universe = _join_universe(me, p + k, address, bytes.fromhex(secret), coordinator, root, timeout)
    except CommError as exc:
        gone = watch.gone if watch is not None else None
        if watch is not None:
            watch.abandon()  # the others of this spawn would wait for their job's missing rank: stop them now
        if gone is not None:  # the root knows why: a child ended before it joined
            raise MPIException(ERR_SPAWN, f"rank {me}: {what}: {gone}") from None
        raise MPIException(ERR_SPAWN, f"rank {me}: {what}: the spawned processes did not all join: {exc}") from None
    finally:
        if watch is not None:
            watch.stop()
    return _intercomm(universe, range(p), range(p, p + k)), counts


class _Watch:
    """On the root, while parents and children join the universe: a child that exits first (a
    program that is not an MPI program, or one that failed at start) closes the universe's
    coordinator, so that every parent's join fails at once instead of at the timeout."""

    def __init__(self, children, coordinator):
        self.gone, self._stop = None, threading.Event()
        self._children, self._coordinator = [proc for proc, _c in children], coordinator
        threading.Thread(target=self._run, name="commlib-spawn-watch", daemon=True).start()

    def _run(self):
        while not self._stop.wait(0.05):
            for proc in self._children:
                code = proc.poll()
                if code is not None:
                    self.gone = f"spawned process {proc.pid} ({' '.join(map(str, proc.args))}) exited with code " \
                                f"{code} before it joined"
                    self._coordinator.close()
                    return

    def stop(self):
        self._stop.set()

    def abandon(self):
        """The spawn failed: stop this spawn's children and close their job's coordinator."""
        self.stop()
        with _lock:
            mine = [(proc, c) for proc, c in _children if proc in self._children]
            _children[:] = [entry for entry in _children if entry not in mine]
        for proc, _c in mine:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for coord in {id(c): c for _p, c in mine}.values():
            coord.close()


def get_parent():
    """In a spawned child: the intercommunicator to the parents (joined at start-up); else None."""
    global _parent
    with _lock:
        if _parent is not None or _PARENT not in os.environ:
            return _parent
        env = os.environ
        p = int(env[_PARENT + "_SIZE"])
    me_world = _api.init()
    k, i = me_world.size(), me_world.rank()
    host, port = env[_PARENT].rsplit(":", 1)
    universe = _join_universe(p + i, p + k, (host, int(port)), bytes.fromhex(env[_PARENT + "_SECRET"]), None,
                              int(env[_PARENT + "_ROOT"]), default_timeout())
    _parent = _intercomm(universe, range(p, p + k), range(p))
    return _parent


def _at_exit():
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_close_all)


_registered = False


def _close_all():
    """At exit: leave every universe, then wait for this root's children (bounded), stop any left."""
    for group, client in reversed(_universes):
        with contextlib.suppress(Exception):
            _world.close(group, client)
    _universes.clear()
    if not _children:
        return
    deadline = time.monotonic() + default_timeout()  # one bound for all of them, not one each
    for proc, _c in _children:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"commlib: spawned process {proc.pid} ({proc.args[0]}) still running at exit: stopping it",
                  file=sys.stderr, flush=True)
            proc.kill()
            proc.wait()
    for coord in {id(c): c for _p, c in _children}.values():
        coord.close()
    _children.clear()


provide(spawn=spawn, programs_of=programs_of, get_parent=get_parent)  # Comm.Spawn(_multiple), Get_parent
