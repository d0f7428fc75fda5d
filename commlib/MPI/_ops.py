"""MPI reduction operations: the predefined ones and `Op.Create` user functions.

An Op reduces Python objects (`op(x, y)`, x from the lower rank) and
buffers. Predefined ops that commlib's kernels implement (`kernel`) run as
commlib collectives; the others, and user functions, combine buffers in
NumPy (`combine(lower, acc)`: acc = lower op acc).
"""
import numpy as np

from ._constants import ERR_OP, MPIException


class Op:
    """An MPI reduction operation; callable on objects as op(x, y)."""

    __slots__ = ("_name", "_obj", "_buf", "_kernel", "_commute", "_predefined", "_user", "__weakref__")

    def __new__(cls, op=None):
        if op is not None and not isinstance(op, Op):
            raise TypeError(f"expected an MPI.Op, got {type(op).__name__}")
        self = object.__new__(cls)
        if op is None:
            self._set("MPI_OP_NULL", None, None, None, True, True, None)
        else:
            self._set(op._name, op._obj, op._buf, op._kernel, op._commute, op._predefined, op._user)
        return self

    def _set(self, name, obj, buf, kernel, commute, predefined, user):
        self._name, self._obj, self._buf, self._kernel = name, obj, buf, kernel
        self._commute, self._predefined, self._user = commute, predefined, user

    @classmethod
    def Create(cls, function, commute=False):
        """A user op: function(x, y) on objects; function(inbuf, inoutbuf, datatype) on buffers."""
        if not callable(function):
            raise TypeError("Op.Create needs a callable")
        op = object.__new__(cls)
        op._set(f"user op {getattr(function, '__name__', 'function')}", lambda x, y: function(x, y, None), None,
                None, bool(commute), False, function)
        return op

    def __call__(self, x, y):
        """x op y on Python objects (a user function gets (x, y, None), as in mpi4py)."""
        if self._obj is None:
            raise ValueError("MPI.OP_NULL cannot be applied")
        return self._obj(x, y)

    def __reduce__(self):
        if self._predefined:
            return (_restore, (self._name[4:], self is _named(self._name[4:]), type(self)))
        return (Op.Create, (self._user, self._commute))

    def Is_commutative(self):
        return self._commute

    is_commutative = property(Is_commutative)

    @property
    def is_predefined(self):
        return self._predefined

    def Free(self):
        if self._predefined:
            raise MPIException(ERR_OP, f"cannot free the predefined op {self._name}")
        self._set("MPI_OP_NULL", None, None, None, True, True, None)

    def free(self):
        """Free() made safe: nothing for OP_NULL or a predefined op (a copy of one is only emptied)."""
        if self._obj is None and self._name == "MPI_OP_NULL" or self._predefined and self is _named(self._name[4:]):
            return
        if self._predefined:
            self._set("MPI_OP_NULL", None, None, None, True, True, None)
            return
        self.Free()

    def Get_name(self):
        return self._name

    def Reduce_local(self, inbuf, inoutbuf):
        """inoutbuf = inbuf op inoutbuf, elementwise, on this rank."""
        from ._bufspec import parse_recv, parse_send  # the buffer parser sits above this module

        src = parse_send(inbuf)
        dst = parse_recv(inoutbuf)
        if src.count != dst.count or src.datatype._base != dst.datatype._base:
            raise ValueError(f"Reduce_local: mismatched buffers ({src.count} {src.datatype.Get_name()} vs "
                             f"{dst.count} {dst.datatype.Get_name()})")
        self.combine(src.array, dst.array, dst.datatype)

    def combine(self, lower, acc, datatype):
        """acc[...] = lower op acc (typed flat arrays of equal length)."""
        if self._user is not None:
            self._user(memoryview(lower), memoryview(acc), datatype)
            return
        if self._buf is None:
            raise MPIException(ERR_OP, f"{self._name} cannot reduce buffers")
        self._buf(lower, acc)

    def __eq__(self, other):
        if not isinstance(other, Op):
            return NotImplemented
        return self is other or (self._name == other._name and self._user is other._user and self._obj is other._obj)

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __bool__(self):
        return self._obj is not None

    def __repr__(self):
        return f"<MPI.Op {self._name}>"


def _logical(fn):
    def buf(lower, acc):
        r = fn(lower != 0, acc != 0)
        acc[...] = r
    return buf


def _numpy(ufunc):
    def buf(lower, acc):
        ufunc(lower, acc, out=acc)
    return buf


def _bool_safe(ufunc, logical):
    """ufunc on numbers; on bool arrays the logical op numpy would pick anyway."""
    def buf(lower, acc):
        if acc.dtype == np.bool_:
            logical(lower, acc, out=acc)
        else:
            ufunc(lower, acc, out=acc)
    return buf


def _replace(lower, acc):  # (x, y) -> y: acc (the higher rank's) stays
    return None


def _no_op(lower, acc):  # (x, y) -> x
    acc[...] = lower


def _maxloc(x, y):
    (a, i), (b, j) = x, y
    if b > a or (b == a and j < i):
        return y
    return x


def _minloc(x, y):
    (a, i), (b, j) = x, y
    if b < a or (b == a and j < i):
        return y
    return x


def _predefined(name, obj, buf, kernel):
    op = object.__new__(Op)
    op._set(f"MPI_{name}", obj, buf, kernel, True, True, None)
    return op


OP_NULL = Op()
MAX = _predefined("MAX", lambda x, y: y if y > x else x, _bool_safe(np.maximum, np.logical_or), "max")
MIN = _predefined("MIN", lambda x, y: y if y < x else x, _bool_safe(np.minimum, np.logical_and), "min")
SUM = _predefined("SUM", lambda x, y: x + y, _bool_safe(np.add, np.logical_or), "sum")
PROD = _predefined("PROD", lambda x, y: x * y, _bool_safe(np.multiply, np.logical_and), "prod")
LAND = _predefined("LAND", lambda x, y: bool(x) and bool(y), _logical(np.logical_and), "land")
LOR = _predefined("LOR", lambda x, y: bool(x) or bool(y), _logical(np.logical_or), "lor")
LXOR = _predefined("LXOR", lambda x, y: bool(x) != bool(y), _logical(np.logical_xor), None)
BAND = _predefined("BAND", lambda x, y: x & y, _numpy(np.bitwise_and), "band")
BOR = _predefined("BOR", lambda x, y: x | y, _numpy(np.bitwise_or), "bor")
BXOR = _predefined("BXOR", lambda x, y: x ^ y, _numpy(np.bitwise_xor), "bxor")
MAXLOC = _predefined("MAXLOC", _maxloc, None, None)
MINLOC = _predefined("MINLOC", _minloc, None, None)
REPLACE = _predefined("REPLACE", lambda x, y: y, _replace, None)
NO_OP = _predefined("NO_OP", lambda x, y: x, _no_op, None)


def _named(name):
    from .. import MPI
    return getattr(MPI, name)


def _restore(name, same, cls=None):
    """A predefined op unpickles to itself, a copy of its handle to a new equal handle (of its class)."""
    return _named(name) if same else (cls or Op)(_named(name))
