"""The API layer: the functions of API.md, over the engine and the algorithms.

lifecycle.py   init / finalize / is_available
collectives.py the collectives and their i variants (each on its group's ordered stream)
p2p.py         point-to-point over the matching engine
objects.py     the *_obj variants (pickle protocol 5, out-of-band buffers)
"""
from .._engine import ANY_SOURCE, ANY_TAG, Group, Request, Status, test_all, test_any, wait_all, wait_any
from .collectives import (all_gather, all_max, all_min, all_prod, all_reduce, all_sum, all_to_all, barrier,
                          broadcast, gather, iall_gather, iall_reduce, iall_to_all, ibarrier, ibroadcast, igather,
                          ippermute, ireduce, ireduce_scatter, iscatter, ppermute, reduce, reduce_scatter, scatter)
from .lifecycle import finalize, init, is_available
from .objects import all_gather_obj, broadcast_obj, gather_obj, recv_obj, scatter_obj, send_obj
from .p2p import iprobe, irecv, isend, issend, probe, recv, recv_into, recv_like, send, sendrecv

__all__ = [
    "ANY_SOURCE", "ANY_TAG", "Group", "Request", "Status",
    "all_gather", "all_gather_obj", "all_max", "all_min", "all_prod", "all_reduce", "all_sum", "all_to_all",
    "barrier", "broadcast", "broadcast_obj", "finalize", "gather", "gather_obj", "iall_gather", "iall_reduce",
    "iall_to_all", "ibarrier", "ibroadcast", "igather", "init", "ippermute", "iprobe", "ireduce",
    "ireduce_scatter", "irecv", "is_available", "iscatter", "isend", "issend", "ppermute", "probe", "recv",
    "recv_into", "recv_like", "recv_obj", "reduce", "reduce_scatter", "scatter", "scatter_obj", "send",
    "send_obj", "sendrecv", "test_all", "test_any", "wait_all", "wait_any",
]

import commlib._trace as _trace  # noqa: E402

from . import collectives, lifecycle, objects, p2p, stats  # noqa: E402

lifecycle.report_stats = stats.report_at_finalize  # (stats gathers with objects, which stand above lifecycle)

# Where the peer is in each point-to-point call's arguments, for its trace record; the names of __all__
# that are no communication call.
_PEERS = {"send": (1, "dst"), "isend": (1, "dst"), "issend": (1, "dst"), "recv": (2, "src"), "irecv": (2, "src"),
          "recv_like": (1, "src"), "recv_into": (1, "src"), "sendrecv": (1, "dst"), "probe": (0, "src"),
          "iprobe": (0, "src"), "send_obj": (1, "dst"), "recv_obj": (0, "src")}
_NOT_CALLS = ("ANY_SOURCE", "ANY_TAG", "Group", "Request", "Status", "init", "finalize", "is_available", "test_all",
              "test_any")


def _record_calls(trace):
    """When recording starts (commlib._trace.enable): the API's calls wrapped where they are looked up
    (its modules, this package, and `commlib` once it has loaded them), and Request.wait."""
    import sys
    namespaces = [collectives, p2p, objects, sys.modules[__name__]]
    if "commlib" in sys.modules:
        namespaces.append(sys.modules["commlib"])
    trace.install(namespaces, [name for name in __all__ if name not in _NOT_CALLS], _PEERS)
    trace.install_wait(Request)


_trace.register(_record_calls, world=lambda: lifecycle._world)
_trace.configure()  # COMMLIB_TRACE / COMMLIB_STATS: every call recorded (else nothing replaced: no cost at all)
