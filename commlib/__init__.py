"""commlib: MPI-style collectives for Python over plain sockets.

The public names are exactly those of API.md, re-exported from the layers:
kernels (`_kernels`), wire (`_wire`), transport (`_transport/`), rendezvous
(`_rendezvous`), engine (`_engine/`), algorithms (`_algorithms/`) and the API
(`_api/`).
"""


def _unbuilt(exc):
    """The ImportError of a commlib without its compiled extensions: an unbuilt source checkout
    that shadows an installed commlib (python run from the checkout's root) is named as such."""
    import importlib.machinery
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    outside = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(here)]
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                spec = finder.find_spec(__name__, outside)
            else:
                spec = finder.find_spec(__name__, None)
        except Exception:  # a third-party finder that cannot answer: it found nothing for us
            spec = None
        origin = spec.origin if spec is not None else None
        if origin and os.path.dirname(os.path.abspath(origin)) != here:
            return ImportError(
                f"this commlib is an unbuilt source checkout ({here}), imported because its directory comes "
                f"first on sys.path (the current directory, or the script's), and it shadows the installed "
                f"commlib ({os.path.dirname(origin)}): run from another directory, or build the checkout in "
                f"place with `python setup.py build_ext --inplace` (missing: {exc})")
    return ImportError("commlib's compiled extensions are missing; build them with `pip install .` "
                       f"(or `pip install -e .` / `python setup.py build_ext --inplace` for development): {exc}")


import importlib.util as _util

try:  # built? (a look for the extension's file: loading it, and NumPy, waits for the first public name)
    _built = _util.find_spec(__name__ + "._kernels") is not None
except ImportError:
    _built = False
if not _built:
    raise _unbuilt("no module named 'commlib._kernels'")

__version__ = "0.1.0"

# The public names (exactly those of API.md) load the layers on first use (PEP 562): a program's
# first `cl.init()`, or `from commlib import *`, imports them all; commrun, which imports commlib's
# host and rendezvous modules, never loads NumPy, the kernels or the step loop for them.
_NAMES = ("AuthError", "CommError", "CommTimeout", "MismatchError", "PeerLost", "ReduceOp", "stats")


def _load():
    g = globals()
    if "__all__" in g:  # loaded (a name asked for that is not there, e.g. hasattr(commlib, "MPI"))
        return g
    try:
        from . import _kernels  # noqa: F401  (compiled extensions)
        from ._transport import _io  # noqa: F401
    except ImportError as exc:
        raise _unbuilt(exc) from exc
    from . import _api
    from ._dtypes import ReduceOp
    from ._errors import AuthError, CommError, CommTimeout, MismatchError, PeerLost
    from ._api.stats import stats
    api = vars(_api)  # (as tracing left them: it wraps the calls where they are looked up)
    for name in _api.__all__:
        g.setdefault(name, api[name])
    for name, value in zip(_NAMES, (AuthError, CommError, CommTimeout, MismatchError, PeerLost, ReduceOp, stats)):
        g.setdefault(name, value)
    g["__all__"] = sorted(set(_api.__all__) | set(_NAMES))
    return g


def __getattr__(name):
    if name == "__all__" or not name.startswith("_"):
        g = _load()
        if name in g:
            return g[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_load()["__all__"]))
