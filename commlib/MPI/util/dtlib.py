"""NumPy dtypes and MPI datatypes, each made from the other: mpi4py.util.dtlib for commlib.MPI.

`from_numpy_dtype(dtype)`: a basic dtype is its predefined datatype, a subarray dtype a C-order
`Create_subarray`, a structured dtype a `Create_struct` of its fields at their offsets (resized to
the dtype's itemsize where they differ). `to_numpy_dtype(datatype)` is the reverse: named types by
typecode; contiguous and subarray types as subarray dtypes (a Fortran-order subarray as the C-order
shape reversed); vector, indexed, struct and darray types as aligned structured dtypes with a field
per block; resized types as structured dtypes of the new itemsize. What NumPy cannot say (a lower
bound other than 0, a partial subarray, an extent that leaves no room for a resized basic type) is
a ValueError. Without NumPy (`_np_dtype` None), `to_numpy_dtype` gives the spec NumPy would take.
"""
from .. import COMBINER_NAMED, COMBINER_STRUCT, DATATYPE_NULL, ORDER_FORTRAN, Datatype

try:
    from numpy import dtype as _np_dtype
except ImportError:  # pragma: no cover - numpy is a dependency of commlib
    _np_dtype = None

__all__ = ["from_numpy_dtype", "to_numpy_dtype"]


def from_numpy_dtype(dtype):
    """The MPI datatype of a NumPy dtype (or anything numpy.dtype() takes)."""
    if _np_dtype is None:
        raise RuntimeError("dtlib: NumPy is not available")
    dtype = _np_dtype(dtype)
    if dtype.hasobject:
        raise ValueError(f"dtlib: a dtype holding Python objects ({dtype}) has no MPI datatype")
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        inner = from_numpy_dtype(base)
        try:
            return inner.Create_subarray(list(shape), list(shape), [0] * len(shape))
        finally:
            inner.Free()
    if dtype.fields is not None:
        names = dtype.names
        types = [from_numpy_dtype(dtype.fields[n][0]) for n in names]
        offsets = [dtype.fields[n][1] for n in names]
        struct = Datatype.Create_struct([1] * len(names), offsets, types)
        for t in types:
            t.Free()
        if struct.extent != dtype.itemsize or struct.lb != 0:
            resized = struct.Create_resized(0, dtype.itemsize)
            struct.Free()
            struct = resized
        return struct
    if dtype.byteorder not in ("=", "|") and not dtype.isnative:
        raise ValueError(f"dtlib: dtype {dtype} is not in native byte order")
    if dtype.kind == "V":
        raise ValueError(f"dtlib: a void dtype ({dtype}) has no MPI datatype")
    try:
        named = Datatype.fromcode(dtype.char)
    except ValueError:
        raise ValueError(f"dtlib: dtype {dtype} has no MPI datatype") from None
    if not named:
        raise ValueError(f"dtlib: commlib carries no {dtype} (MPI.{named.Get_name()[4:] or 'DATATYPE_NULL'})")
    return named.Dup()  # a new handle, which the caller frees, as for every type made here


def to_numpy_dtype(datatype):
    """The NumPy dtype of an MPI datatype."""
    spec = _spec(datatype)
    return spec if _np_dtype is None else _np_dtype(spec)


def _aligned(names, formats, offsets, itemsize):
    """A structured dtype spec, aligned (as a C struct) where its offsets and itemsize allow it."""
    # numpy builds nested formats with the outer align flag: an unaligned part makes the whole unaligned
    aligned = all(f.get("aligned", True) for f in formats if isinstance(f, dict))
    if aligned and _np_dtype is not None:
        aligns = [_np_dtype(f).alignment for f in formats]
        aligned = all(o % a == 0 for o, a in zip(offsets, aligns)) and itemsize % max(aligns, default=1) == 0
    return {"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize, "aligned": aligned}


def _block(spec, n):
    return spec if n == 1 else (spec, (n,))


def _spec(t):
    """What numpy.dtype() takes for datatype t."""
    if t == DATATYPE_NULL or not t:
        raise ValueError("dtlib: MPI.DATATYPE_NULL has no NumPy dtype")
    combiner = t.combiner
    if combiner == COMBINER_NAMED or t.is_predefined and combiner != COMBINER_STRUCT:
        if t._mixed or not t._simple:  # a value-index pair: value then index
            value, index = t._types if t._types else _pair_parts(t)
            return _aligned(["f0", "f1"], [_spec(value), _spec(index)], [0, _pair_offset(value, index)], t.extent)
        return t.tocode() if t._code is not None else t._base.str
    old, name, params = t.decode()
    if name == "DUP":
        return _spec(old)
    lb, extent = t.Get_extent()
    if lb != 0 and not (name == "STRUCT" and lb > 0 and t.true_ub <= extent):  # a struct whose fields fit
        raise ValueError(f"dtlib: {t.Get_name()} has lower bound {lb}; NumPy dtypes start at 0")
    if name == "CONTIGUOUS":
        return (_spec(old), (params["count"],))
    if name == "SUBARRAY":
        sizes, subsizes, starts = params["sizes"], params["subsizes"], params["starts"]
        if sizes != subsizes or any(starts):
            raise ValueError(f"dtlib: a subarray type of part of its array ({subsizes} of {sizes}) has no NumPy dtype")
        shape = sizes[::-1] if params["order"] == ORDER_FORTRAN else sizes
        return (_spec(old), tuple(shape))
    if name == "RESIZED":
        inner = _spec(old)
        if isinstance(inner, dict):
            return dict(inner, itemsize=extent)
        raise ValueError(f"dtlib: a resized basic type ({t.Get_name()}, extent {extent}) has no NumPy dtype")
    if name == "STRUCT":
        types, blocklengths, offsets = params["datatypes"], params["blocklengths"], params["displacements"]
        formats = [_block(_spec(dt), n) for dt, n in zip(types, blocklengths)]
    else:  # vector, hvector, indexed, hindexed, their block forms, darray: a field per block
        formats, offsets = _blocks(old, name, params)
    names = [f"f{i}" for i in range(len(formats))]
    return _aligned(names, formats, offsets, extent)


def _blocks(old, name, params):
    ext = old.extent
    inner = _spec(old)
    if name in ("VECTOR", "HVECTOR"):
        stride = params["stride"] * (ext if name == "VECTOR" else 1)
        return [_block(inner, params["blocklength"])] * params["count"], [i * stride for i in range(params["count"])]
    if name in ("INDEXED", "HINDEXED"):
        scale = ext if name == "INDEXED" else 1
        return ([_block(inner, n) for n in params["blocklengths"]], [d * scale for d in params["displacements"]])
    if name in ("INDEXED_BLOCK", "HINDEXED_BLOCK"):
        scale = ext if name == "INDEXED_BLOCK" else 1
        ds = params["displacements"]
        return [_block(inner, params["blocklength"])] * len(ds), [d * scale for d in ds]
    raise ValueError(f"dtlib: a {name.lower()} datatype has no NumPy dtype")


def _pair_parts(t):
    from .._datatypes import NAMED, _PAIRS
    for name, (v, i) in _PAIRS.items():
        if t._name == f"MPI_{name}":
            return NAMED[v], NAMED[i]
    raise ValueError(f"dtlib: {t.Get_name()} has no NumPy dtype")


def _pair_offset(value, index):
    align = index.size
    return -(-value.size // align) * align
