"""`from commlib import MPI`: the part of mpi4py's `MPI` module that real scripts use, over commlib.

Change `from mpi4py import MPI` to `from commlib import MPI`, run under
`commrun -n N`, and the program behaves as it does under mpirun; no MPI
library is needed. The semantics are those of mpi4py 4.1 on MPICH
(`python -m commlib.MPI` lists what is covered); importing initialises, as
mpi4py does by default. Outside a launcher COMM_WORLD is a
size-1 singleton.

This is a front-end: parsing of mpi4py's message arguments (`_bufspec`), datatypes,
ops, requests and communicators, over commlib's groups, engine and
collectives. `python -m commlib.MPI --version` says what it provides.
"""
import threading as _threading
import time as _time

from .. import __version__ as _version
from .. import _trace
from .._api import finalize as _finalize
from ._comm import (Cartcomm, Comm, Distgraphcomm, Graphcomm, Intracomm, Topocomm, comm_class as _comm_class,
                    processor_name as _processor_name, world_comms)
from ._intercomm import Intercomm
from . import _spawn  # noqa: F401  (Comm.Spawn, Spawn_multiple and Get_parent are its)
from ._bufspec import address as _address
from ._buffer import buffer
from ._groups import Group
from ._info import INFO_ENV, INFO_NULL, Info, fill_env as _fill_env
from ._message import MESSAGE_NO_PROC, MESSAGE_NULL, Message
from ._topology import UNWEIGHTED, WEIGHTS_EMPTY, Compute_dims
from ._p2p import PICKLE, Pickle
from ._constants import *  # noqa: F401,F403
from ._constants import MPIException, THREAD_MULTIPLE
from ._attributes import (ERRHANDLER_NULL, ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Add_error_class,
                          Add_error_code, Add_error_string, Errhandler, Remove_error_class, Remove_error_code,
                          Remove_error_string, guard_class as _guard_class, on_first_handler as _on_first_handler)
import inspect as _inspect

from ._datatypes import (DATATYPE_NULL, NAMED as _NAMED, _PAIR_ALIASES, _PAIRS, Datatype,
                         on_derived as _on_derived, pair_type as _pair_type)
from ._ops import (BAND, BOR, BXOR, LAND, LOR, LXOR, MAX, MAXLOC, MIN, MINLOC, NO_OP, OP_NULL, PROD, REPLACE, SUM,
                   Op)
from ._requests import Prequest, Request, Status
from ._grequest import Grequest

Exception = MPIException  # noqa: A001  (mpi4py's name: MPI.Exception)

globals().update(_NAMED)  # MPI.DOUBLE, MPI.INT, MPI.BYTE, ...


def __getattr__(name):
    """MPI.FLOAT_INT, MPI.DOUBLE_INT ...: the value-index pair types, made on first use."""
    if name in _PAIRS or name in _PAIR_ALIASES:
        return _pair_type(name)
    raise AttributeError(f"module 'commlib.MPI' has no attribute {name!r}")

COMM_WORLD, COMM_SELF = world_comms()
_fill_env()
COMM_NULL = Intracomm()
COMM_NULL._c.name = "MPI_COMM_NULL"
REQUEST_NULL = Request()
GROUP_NULL = Group()
GROUP_EMPTY = Group._of((), None)

_finalized = False


# ------------------------------------------------------------------ environment
def Init():
    """Already initialised at import (as mpi4py by default): nothing to do."""


def Init_thread(required=THREAD_MULTIPLE):
    return THREAD_MULTIPLE


def Finalize():
    """Leave the job (flush, compare collectives with every rank, close); atexit does it otherwise."""
    global _finalized
    if not _finalized:
        _finalized = True
        _finalize()


def Is_initialized():
    return True


def Is_finalized():
    return _finalized


def Query_thread():
    """THREAD_MULTIPLE: point-to-point calls are safe from any thread; each communicator's collectives
    run in program order (calling them from several threads at once is erroneous, as in MPI)."""
    return THREAD_MULTIPLE


def Is_thread_main():
    return _threading.current_thread() is _threading.main_thread()


def Get_version():
    """The MPI standard version whose API this follows: 4.1 (MPI-IO and sessions are not provided)."""
    return (4, 1)


def Get_library_version():
    return f"commlib {_version} (shared memory and sockets; no MPI library)"


def get_vendor():
    return ("commlib", tuple(int(x) for x in _version.split(".")[:3]))


def Get_abi_version():
    return (-1, -1)


def Get_abi_info():
    """The sizes of MPI's integer types here (MPI-5's MPI_Abi_get_info)."""
    return Info.Create({f"mpi_{t.lower()}_size": str(_NAMED[t].Get_size()) for t in ("AINT", "COUNT", "OFFSET")})


def Get_abi_fortran_info():
    """MPI.INFO_NULL: there is no Fortran binding behind commlib.MPI."""
    return INFO_NULL


def Get_processor_name():
    return _processor_name()


def Wtime():
    return _time.perf_counter()


def Wtick():
    return _time.get_clock_info("perf_counter").resolution


def Pcontrol(level):
    return None


def Get_error_class(errorcode):
    """The error class of an error code (a predefined class is its own)."""
    return MPIException(int(errorcode)).Get_error_class()


def Get_error_string(errorcode):
    return MPIException(int(errorcode)).Get_error_string()


def _lifecycle_abort(code, why):
    """ERRORS_ARE_FATAL / ERRORS_ABORT: report and stop the job with the error code (as MPI_Abort)."""
    from .._api import lifecycle
    lifecycle.abort(int(code) or 1, why)


def Attach_buffer(buf):
    """Attach a buffer for buffered sends (commlib's sends never need one: it is kept and given back)."""
    global _attached
    if buf is not None and buf is not BUFFER_AUTOMATIC:
        try:
            writable = not buf.readonly if isinstance(buf, buffer) else not buffer.frombuffer(buf).readonly
        except BufferError:
            writable = False
        if not writable:
            raise BufferError("MPI.Attach_buffer: the buffer is read-only")
    _attached = buf


def Detach_buffer():
    global _attached
    buf, _attached = _attached, None
    return buf


def Flush_buffer():
    """Wait for buffered sends: commlib's Bsend completes as Send does, so none is ever pending."""


def Iflush_buffer():
    """Flush_buffer as a request (complete at once: no buffered send is ever pending)."""
    return Request._completed()


_attached = None


def Alloc_mem(size, info=None):
    """A new MPI.buffer of `size` bytes (free it with MPI.Free_mem)."""
    return buffer.allocate(size)


def Free_mem(mem):
    """Release an MPI.buffer from MPI.Alloc_mem."""
    if isinstance(mem, buffer):
        mem.release()


def _not_provided(what):
    def fail(*args, **kwargs):
        raise NotImplementedError(f"{what} is not provided by commlib.MPI (see the README's mpi4py section)")
    return fail




def _guard_all():
    """The first error handler other than ERRORS_RETURN was set: from now on every MPI object's methods
    pass their errors through the object's handler (_attributes.dispatch)."""
    for cls in (Comm, Intracomm, Topocomm, Cartcomm, Graphcomm, Distgraphcomm, Intercomm, Win):
        _guard_class(cls)


_on_first_handler(_guard_all)
for _name in ("Accept", "Connect", "Join"):
    setattr(Comm, _name, _not_provided(f"Comm.{_name}"))


class _OutOfScope:
    """A class of mpi4py's whose objects commlib does not make (MPI-IO files, sessions): only its null
    handle exists (FILE_NULL; `MPI.File()` is one, as in mpi4py), and making a real one raises
    NotImplementedError, on which mpi4py's own tests skip."""

    __slots__ = ("__weakref__",)
    _what = "this class"

    def __new__(cls, other=None):
        if other is not None and not isinstance(other, cls._base):
            raise TypeError(f"expected an MPI.{cls._base.__name__}, got {type(other).__name__}")
        return object.__new__(cls)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_what" in vars(cls):  # File and Session themselves, not a program's subclass of them
            cls._base = cls
            for name in ("Open", "Init", "Start", "Create_from_groups", "Delete", "Get_num_psets",
                         "Get_nth_pset"):
                setattr(cls, name, staticmethod(_not_provided(f"{cls._what}.{name}")))

    def Free(self):
        raise MPIException(self._null_error, f"{self._base.__name__}.Free: operation on a null object")

    def free(self):
        """Nothing to free: every object of this class is null."""

    def __bool__(self):
        return False

    def __eq__(self, other):
        return isinstance(other, self._base) if isinstance(other, _OutOfScope) else NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __reduce__(self):
        if self is globals().get(f"{self._base.__name__.upper()}_NULL"):
            return (_builtin_null, (f"{self._base.__name__.upper()}_NULL",))
        return (type(self), ())


def _builtin_null(name):
    return globals()[name]


from ._win import CONSTANTS as _WIN_CONSTANTS, WIN_NULL, Win  # noqa: E402  (one-sided communication)

globals().update(_WIN_CONSTANTS)  # WIN_BASE ..., WIN_FLAVOR_*, WIN_SEPARATE/UNIFIED, MODE_NO*, LOCK_*, ERR_RMA_*


class File(_OutOfScope):
    __slots__ = ()
    _what, _null_error = "MPI.File (MPI-IO)", ERR_FILE


class Session(_OutOfScope):
    __slots__ = ()
    _what, _null_error = "MPI.Session (MPI-4 sessions)", ERR_SESSION


FILE_NULL, SESSION_NULL = File(), Session()
BUFFER_AUTOMATIC = None


def Get_address(location):
    """The address of `location`'s memory (a buffer; None or MPI.BOTTOM: MPI.BOTTOM)."""
    return _address(location)


def Aint_add(base, disp):
    """base + disp, as MPI_Aint_add."""
    return int(base) + int(disp)


def Aint_diff(addr1, addr2):
    """addr1 - addr2, as MPI_Aint_diff."""
    return int(addr1) - int(addr2)


Open_port = Close_port = Publish_name = Unpublish_name = Lookup_name = _not_provided("MPI ports (dynamic processes)")
def Get_hw_resource_info():
    """What MPI knows of this process's hardware (MPI-4.1): the host and its processors."""
    import os
    import platform
    info = Info.Create()
    info.update({"mpi_hw_resource_type": "mpi_shared_memory", "host": _processor_name(), "arch": platform.machine(),
                 "cpu_count": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())})
    return info
memory = buffer


pickle = PICKLE  # the serialiser object messages use: replace its dumps/loads to change it


def _install_unpacking():
    """Once a derived datatype that is packed exists, every buffer method runs under `unpacking`, so
    that a receive into one is written back to the caller's memory when the call (or request)
    completes. Programs that never make one never pay for the wrapper."""
    from ._bufspec import unpacking
    classes = [Comm, Intracomm, Topocomm, Cartcomm, Graphcomm, Distgraphcomm, Intercomm, Message, Op]
    for cls in classes:
        for name, fn in list(vars(cls).items()):
            if name[:1].isupper() and _inspect.isfunction(fn) and not getattr(fn, "_unpacking", False):
                setattr(cls, name, unpacking(fn))


_on_derived(_install_unpacking)


_typedict = {c: Datatype.fromcode(c) for c in "?cbhilqBHILQefdFD"}
_typedict_c = dict(_typedict)
_typedict_f = {"l": _NAMED["LOGICAL"], "i": _NAMED["INTEGER"], "r": _NAMED["REAL"], "s": _NAMED["REAL"],
               "d": _NAMED["DOUBLE_PRECISION"], "c": _NAMED["COMPLEX"], "z": _NAMED["DOUBLE_COMPLEX"]}


def _typecode(datatype):
    """The typecode character of a datatype of one basic type (None for others), as mpi4py's."""
    if datatype._base is None or datatype._mixed:
        return None
    for code, dt in _typedict.items():
        if dt._base == datatype._base and datatype.size == dt.size:
            return code
    return None


def _typealign(datatype):
    """The alignment of a datatype of one basic type or a value-index pair, as mpi4py's (None for
    other structs)."""
    if datatype._base is None:
        return None
    if datatype._mixed:
        if not datatype.is_predefined:
            return None
        from ._datatypes import NAMED, _PAIRS
        v, i = _PAIRS[datatype.Get_name()[4:]]
        return max(_typealign(NAMED[v]), _typealign(NAMED[i]))
    return datatype._base.alignment


_HANDLE_CLASSES = (Comm, Group, Op, Request, Info, Errhandler, Message, Datatype, Win, File, Session)


def _sizeof(obj):
    """The size in bytes of an MPI handle (a C int, as MPICH's) or of a Status (MPI_Status: five ints)."""
    cls = obj if isinstance(obj, type) else type(obj)
    if issubclass(cls, Status):
        return 20
    if issubclass(cls, _HANDLE_CLASSES):
        return 4
    raise TypeError(f"_sizeof: expected an MPI handle or its class, got {type(obj).__name__}")


def _addressof(obj):
    """Where the handle lives (this process's address of the object: there is no C handle behind it)."""
    if not isinstance(obj, _HANDLE_CLASSES + (Status,)):
        raise TypeError(f"_addressof: expected an MPI handle, got {type(obj).__name__}")
    return id(obj)


def _handleof(obj):
    """The integer handle of an MPI object (a Status has none: 0)."""
    if isinstance(obj, Status):
        return 0
    if not isinstance(obj, _HANDLE_CLASSES):
        raise TypeError(f"_handleof: expected an MPI handle, got {type(obj).__name__}")
    return obj.handle


def _install_handles():
    from ._handles import install
    from ._comm import _NULL

    install(Comm, lambda c: None if c._c is _NULL else c._c,
            lambda cls, o: _comm_class(o._c)._of(o._c) if o._c is not _NULL else cls())
    install(Datatype, lambda t: None if t._base is None else (t if t._combiner == COMBINER_NAMED else t._lay),
            lambda cls, o: o if o._predefined else cls(o))
    install(Op, lambda o: o if o else None, lambda cls, o: o if o.is_predefined else cls(o))
    install(Request, lambda r: r._persist if r._persist is not None else r._r, lambda cls, o: cls(o))
    install(Message, lambda m: m._msg, lambda cls, o: cls(o))
    install(Group, lambda g: g._ranks, lambda cls, o: cls(o))
    install(Info, lambda i: i._d, lambda cls, o: cls(o))
    install(Errhandler, lambda e: e._h if e else None, lambda cls, o: cls(o))
    install(File, lambda f: None, lambda cls, o: cls())
    install(Session, lambda s: None, lambda cls, o: cls())


_install_handles()

# What tracing records of commlib.MPI (COMMLIB_TRACE): each communicator class's communication methods,
# as "MPI.<name>", with where the peer is among the arguments (self first) of the point-to-point ones.
_TRACED_PEERS = {name: (2, "dest") for name in ("Send", "Ssend", "Bsend", "Rsend", "Isend", "Issend", "Sendrecv",
                                                  "send", "ssend", "isend", "issend", "sendrecv")}
_TRACED_PEERS.update({name: (2, "source") for name in ("Recv", "Irecv", "recv", "irecv")})
_TRACED_PEERS.update({name: (1, "source") for name in ("Probe", "Iprobe", "probe", "iprobe")})
_TRACED_COLLECTIVES = (
    "Barrier", "Ibarrier", "Bcast", "Ibcast", "Allreduce", "Iallreduce", "Reduce", "Ireduce", "Scan", "Iscan",
    "Exscan", "Iexscan", "Gather", "Igather", "Scatter", "Iscatter", "Allgather", "Iallgather", "Alltoall",
    "Ialltoall", "Gatherv", "Igatherv", "Scatterv", "Iscatterv", "Allgatherv", "Iallgatherv", "Alltoallv",
    "Ialltoallv", "Alltoallw", "Ialltoallw", "Reduce_scatter", "Reduce_scatter_block", "Neighbor_allgather",
    "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw", "barrier", "bcast",
    "gather", "scatter", "allgather", "alltoall", "reduce", "allreduce", "scan", "exscan")


def _comm_group(args, kwargs):
    c = getattr(args[0], "_c", None) if args else None
    return getattr(c, "g", None)


_trace.register(lambda trace: trace.install_methods(Comm, _TRACED_COLLECTIVES + tuple(_TRACED_PEERS),
                                                    _TRACED_PEERS, "MPI.", _comm_group))
