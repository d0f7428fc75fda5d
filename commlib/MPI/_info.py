"""`MPI.Info`: string hints as key/value pairs, with the Python mapping methods mpi4py gives them.

commlib takes no hints, so an Info only carries what the program puts in it (and INFO_ENV, the
start-up facts MPI defines). Handles made by `Info(info)` share one dictionary (`==`); `Dup` and
`copy` make a new one; a null Info (INFO_NULL, or a freed one) behaves as an empty read-only mapping
for the Python methods and raises ERR_INFO for the MPI ones.
"""
import os
import platform
import socket
import sys

from ._constants import ERR_ARG, ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, MPIException

_MAX_KEY = 255  # MPI_MAX_INFO_KEY


class Info:
    """An MPI info object."""

    __slots__ = ("_d", "__weakref__")

    def __new__(cls, info=None):
        if info is not None and not isinstance(info, Info):
            raise TypeError(f"expected an MPI.Info, got {type(info).__name__}")
        self = object.__new__(cls)
        self._d = None if info is None else info._d
        return self

    @classmethod
    def Create(cls, items=None):
        """A new info object, from a mapping or (key, value) pairs when given."""
        info = cls()
        info._d = {}
        if items is not None:
            if not isinstance(items, (dict, list, tuple)) and not hasattr(items, "keys"):
                raise TypeError(f"Info.Create: items must be a mapping or (key, value) pairs, "
                                f"got {type(items).__name__}")
            info.update(items)
        return info

    @classmethod
    def Create_env(cls, args=None):
        """An info object of the facts MPI_INFO_ENV holds, for a program started with args."""
        if args is None:
            args = sys.argv
        elif isinstance(args, str):
            args = [args]
        args = [str(a) for a in args]
        info = cls.Create()
        if args:
            info._d["command"] = args[0]
            if args[1:]:
                info._d["argv"] = " ".join(args[1:])
        from . import COMM_WORLD  # the world's size is the job's process count
        info._d.update({"maxprocs": str(COMM_WORLD.Get_size()), "host": socket.gethostname(),
                        "arch": platform.machine(), "wdir": os.getcwd(), "thread_level": "MPI_THREAD_MULTIPLE"})
        return info

    def _items(self, what):
        if self._d is None:
            raise MPIException(ERR_INFO, f"Info.{what}: operation on MPI.INFO_NULL")
        return self._d

    # ---------------------------------------------------------------- MPI methods
    def Set(self, key, value):
        items = self._items("Set")
        _check_key(key, "Set")
        if not isinstance(value, str):
            raise TypeError(f"Info.Set: the value must be a str, got {type(value).__name__}")
        items[key] = value

    def Get(self, key):
        """The value of key, or None when it is not set."""
        items = self._items("Get")
        _check_key(key, "Get")
        return items.get(key)

    def Delete(self, key):
        items = self._items("Delete")
        _check_key(key, "Delete")
        if key not in items:
            raise MPIException(ERR_INFO_NOKEY, f"Info.Delete: no key {key!r}")
        del items[key]

    def Get_nkeys(self):
        return len(self._items("Get_nkeys"))

    def Get_nthkey(self, n):
        keys = list(self._items("Get_nthkey"))
        if not 0 <= n < len(keys):
            raise MPIException(ERR_ARG, f"Info.Get_nthkey: {n} is not in 0..{len(keys) - 1}")
        return keys[n]

    def Dup(self):
        info = type(self)()
        info._d = dict(self._items("Dup"))
        return info

    def Free(self):
        self._items("Free")
        if self is INFO_ENV:
            raise MPIException(ERR_INFO, "Info.Free: MPI.INFO_ENV cannot be freed")
        self._d = None

    def free(self):
        """Free() made safe: nothing for INFO_NULL or INFO_ENV itself (a copy of INFO_ENV is only emptied)."""
        if self._d is None or self is INFO_ENV:
            return
        if self._d is INFO_ENV._d:
            self._d = None
            return
        self.Free()

    # ---------------------------------------------------------------- the mapping methods
    def __len__(self):
        return 0 if self._d is None else len(self._d)

    def __contains__(self, key):
        return self._d is not None and key in self._d

    def __iter__(self):
        return iter(list(self._d or ()))

    def __getitem__(self, key):
        if self._d is None or key not in self._d:
            raise KeyError(key)
        return self._d[key]

    def __setitem__(self, key, value):
        if self._d is None:
            raise KeyError(key)
        self.Set(key, value)

    def __delitem__(self, key):
        if self._d is None or key not in self._d:
            raise KeyError(key)
        del self._d[key]

    def get(self, key, default=None):
        return default if self._d is None else self._d.get(key, default)

    def keys(self):
        return list(self._d or ())

    def values(self):
        return list((self._d or {}).values())

    def items(self):
        return list((self._d or {}).items())

    def update(self, items=(), **kwds):
        if self._d is None:
            raise KeyError("update on MPI.INFO_NULL")
        pairs = items.items() if hasattr(items, "items") else items
        for k, v in list(pairs) + list(kwds.items()):
            self.Set(k, v)

    def pop(self, key, *default):
        if self._d is None or key not in self._d:
            if default:
                return default[0]
            raise KeyError(key)
        return self._d.pop(key)

    def popitem(self):
        if not self._d:
            raise KeyError("popitem(): the info object is empty")
        return self._d.popitem()

    def copy(self):
        return type(self)() if self._d is None else self.Dup()

    def clear(self):
        if self._d is not None:
            self._d.clear()

    # ---------------------------------------------------------------- handle behaviour
    def __bool__(self):
        return self._d is not None

    def __eq__(self, other):
        if not isinstance(other, Info):
            return NotImplemented
        return self._d is other._d

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __reduce__(self):
        if self is INFO_NULL or self is INFO_ENV:
            return (_predefined, ("INFO_NULL" if self is INFO_NULL else "INFO_ENV",))
        if self._d is None or self._d is INFO_ENV._d:
            return (_predefined_copy, (type(self), "INFO_NULL" if self._d is None else "INFO_ENV"))
        return (_rebuilt, (type(self), self.items()))

    def __repr__(self):
        return "<MPI.Info NULL>" if self._d is None else f"<MPI.Info {self._d!r}>"


def _check_key(key, what):
    if not isinstance(key, str):
        raise TypeError(f"Info.{what}: the key must be a str, got {type(key).__name__}")
    if not key or len(key) > _MAX_KEY:
        raise MPIException(ERR_INFO_KEY, f"Info.{what}: a key must have 1..{_MAX_KEY} characters")


def _predefined(name):
    return INFO_NULL if name == "INFO_NULL" else INFO_ENV


def _predefined_copy(cls, name):
    return cls(_predefined(name))


def _rebuilt(cls, items):
    return cls.Create(items)


INFO_NULL = Info()
INFO_ENV = Info()  # filled by `fill_env` once COMM_WORLD exists


def fill_env():
    INFO_ENV._d = Info.Create_env()._d
