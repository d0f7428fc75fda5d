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

_trace.configure()  # COMMLIB_TRACE / COMMLIB_STATS: every call recorded (else nothing replaced: no cost at all)
