"""The transport layer: connections between ranks, and the seam the layers above use.

Above this package nothing touches a descriptor, the step loop (`_io`) or a
status code. Per group and per peer a transport provides:

- collectives, `CollectiveChannel` (one per group): `run(op, plan, slots,
  bounds)` runs a whole plan of full-duplex rows (`commlib._plan`) with the
  GIL released once; per peer it needs one way to send bytes and one to
  receive them (here a socket each way, opened on the first row that needs
  it, looked up per row by `peer_fds`); `stopped` resumes after a slow step
  or raises; `fast_path` is the one-call path over the same step loop.
- point-to-point, `PointToPoint` (p2p.py, one per process): per (group,
  peer) an `Outgoing` (a FIFO of Frames; `write()` without blocking: SENT,
  AGAIN, LOST) and an `Incoming` (`read()` without blocking: MORE, HEADER,
  PAYLOAD, AGAIN, LOST; `receive_into(view)` after a header; `idle`,
  `busy`, `stop()`, `pending()`); a `Poller` (`watch`, `wait`, `wake`) over
  the connections with work, new arrivals and the process's failure; the
  blocking send/recv (`fast_path`: `_io.P2PFast`) and its `recv_step`.
- failure, per process: `ep.failure` (sticky), `raise_if_failed()`,
  `error(exc)` spreads one to every rank; `gone(peer)`/`finishing(peer)`.

The engine only matches, orders and schedules: it says which frame goes
next and where a payload lands; the bytes move here. Shared memory (shm.py,
_shm.h) sits under the descriptor: a same-host connection handed a segment at
its handshake reads and writes rings through `_io` (the step loop, P2PFast,
Incoming/Outgoing) and sleeps on the socket as a doorbell (Poller,
`cl_prepare_wait`); nothing above tells the two apart. `Transport` builds both channels over an `Endpoint`
(sockets.py: listeners, authenticated connections, the sticky failure and
wake pipe) and its `Notices` (notices.py: what the coordinator says).
"""
# The names below load their modules on first use (PEP 562): commrun imports this package for its
# settings (limits, interfaces, seal's switch) and never needs the step loop, NumPy or a socket of
# a rank's, so its start costs none of them.
_LAZY = {
    "Transport": ".channels", "CollectiveChannel": ".channels", "spin_seconds": ".channels",
    "spin_policy": ".channels", "env_number": ".channels", "PEER_CHECK_MAX_S": ".channels",
    "SPIN_MAX_US": ".channels", "SPIN_MAX_SHARED_US": ".channels", "SPIN_YIELD_US": ".channels",
    "YIELD_RANKS_PER_CORE": ".channels", "PointToPoint": ".p2p", "Endpoint": ".sockets",
    "host_identity": ".sockets", "CH_COLL": ".sockets", "CH_LANE": ".sockets", "CH_P2P": ".sockets",
    "SHARED_GID": ".sockets", "routed_address": ".interfaces",
}

__all__ = ["Transport", "CollectiveChannel", "PointToPoint", "Endpoint", "spin_seconds", "spin_policy", "env_number",
           "host_identity", "routed_address"]


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
