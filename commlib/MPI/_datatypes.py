"""MPI datatypes: predefined names, typecode strings, buffer formats, `Create_contiguous`.

A Datatype is a NumPy base dtype repeated `mult` times (1 for the predefined
types, n for `Create_contiguous(n)`): a message of `count` elements of it is
`count * mult` elements of the base dtype, which is how commlib's kernels
see it. Types commlib cannot carry (long double) are `DATATYPE_NULL`.
"""
import sys

import numpy as np

from .._dtypes import DT_BYTES, dtype_code
from ._constants import ERR_TYPE, MPIException


class Datatype:
    """An MPI datatype handle (`MPI.DOUBLE`, `MPI.Datatype.fromcode("d")`, derived types)."""

    __slots__ = ("_base", "_mult", "_name", "_code", "_predefined", "_wire")

    def __new__(cls, datatype=None):
        self = object.__new__(cls)
        if datatype is None:
            self._set(None, 0, "MPI_DATATYPE_NULL", None, True)
        else:
            self._set(datatype._base, datatype._mult, datatype._name, datatype._code, datatype._predefined)
        return self

    def _set(self, base, mult, name, code, predefined):
        self._base, self._mult, self._name, self._code, self._predefined = base, mult, name, code, predefined
        self._wire = DT_BYTES if base is None or base == np.uint8 else dtype_code(base)

    # ------------------------------------------------------------ queries
    def _require(self):
        if self._base is None:
            raise MPIException(ERR_TYPE, "MPI.DATATYPE_NULL is not a datatype that can be used here")

    def Get_size(self):
        self._require()
        return self._base.itemsize * self._mult

    size = property(Get_size)

    def Get_extent(self):
        return 0, self.Get_size()

    def Get_true_extent(self):
        return 0, self.Get_size()

    extent = property(lambda self: self.Get_size())
    true_extent = extent
    lb = property(lambda self: 0)
    ub = extent
    true_lb = lb
    true_ub = extent

    def Get_name(self):
        return self._name

    def Set_name(self, name):
        self._name = str(name)

    name = property(Get_name, Set_name)

    @property
    def is_predefined(self):
        return self._predefined

    @property
    def is_named(self):
        return self._predefined and self._base is not None

    def tocode(self):
        """The typecode string of a predefined type ("d" for MPI.DOUBLE)."""
        if self._code is None:
            raise ValueError(f"{self._name} has no typecode")
        return self._code

    @classmethod
    def fromcode(cls, code):
        """The predefined datatype of a typecode string: Datatype.fromcode("i") is MPI.INT."""
        dt = _BY_CODE.get(code) if isinstance(code, str) else None
        if dt is None:
            raise ValueError(f"cannot map typecode {code!r} to an MPI datatype")
        return dt

    typestr = property(lambda self: self._base.str if self._mult == 1 else f"{self._mult}{self._base.str}")

    # ------------------------------------------------------------ life cycle
    def Commit(self):
        self._require()
        return self

    def Dup(self):
        self._require()
        dup = Datatype(self)
        dup._predefined = False
        return dup

    def Free(self):
        if self._predefined:
            raise MPIException(ERR_TYPE, f"cannot free the predefined datatype {self._name}")
        self._set(None, 0, "MPI_DATATYPE_NULL", None, True)

    def Create_contiguous(self, count):
        """count consecutive elements of this type, as one element."""
        self._require()
        if int(count) < 0:
            raise MPIException(ERR_TYPE, f"Create_contiguous: count must be >= 0, got {count}")
        dt = Datatype(self)
        dt._mult, dt._predefined, dt._code = self._mult * int(count), False, None
        dt._name = f"contiguous({count}, {self._name})"
        return dt

    # ------------------------------------------------------------ comparison
    def __eq__(self, other):
        if not isinstance(other, Datatype):
            return NotImplemented
        if self._base is None or other._base is None:
            return self._base is None and other._base is None
        return self is other or (self._name == other._name and self._base == other._base
                                 and self._mult == other._mult)

    def __hash__(self):
        return hash((self._name, self._mult))

    def __bool__(self):
        return self._base is not None

    def __repr__(self):
        return f"<MPI.Datatype {self._name}>"

    def __reduce__(self):
        if self._predefined:
            return (_restore, (self._name[4:],))
        raise ValueError(f"cannot pickle the derived datatype {self._name}")


def _restore(name):
    from .. import MPI  # predefined handles unpickle to the very same object
    return getattr(MPI, name)


def _derived_not_provided(name):
    def fail(self, *args, **kwargs):
        raise NotImplementedError(f"Datatype.{name}: derived datatypes beyond Create_contiguous are not provided "
                                  f"by commlib.MPI (slice and copy with NumPy instead)")
    fail.__name__ = name
    return fail


for _name in ("Create_vector", "Create_hvector", "Create_indexed", "Create_hindexed", "Create_indexed_block",
              "Create_hindexed_block", "Create_struct", "Create_subarray", "Create_darray", "Create_resized",
              "Create_f90_integer", "Create_f90_real", "Create_f90_complex", "Get_envelope", "decode", "Pack",
              "Unpack", "Pack_size", "Pack_external", "Unpack_external", "Pack_external_size", "Match_size"):
    setattr(Datatype, _name, _derived_not_provided(_name))


def _predefined(name, np_name, code=None):
    dt = object.__new__(Datatype)
    dt._set(None if np_name is None else np.dtype(np_name), 1 if np_name else 0, name, code, True)
    return dt


DATATYPE_NULL = _predefined("MPI_DATATYPE_NULL", None)
_TABLE = [  # name, numpy dtype, typecode (None: an alias, found by name only)
    ("UNSIGNED_CHAR", "uint8", "B"), ("BYTE", "uint8", "B"), ("CHAR", "int8", "c"), ("SIGNED_CHAR", "int8", "b"),
    ("C_BOOL", "bool", "?"), ("SHORT", "int16", "h"),
    ("UNSIGNED_SHORT", "uint16", "H"), ("INT", "int32", "i"), ("UNSIGNED", "uint32", "I"),
    ("LONG", "int64", "l"), ("UNSIGNED_LONG", "uint64", "L"), ("LONG_LONG", "int64", "q"),
    ("UNSIGNED_LONG_LONG", "uint64", "Q"), ("FLOAT", "float32", "f"), ("DOUBLE", "float64", "d"),
    ("C_FLOAT_COMPLEX", "complex64", "F"), ("C_DOUBLE_COMPLEX", "complex128", "D"),
    ("INT8_T", "int8", "i1"), ("INT16_T", "int16", "i2"), ("INT32_T", "int32", "i4"), ("INT64_T", "int64", "i8"),
    ("UINT8_T", "uint8", "u1"), ("UINT16_T", "uint16", "u2"), ("UINT32_T", "uint32", "u4"),
    ("UINT64_T", "uint64", "u8"), ("WCHAR", "uint32", None), ("BOOL", "bool", None),
    ("CXX_BOOL", "bool", None), ("COMPLEX", "complex64", None), ("DOUBLE_COMPLEX", "complex128", None),
    ("C_COMPLEX", "complex64", None), ("CXX_FLOAT_COMPLEX", "complex64", None),
    ("CXX_DOUBLE_COMPLEX", "complex128", None), ("LOGICAL", "int32", None), ("INTEGER", "int32", None),
    ("REAL", "float32", None), ("DOUBLE_PRECISION", "float64", None), ("AINT", "int64", None),
    ("OFFSET", "int64", None), ("COUNT", "int64", None), ("PACKED", "uint8", None),
    ("SIGNED_SHORT", "int16", None), ("SIGNED_INT", "int32", None), ("SIGNED_LONG", "int64", None),
    ("SIGNED_LONG_LONG", "int64", None), ("UNSIGNED_INT", "uint32", None),
    ("FLOAT16_T", "float16", "e"),  # no MPI-3.1 name; commlib carries it (float16 buffers)
]
NAMED = {}
_BY_CODE = {}
for _name, _np, _code in _TABLE:
    NAMED[_name] = _predefined(f"MPI_{_name}", _np, _code)
    if _code is not None:
        _BY_CODE.setdefault(_code, NAMED[_name])
# commlib has no float128: long double types exist but are DATATYPE_NULL.
for _name, _np in (("FLOAT32_T", "float32"), ("FLOAT64_T", "float64"), ("C_FLOAT32_COMPLEX", "complex64"),
                   ("C_FLOAT64_COMPLEX", "complex128"), ("INTEGER1", "int8"), ("INTEGER2", "int16"),
                   ("INTEGER4", "int32"), ("INTEGER8", "int64"), ("REAL4", "float32"), ("REAL8", "float64"),
                   ("COMPLEX8", "complex64"), ("COMPLEX16", "complex128"), ("DOUBLE_COMPLEX_F", "complex128"),
                   ("LOGICAL1", "int8"), ("LOGICAL2", "int16"), ("LOGICAL4", "int32"), ("LOGICAL8", "int64"),
                   ("CHARACTER", "int8")):
    NAMED[_name] = _predefined(f"MPI_{_name}", _np)
# Types commlib has no buffer layout for (long double, value-index pairs, 16-bit floats by MPI name,
# Fortran extended precision): they exist, as DATATYPE_NULL.
for _name in ("LONG_DOUBLE", "C_LONG_DOUBLE_COMPLEX", "CXX_LONG_DOUBLE_COMPLEX", "FLOAT_INT", "DOUBLE_INT",
              "LONG_INT", "SHORT_INT", "TWOINT", "INT_INT", "LONG_DOUBLE_INT", "UB", "LB", "2INT", "PAIR_INT",
              "REAL2", "REAL16", "COMPLEX4", "COMPLEX32", "INTEGER16", "LOGICAL16", "DOUBLE_PRECISION_F",
              "FLOAT16_T_MPI", "BFLOAT16_T", "C_FLOAT16_COMPLEX", "C_BFLOAT16_COMPLEX", "FLOAT128_T",
              "C_FLOAT128_COMPLEX", "TWOREAL", "TWODOUBLE_PRECISION", "TWOINTEGER", "COUNT_T", "AINT_T"):
    NAMED.setdefault(_name, DATATYPE_NULL)
_BY_CODE.update({"b1": NAMED["C_BOOL"], "f4": NAMED["FLOAT"], "f8": NAMED["DOUBLE"], "c8": NAMED["C_FLOAT_COMPLEX"],
                 "c16": NAMED["C_DOUBLE_COMPLEX"], "f2": NAMED["FLOAT16_T"], "int": NAMED["LONG"],
                 "float": NAMED["DOUBLE"], "complex": NAMED["C_DOUBLE_COMPLEX"], "bool": NAMED["C_BOOL"]})

# numpy dtype.char -> Datatype, for buffers given without a datatype
BY_CHAR = {c: _BY_CODE[c] for c in "bBhHiIlLqQfdFD?e"}
BY_CHAR["p"], BY_CHAR["P"] = NAMED["LONG"], NAMED["UNSIGNED_LONG"]
_BF16 = None
try:  # bfloat16 buffers map to commlib's dtype, without an MPI name
    import ml_dtypes as _ml

    _BF16 = _predefined("MPIX_BFLOAT16", np.dtype(_ml.bfloat16))
except ImportError:
    pass


def of_dtype(dtype):
    """The Datatype of a NumPy dtype (a buffer given without one)."""
    dt = BY_CHAR.get(dtype.char)
    if dt is not None and dt._base == dtype:
        return dt
    if _BF16 is not None and dtype == _BF16._base:
        return _BF16
    if not dtype.isnative:
        raise BufferError(f"buffers of non-native byte order ({dtype}) cannot be communicated")
    if dtype.kind == "V":
        raise MPIException(ERR_TYPE, f"buffers of dtype {dtype} have no MPI datatype")
    raise MPIException(ERR_TYPE, f"buffers of dtype {dtype} cannot be communicated (no commlib datatype)")


_FORMAT = {"Zf": "F", "Zd": "D", "c": "B", "s": "B", "x": "B"}


def of_format(fmt):
    """The Datatype of a buffer-protocol format string ("d", "<i", "Zd", "B")."""
    if fmt[:1] in (">!" if sys.byteorder == "little" else "<"):
        raise BufferError(f"buffers of non-native byte order (format {fmt!r}) cannot be communicated")
    f = fmt.lstrip("@=<>!")
    f = _FORMAT.get(f, f)
    dt = _BY_CODE.get(f)
    if dt is None or len(f) != 1:
        raise MPIException(ERR_TYPE, f"buffers with format {fmt!r} have no MPI datatype")
    return dt


def as_datatype(spec):
    """A Datatype from a Datatype or a typecode string (KeyError for an unknown typecode, as mpi4py)."""
    if isinstance(spec, Datatype):
        if spec._base is None:
            raise ValueError("MPI.DATATYPE_NULL (or a type commlib cannot carry, such as long double) "
                             "cannot be used in a message")
        return spec
    if isinstance(spec, str):
        dt = _BY_CODE.get(spec)
        if dt is None:
            raise KeyError(f"cannot map typecode {spec!r} to an MPI datatype")
        return dt
    raise TypeError(f"expected an MPI.Datatype or a typecode string, got {type(spec).__name__}")
