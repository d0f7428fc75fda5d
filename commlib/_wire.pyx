# cython: language_level=3
"""The wire layer: one fixed binary header in front of every message.

What: the only module that knows the header layout. It turns a message
description into 56 bytes and 56 bytes back into a `Header`, and a `Decoder`
reassembles frames from a byte stream fed in arbitrary slices. No sockets,
threads or clocks live here (sans-IO), so every rule is testable in-process.

Goals:
- Mismatch detection at no per-byte cost. Every collective step carries a
  header that describes the *whole* collective (kind of operation, group,
  sequence number, dtype, op, element count, root, a hash of the shape). All
  ranks that agree build identical bytes, so a receiver compares the header it
  received with the one it sent itself; a difference is a `MismatchError`
  naming both sides, detected before a payload byte is accepted.
- 64-bit counts and lengths everywhere: arrays over 2 GiB are ordinary.
- Hostile input is an error, never a crash, a hang or a huge allocation:
  the magic, version, kind and dtype are checked and payload lengths are
  bounded before anything is buffered.

Plan: 56 bytes, little-endian, no implicit padding, written by one encoder
(`pack_header`, also called from C by the data path through `_wire.pxd`) and
read by `decode` (a `struct.Struct` of the same layout):

    magic   4s  b"CMLB"
    version B   PROTOCOL_VERSION
    kind    B   KIND_COLL | KIND_P2P
    coll    B   which collective (COLL_NAMES index); 0 for point-to-point
    dtype   B   wire dtype code (_dtypes), DT_BYTES for raw bytes / pickles
    op      B   reduction op code, 0 when the collective has none
    flags   B   FLAG_OBJECT: the payload is a pickle (object variants);
                FLAG_SYNC: the sender waits for a FLAG_ACK (issend);
                FLAG_ACK: an acknowledgement of message `seq`, no payload;
                FLAG_BYE: the last frame of a point-to-point connection its
                sender closes for being idle (no payload; root: the sender's
                world rank, group: every group's); its next frames come on a
                new connection
    _pad    H   zero
    group   I   group id (identical on every member of a group)
    root    i   root of a rooted collective; source rank for point-to-point
    shape   I   crc32 of the shape where ranks' shapes must agree, else 0
    seq     Q   per-group collective sequence number / per-pair message number
    tag     q   point-to-point tag; 0 for collectives
    count   Q   element count of the operation
    nbytes  Q   payload bytes following this header in this message
"""
import struct
import zlib

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize

from ._dtypes import DT_BYTES, DTYPE_NAMES, OP_NAMES, dtype_name, op_name
from ._errors import CommError

MAGIC = b"CMLB"
PROTOCOL_VERSION = WIRE_VERSION
KIND_COLL, KIND_P2P = WIRE_KIND_COLL, WIRE_KIND_P2P
FLAG_OBJECT = 1
FLAG_SYNC = 2
FLAG_ACK = 4
FLAG_BYE = 8

_HEADER = struct.Struct("<4sBBBBBBHIiIQqQQ")
HEADER_NBYTES = _HEADER.size  # 56 == HEADER_LEN

# Collective ids on the wire; index = code. Never renumber.
COLL_NAMES = (
    "send", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
    "reduce", "gather", "scatter", "all_to_all", "ppermute", "split",
    "broadcast_obj", "all_gather_obj", "gather_obj", "scatter_obj",
)
COLL = {name: i for i, name in enumerate(COLL_NAMES)}
if (COLL["all_reduce"], COLL["all_gather"], COLL["reduce_scatter"], COLL["broadcast"], COLL["barrier"], COLL["reduce"],
        COLL["broadcast_obj"], COLL["all_gather_obj"]) != (COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER,
                                                           COLL_BROADCAST, COLL_BARRIER, COLL_REDUCE,
                                                           COLL_BROADCAST_OBJ, COLL_ALL_GATHER_OBJ):
    raise ImportError("_wire.pxd's collective codes do not match COLL_NAMES")

# A point-to-point or object payload larger than this is refused by the
# decoder (collective payload sizes are known to the receiver beforehand).
MAX_FRAME_NBYTES = 1 << 46


class ProtocolError(CommError):
    """Bytes on a connection that are not a valid commlib frame."""


class Header:
    """A decoded header; fields as in the module docstring."""

    __slots__ = ("kind", "coll", "dtype", "op", "flags", "group", "root", "shape", "seq", "tag", "count", "nbytes")

    def __init__(self, kind, coll, dtype, op, flags, group, root, shape, seq, tag, count, nbytes):
        self.kind, self.coll, self.dtype, self.op, self.flags = kind, coll, dtype, op, flags
        self.group, self.root, self.shape, self.seq, self.tag = group, root, shape, seq, tag
        self.count, self.nbytes = count, nbytes

    def encode(self):
        return encode(self.kind, self.coll, self.dtype, self.op, self.flags, self.group, self.root,
                      self.shape, self.seq, self.tag, self.count, self.nbytes)

    def describe(self):
        """Human form used in error messages: `all_reduce #3 (float32, 1024, op=sum)`."""
        if self.kind == KIND_P2P:
            return f"send(tag={self.tag}, {dtype_name(self.dtype)}, {self.count})"
        name = COLL_NAMES[self.coll]
        parts = [dtype_name(self.dtype), str(self.count)]
        if name in ("all_reduce", "reduce_scatter", "reduce"):
            parts.append(f"op={op_name(self.op)}")
        if name in ("broadcast", "reduce", "gather", "scatter"):
            parts.append(f"root={self.root}")
        return f"{name} #{self.seq} ({', '.join(parts)})"

    def __eq__(self, other):
        return isinstance(other, Header) and all(getattr(self, f) == getattr(other, f) for f in self.__slots__)

    def __repr__(self):
        fields = ", ".join(f"{f}={getattr(self, f)}" for f in self.__slots__)
        return f"Header({fields})"


cdef inline void _put(unsigned char* p, unsigned long long v, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        p[i] = (v >> (8 * i)) & 0xFF


cdef void pack_header(unsigned char* h, int kind, int coll, int dtype, int op, int flags, unsigned int group,
                      int root, unsigned int shape, unsigned long long seq, long long tag, unsigned long long count,
                      unsigned long long nbytes) noexcept nogil:
    """Write the 56 header bytes at h: the one encoder, in the layout of the module docstring."""
    h[0], h[1], h[2], h[3] = b'C', b'M', b'L', b'B'
    h[4], h[5], h[6], h[7], h[8], h[9], h[10], h[11] = WIRE_VERSION, kind, coll, dtype, op, flags, 0, 0
    _put(h + 12, group, 4)
    _put(h + 16, <unsigned int>root, 4)
    _put(h + 20, shape, 4)
    _put(h + 24, seq, 8)
    _put(h + 32, <unsigned long long>tag, 8)
    _put(h + 40, count, 8)
    _put(h + 48, nbytes, 8)


cdef bytes _header(int kind, int coll, int dtype, int op, int flags, unsigned int group, int root, unsigned int shape,
                   unsigned long long seq, long long tag, unsigned long long count, unsigned long long nbytes):
    if not (0 <= kind < 256 and 0 <= coll < 256 and 0 <= dtype < 256 and 0 <= op < 256 and 0 <= flags < 256):
        raise struct.error("a header byte field is out of range")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, HEADER_LEN)
    pack_header(<unsigned char*>PyBytes_AS_STRING(out), kind, coll, dtype, op, flags, group, root, shape, seq, tag,
                count, nbytes)
    return out


def encode(kind, coll, dtype, op, flags, group, root, shape, seq, tag, count, nbytes):
    """The 56 header bytes for these fields (all of them, positionally: prefer the named constructors)."""
    return _header(kind, coll, dtype, op, flags, group, root, shape, seq, tag, count, nbytes)


def collective_header(*, coll, group, seq, dtype=0, op=0, count=0, root=0, shape=0):
    """The header every step of collective `coll` #seq carries; identical on every rank that agrees."""
    return _header(KIND_COLL, COLL[coll], dtype, op, 0, group, root, shape, seq, 0, count, 0)


def message_header(*, group, source, tag, dtype, count, nbytes, flags=0, seq=0):
    """A point-to-point message of nbytes from group rank `source`; seq numbers the pair's messages."""
    return _header(KIND_P2P, 0, dtype, 0, flags, group, source, 0, seq, tag, count, nbytes)


def ack_header(*, group, source, tag, seq):
    """The receiver's acknowledgement that message `seq` (an issend) was matched."""
    return _header(KIND_P2P, 0, DT_BYTES, 0, FLAG_ACK, group, source, 0, seq, tag, 0, 0)


def bye_header(*, group, source):
    """The last frame of an idle point-to-point connection that world rank `source` closes; `group`:
    the key every group's connections share."""
    return _header(KIND_P2P, 0, DT_BYTES, 0, FLAG_BYE, group, source, 0, 0, 0, 0, 0)


_SHAPE_HASHES = {}


def shape_hash(shape):
    """A 32-bit fingerprint of a shape, so ranks can agree on shapes cheaply."""
    if type(shape) is tuple:  # numpy shapes are tuples of ints: the common, fast case
        h = _SHAPE_HASHES.get(shape)
        if h is not None:
            return h
    key = tuple(int(d) for d in shape)
    h = _SHAPE_HASHES.get(key)
    if h is None:
        if len(_SHAPE_HASHES) > 4096:  # bounded: programs with ever-new shapes
            _SHAPE_HASHES.clear()
        h = _SHAPE_HASHES[key] = zlib.crc32(repr(key).encode())
    return h


def decode(data):
    """Parse exactly HEADER_NBYTES bytes into a Header; ProtocolError if invalid."""
    if len(data) != HEADER_NBYTES:
        raise ProtocolError(f"truncated header: {len(data)} of {HEADER_NBYTES} bytes")
    (magic, version, kind, coll, dtype, op, flags, _pad, group, root, shape, seq, tag, count,
     nbytes) = _HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}: not a commlib frame")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version} from peer, this is version {PROTOCOL_VERSION}")
    if kind not in (KIND_COLL, KIND_P2P):
        raise ProtocolError(f"unknown frame kind {kind}")
    if coll >= len(COLL_NAMES):
        raise ProtocolError(f"unknown collective id {coll}")
    if dtype >= len(DTYPE_NAMES) and dtype != DT_BYTES:
        raise ProtocolError(f"unknown dtype code {dtype}")
    if op >= len(OP_NAMES):
        raise ProtocolError(f"unknown reduction op code {op}")
    if nbytes > MAX_FRAME_NBYTES:
        raise ProtocolError(f"declared payload of {nbytes} bytes exceeds the limit of {MAX_FRAME_NBYTES}")
    return Header(kind, coll, dtype, op, flags, group, root, shape, seq, tag, count, nbytes)


NEED_DATA = object()  # sentinel: feed more bytes


class Decoder:
    """Reassembles (Header, payload) frames from a stream fed in arbitrary slices.

    `max_nbytes` bounds what one frame may make us buffer: a peer declaring
    a larger payload is a ProtocolError before any of it is stored.
    """

    def __init__(self, max_nbytes=MAX_FRAME_NBYTES):
        self._buf = bytearray()
        self._header = None
        self._max = max_nbytes

    def feed(self, data):
        self._buf += data

    def next_frame(self):
        """Return (Header, payload bytes), or NEED_DATA."""
        if self._header is None:
            if len(self._buf) < HEADER_NBYTES:
                return NEED_DATA
            header = decode(bytes(self._buf[:HEADER_NBYTES]))
            if header.nbytes > self._max:
                raise ProtocolError(f"declared payload of {header.nbytes} bytes exceeds this receiver's limit of {self._max}")
            del self._buf[:HEADER_NBYTES]
            self._header = header
        if len(self._buf) < self._header.nbytes:
            return NEED_DATA
        header, self._header = self._header, None
        payload = bytes(self._buf[:header.nbytes])
        del self._buf[:header.nbytes]
        return header, payload

    @property
    def buffered(self):
        """Bytes fed but not yet returned in a frame."""
        return len(self._buf)
