"""Integer handles of MPI objects, as mpi4py exposes them: `obj.handle`, `Class.fromhandle(h)`,
`toint`/`fromint` and `py2f`/`f2py` (one int space here: there is no C or Fortran library behind).

An int names an object's state within this process: every copy of the same communicator, datatype,
request or message (`MPI.Comm(c)`, `MPI.Datatype(t)` ...) has the same handle, and `fromhandle`
gives back an object equal to it. A null object is 0. A handle once asked for keeps its state
reachable for the life of the process, as an MPI handle lives until freed.
"""
import itertools
import threading

_lock = threading.Lock()
_by_key = {}  # id(state key) -> (handle, key, an object of that state)
_by_handle = {}  # handle -> an object of that state
_next = itertools.count(0x44000001)


def handle_of(obj, key):
    """The handle of obj, whose state is identified by `key` (None: a null object, handle 0)."""
    if key is None:
        return 0
    with _lock:
        entry = _by_key.get(id(key))
        if entry is not None and entry[1] is key:
            return entry[0]
        h = next(_next)
        _by_key[id(key)] = (h, key, obj)
        _by_handle[h] = obj
        return h


def object_of(h, cls):
    """An object of the state handle h names (cls() for 0); ValueError for a handle never given out."""
    h = int(h)
    if h == 0:
        return cls()
    obj = _by_handle.get(h)
    if obj is None:
        raise ValueError(f"{cls.__name__}.fromhandle: no MPI object of this process has handle {h:#x}")
    if not isinstance(obj, cls) and not isinstance(cls(), type(obj)):
        raise TypeError(f"{cls.__name__}.fromhandle: handle {h:#x} is a {type(obj).__name__}")
    return obj


def null_reduce(obj, name, null):
    """__reduce__ of a handle class whose only picklable objects are its predefined ones: the constant
    itself unpickles to itself, a copy of it to a new handle of the copy's class; others cannot be
    pickled (they name state in this process)."""
    const = _constant(name)
    if obj is const:
        return (_constant, (name,))
    if null:
        return (_constant_copy, (type(obj), name))
    raise ValueError(f"cannot pickle {obj!r}: it names an object of this process")


def _constant(name):
    from .. import MPI
    return getattr(MPI, name)


def _constant_copy(cls, name):
    return cls(_constant(name))


def install(cls, key, copy):
    """Give cls the handle API: key(obj) names obj's state (None when null); copy(cls, obj) makes a
    new object of cls sharing obj's state."""
    cls.handle = property(lambda self: handle_of(self, key(self)))

    def fromhandle(klass, h):
        return copy(klass, object_of(h, klass))
    cls.fromhandle = classmethod(fromhandle)
    cls.toint = cls.py2f = lambda self: self.handle
    cls.fromint = cls.f2py = classmethod(fromhandle)
