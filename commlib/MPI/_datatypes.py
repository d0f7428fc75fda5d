"""MPI datatypes: predefined names, typecode strings, buffer formats, and derived types.

A Datatype is its flattened typemap (see the class) over one basic NumPy dtype, or bytes for a
struct of mixed types: a message of `count` elements of it is `count * mult` elements of that
dtype once packed, which is how commlib's kernels see it. Types commlib cannot carry (long
double) are `DATATYPE_NULL`.
"""
import math
import sys

import numpy as np

from .._dtypes import DT_BYTES, dtype_code
from .._kernels import cai_view, dlpack_view, typemap_copy
from ._attributes import _NONE, Attributes
from ._constants import (
    COMBINER_CONTIGUOUS, COMBINER_DARRAY, COMBINER_DUP, COMBINER_F90_COMPLEX, COMBINER_F90_INTEGER, COMBINER_F90_REAL,
    COMBINER_HINDEXED, COMBINER_HINDEXED_BLOCK, COMBINER_HVECTOR, COMBINER_INDEXED, COMBINER_INDEXED_BLOCK,
    COMBINER_NAMED, COMBINER_RESIZED, COMBINER_STRUCT, COMBINER_SUBARRAY, COMBINER_VALUE_INDEX, COMBINER_VECTOR,
    DISTRIBUTE_BLOCK, DISTRIBUTE_CYCLIC, DISTRIBUTE_DFLT_DARG, DISTRIBUTE_NONE, ERR_ARG, ERR_COUNT, ERR_TRUNCATE,
    ERR_TYPE, ORDER_C, ORDER_FORTRAN, TYPECLASS_COMPLEX, TYPECLASS_INTEGER, TYPECLASS_REAL, MPIException)


_I64 = np.dtype(np.int64)
_NO_BLOCKS = np.empty((0, 2), np.int64)
_NO_RUNS = np.empty((0, 4), np.int64)
_LAZY = frozenset(("_blocks", "_runs", "_simple", "_plan"))  # made from `_lay` when first read


class _Layout:
    """A type's typemap, made when first needed and shared by every handle of the type: its flat
    blocks and the kernel's runs of them. A derived type holds its components' layouts (never the
    handles, which the program may free meanwhile) until then. Most derived types are made, asked
    their extent and freed: building typemaps with NumPy at creation cost ~50 us a step."""

    __slots__ = ("pieces", "blocks", "runs")

    def __init__(self, pieces=None, blocks=None, runs=None):
        self.pieces, self.blocks, self.runs = pieces, blocks, runs

    def made(self):
        """(blocks, runs), computed once: each piece is `count` copies of a component's blocks, one
        extent `ext` apart, from byte `disp`."""
        if self.blocks is None:
            rows = []
            for lay, count, disp, ext in self.pieces:
                b = lay.made()[0]
                if len(b) == 1 and b[0, 1] == ext:  # copies that touch: one block, however many
                    rows.append(np.array([[disp + b[0, 0], count * ext]], np.int64))
                else:
                    reps = (disp + np.arange(count, dtype=np.int64) * ext)[:, None]
                    rows.append(np.stack([(reps + b[:, 0]).ravel(), np.broadcast_to(b[:, 1], (count, len(b))).ravel()],
                                         1))
            self.blocks = _merge(np.concatenate(rows) if rows else _NO_BLOCKS)
            self.runs = _runs_of(self.blocks)
            self.pieces = None
        return self.blocks, self.runs


class Datatype(Attributes):
    """An MPI datatype handle (`MPI.DOUBLE`, `MPI.Datatype.fromcode("d")`, derived types).

    Every datatype is its typemap, flattened: `_blocks`, rows of (byte displacement, byte length) in
    typemap order with neighbours merged, plus its bounds (`_lb`, `_ub`, the true ones) and `_bytes`.
    `_base` is the one basic NumPy dtype it is made of (uint8 for a struct of mixed types, `_mixed`),
    `_mult` how many of those one element holds. A type whose one block starts at 0 and fills its
    extent is `_simple`: a message of it is a plain view of the caller's memory; any other is packed
    and unpacked by `_kernels.typemap_copy` in one pass.
    """

    __slots__ = ("_base", "_mult", "_name", "_code", "_predefined", "_wire", "_blocks", "_runs", "_lb", "_ub", "_tlb",
                 "_tub", "_bytes", "_simple", "_plan", "_mixed", "_align", "_x32", "_combiner", "_ints", "_addrs",
                 "_types", "_lay",
                 "_committed", "_attr", "__weakref__")
    _kind, _null_error = "Datatype", ERR_TYPE

    def __new__(cls, datatype=None):
        self = object.__new__(cls)
        if datatype is None:
            self._set(None, 0, "MPI_DATATYPE_NULL", None, True)
        elif not isinstance(datatype, Datatype):
            raise TypeError(f"expected an MPI.Datatype, got {type(datatype).__name__}")
        else:
            self._copy(datatype)
        return self

    def _copy(self, other):
        other._attrs()  # made now, so that every handle of the type shares one attribute dict
        for k, slot in _SLOTS:
            try:
                setattr(self, k, slot.__get__(other))
            except AttributeError:  # not made yet (_LAZY): the copy makes its own from the shared layout
                continue

    def __getattr__(self, name):  # only for a slot not set: the typemap's parts, made on first use
        if name not in _LAZY:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        self._fill()
        return object.__getattribute__(self, name)

    def _fill(self):
        blocks, runs = self._lay.made()
        size, lb, ub = self._bytes, self._lb, self._ub
        self._blocks, self._runs = blocks, runs
        self._simple = simple = (lb == 0 and ub == size and
                                 (size == 0 or (len(blocks) == 1 and blocks[0, 0] == 0 and blocks[0, 1] == size)))
        # what _kernels.derived_pack/space/unpack need, in one tuple: a packed message in one C call
        self._plan = None if simple else (runs, ub - lb, self._tlb, self._tub, size)

    def _attrs(self):
        """Attributes by keyval (_attributes.py), shared by the handles of this type; None for the null type."""
        if self._base is None and self._predefined and self._name == "MPI_DATATYPE_NULL":
            return None
        d = getattr(self, "_attr", None)
        if d is None:
            d = self._attr = {}
        return d

    def _builtin_attr(self, keyval):
        return _NONE

    def _set(self, base, mult, name, code, predefined):
        """A basic type: mult (0 or 1) elements of base at displacement 0."""
        self._base, self._mult, self._name, self._code, self._predefined = base, mult, name, code, predefined
        self._wire = DT_BYTES if base is None or base == np.uint8 else dtype_code(base)
        size = 0 if base is None else base.itemsize * mult
        self._bytes, self._lb, self._ub, self._tlb, self._tub = size, 0, size, 0, size
        self._blocks = np.array([[0, size]], np.int64) if size else _NO_BLOCKS
        self._runs = np.array([[0, size, 0, 1]], np.int64) if size else _NO_RUNS
        self._lay = _Layout(None, self._blocks, self._runs)
        self._simple, self._mixed, self._plan = True, False, None
        self._align = 0 if base is None else (base.itemsize // 2 if base.kind == "c" else base.itemsize)
        self._x32 = None if base is None else base.itemsize
        self._combiner, self._ints, self._addrs, self._types = COMBINER_NAMED, (), (), ()
        self._committed = True

    # ------------------------------------------------------------ queries
    def _require(self):
        if self._base is None:
            raise MPIException(ERR_TYPE, "MPI.DATATYPE_NULL is not a datatype that can be used here")

    def Get_size(self):
        self._require()
        return self._bytes

    size = property(Get_size)

    def Get_extent(self):
        self._require()
        return self._lb, self._ub - self._lb

    def Get_true_extent(self):
        self._require()
        return self._tlb, self._tub - self._tlb

    extent = property(lambda self: self.Get_extent()[1])
    lb = property(lambda self: self.Get_extent()[0])
    ub = property(lambda self: self._ub if self._base is not None else self.Get_extent()[0])
    true_extent = property(lambda self: self.Get_true_extent()[1])
    true_lb = property(lambda self: self.Get_true_extent()[0])
    true_ub = property(lambda self: self._tub if self._base is not None else self.Get_true_extent()[0])

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
        return self._combiner == COMBINER_NAMED and self._base is not None

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

    @property
    def typestr(self):
        if self._base is None:
            return ""
        if self._combiner == COMBINER_NAMED or (self._simple and not self._mixed and self._mult == 1):
            return self._base.str
        return f"V{self.extent}" if self._mixed or not self._simple else f"{self._mult}{self._base.str}"

    typechar = property(lambda self: self._code if self._code is not None and len(self._code) == 1 else
                        ("V" if self._base is not None else ""))

    # ------------------------------------------------------------ life cycle
    def Commit(self):
        self._require()
        self._committed = True
        return self

    commit = Commit

    def Free(self):
        if self._predefined:
            raise MPIException(ERR_TYPE, f"cannot free the predefined datatype {self._name}")
        try:
            self._delete_attrs()
        finally:
            self._set(None, 0, "MPI_DATATYPE_NULL", None, False)
            self._attr = None

    def free(self):
        """Free() made safe: nothing for a null or predefined type (a copy of a predefined one is only
        emptied), Free() otherwise."""
        if not self or any(self is t for t in _CONSTANTS):
            return
        if self._predefined:
            self._set(None, 0, "MPI_DATATYPE_NULL", None, False)
            return
        self.Free()

    def Dup(self):
        """A new handle for the same type (derived: Free one, the other stays)."""
        self._require()
        new = _derive(COMBINER_DUP, (), (), (self,), [(self, 1, 0)], name=self._name, resized=(self._lb, self._ub))
        self._copy_attrs(new)
        return new

    Create_dup = Dup

    # ------------------------------------------------------------ constructors
    def Create_contiguous(self, count):
        """count consecutive elements of this type, as one element."""
        count = _count(count, "Create_contiguous", "count")
        return _derive(COMBINER_CONTIGUOUS, (count,), (), (self,), [(self, count, 0)])

    def Create_vector(self, count, blocklength, stride):
        """count blocks of blocklength elements, block starts `stride` elements apart."""
        count, bl = _count(count, "Create_vector", "count"), _count(blocklength, "Create_vector", "blocklength")
        ext = self._extent_of("Create_vector")
        return _derive(COMBINER_VECTOR, (count, bl, int(stride)), (), (self,),
                       [(self, bl, i * int(stride) * ext) for i in range(count)])

    def Create_hvector(self, count, blocklength, stride):
        """count blocks of blocklength elements, block starts `stride` bytes apart."""
        count, bl = _count(count, "Create_hvector", "count"), _count(blocklength, "Create_hvector", "blocklength")
        self._require()
        return _derive(COMBINER_HVECTOR, (count, bl), (int(stride),), (self,),
                       [(self, bl, i * int(stride)) for i in range(count)])

    def Create_indexed(self, blocklengths, displacements):
        """Blocks of blocklengths[i] elements at displacements[i] elements."""
        bls, ds = _pairs(blocklengths, displacements, "Create_indexed")
        ext = self._extent_of("Create_indexed")
        return _derive(COMBINER_INDEXED, (len(bls), *bls, *ds), (), (self,),
                       [(self, b, d * ext) for b, d in zip(bls, ds)])

    def Create_hindexed(self, blocklengths, displacements):
        """Blocks of blocklengths[i] elements at displacements[i] bytes."""
        bls, ds = _pairs(blocklengths, displacements, "Create_hindexed")
        self._require()
        return _derive(COMBINER_HINDEXED, (len(bls), *bls), tuple(ds), (self,),
                       [(self, b, d) for b, d in zip(bls, ds)])

    def Create_indexed_block(self, blocklength, displacements):
        """Blocks of blocklength elements at displacements[i] elements."""
        bl = _count(blocklength, "Create_indexed_block", "blocklength")
        ds = [int(d) for d in displacements]
        ext = self._extent_of("Create_indexed_block")
        return _derive(COMBINER_INDEXED_BLOCK, (len(ds), bl, *ds), (), (self,), [(self, bl, d * ext) for d in ds])

    def Create_hindexed_block(self, blocklength, displacements):
        """Blocks of blocklength elements at displacements[i] bytes."""
        bl = _count(blocklength, "Create_hindexed_block", "blocklength")
        ds = [int(d) for d in displacements]
        self._require()
        return _derive(COMBINER_HINDEXED_BLOCK, (len(ds), bl), tuple(ds), (self,), [(self, bl, d) for d in ds])

    @classmethod
    def Create_struct(cls, blocklengths, displacements, datatypes):
        """Blocks of blocklengths[i] elements of datatypes[i] at displacements[i] bytes."""
        bls, ds = _pairs(blocklengths, displacements, "Create_struct")
        types = list(datatypes)
        if len(types) != len(bls):
            raise ValueError(f"Create_struct: {len(bls)} blocklengths, {len(types)} datatypes")
        for t in types:
            if not isinstance(t, Datatype):
                raise TypeError(f"Create_struct: expected MPI.Datatype, got {type(t).__name__}")
            t._require()
        return _derive(COMBINER_STRUCT, (len(bls), *bls), tuple(ds), tuple(types),
                       [(t, b, d) for t, b, d in zip(types, bls, ds)], struct=True)

    def Create_resized(self, lb, extent):
        """This type with its lower bound and extent set (the typemap unchanged)."""
        self._require()
        lb, extent = int(lb), int(extent)
        return _derive(COMBINER_RESIZED, (), (lb, extent), (self,), [(self, 1, 0)], resized=(lb, lb + extent))

    def Create_subarray(self, sizes, subsizes, starts, order=None):
        """The subsizes block at starts of an array of sizes (C or Fortran order) of this type."""
        order = ORDER_C if order is None else order
        sizes, subsizes, starts = [list(map(int, v)) for v in (sizes, subsizes, starts)]
        nd = len(sizes)
        if nd < 1 or len(subsizes) != nd or len(starts) != nd:
            raise ValueError(f"Create_subarray: sizes {sizes}, subsizes {subsizes}, starts {starts}: lengths differ")
        for d in range(nd):
            if sizes[d] < 1 or subsizes[d] < 1 or starts[d] < 0 or starts[d] + subsizes[d] > sizes[d]:
                raise MPIException(ERR_ARG, f"Create_subarray: dimension {d}: start {starts[d]} + subsize "
                                            f"{subsizes[d]} outside size {sizes[d]}")
        if order not in (ORDER_C, ORDER_FORTRAN):
            raise MPIException(ERR_ARG, f"Create_subarray: order must be MPI.ORDER_C or MPI.ORDER_FORTRAN, got {order}")
        ext = self._extent_of("Create_subarray")
        dims = range(nd) if order == ORDER_FORTRAN else range(nd - 1, -1, -1)  # fastest first
        t, stride, offset = self, ext, 0
        for k, d in enumerate(dims):
            t = t.Create_contiguous(subsizes[d]) if k == 0 else t.Create_hvector(subsizes[d], 1, stride)
            offset += starts[d] * stride
            stride *= sizes[d]
        t = _derive(COMBINER_HINDEXED, (), (), (t,), [(t, 1, offset)])
        return _derive(COMBINER_SUBARRAY, (nd, *sizes, *subsizes, *starts, order), (), (self,), [(t, 1, 0)],
                       resized=(0, stride))

    def Create_darray(self, size, rank, gsizes, distribs, dargs, psizes, order=None):
        """This process's block of a distributed array (HPF-style BLOCK / CYCLIC / NONE per dimension)."""
        order = ORDER_C if order is None else order
        gsizes, distribs, dargs, psizes = [list(map(int, v)) for v in (gsizes, distribs, dargs, psizes)]
        nd, size, rank = len(gsizes), int(size), int(rank)
        if not (len(distribs) == len(dargs) == len(psizes) == nd) or nd < 1:
            raise ValueError("Create_darray: gsizes, distribs, dargs and psizes must have one entry per dimension")
        if math.prod(psizes) != size or not 0 <= rank < size:
            raise MPIException(ERR_ARG, f"Create_darray: psizes {psizes} for {size} processes, rank {rank}")
        coords, r = [0] * nd, rank
        for d in range(nd - 1, -1, -1):  # process grid in row-major order
            coords[d], r = r % psizes[d], r // psizes[d]
        ext = self._extent_of("Create_darray")
        # per dimension: the global indices this process owns, in order
        owned = [_darray_indices(gsizes[d], distribs[d], dargs[d], psizes[d], coords[d], d) for d in range(nd)]
        dims = range(nd) if order == ORDER_FORTRAN else range(nd - 1, -1, -1)
        t, stride = self, ext
        for k, d in enumerate(dims):
            t = _derive(COMBINER_HINDEXED, (), (), (t,), [(t, 1, i * stride) for i in owned[d]])
            stride *= gsizes[d]
        return _derive(COMBINER_DARRAY, (size, rank, nd, *gsizes, *distribs, *dargs, *psizes, order), (), (self,),
                       [(t, 1, 0)], resized=(0, stride))

    @classmethod
    def Create_f90_integer(cls, r):
        """The integer type holding r decimal digits (INTEGER1/2/4/8)."""
        r = int(r)
        for bits, name in ((2, "INTEGER1"), (4, "INTEGER2"), (9, "INTEGER4"), (18, "INTEGER8")):
            if r <= bits:
                return _f90(NAMED[name], COMBINER_F90_INTEGER, (r,))
        raise MPIException(ERR_ARG, f"Create_f90_integer: no integer type holds {r} digits")

    @classmethod
    def Create_f90_real(cls, p, r):
        """The real type of p digits and exponent range r (REAL4/REAL8)."""
        p, r = int(p), int(r)
        t = NAMED["REAL4"] if p <= 6 and r <= 37 else NAMED["REAL8"] if p <= 15 and r <= 307 else None
        if t is None:
            raise MPIException(ERR_ARG, f"Create_f90_real: no real type of precision {p}, range {r}")
        return _f90(t, COMBINER_F90_REAL, (p, r))

    @classmethod
    def Create_f90_complex(cls, p, r):
        """The complex type of p digits and exponent range r (COMPLEX8/COMPLEX16)."""
        p, r = int(p), int(r)
        t = NAMED["COMPLEX8"] if p <= 6 and r <= 37 else NAMED["COMPLEX16"] if p <= 15 and r <= 307 else None
        if t is None:
            raise MPIException(ERR_ARG, f"Create_f90_complex: no complex type of precision {p}, range {r}")
        return _f90(t, COMBINER_F90_COMPLEX, (p, r))

    def _extent_of(self, what):
        self._require()
        return self._ub - self._lb

    # ------------------------------------------------------------ contents
    def Get_envelope(self):
        """(integers, addresses, large counts, datatypes, combiner): the sizes Get_contents returns."""
        self._require()
        return len(self._ints), len(self._addrs), 0, len(self._types), self._combiner

    envelope = property(Get_envelope)
    combiner = property(lambda self: self.Get_envelope()[-1])

    def Get_contents(self):
        """(integers, addresses, large counts, datatypes): the arguments this type was made from."""
        self._require()
        if self._combiner == COMBINER_NAMED:
            raise MPIException(ERR_TYPE, f"Get_contents of the named datatype {self._name}")
        return list(self._ints), list(self._addrs), [], [_handle(t) for t in self._types]

    contents = property(Get_contents)

    def decode(self):
        """(old type, combiner name, keyword arguments): calling the old type's Create_<combiner>(**kwargs)
        makes this type again."""
        self._require()
        c, i, a, types = self._combiner, self._ints, self._addrs, [_handle(t) for t in self._types]
        old = types[0] if len(types) == 1 else DATATYPE_NULL
        if c == COMBINER_NAMED:
            return self, "NAMED", {}
        params = {}
        if c == COMBINER_CONTIGUOUS:
            params = {"count": i[0]}
        elif c == COMBINER_VECTOR:
            params = {"count": i[0], "blocklength": i[1], "stride": i[2]}
        elif c == COMBINER_HVECTOR:
            params = {"count": i[0], "blocklength": i[1], "stride": a[0]}
        elif c == COMBINER_INDEXED:
            params = {"blocklengths": list(i[1:1 + i[0]]), "displacements": list(i[1 + i[0]:])}
        elif c in (COMBINER_HINDEXED, COMBINER_STRUCT):
            params = {"blocklengths": list(i[1:]), "displacements": list(a)}
            if c == COMBINER_STRUCT:
                params["datatypes"] = list(types)
        elif c == COMBINER_INDEXED_BLOCK:
            params = {"blocklength": i[1], "displacements": list(i[2:])}
        elif c == COMBINER_HINDEXED_BLOCK:
            params = {"blocklength": i[1], "displacements": list(a)}
        elif c == COMBINER_SUBARRAY:
            n = i[0]
            params = {"sizes": list(i[1:1 + n]), "subsizes": list(i[1 + n:1 + 2 * n]),
                      "starts": list(i[1 + 2 * n:1 + 3 * n]), "order": i[1 + 3 * n]}
        elif c == COMBINER_DARRAY:
            n = i[2]
            params = {"size": i[0], "rank": i[1], "gsizes": list(i[3:3 + n]), "distribs": list(i[3 + n:3 + 2 * n]),
                      "dargs": list(i[3 + 2 * n:3 + 3 * n]), "psizes": list(i[3 + 3 * n:3 + 4 * n]),
                      "order": i[3 + 4 * n]}
        elif c == COMBINER_RESIZED:
            params = {"lb": a[0], "extent": a[1]}
        elif c == COMBINER_F90_INTEGER:
            params = {"r": i[0]}
        elif c in (COMBINER_F90_REAL, COMBINER_F90_COMPLEX):
            params = {"p": i[0], "r": i[1]}
        return old, _COMBINER_NAMES[c], params

    # ------------------------------------------------------------ packing
    def Pack_size(self, count, comm=None):
        """Bytes Pack needs for count elements."""
        return _count(count, "Pack_size", "count") * self.Get_size()

    def Pack(self, inbuf, outbuf, position, comm=None):
        """Pack inbuf (whole elements of this type) into outbuf at byte `position`; the new position."""
        return pack_into(self, inbuf, outbuf, position, None)

    def Unpack(self, inbuf, position, outbuf, comm=None):
        """Unpack from inbuf at byte `position` as many elements as outbuf holds; the new position."""
        return unpack_from(self, inbuf, position, outbuf, None)

    def Pack_external_size(self, datarep, count):
        """Bytes Pack_external needs for count elements in `datarep` ("external32")."""
        _datarep(datarep)
        return _count(count, "Pack_external_size", "count") * self._mult * self._x32_size()

    def Pack_external(self, datarep, inbuf, outbuf, position):
        """Pack as Pack does, in `external32` (big-endian, the standard's sizes)."""
        _datarep(datarep)
        return pack_into(self, inbuf, outbuf, position, self._x32_dtype())

    def Unpack_external(self, datarep, inbuf, position, outbuf):
        _datarep(datarep)
        return unpack_from(self, inbuf, position, outbuf, self._x32_dtype())

    def _x32_size(self):
        self._require()
        if self._mixed or self._x32 is None:
            raise MPIException(ERR_TYPE, f"Pack_external: {self._name} mixes basic types; commlib packs external32 "
                                         f"for datatypes of one basic type")
        return self._x32

    def _x32_dtype(self):
        size = self._x32_size()
        b = self._base
        kind = "f" if b.kind == "f" else "c" if b.kind == "c" else "b" if b.kind == "b" else b.kind
        return np.dtype(">" + kind + str(size)) if kind != "b" else np.dtype("?")

    @classmethod
    def Match_size(cls, typeclass, size):
        """The predefined type of `typeclass` (MPI.TYPECLASS_INTEGER, _REAL, _COMPLEX) and `size` bytes."""
        names = {TYPECLASS_INTEGER: {1: "INTEGER1", 2: "INTEGER2", 4: "INTEGER4", 8: "INTEGER8"},
                 TYPECLASS_REAL: {4: "REAL4", 8: "REAL8"}, TYPECLASS_COMPLEX: {8: "COMPLEX8", 16: "COMPLEX16"}}
        name = names.get(typeclass, {}).get(int(size))
        if name is None:
            raise MPIException(ERR_ARG, f"Match_size: no type of class {typeclass} and {size} bytes")
        return NAMED[name]

    # ------------------------------------------------------------ comparison
    def __eq__(self, other):
        if not isinstance(other, Datatype):
            return NotImplemented
        if self._base is None or other._base is None:
            return self._base is None and other._base is None
        if self._combiner == other._combiner == COMBINER_NAMED:
            return self._name == other._name and self._base == other._base
        return self._lay is other._lay and self._types == other._types  # one handle: MPI.Datatype(t) copies

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __bool__(self):
        return self._base is not None

    def __repr__(self):
        return f"<MPI.Datatype {self._name}>"

    def __reduce__(self):
        if self._predefined and (self._combiner == COMBINER_NAMED or self._base is None):
            name = "DATATYPE_NULL" if self._base is None else self._name[4:]
            if any(self is t for t in _CONSTANTS):
                return (_restore, (name,))  # the predefined object itself
            return (_restore_copy, (type(self), name))  # a handle of it: a new equal handle, of its class
        if self._base is None:
            return (_restore_copy, (type(self), "DATATYPE_NULL"))
        old, comb, params = self.decode()
        return (_recreate, (old, comb, params))


def _handle(t):
    """What Get_contents hands back: the named type itself, a new handle of a derived one."""
    return t if t._combiner == COMBINER_NAMED or t._predefined else Datatype(t)


def _restore(name):
    from .. import MPI  # predefined handles unpickle to the very same object
    return getattr(MPI, name)


def _restore_copy(cls, name):
    return cls(_restore(name))


def _recreate(old, combiner, params):
    if combiner == "STRUCT":
        return Datatype.Create_struct(**params)
    if combiner == "DUP":
        return old.Dup()
    return getattr(old, "Create_" + combiner.lower())(**params)


_COMBINER_NAMES = {COMBINER_NAMED: "NAMED", COMBINER_DUP: "DUP", COMBINER_CONTIGUOUS: "CONTIGUOUS",
                   COMBINER_VECTOR: "VECTOR", COMBINER_HVECTOR: "HVECTOR", COMBINER_INDEXED: "INDEXED",
                   COMBINER_HINDEXED: "HINDEXED", COMBINER_INDEXED_BLOCK: "INDEXED_BLOCK",
                   COMBINER_HINDEXED_BLOCK: "HINDEXED_BLOCK", COMBINER_STRUCT: "STRUCT",
                   COMBINER_SUBARRAY: "SUBARRAY", COMBINER_DARRAY: "DARRAY", COMBINER_RESIZED: "RESIZED",
                   COMBINER_F90_INTEGER: "F90_INTEGER", COMBINER_F90_REAL: "F90_REAL",
                   COMBINER_F90_COMPLEX: "F90_COMPLEX", COMBINER_VALUE_INDEX: "VALUE_INDEX"}


def _datarep(datarep):
    if datarep != "external32":
        raise MPIException(ERR_ARG, f"data representation {datarep!r}: commlib packs 'external32'")


def _count(x, what, name):
    x = int(x)
    if x < 0:
        raise MPIException(ERR_COUNT, f"{what}: {name} must be >= 0, got {x}")
    return x


def _pairs(blocklengths, displacements, what):
    bls = [_count(b, what, "blocklength") for b in blocklengths]
    ds = [int(d) for d in displacements]
    if len(bls) != len(ds):
        raise ValueError(f"{what}: {len(bls)} blocklengths, {len(ds)} displacements")
    return bls, ds


def _f90(named, combiner, ints):
    t = Datatype(named)
    t._combiner, t._ints, t._predefined = combiner, ints, True
    return t


def _darray_indices(gsize, distrib, darg, psize, coord, d):
    """The global indices along one dimension that process coordinate `coord` owns, in order."""
    if distrib == DISTRIBUTE_NONE:
        return list(range(gsize))
    if distrib == DISTRIBUTE_BLOCK:
        b = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        if b * psize < gsize:
            raise MPIException(ERR_ARG, f"Create_darray: dimension {d}: block {b} x {psize} processes < {gsize}")
        return list(range(coord * b, min(gsize, (coord + 1) * b)))
    if distrib == DISTRIBUTE_CYCLIC:
        b = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
        return [i for start in range(coord * b, gsize, psize * b) for i in range(start, min(start + b, gsize))]
    raise MPIException(ERR_ARG, f"Create_darray: dimension {d}: unknown distribution {distrib}")


def _derive(combiner, ints, addrs, types, pieces, name=None, resized=None, struct=False):
    """A derived datatype of `pieces`, each (datatype, count, byte displacement): count copies of the
    datatype one extent apart. Computes the bounds and the basic type now, the flattened typemap
    (`_Layout`) when a message first needs it."""
    for t in types:
        t._require()
    parts, lb, ub, tlb, tub, size = [], None, None, None, None, 0
    bases, align, x32 = set(), 0, set()
    for t, count, disp in pieces:
        if count == 0 or t._bytes == 0 and t._ub == t._lb:
            continue
        ext = t._ub - t._lb
        span = (count - 1) * ext
        lo, hi = disp + t._lb + min(0, span), disp + t._ub + max(0, span)
        lb, ub = (lo, hi) if lb is None else (min(lb, lo), max(ub, hi))
        if t._bytes:
            tlo, thi = disp + t._tlb + min(0, span), disp + t._tub + max(0, span)
            tlb, tub = (tlo, thi) if tlb is None else (min(tlb, tlo), max(tub, thi))
            parts.append((t._lay, count, disp, ext))
            size += count * t._bytes
            bases.add(t._base if not t._mixed else None)
            x32.add(t._x32 if not t._mixed else None)
            align = max(align, t._align)
    lb, ub = (0, 0) if lb is None else (lb, ub)
    tlb, tub = (0, 0) if tlb is None else (tlb, tub)
    if struct and align and resized is None:  # a struct's extent rounds up to its strictest member's alignment
        ub = lb + -(-(ub - lb) // align) * align
    if resized is not None:
        lb, ub = resized
    dt = object.__new__(Datatype)
    base = bases.pop() if len(bases) == 1 else None
    mixed = base is None and size > 0
    if base is None:
        base = np.dtype(np.uint8) if mixed or not types else types[0]._base
    dt._base, dt._mult, dt._mixed = base, (size // base.itemsize if base.itemsize else 0), mixed
    dt._name = name if name is not None else f"{_COMBINER_NAMES[combiner].lower()}({types[0]._name if types else ''})"
    dt._code, dt._predefined = None, False
    dt._wire = DT_BYTES if mixed or base == np.uint8 else dtype_code(base)
    dt._bytes, dt._lb, dt._ub, dt._tlb, dt._tub = size, lb, ub, tlb, tub
    dt._lay = _Layout(tuple(parts))
    dt._align = align
    dt._x32 = x32.pop() if len(x32) == 1 else (types[0]._x32 if not x32 and types else None)
    # its own handles of the types it was made from: freeing those later leaves this one whole, as in MPI
    dt._combiner, dt._ints, dt._addrs, dt._types = combiner, tuple(ints), tuple(addrs), tuple(_handle(t) for t in types)
    dt._committed = False
    if not _derived_seen and not dt._simple:  # (made now only until the first type that is not a plain view)
        _note_derived()
    return dt


def _merge(rows):
    """Typemap rows with each block that starts where the previous one ends folded into it."""
    if len(rows) < 2:
        return np.ascontiguousarray(rows, dtype=np.int64)
    rows = rows[rows[:, 1] > 0]
    if len(rows) < 2:
        return np.ascontiguousarray(rows, dtype=np.int64)
    starts = np.ones(len(rows), bool)
    starts[1:] = rows[1:, 0] != rows[:-1, 0] + rows[:-1, 1]
    idx = np.flatnonzero(starts)
    ends = rows[:, 0] + rows[:, 1]
    last = np.append(idx[1:] - 1, len(rows) - 1)
    return np.ascontiguousarray(np.stack([rows[idx, 0], ends[last] - rows[idx, 0]], 1), dtype=np.int64)


def _runs_of(blocks):
    """The typemap as the kernel walks it: rows of (displacement, length, stride, repetitions), each
    folding a stretch of equal blocks at an equal spacing (a vector's columns become one row)."""
    k = len(blocks)
    single = np.column_stack([blocks, np.zeros(k, np.int64), np.ones(k, np.int64)]) if k else np.empty((0, 4), np.int64)
    if k < 3:
        return np.ascontiguousarray(single, dtype=np.int64)
    d, length = blocks[:, 0], blocks[:, 1]
    step = np.diff(d)  # pair p joins rows p and p + 1
    regular = length[1:] == length[:-1]
    change = np.flatnonzero((step[1:] != step[:-1]) | (regular[1:] != regular[:-1])) + 1
    starts = np.concatenate([[0], change])
    if len(starts) > max(64, k // 8):  # irregular: nothing to fold
        return np.ascontiguousarray(single, dtype=np.int64)
    ends = np.concatenate([change, [k - 1]])  # pairs starts[j] .. ends[j] - 1
    parts, row = [], 0
    for ps, pe in zip(starts.tolist(), ends.tolist()):
        if not regular[ps]:
            continue
        first, last = max(ps, row), pe  # rows first .. last, each pair in the stretch alike
        if last - first + 1 >= 2:
            parts.append(single[row:first])
            parts.append(np.array([[d[first], length[first], step[ps], last - first + 1]], np.int64))
            row = last + 1
    parts.append(single[row:])
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.int64)


_SLOTS = [(k, getattr(Datatype, k)) for k in Datatype.__slots__[:-1]]
_derived_hooks = []
_derived_seen = False


def on_derived(fn):
    """Call fn once the first datatype that is not a plain view exists (at once if one does)."""
    if _derived_seen:
        fn()
    else:
        _derived_hooks.append(fn)


def _note_derived():
    """A datatype that is not a plain view now exists: run (once) what receives into one need."""
    global _derived_seen
    _derived_seen = True
    while _derived_hooks:
        _derived_hooks.pop()()


def _predefined(name, np_name, code=None):
    dt = object.__new__(Datatype)
    dt._set(None if np_name is None else np.dtype(np_name), 1 if np_name else 0, name, code, True)
    _CONSTANTS.append(dt)
    return dt


_CONSTANTS = []  # the predefined datatype objects themselves (free() leaves them alone)


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
for _name in ("LONG_DOUBLE", "C_LONG_DOUBLE_COMPLEX", "CXX_LONG_DOUBLE_COMPLEX", "LONG_DOUBLE_INT", "UB", "LB",
              "REAL2", "REAL16", "COMPLEX4", "COMPLEX32", "INTEGER16", "LOGICAL16", "DOUBLE_PRECISION_F",
              "FLOAT16_T_MPI", "BFLOAT16_T", "C_FLOAT16_COMPLEX", "C_BFLOAT16_COMPLEX", "FLOAT128_T",
              "C_FLOAT128_COMPLEX", "TWOREAL", "TWODOUBLE_PRECISION", "TWOINTEGER", "COUNT_T", "AINT_T"):
    NAMED.setdefault(_name, DATATYPE_NULL)
_BY_CODE.update({"g": NAMED["LONG_DOUBLE"], "G": NAMED["C_LONG_DOUBLE_COMPLEX"],  # DATATYPE_NULL here
                 "p": NAMED["AINT"], "P": NAMED["UNSIGNED_LONG"],
                 "b1": NAMED["C_BOOL"], "f4": NAMED["FLOAT"], "f8": NAMED["DOUBLE"], "c8": NAMED["C_FLOAT_COMPLEX"],
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


_PAIRS = {"FLOAT_INT": ("FLOAT", "INT"), "DOUBLE_INT": ("DOUBLE", "INT"), "LONG_INT": ("LONG", "INT"),
          "SHORT_INT": ("SHORT", "INT"), "TWOINT": ("INT", "INT")}
_PAIR_ALIASES = {"INT_INT": "TWOINT", "PAIR_INT": "TWOINT", "2INT": "TWOINT"}
_pair_types = {}


def pair_type(name):
    """The named value-index pair type (MINLOC / MAXLOC operands: a struct of value then index),
    made on first use: a pair with padding is packed, and the machinery receives into packed types
    need is installed only once a program uses one."""
    name = _PAIR_ALIASES.get(name, name)
    t = _pair_types.get(name)
    if t is None:
        v, i = NAMED[_PAIRS[name][0]], NAMED[_PAIRS[name][1]]
        off = -(-v._bytes // i._align) * i._align
        t = Datatype.Create_struct([1, 1], [0, off], [v, i])
        t._name, t._predefined, t._combiner = f"MPI_{name}", True, COMBINER_NAMED
        t._ints, t._addrs, t._types = (), (), ()
        t._committed = True
        _pair_types[name] = t
        _CONSTANTS.append(t)
    return t


def Get_value_index(value, index):
    """The named value-index pair type (MPI.FLOAT_INT ...) of value and index, or DATATYPE_NULL."""
    value._require()
    index._require()
    for name, (v, i) in _PAIRS.items():
        if value == NAMED[v] and index == NAMED[i]:
            return pair_type(name)
    return DATATYPE_NULL


Datatype.Get_value_index = staticmethod(Get_value_index)
for _name in ("LONG", "UNSIGNED_LONG", "SIGNED_LONG"):  # external32 sizes where they differ from LP64's
    NAMED[_name]._x32 = 4


# ------------------------------------------------ buffers as flat memory; Pack and Unpack

_BYTE = NAMED["BYTE"]
_EMPTY = np.empty(0, dtype=np.uint8)


def reach(dt, n, origin, nbytes, what):
    """n elements of dt at byte `origin` lie inside a buffer of nbytes (ValueError otherwise)."""
    if n == 0 or dt._bytes == 0:
        return
    span = (n - 1) * (dt._ub - dt._lb)
    lo, hi = origin + dt._tlb + min(0, span), origin + dt._tub + max(0, span)
    if lo < 0 or hi > nbytes:
        raise ValueError(f"{what}: {n} elements of {dt.Get_name()} at byte {origin} reach bytes [{lo}, {hi}) of a "
                         f"buffer of {nbytes} bytes")


def _flat(obj, writable):
    """(flat contiguous ndarray view of obj's memory, its Datatype or None for raw bytes)."""
    if isinstance(obj, np.ndarray):
        a = obj
        if not a.flags.c_contiguous:
            if not a.flags.f_contiguous:
                raise BufferError("message buffer is not contiguous (pass np.ascontiguousarray(x), "
                                  "or a copy you receive into and then assign back)")
            a = a.reshape(-1, order="F")
        else:
            a = a.reshape(-1)
        if writable and not a.flags.writeable:
            raise BufferError("message buffer is read-only; a receive needs a writable buffer")
        return a, None
    try:
        m = memoryview(obj)
    except TypeError:
        if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):  # torch tensors, JAX arrays...
            return _flat(dlpack_view(obj, writable), writable)
        if hasattr(obj, "__cuda_array_interface__"):  # then the CUDA array interface, over host memory only
            return _flat(cai_view(obj, writable), writable)
        raise TypeError(f"message: expected a buffer (NumPy array, bytearray, array.array, memoryview, "
                        f"DLPack array...) or a list/tuple [buf, ...], got {type(obj).__name__}") from None
    if not m.contiguous:
        raise BufferError("message buffer is not contiguous")
    if writable and m.readonly:
        raise BufferError(f"message buffer ({type(obj).__name__}) is read-only; a receive needs a writable buffer")
    fmt = m.format
    u8 = np.frombuffer(m if m.c_contiguous else m.tobytes(), dtype=np.uint8) if m.nbytes else _EMPTY
    if fmt in ("B", "c", "s") or m.nbytes == 0:
        return u8, _BYTE if fmt in ("B", "c", "s") else None
    dt = of_format(fmt)
    return u8.view(dt._base), dt


def _int(x, what):
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
        x = int(x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"message: {what} must be an int, got {type(x).__name__}")
    if x < 0:
        raise ValueError(f"message: {what} must be >= 0, got {x}")
    return int(x)


def _whole(dt, buf, writable, what):
    """(bytes of buf, how many whole elements of dt it holds): Pack's and Unpack's user side."""
    flat, _ = _flat(buf, writable)
    mem = flat.view(np.uint8) if flat.size else np.empty(0, np.uint8)
    ext = dt._ub - dt._lb
    n = mem.nbytes // ext if ext > 0 else 0
    reach(dt, n, 0, mem.nbytes, what)
    return mem, n


def pack_into(dt, inbuf, outbuf, position, x32):
    """Datatype.Pack (x32 None) / Pack_external (x32: the external32 dtype): inbuf's whole elements
    of dt, packed into outbuf from byte `position`; the position after them."""
    dt._require()
    mem, n = _whole(dt, inbuf, False, "Pack")
    out, _ = _flat(outbuf, True)
    out = out.view(np.uint8) if out.size else np.empty(0, np.uint8)
    position = _int(position, "position")
    packed = np.empty(n * dt._bytes, np.uint8)
    typemap_copy(mem, packed, dt._runs, n, dt._ub - dt._lb, 0, True)
    if x32 is not None:
        packed = packed.view(dt._base).astype(x32).view(np.uint8)
    end = position + packed.nbytes
    if end > out.nbytes:
        raise MPIException(ERR_TRUNCATE, f"Pack: {packed.nbytes} bytes at position {position} do not fit the "
                                         f"{out.nbytes}-byte output buffer")
    out[position:end] = packed
    return end


def unpack_from(dt, inbuf, position, outbuf, x32):
    """Datatype.Unpack / Unpack_external: as many elements of dt as outbuf holds, from inbuf at byte
    `position`; the position after them."""
    dt._require()
    src, _ = _flat(inbuf, False)
    src = src.view(np.uint8) if src.size else np.empty(0, np.uint8)
    mem, n = _whole(dt, outbuf, True, "Unpack")
    position = _int(position, "position")
    width = dt._bytes if x32 is None else dt._mult * x32.itemsize
    end = position + n * width
    if end > src.nbytes:
        raise MPIException(ERR_TRUNCATE, f"Unpack: {n} elements need {n * width} bytes at position {position}, "
                                         f"the input buffer has {src.nbytes}")
    packed = src[position:end]
    if x32 is not None:
        packed = packed.view(x32).astype(dt._base).view(np.uint8)
    typemap_copy(mem, np.ascontiguousarray(packed), dt._runs, n, dt._ub - dt._lb, 0, False)
    return end
