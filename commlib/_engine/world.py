"""The world: joining the job over the transport, and leaving it.

The only place above the transport that builds one: `join()` starts this
rank's endpoint (and the job's coordinator when this rank hosts it),
registers with the coordinator, and returns the world Group on a Transport
and its Engine; `digests()` and `close()` are the two halves of leaving.
The API (`_api/lifecycle.py`) decides when to call them; the policy of
finalize (flush, compare, then close) is written there.
"""
import contextlib
import os
import sys
import time

from .. import _debug, _rendezvous, _trace
from .._errors import CommError
from .._transport import Endpoint, Transport, seal
from .._transport.limits import raise_fd_limit
from .group import Group
from .p2p import Engine


def alone(timeout):
    """The world of a process outside any launcher: a group of size 1 with no transport."""
    return Group(None, Engine(None), 0, [0], 0, timeout)


def join(env, timeout, coordinator=None, eager=True):
    """Join the job `env` describes (a `_rendezvous.JobEnv`).

    Args:
        env: this rank, the job's size, the coordinator's address, the secret.
        timeout: the world group's deadline for every blocking call, in seconds.
        coordinator: a `_rendezvous.Coordinator` this rank already started, when it hosts it.
        eager: start connecting to the ring neighbour at once (a job that runs large collectives);
            False for short-lived jobs whose ranks may leave before a neighbour's connection lands.

    Returns:
        (world Group, coordinator Client): the client stays connected for the job's life and
        carries the notices ("rank k died") the transport turns into PeerLost.

    Raises:
        CommError (CommTimeout, AuthError) when the coordinator cannot be reached or refuses this
        rank; nothing is left open then.
    """
    try:
        sealing = seal.enabled()
    except ValueError as exc:
        raise CommError(f"rank {env.rank}: {exc}") from None
    if sealing and (weak := _rendezvous.weak_secret_words(env.secret)) is not None:
        raise CommError(f"rank {env.rank}: {seal.ENV}=1 needs a secret only the job knows, but {weak}: export "
                        f"the same COMMLIB_SECRET to every rank (e.g. from a Kubernetes Secret; "
                        f"`python -c 'import secrets; print(secrets.token_hex(32))'` makes one)")
    if env.rank == 0:  # once a job, not once a rank
        _rendezvous.warn_if_derived(env.secret)
    raise_fd_limit()  # a socket per peer (and per group): the soft default of 1,024 is no ceiling of ours
    if coordinator is None and env.host_coordinator:  # in a process of its own (_rendezvous/service.py)
        coordinator = _rendezvous.Service(env.size, env.secret, host=env.coordinator[0], port=env.coordinator[1],
                                          linger=timeout)
    ep = Endpoint(env.rank, env.secret, env.coordinator[0], timeout, spans_hosts=env.local_size < env.size)
    try:
        client = _rendezvous.Client.connect(env.via or env.coordinator, env.secret, env.rank, timeout, pumps=ep.pumps)
        ep.set_table(client.register(ep.info(), timeout))
    except BaseException:
        ep.close()
        if coordinator is not None:
            coordinator.close()
        raise
    if _trace.ENABLED:  # a trace places this rank's records on the coordinator's clock
        _trace.note_clock(client.clock_offset())
    ep.notices.send = client.send
    ep.coordinator_sock = client.sock
    if env.source != "commrun":  # rank 0 hosts the coordinator: losing it is losing rank 0
        ep.notices.coordinator_rank = 0
    client.start_listener(ep.notices.on_notice)
    transport = Transport(ep)
    world = Group(transport, Engine(transport), 0, list(range(env.size)), env.rank, timeout)
    if env.size > 1 and eager:  # every large collective needs the ring neighbour: start connecting now
        transport.connect_eagerly(0, (env.rank + 1) % env.size, min(timeout, 5.0))
    world._coordinator = coordinator
    if _debug.LEVEL:
        _debug.set_rank(env.rank)
        _debug.log(_debug.INFO, lambda: _joined(env, timeout, ep))
    if os.environ.get("COMMLIB_VERBOSE", "") not in ("", "0"):
        print(ep.routes_text(), file=sys.stderr, flush=True)
    return world, client


def _joined(env, timeout, ep):
    from .._transport import spin_policy
    seconds, adaptive, yielding = spin_policy()
    spin = (f"{'adaptive, up to' if adaptive else 'fixed'} {seconds * 1e6:.0f} us"
            + (", yielding the core" if yielding else "")) if seconds else "none (every wait sleeps)"
    return (f"joined as rank {env.rank} of {env.size} ({env.local_size} on this host), started by {env.source}, "
            f"coordinator {env.coordinator[0]}:{env.coordinator[1]}, timeout {timeout:g} s, spin {spin}; "
            f"{ep.routes_text()}")


def digests(world, at_exit=False, exit_code=None):
    """Flush this rank's queued sends, then send every group's collective digest to the coordinator,
    which compares them with every other rank's (waiting, bounded by the world's timeout, for its
    verdict: once all have finished).
    `at_exit`: finalize() runs at interpreter exit (the peers say "its program ended");
    `exit_code`: the code the program passed to sys.exit(), when it did (the peers say "exited with
    code 7").

    Returns:
        (ours, {world rank: theirs}), or None when the job already failed (nothing to compare).
    """
    ep, engine = world.transport.ep, world.engine
    if ep.failure is not None:
        return None
    deadline = time.monotonic() + world.timeout
    engine.drain(deadline)
    mine = {"groups": {str(gid): g.summary() for gid, g in list(engine.groups.items())}, "at_exit": at_exit,
            "exit_code": exit_code}
    return mine, ep.notices.exchange_digests(mine, deadline)


def close(world, client):
    """Close the world: fail what is still posted, say goodbye, close every connection; a rank that
    hosts the coordinator keeps it until the others have left (bounded by the world's timeout)."""
    ep = world.transport.ep
    world.engine.close("commlib.finalize() was called before it completed")
    ep._closed = True
    coordinator = getattr(world, "_coordinator", None)
    if client is not None:
        with contextlib.suppress(OSError):
            client.close()
    ep.close()
    if coordinator is not None:
        # Ranks still working need the coordinator: wait for them to leave.
        if not coordinator.wait_until_alone(world.world[world._rank], world.timeout + 2.0):
            still = coordinator.connected()
            print(f"commlib: rank {world._rank}: closing the coordinator while "
                  f"{f'ranks {still}' if still is not None else 'ranks'} are still connected", file=sys.stderr)
        coordinator.close()
