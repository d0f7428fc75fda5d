"""init() and finalize(): joining the job, and leaving it without hurting anyone.

init() finds the launcher's environment and joins the job (the engine's
`world.join`: this rank's endpoint, the coordinator, the world group). The collective
connection to the ring neighbour is opened eagerly, in the background and best
effort: init() does not wait for the handshake, and a peer that already
finished is no error here (only an operation that needs it fails).

finalize() (also run at exit) leaves in an order that keeps every peer
healthy: queued sends are flushed first (a receiver may still need them);
then every rank's collective digest is exchanged through the coordinator,
which also waits (bounded by the timeout) until every rank has finished its
work, so no rank closes its listeners while a slower one may still connect;
a difference in the digests is a MismatchError naming both sides (a
broadcast where every rank thought it was the root moves no bytes, and is
found here). Only then does it say goodbye and close.
"""
import atexit
import contextlib
import os
import random
import sys
import threading
import time

import commlib._debug as _debug
from .._errors import CommError, MismatchError
from .._wire import ProtocolError, decode

DEFAULT_TIMEOUT_S = 300.0

_world = None
_client = None
_finalized = False
_aborting = False
_at_exit = False  # finalize() runs from atexit: the program ended without calling it
_NOT_CALLED = object()
_exit_status = _NOT_CALLED  # what the main thread last passed to sys.exit() (a hint for the peers)
_lock = threading.Lock()
report_stats = None  # COMMLIB_STATS: finalize's table, report_stats(world) (stats.py; set by the package)
# Tests of failure reports: each rank waits a random 0..N s before it leaves (finalize(), at exit,
# abort()), so that every order in which the peers learn of a cause and of a departure is tried.
_EXIT_DELAY_S = float(os.environ.get("COMMLIB_TEST_EXIT_DELAY") or 0)


def is_available():
    """True: the socket backend needs nothing external."""
    return True


def current():
    """This process's world Group if commlib is initialised (by init(), a front-end or a join), else None."""
    return _world


def default_timeout():
    """COMMLIB_TIMEOUT (seconds), else DEFAULT_TIMEOUT_S."""
    raw = os.environ.get("COMMLIB_TIMEOUT", "")
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise CommError(f"COMMLIB_TIMEOUT={raw!r} is not a number of seconds") from None


def init(strict=False, timeout=None, *, rank=None, size=None, coordinator=None, secret=None):
    """The world group; the second call returns the same group.

    Finds peers from the launcher's variables (commrun, srun, torchrun-style,
    mpirun/mpiexec, Kubeflow, Indexed Jobs: `_rendezvous.discover`), or from
    rank=, size=, coordinator= ("host:port", hosted by rank 0) and secret=
    (bytes or hex; default COMMLIB_SECRET) for any other launcher. Outside
    any launcher it returns a group of size 1 (every collective is the
    identity), or raises CommError when `strict`.
    """
    global _world
    with _lock:
        if _world is not None:
            return _world
        if _finalized:
            raise CommError("commlib.finalize() was called on this rank; the job cannot be joined again")
        from .. import _rendezvous

        if timeout is None:
            timeout = default_timeout()
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        timeout = float(timeout)
        given = (rank, size, coordinator, secret)
        env = _rendezvous.explicit(*given) if any(v is not None for v in given) else _rendezvous.discover()
        if env is None:
            if strict:
                raise CommError("commlib.init(strict=True): no launcher environment found "
                                "(run under commrun, srun, or set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)")
            from .._engine import world

            _world = world.alone(timeout)
            return _world
        store = _torch_store(env) if env.source == "torchrun" else None
        if store is not None:  # torch's TCPStore holds MASTER_PORT: meet through it instead
            env, coordinator = _rendezvous.via_key_value(env.rank, env.size, store.set,
                                                         lambda key: store.get(key).decode(), env.coordinator[0],
                                                         prefix="commlib/init/")
            return _join(env, timeout, coordinator)
        return _join(env, timeout)


def _torch_store(env):
    """torch.distributed's default store when this process already joined torch's group (of any backend)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if (dist.get_rank(), dist.get_world_size()) != (env.rank, env.size):
        raise CommError(f"commlib.init(): RANK/WORLD_SIZE say rank {env.rank} of {env.size}, but torch.distributed "
                        f"was initialised as rank {dist.get_rank()} of {dist.get_world_size()}")
    return dist.distributed_c10d._get_default_store()


def join(env, timeout, coordinator=None):
    """The world group of the job `env` describes (a `_rendezvous.JobEnv`), for front-ends that find
    the job themselves (commlib.torch, through torch's store); `coordinator`: one this rank
    already started, when it hosts it. The world already joined is returned as it is."""
    with _lock:
        if _world is not None:
            return _world
        if _finalized:
            raise CommError("commlib.finalize() was called on this rank; the job cannot be joined again")
        return _join(env, timeout, coordinator)


def _join(env, timeout, coordinator=None):
    global _world, _client
    from .._engine import world

    _world, _client = world.join(env, timeout, coordinator)
    _install_excepthook(_client, env.rank)
    with contextlib.suppress(Exception):  # no usable stderr (closed by the program): no stack dumps
        _debug.catch_stack_signal()
    _install_exit_hint()
    atexit.register(_finalize_at_exit)
    return _world


def finalize():
    """Leave the job: flush sends, compare collective digests with every rank, close. Safe to call twice.

    Raises MismatchError when ranks ran different collectives (after closing).
    """
    global _world, _client, _finalized
    import commlib._trace as _trace
    if _trace.ENABLED and _world is not None and _world.transport is not None and not _aborting:
        _trace.note_clock_end(_world)  # the clock against the coordinator's again: its drift over the job
        if _trace.STATS and report_stats is not None:
            report_stats(_world)  # a collective of every rank, while the world still is one
    if _EXIT_DELAY_S > 0:
        _delay_exit()
    with _lock:
        world, client = _world, _client
        _world = _client = None
        if world is not None and world.transport is not None:
            _finalized = True
    if world is None or world.transport is None:
        return
    if _debug.LEVEL:
        _debug.log(_debug.INFO, lambda: _waits_text(world))
    from .._engine import world as joined

    got = None if _aborting else joined.digests(world, at_exit=_at_exit,
                                                 exit_code=_exit_code(_exit_status) if _at_exit else None)
    mismatch = _compare(world.world[world.rank()], *got) if got is not None else None
    joined.close(world, client)
    if mismatch is not None:
        raise mismatch


def _waits_text(world):
    """COMMLIB_DEBUG at finalize(): how this rank's waits for its peers ended, spinning or asleep."""
    parts = []
    steppers = [(f"group {g.gid} collectives", g._channel.stepper)
                for g in list(world.engine.groups.values()) if g._channel is not None]
    if world.transport._p2p is not None:
        steppers.append(("point-to-point", world.transport._p2p.stepper))
    for what, stepper in steppers:
        waits, sleeps, slept = stepper.wait_counts()
        if waits:
            parts.append(f"{what}: {waits} waits, {waits - slept} ended spinning "
                         f"({100 * (waits - slept) / waits:.0f} %), {slept} slept ({sleeps} sleeps in poll)")
    seconds, adaptive, yielding = world.spin
    policy = (f"spin {'adaptive, up to' if adaptive else 'fixed'} {seconds * 1e6:.0f} us"
              f"{', yielding the core' if yielding else ''}" if seconds > 0 else "no spin")
    return f"finalize: {policy}; " + ("; ".join(parts) if parts else "no wait in the step loop")


def _compare(me, mine, got):
    """MismatchError for the first collective on which another rank's history differs from ours."""
    for peer in sorted(got):
        if peer == me:
            continue
        theirs_groups = got[peer].get("groups") or {}
        for gid, ours in mine["groups"].items():
            theirs = theirs_groups.get(gid)
            if theirs is None or (theirs.get("n") == ours["n"] and theirs.get("digest") == ours["digest"]):
                continue
            return MismatchError(_difference(me, ours, peer, theirs), rank=peer)
    return None


def _difference(me, ours, peer, theirs):
    try:
        a = {h.seq: h for h in (decode(bytes.fromhex(x)) for x in ours["recent"])}
        b = {h.seq: h for h in (decode(bytes.fromhex(x)) for x in theirs.get("recent", []))}
    except (ValueError, ProtocolError):
        a = b = {}
    for seq in sorted(set(a) & set(b)):
        if a[seq].encode() != b[seq].encode():
            return (f"rank {me} called {a[seq].describe()} but rank {peer} called {b[seq].describe()} "
                    f"(found when the ranks compared their collectives at finalize)")
    last_a = a[max(a)].describe() if a else "none"
    last_b = b[max(b)].describe() if b else "none"
    return (f"rank {me} ran {ours['n']} collectives (last: {last_a}) but rank {peer} ran {theirs.get('n')} "
            f"(last: {last_b}) (found when the ranks compared their collectives at finalize)")


def _finalize_at_exit():
    """finalize() at interpreter exit: a mismatch found now still fails the process."""
    global _at_exit
    _at_exit = True  # peers waiting on this rank learn that its program ended (and wait for its exit code)
    try:
        finalize()
    except MismatchError as exc:
        print(f"commlib: MismatchError: {exc}", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(1)


def abort(code, message):
    """Stop the whole job at once (MPI_Abort): say why, tell the peers, exit with `code` (1 for 0).

    Under commrun this rank's non-zero exit stops every other rank and becomes
    commrun's exit code; under other launchers the peers raise PeerLost.
    """
    global _aborting
    _aborting = True
    code = code & 0xFF or 1
    world, client = _world, _client
    if world is not None and client is not None:  # the peers raise this cause, not a bare exit code
        with contextlib.suppress(Exception):
            client.send({"kind": "abort", "to": "all", "error": "abort", "rank": world.rank(),
                         "message": f"{message} (exit code {code})"})
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        os.write(2, f"commlib: {message}\n".encode())
    if _EXIT_DELAY_S > 0:
        _delay_exit()
    os._exit(code)


def _delay_exit():
    """COMMLIB_TEST_EXIT_DELAY: a random pause before this rank leaves (tests only)."""
    time.sleep(random.uniform(0, _EXIT_DELAY_S))


def _install_exit_hint():
    """Remember the code the main thread passes to sys.exit(), so that a program that ends with
    sys.exit(7) while its peers wait on it can tell them "exited with code 7" in its goodbye:
    atexit (where finalize() then runs) cannot see the code. sys.exit behaves as before."""
    real = sys.exit
    if getattr(real, "_commlib_hint", False):
        return

    def exit(status=None):
        global _exit_status
        if threading.current_thread() is threading.main_thread():  # elsewhere it ends a thread only
            _exit_status = status
        real(status)

    exit._commlib_hint = True
    exit.__doc__ = real.__doc__
    sys.exit = exit


def _exit_code(status):
    """The process exit code Python makes of sys.exit(status); None when sys.exit was not called."""
    if status is _NOT_CALLED:
        return None
    if status is None:
        return 0
    if isinstance(status, int) and not isinstance(status, bool):
        return status & 0xFF
    return 1  # a message: printed, and the process exits with 1


def _install_excepthook(client, rank):
    """An uncaught exception tells the job at once, so peers raise PeerLost instead of waiting."""
    previous = sys.excepthook

    def hook(etype, value, tb):
        global _aborting
        if _world is not None and not issubclass(etype, (KeyboardInterrupt, SystemExit)):
            _aborting = True
            # A commlib error keeps its kind and words (a mismatch stays a MismatchError on every
            # rank, whichever notice arrives first); any other exception is named with its type.
            ours = issubclass(etype, CommError)
            try:
                client.send({"kind": "abort", "to": "all", "error": etype.__name__ if ours else "exception",
                             "rank": rank, "message": str(value) if ours else f"{etype.__name__}: {value}"})
            except Exception as err:  # the report is best effort; the traceback still prints
                print(f"commlib: could not report the failure to peers: {err}", file=sys.stderr)
        previous(etype, value, tb)

    sys.excepthook = hook
