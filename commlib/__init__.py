"""commlib: MPI-style collectives for Python over plain sockets.

The public names are exactly those of API.md, re-exported from the layers:
kernels (`_kernels`), wire (`_wire`), transport (`_transport/`), rendezvous
(`_rendezvous`), engine (`_engine/`), algorithms (`_algorithms/`) and the API
(`_api/`).
"""
try:
    from . import _kernels  # noqa: F401  (compiled extensions)
    from ._transport import _io  # noqa: F401
except ImportError as exc:  # pragma: no cover - only in an unbuilt checkout
    raise ImportError(
        "commlib's compiled extensions are missing; build them with `pip install .` "
        "(or `pip install -e .` / `python setup.py build_ext --inplace` for development)"
    ) from exc

from ._api import *  # noqa: F401,F403  (exactly the names of API.md)
from ._api import __all__ as _api_names
from ._dtypes import ReduceOp
from ._errors import AuthError, CommError, CommTimeout, MismatchError, PeerLost
from ._trace import stats

__version__ = "0.1.0"

__all__ = sorted(set(_api_names) | {"AuthError", "CommError", "CommTimeout", "MismatchError", "PeerLost",
                                     "ReduceOp", "stats"})
