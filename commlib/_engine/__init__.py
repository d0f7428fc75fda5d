"""The engine layer: groups, the point-to-point matching engine, collective streams, requests.

It sits between the transport (which moves bytes) and the algorithms and API
(which decide what moves): `group.Group` and `group.Op` are what the
algorithms run on; `p2p.Engine` makes progress on point-to-point requests;
`streams.Stream` keeps each group's collectives in program order;
`requests` holds the Request handle and wait_all/wait_any/test_all/test_any;
`world` joins the job over the transport and closes it (the only wiring of a
transport above this package).
"""
from .group import Group, Op, Status
from .matching import ANY_SOURCE, ANY_TAG
from .p2p import EAGER_BYTES, Engine
from .requests import Request, test_all, test_any, wait_all, wait_any

__all__ = ["ANY_SOURCE", "ANY_TAG", "EAGER_BYTES", "Engine", "Group", "Op", "Request", "Status", "test_all",
           "test_any", "wait_all", "wait_any"]
