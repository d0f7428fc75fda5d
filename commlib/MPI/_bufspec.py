"""The message argument of mpi4py's buffer methods (`BufSpec`), parsed exactly as mpi4py does.

    buf                              the whole buffer, datatype from its format
    [buf, datatype]                  datatype: an MPI.Datatype or a typecode string ("d");
                                     it wins over the buffer's format (bytes are reinterpreted)
    [buf, count] / [buf, count, datatype] / [buf, (count, displ), datatype] / [buf, count, displ, datatype]
    None, [None, datatype], [None, 0, datatype]   a message of no elements

Vector collectives take [buf, counts], [buf, (counts, displs)], [buf, (counts, displs), datatype] or
[buf, counts, displs, datatype]; counts is a sequence or one int, displs None (packed), one int
(a stride) or a sequence.

A DLPack array (an object with `__dlpack__` and no buffer protocol: a torch tensor, a CPU JAX array)
is viewed through its capsule (`_kernels.dlpack_view`); then an object with `__cuda_array_interface__`
(`_kernels.cai_view`: host memory only, device memory is a BufferError). The result is always a
view of the caller's memory: a receive writes in place. A non-contiguous
buffer is a BufferError (a receive into a silent copy would be lost), and so is a read-only
buffer given to a receive.
"""
import functools
import mmap
import threading

import numpy as np

from .._kernels import host_span, typemap_copy
from ._buffer import buffer, plain_parts, set_message_types
from ._constants import BOTTOM, IN_PLACE
from ._datatypes import BY_CHAR, NAMED, Datatype, _flat, _int, as_datatype, of_dtype, reach

_BYTE = NAMED["BYTE"]
_EMPTY = np.empty(0, dtype=np.uint8)


class Msg:
    """A parsed message: `array` is a flat view of `count` elements of `datatype` in the caller's
    memory (count * datatype's multiplicity elements of its NumPy base dtype). `given`: the count
    was explicit; `rest` then views the buffer from the displacement to its end (a block
    collective's explicit count is per rank: it may need more than `count` elements)."""

    __slots__ = ("array", "count", "datatype", "given", "rest")

    def __init__(self, array, count, datatype, given=False, rest=None):
        self.array, self.count, self.datatype, self.given, self.rest = array, count, datatype, given, rest

    @property
    def u8(self):
        return self.array.view(np.uint8)

    @property
    def nbytes(self):
        return self.array.nbytes

    def span(self, nbase, what):
        """A flat view of nbase base elements from the displacement on (a block collective's buffer:
        the explicit count is per rank)."""
        arr = self.rest if self.given else self.array
        if arr.size < nbase:
            mult = self.datatype._mult or 1
            raise ValueError(f"{what}: a count of {nbase // mult} elements needs {nbase} of {arr.dtype}, "
                             f"the buffer has {arr.size}")
        return arr[:nbase]


class DMsg:
    """A message of a derived datatype that is not a plain view (holes, a moved lower bound, a
    reordered or mixed typemap): `array` is its packed form, made from the caller's memory on first
    use in one pass of `_kernels.typemap_copy`; a receive's packed form goes back to that memory
    when its call (or request) completes, through `pending_unpack`."""

    __slots__ = ("_mem", "_origin", "count", "datatype", "given", "_writable", "_packed", "_n")

    def __init__(self, mem, origin, count, datatype, given, writable):
        self._mem, self._origin, self.count, self.datatype = mem, origin, count, datatype
        self.given, self._writable, self._packed, self._n = given, writable, None, 0

    def _pack(self, n, what="message", into=None):
        """Pack n elements (into `into`, n elements' bytes, when given) unless that many are packed."""
        if self._packed is not None and n <= self._n:
            return
        dt = self.datatype
        reach(dt, n, self._origin, self._mem.nbytes, what)
        packed = np.empty(n * dt._bytes, np.uint8) if into is None else into
        typemap_copy(self._mem, packed, dt._runs, n, dt._ub - dt._lb, self._origin, True)
        if self._writable and self._packed is None:
            pending_unpack(self._unpack)
        self._packed, self._n = packed, n

    def _unpack(self):
        dt = self.datatype
        typemap_copy(self._mem, self._packed, dt._runs, self._n, dt._ub - dt._lb, self._origin, False)

    def _view(self, n):
        dt = self.datatype
        return self._packed[:n * dt._bytes].view(dt._base) if dt._bytes else np.empty(0, dt._base)

    @property
    def array(self):
        self._pack(self.count)
        return self._view(self.count)

    @property
    def u8(self):
        return self.array.view(np.uint8)

    @property
    def nbytes(self):
        return self.count * self.datatype._bytes

    def span(self, nbase, what):
        mult = self.datatype._mult
        n = nbase // mult if mult else 0
        self._pack(n, what)
        return self._view(n)


_local = threading.local()


def pending_unpack(fn):
    """Run fn (write a packed receive back to the caller's memory) when the current MPI call completes."""
    items = _local.__dict__.get("items")
    if items is None or not _local.depth:
        raise RuntimeError("commlib.MPI internal error: a receive into a derived datatype outside an unpacking call")
    items.append(fn)


def unpacking(method):
    """method, run so that receives into derived datatypes it sets up are unpacked when it returns or,
    for a method returning a request, when the request completes."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        loc = _local
        items = loc.__dict__.setdefault("items", [])
        mark = len(items)
        loc.depth = getattr(loc, "depth", 0) + 1
        try:
            result = method(*args, **kwargs)
        except BaseException:
            del items[mark:]
            raise
        finally:
            loc.depth -= 1
        if len(items) > mark:
            todo = items[mark:]
            del items[mark:]
            if hasattr(result, "_after"):
                result._after(todo)
            else:
                for fn in todo:
                    fn()
        return result
    call._unpacking = True
    return call


def _split(spec):
    """(buf, count slot, displ slot, datatype or None) of a list/tuple message, read by position as
    mpi4py does: [buf, datatype-or-count], [buf, count, datatype], [buf, count, displ, datatype]."""
    n = len(spec)
    if n == 0 or n > 4:
        raise ValueError(f"message: expected [buf], [buf, datatype], [buf, count, datatype] or "
                         f"[buf, count, displ, datatype], got a sequence of {n} items")
    buf, count, displ, dt = spec[0], None, None, None
    if n == 2:
        if spec[1] is None or isinstance(spec[1], (Datatype, str)):
            dt = spec[1]
        else:
            count = spec[1]
    elif n == 3:
        count, dt = spec[1], spec[2]
    elif n == 4:
        count, displ, dt = spec[1], spec[2], spec[3]
    return buf, count, displ, None if dt is None else as_datatype(dt)


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


_RAW_BUFFERS = (bytearray, mmap.mmap)
set_message_types(Datatype, _RAW_BUFFERS)  # the compiled readers of the plain forms (_buffer) read them


def _parse(spec, writable):
    if spec is None:
        return Msg(_EMPTY, 0, _BYTE)
    ts = type(spec)
    if ts is np.ndarray and spec.flags.c_contiguous:  # the common case, fast
        dt = BY_CHAR.get(spec.dtype.char)
        if dt is not None and dt._base == spec.dtype and (spec.flags.writeable or not writable):
            return Msg(spec.reshape(-1), spec.size, dt)
    elif ts is list or ts is tuple:  # ... and its list forms
        parts = plain_parts(spec, writable)
        if parts is not None:
            whole, flat, count, dt = parts
            given = len(spec) == 3
            return Msg(flat, count, dt, given, whole if given else None)
    count = displ = None
    if isinstance(spec, (list, tuple)):
        buf, count, displ, dt = _split(spec)
        if isinstance(count, tuple):
            if displ is not None or len(count) != 2:
                raise ValueError(f"message: expected (count, displ), got {count!r}")
            count, displ = count
        if buf is None:
            if (count or 0) or (displ or 0):
                raise ValueError(f"message: a None buffer can only carry 0 elements, got count {count}")
            return Msg(np.empty(0, dt._base if dt is not None else np.uint8), 0, dt or _BYTE)
    else:
        buf, dt = spec, None
    if dt is not None and _is_bottom(buf):  # [MPI.BOTTOM, count, datatype]: the datatype holds addresses
        count = 0 if count is None else _int(count, "count")  # MPI.BOTTOM alone holds nothing
        mem, origin = _bottom_span(dt, count, 0 if displ is None else _int(displ, "displacement") * (dt._ub - dt._lb),
                                   writable)
        return DMsg(mem, origin, count, dt, True, writable) if not dt._simple else \
            Msg(mem.view(dt._base) if mem.size else np.empty(0, dt._base), count, dt)
    flat, fdt = _flat(buf, writable)
    if dt is not None and not dt._simple:
        return _derived(flat, count, displ, dt, writable)
    flat, dt = _view(flat, fdt, dt, writable)
    mult = dt._mult
    displ = 0 if displ is None else _int(displ, "displacement")
    given = count is not None
    if not given:
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
    return Msg(flat[lo:hi] if (lo or hi != flat.size) else flat, count, dt, given, flat[lo:] if given else None)


def _derived(flat, count, displ, dt, writable):
    """The DMsg of `count` elements (or as many as the buffer holds) of dt at displacement displ."""
    mem = flat.view(np.uint8) if flat.size else np.empty(0, np.uint8)
    ext = dt._ub - dt._lb
    origin = 0 if displ is None else _int(displ, "displacement") * ext
    given = count is not None
    if displ is not None and ext <= 0 and _int(displ, "displacement") != 0:
        raise ValueError(f"message: a displacement needs a datatype of positive extent ({dt.Get_name()}: {ext})")
    if given:
        count = _int(count, "count")
    else:
        avail = mem.nbytes - origin
        if ext <= 0 or avail < 0 or avail % ext:
            raise ValueError(f"message: cannot infer the count of {dt.Get_name()} elements (extent {ext}) in a "
                             f"buffer of {mem.nbytes} bytes; give [buf, count, datatype]")
        count = avail // ext
    m = DMsg(mem, origin, count, dt, given, writable)
    reach(dt, count, origin, mem.nbytes, "message")
    return m


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
    if _is_int(x):
        return [_int(int(x), what)] * size
    vals = [_int(v, what) for v in (x.tolist() if isinstance(x, np.ndarray) else list(x))]
    if len(vals) < size:
        raise ValueError(f"message: {what}s has {len(vals)} entries for {size} ranks")
    return vals[:size]


def parse_vector(spec, size, writable):
    """The message of a vector collective's buffer, for a communicator of `size` ranks."""
    counts = displs = None
    if isinstance(spec, (list, tuple)):
        buf, counts, displs, dt = _split(spec)
        if isinstance(counts, tuple):  # a tuple in the counts slot is always (counts, displs)
            if displs is not None or len(counts) != 2:
                raise ValueError(f"message: expected (counts, displs), got {counts!r}")
            counts, displs = counts
    else:
        buf, dt = spec, None
    if buf is None or _is_bottom(buf):
        flat, dt = np.empty(0, dt._base if dt is not None else np.uint8), dt or _BYTE
    else:
        flat, fdt = _flat(buf, writable)
        if dt is not None and not dt._simple:
            return _derived_vector(flat, counts, displs, dt, size, writable)
        flat, dt = _view(flat, fdt, dt, writable)
    mult = dt._mult
    counts = _ints(counts, size, "count")
    if counts is None:  # as even as possible: the first len % size ranks get one more
        total = flat.size // mult
        counts = [total // size + (1 if i < total % size else 0) for i in range(size)]
    if displs is None:
        displs, pos = [], 0
        for c in counts:
            displs.append(pos)
            pos += c
    elif _is_int(displs):
        displs = [i * _int(displs, "displacement") for i in range(size)]
    else:
        displs = _ints(displs, size, "displacement")
    need = max((d + c for c, d in zip(counts, displs) if c), default=0) * mult
    if need > flat.size:
        raise ValueError(f"message: counts/displacements reach element {need} of a buffer of {flat.size}")
    return VMsg(flat, counts, displs, dt)


def _derived_vector(flat, counts, displs, dt, size, writable):
    """A VMsg over the packed form of a vector message of a derived datatype: each rank's counts[i]
    elements at displs[i] extents, packed one after another (and, for a receive, unpacked back when
    the call completes)."""
    mem = flat.view(np.uint8) if flat.size else np.empty(0, np.uint8)
    ext = dt._ub - dt._lb
    counts = _ints(counts, size, "count")
    if counts is None:
        if ext <= 0 or mem.nbytes % ext:
            raise ValueError(f"message: cannot infer the counts of {dt.Get_name()} elements (extent {ext}) in a "
                             f"buffer of {mem.nbytes} bytes")
        total = mem.nbytes // ext
        counts = [total // size + (1 if i < total % size else 0) for i in range(size)]
    if displs is None:
        displs = list(np.cumsum([0] + counts[:-1]))
    elif _is_int(displs):
        displs = [i * _int(displs, "displacement") for i in range(size)]
    else:
        displs = _ints(displs, size, "displacement")
    packed_displs = [int(d) for d in np.cumsum([0] + counts[:-1])] if counts else []
    packed = np.empty(sum(counts) * dt._bytes, np.uint8)
    for c, d, at in zip(counts, displs, packed_displs):  # each rank's part packed straight into its place
        m = DMsg(mem, int(d) * ext, c, dt, True, writable)
        m._pack(c, "message", packed[at * dt._bytes:(at + c) * dt._bytes])
    packed = packed.view(dt._base) if dt._bytes else np.empty(0, dt._base)
    return VMsg(packed, counts, packed_displs, dt)


def parse_vectorw(spec, size, writable, what):
    """Alltoallw's message, [buf, (counts, displs), datatypes] or [buf, counts, displs, datatypes]
    (displacements in bytes, a datatype per rank): per rank, the packed bytes of its part (for a
    receive, unpacked back when the call completes)."""
    if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3, 4):
        raise ValueError(f"{what}: expected [buf, datatypes], [buf, (counts, displs), datatypes] or "
                         f"[buf, counts, displs, datatypes]")
    if len(spec) == 2:
        (buf, types), counts, displs = spec, None, None
    elif len(spec) == 3:
        buf, cd, types = spec
        if not isinstance(cd, (list, tuple)) or len(cd) != 2:
            raise ValueError(f"{what}: expected (counts, displs), got {cd!r}")
        counts, displs = cd
    else:
        buf, counts, displs, types = spec
    if _is_bottom(buf) and (counts is None or displs is None):
        raise ValueError(f"{what}: a message at MPI.BOTTOM needs its counts and displacements")
    if counts is None and displs is None:  # one element of each rank's datatype at the buffer's start
        counts, displs = [1] * size, [0] * size
    counts, displs = _ints(counts, size, "count"), _ints(displs, size, "displacement")
    types = [as_datatype(t) for t in types] if isinstance(types, (list, tuple)) else [as_datatype(types)] * size
    if counts is None or displs is None or len(types) < size:
        raise ValueError(f"{what}: counts, displacements and datatypes need one entry per rank ({size})")
    at_bottom = _is_bottom(buf)
    if buf is None or at_bottom:
        mem = np.empty(0, np.uint8)
    else:
        flat, _ = _flat(buf, writable)
        mem = flat.view(np.uint8) if flat.size else np.empty(0, np.uint8)
    parts = []
    for c, d, t in zip(counts, displs, types):
        if at_bottom:  # absolute addresses: each part's own span of this process's memory
            mem, d = _bottom_span(t, c, d, writable)
        reach(t, c, d, mem.nbytes, what)
        if t._simple:  # a plain view: received in place
            parts.append(mem[d:d + c * t._bytes])
        else:
            parts.append(DMsg(mem, d, c, t, True, writable).u8)
    return parts


def _bottom_span(dt, count, displ, writable):
    """(bytes, origin) of `count` elements of dt at absolute address `displ` (MPI.BOTTOM + displ):
    the span of memory they touch, probed by the kernel, and where element 0 starts in it."""
    if count == 0 or dt._bytes == 0:
        return np.empty(0, np.uint8), 0
    span = (count - 1) * (dt._ub - dt._lb)
    lo, hi = displ + dt._tlb + min(0, span), displ + dt._tub + max(0, span)
    return host_span(lo, hi - lo, writable), displ - lo


def _is_bottom(buf):
    return type(buf) is int and buf == BOTTOM


def _is_int(x):
    return (isinstance(x, (int, np.integer)) and not isinstance(x, bool)) or (
        isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu")


def block_count(msg, size, what):
    """The per-rank count of a buffer holding one block per rank: the explicit count when one was
    given (MPI's per-process count), else len / size."""
    if msg.given:
        return msg.count
    if msg.count % size:
        raise ValueError(f"{what}: buffer of {msg.count} {msg.datatype.Get_name()} elements does not split into "
                         f"{size} equal blocks")
    return msg.count // size


def blocks(msg, size, what):
    """(flat view of the size blocks, elements per block in base units) of a one-block-per-rank buffer."""
    per = block_count(msg, size, what) * msg.datatype._mult
    return msg.span(per * size, what), per


def address(location):
    """MPI.Get_address: the address of a buffer's first byte (None and MPI.BOTTOM: 0)."""
    if location is None or (type(location) is int and location == BOTTOM):
        return BOTTOM
    if isinstance(location, buffer):
        return location.address  # 0 for an empty one, as mpi4py's
    a, _ = _flat(location, False)
    return a.__array_interface__["data"][0]
