"""commlib: MPI-style collectives for Python over plain sockets.

The public names are exactly those of API.md; everything is defined in the
underscore modules and re-exported here.
"""
try:
    from . import _io, _kernels  # noqa: F401  (compiled extensions)
except ImportError as exc:  # pragma: no cover - only in an unbuilt checkout
    raise ImportError(
        "commlib's compiled extensions are missing; build them with `pip install .` "
        "(or `pip install -e .` / `python setup.py build_ext --inplace` for development)"
    ) from exc

from ._api import (
    all_gather, all_max, all_min, all_prod, all_reduce, all_sum, all_to_all, barrier, broadcast, finalize,
    gather, iall_gather, iall_reduce, ibroadcast, init, iprobe, ireduce_scatter, irecv, is_available, isend,
    ppermute, probe, recv, recv_into, recv_like, reduce, reduce_scatter, scatter, send, sendrecv,
)
from ._dtypes import ReduceOp
from ._errors import AuthError, CommError, CommTimeout, MismatchError, PeerLost
from ._group import ANY_SOURCE, ANY_TAG, Group, Status
from ._objects import all_gather_obj, broadcast_obj, gather_obj, recv_obj, scatter_obj, send_obj
from ._progress import Request

__version__ = "0.1.0"

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "AuthError", "CommError", "CommTimeout", "Group", "MismatchError", "PeerLost",
    "ReduceOp", "Request", "Status", "all_gather", "all_max", "all_min", "all_prod", "all_reduce", "all_sum",
    "all_to_all", "barrier", "broadcast", "finalize", "gather", "iall_gather", "iall_reduce", "ibroadcast",
    "init", "iprobe", "ireduce_scatter", "irecv", "is_available", "isend", "ppermute", "probe", "recv",
    "recv_into", "recv_like", "reduce", "reduce_scatter", "scatter", "send", "sendrecv",
    "all_gather_obj", "broadcast_obj", "gather_obj", "recv_obj", "scatter_obj", "send_obj",
]
