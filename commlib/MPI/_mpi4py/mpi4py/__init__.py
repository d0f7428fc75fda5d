"""A stand-in `mpi4py` whose `MPI` is `commlib.MPI`, for programs and libraries that import mpi4py.

It is importable only where asked for: `commrun --mpi4py ...` puts its directory first on the ranks'
PYTHONPATH, and `python -m commlib.MPI --path` prints that directory for other launchers (srun,
torchrun, a batch script). A real mpi4py installed next to it is then shadowed, by request.

What mpi4py's top level has: `__version__` (the mpi4py API level commlib.MPI follows), `rc`,
`get_config`, `MPI`; `python -m mpi4py` (this package's `run`). `get_include` and `profile` concern
mpi4py's C library and raise. `mpi4py.futures` and `mpi4py.util` are not provided yet: importing
them is an ImportError that says so.
"""
import sys

from commlib import MPI, __version__ as _commlib_version

__version__ = "4.1.2"  # the mpi4py API level of commlib.MPI
__author__ = "commlib (stand-in for mpi4py)"
STANDIN = True  # this is commlib's stand-in, not mpi4py

sys.modules[__name__ + ".MPI"] = MPI


class _RC:
    """mpi4py.rc: runtime settings read when MPI initialises. commlib initialises on first use with
    full thread support and raises exceptions on errors, so the settings are kept but change nothing."""

    _KEYS = ("initialize", "threads", "thread_level", "finalize", "fast_reduce", "recv_mprobe", "irecv_bufsz",
             "errors")

    def __init__(self, **kwargs):
        d = self.__dict__
        d.update(initialize=True, threads=True, thread_level="multiple", finalize=None, fast_reduce=True,
                 recv_mprobe=True, irecv_bufsz=32768, errors="exception")
        self(**kwargs)

    def __call__(self, **kwargs):
        for key, value in kwargs.items():
            setattr(self, key, value)

    def __setattr__(self, key, value):
        if key not in self._KEYS:
            raise TypeError(f"mpi4py.rc: unexpected argument {key!r}")
        self.__dict__[key] = value

    def __getattr__(self, key):  # only for names that are not settings
        raise AttributeError(f"mpi4py.rc has no setting {key!r}")

    def __repr__(self):
        return f"<mpi4py.rc (commlib stand-in): {self.__dict__}>"


rc = _RC()
sys.modules[__name__ + ".rc"] = rc  # `import mpi4py.rc` gives the settings object, as in mpi4py


def get_config():
    """Build configuration: commlib needs no MPI library, so there is no mpicc to name."""
    return {"commlib": _commlib_version}


def get_include():
    raise RuntimeError("commlib's stand-in mpi4py has no C headers (it is not built against an MPI library); "
                       "build C extensions against a real mpi4py")


def profile(name, *, path=None):
    raise RuntimeError(f"mpi4py.profile({name!r}): commlib's stand-in loads no MPI profiling library")


__all__ = ["MPI", "rc", "get_config", "get_include", "profile", "__version__"]
