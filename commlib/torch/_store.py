"""commlib's world for torch's default group: the one already joined, or one joined through torch's store."""
import datetime
import os

from .._api import lifecycle
from .._errors import CommError
from .. import _rendezvous

try:  # torch's default for gloo-like backends (30 min); a group left at it gets commlib's own default
    from torch.distributed.constants import default_pg_timeout as _TORCH_DEFAULT
except ImportError:  # pragma: no cover - older torch
    _TORCH_DEFAULT = datetime.timedelta(minutes=30)


def timeout_seconds(timeout):
    """A group's timeout in seconds: init_process_group(timeout=) when the user gave one, else commlib's
    (COMMLIB_TIMEOUT or 300 s), so a lost peer is an error in minutes rather than torch's 30."""
    if timeout is None or timeout == _TORCH_DEFAULT:
        return lifecycle.default_timeout()
    secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if not secs > 0:
        raise ValueError(f"commlib backend: timeout must be positive, got {timeout!r}")
    return secs


def world(store, rank, size, timeout):
    """commlib's world, with this process at torch's `rank` of `size`."""
    w = lifecycle.current()
    if w is None and "COMMLIB_RANK" in os.environ:  # under commrun: its coordinator and supervision
        w = lifecycle.init(timeout=timeout)
    if w is None:
        env, coordinator = _rendezvous.via_key_value(
            rank, size, lambda k, v: store.set(k, v), lambda k: store.get(k).decode(), _store_host(store))
        w = lifecycle.join(env, timeout, coordinator)
    if w.rank() != rank or w.size() != size:
        raise CommError(f"commlib backend: torch says this process is rank {rank} of {size}, but commlib's world "
                        f"has it as rank {w.rank()} of {w.size()} (commlib.init() found a different job; "
                        f"start both from the same launcher)")
    return w


def _store_host(store):
    """The host of the TCPStore under torch's prefix stores, else loopback (a file or hash store is one host)."""
    seen = 0
    while hasattr(store, "underlying_store") and seen < 16:
        store, seen = store.underlying_store, seen + 1
    host = getattr(store, "host", None)
    return host if isinstance(host, str) and host else "127.0.0.1"
