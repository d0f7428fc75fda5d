"""The message argument of mpi4py's buffer methods (`BufSpec`), parsed exactly as mpi4py does.

    buf                              the whole buffer, datatype from its format
    [buf, datatype]                  datatype: an MPI.Datatype or a typecode string ("d");
                                     it wins over the buffer's format (bytes are reinterpreted)
    [buf, count] / [buf, count, datatype] / [buf, (count, displ), datatype] / [buf, count, displ, datatype]
    None, [None, datatype], [None, 0, datatype]   a message of no elements

Vector collectives take [buf, counts], [buf, (counts, displs)], [buf, (counts, displs), datatype] or
[buf, counts, displs, datatype]; counts is a sequence or one int, displs None (packed), one int
(a stride) or a sequence.

The result is always a view of the caller's memory: a receive writes in place. A non-contiguous
buffer is a BufferError (a receive into a silent copy would be lost), and so is a read-only
buffer given to a receive.
"""
import numpy as np

from ._constants import IN_PLACE
from ._datatypes import BY_CHAR, NAMED, Datatype, as_datatype, of_dtype, of_format

_BYTE = NAMED["BYTE"]
_EMPTY = np.empty(0, dtype=np.uint8)


class Msg:
    """A parsed message: `array` is a flat view of `count` elements of `datatype` in the caller's
    memory (count * datatype's multiplicity elements of its NumPy base dtype)."""

    __slots__ = ("array", "count", "datatype")

    def __init__(self, array, count, datatype):
        self.array, self.count, self.datatype = array, count, datatype

    @property
    def u8(self):
        return self.array.view(np.uint8)

    @property
    def nbytes(self):
        return self.array.nbytes


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
        raise TypeError(f"message: expected a buffer (NumPy array, bytearray, array.array, memoryview...) "
                        f"or a list/tuple [buf, ...], got {type(obj).__name__}") from None
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


def _split(spec):
    """(buf, count items, datatype or None) of a list/tuple message."""
    n = len(spec)
    if n == 0 or n > 4:
        raise ValueError(f"message: expected [buf], [buf, datatype], [buf, count, datatype] or "
                         f"[buf, count, displ, datatype], got a sequence of {n} items")
    buf, rest = spec[0], list(spec[1:])
    dt = None
    if rest and (isinstance(rest[-1], (Datatype, str))):
        dt = as_datatype(rest.pop())
    return buf, rest, dt


def _view(flat, fdt, dt, writable):
    """Flat array of dt's base dtype over flat's bytes (reinterpreting when the datatype differs)."""
    if dt is None:
        if fdt is None:
            fdt = of_dtype(flat.dtype)
        return flat, fdt
    base = dt._base
    if flat.dtype != base:
        u8 = flat.view(np.uint8) if flat.size else _EMPTY
        if u8.nbytes % base.itemsize:
            raise ValueError(f"message: buffer of {u8.nbytes} bytes is not a whole number of {dt.Get_name()} "
                             f"elements ({base.itemsize} bytes each)")
        flat = u8.view(base) if u8.nbytes else np.empty(0, base)
    return flat, dt


def _int(x, what):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"message: {what} must be an int, got {type(x).__name__}")
    if x < 0:
        raise ValueError(f"message: {what} must be >= 0, got {x}")
    return int(x)


def _parse(spec, writable):
    if spec is None:
        return Msg(_EMPTY, 0, _BYTE)
    if type(spec) is np.ndarray and spec.flags.c_contiguous:  # the common case, fast
        dt = BY_CHAR.get(spec.dtype.char)
        if dt is not None and dt._base == spec.dtype and (spec.flags.writeable or not writable):
            return Msg(spec.reshape(-1), spec.size, dt)
    count = displ = None
    if isinstance(spec, (list, tuple)):
        buf, rest, dt = _split(spec)
        if len(rest) == 1:
            if isinstance(rest[0], (list, tuple)):
                if len(rest[0]) != 2:
                    raise ValueError(f"message: expected (count, displ), got {rest[0]!r}")
                count, displ = rest[0]
            else:
                count = rest[0]
        elif len(rest) == 2:
            count, displ = rest
        elif rest:
            raise ValueError(f"message: cannot interpret {spec!r}")
        if buf is None:
            if (count or 0) or (displ or 0):
                raise ValueError(f"message: a None buffer can only carry 0 elements, got count {count}")
            return Msg(np.empty(0, dt._base if dt is not None else np.uint8), 0, dt or _BYTE)
    else:
        buf, dt = spec, None
    flat, fdt = _flat(buf, writable)
    flat, dt = _view(flat, fdt, dt, writable)
    mult = dt._mult
    displ = 0 if displ is None else _int(displ, "displacement")
    if count is None:
        avail = flat.size - displ * mult
        if avail < 0 or avail % mult:
            raise ValueError(f"message: buffer of {flat.size} {flat.dtype} elements does not hold whole "
                             f"{dt.Get_name()} elements after displacement {displ}")
        count = avail // mult
    else:
        count = _int(count, "count")
    lo, hi = displ * mult, (displ + count) * mult
    if hi > flat.size:
        raise ValueError(f"message: count {count} at displacement {displ} needs {hi * flat.itemsize} bytes, "
                         f"the buffer has {flat.nbytes}")
    return Msg(flat[lo:hi] if (lo or hi != flat.size) else flat, count, dt)


def parse_send(spec):
    """The message of a send buffer (read-only allowed)."""
    return _parse(spec, False)


def parse_recv(spec):
    """The message of a receive buffer: writable, written in place."""
    return _parse(spec, True)


def is_in_place(spec):
    """MPI.IN_PLACE, or None (mpi4py's other spelling of it as a collective's sendbuf)."""
    return spec is None or spec is IN_PLACE


class VMsg:
    """A vector message: `array` a flat view of the whole buffer in base elements, per-rank
    `counts` and `displs` in datatype elements, and the datatype."""

    __slots__ = ("array", "counts", "displs", "datatype")

    def __init__(self, array, counts, displs, datatype):
        self.array, self.counts, self.displs, self.datatype = array, counts, displs, datatype

    def block(self, i):
        """Rank i's part: a flat view of the buffer."""
        m = self.datatype._mult
        lo = self.displs[i] * m
        return self.array[lo:lo + self.counts[i] * m]


def _ints(x, size, what):
    if x is None:
        return None
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return [_int(x, what)] * size
    vals = [_int(v, what) for v in (x.tolist() if isinstance(x, np.ndarray) else list(x))]
    if len(vals) < size:
        raise ValueError(f"message: {what}s has {len(vals)} entries for {size} ranks")
    return vals[:size]


def parse_vector(spec, size, writable):
    """The message of a vector collective's buffer, for a communicator of `size` ranks."""
    counts = displs = None
    if isinstance(spec, (list, tuple)):
        buf, rest, dt = _split(spec)
        if len(rest) == 1:
            if isinstance(rest[0], tuple) and len(rest[0]) == 2 and not all(
                    isinstance(v, (int, np.integer)) for v in rest[0]):
                counts, displs = rest[0]
            elif isinstance(rest[0], tuple) and len(rest[0]) == 2 and size != 2:
                counts, displs = rest[0]
            else:
                counts = rest[0]
        elif len(rest) == 2:
            counts, displs = rest
        elif rest:
            raise ValueError(f"message: cannot interpret {spec!r}")
    else:
        buf, dt = spec, None
    if buf is None:
        flat, dt = np.empty(0, dt._base if dt is not None else np.uint8), dt or _BYTE
    else:
        flat, fdt = _flat(buf, writable)
        flat, dt = _view(flat, fdt, dt, writable)
    mult = dt._mult
    counts = _ints(counts, size, "count")
    if counts is None:
        total = flat.size // mult
        if flat.size % mult or total % size:
            raise ValueError(f"message: buffer of {total} {dt.Get_name()} elements does not split into "
                             f"{size} equal blocks")
        counts = [total // size] * size
    if displs is None:
        displs, pos = [], 0
        for c in counts:
            displs.append(pos)
            pos += c
    elif isinstance(displs, (int, np.integer)) and not isinstance(displs, bool):
        displs = [i * _int(displs, "displacement") for i in range(size)]
    else:
        displs = _ints(displs, size, "displacement")
    need = max((d + c for c, d in zip(counts, displs) if c), default=0) * mult
    if need > flat.size:
        raise ValueError(f"message: counts/displacements reach element {need} of a buffer of {flat.size}")
    return VMsg(flat, counts, displs, dt)


def block_count(msg, size, what):
    """The per-rank count of a buffer holding one block per rank (count = len / size)."""
    if msg.count % size:
        raise ValueError(f"{what}: buffer of {msg.count} {msg.datatype.Get_name()} elements does not split into "
                         f"{size} equal blocks")
    return msg.count // size
