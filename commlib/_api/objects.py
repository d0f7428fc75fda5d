"""Object variants: send, receive and run collectives on arbitrary picklable Python objects.

What: `send_obj`, `recv_obj`, `broadcast_obj`, `all_gather_obj`, `gather_obj`,
`scatter_obj` (API.md, "Object variants"). Objects are pickled with protocol 5
and out-of-band buffers, so a large numpy array (anything exposing a
contiguous `pickle.PickleBuffer`) inside an object is never copied into the
pickle stream: its memory goes to the socket as it is, and the receiver
reconstructs the array directly on the bytes it received.

Security: bytes are only ever unpickled after arriving on commlib's own
connections, which are authenticated by construction of the transport (each
connection proves the job's secret with HMAC-SHA256 before a payload byte is
read; see `_transport`). Unpickling can run arbitrary code, so this is what
keeps a stranger on the network from executing code in a rank: only the
job's own ranks can reach `pickle.loads` here. Within the job, ranks trust
each other, as in mpi4py.

The frame. One serialized object is a *frame*, a self-describing run of bytes
whose lengths are all 64-bit (objects over 2 GiB are ordinary; the transport
caps each syscall itself):

    offset 0          int64[2 + k] table: k, stream_len, len(buf_0) ... len(buf_k-1)
    align64(...)      the pickle stream (stream_len bytes)
    align64(...)      buf_0, then each further buffer at the next 64-byte boundary

Padding is zero. Buffers start at 64-byte offsets of the frame; collectives
receive frames into 64-byte aligned allocations, point-to-point receives into
numpy's own (16-byte aligned or better), so every array rebuilt from an
out-of-band buffer is aligned for its dtype. Buffers smaller than
`OOB_MIN_BYTES` stay in-band (copying them is cheaper than a separate piece).
A rebuilt array is a writable view into the received frame: it keeps that
frame alive (all of it, if one object holds several arrays).

Point-to-point. `send_obj` sends one message whose header (FLAG_OBJECT,
dtype DT_BYTES, 64-bit nbytes = the frame size) is followed by the frame,
written piece by piece from where the pieces are (the table and stream, then
each buffer straight from the array's memory); the receiver reads the whole
frame into one buffer with `Group.recv_bytes`, no copy. FLAG_OBJECT makes
`recv` of an array refuse a pickle and `recv_obj` refuse an array
(`MismatchError`, from the engine's fit check). Object and array messages share the
(source, tag) ordering of API.md.

Collectives. Each object collective is ONE collective operation on the
collective channel under its own wire id (broadcast_obj, all_gather_obj,
gather_obj, scatter_obj), so ranks that call different collectives, or pass
different roots, get a MismatchError naming both sides instead of silently
exchanging the wrong bytes. They use no point-to-point tags at all, so they
cannot collide with user messages. Within the operation a frame travels as
*pieces*: meta int64[3] = (k, stream_len, frame size), then the k buffer
lengths, the stream, and each buffer, each received straight into its place
in the receiver's frame (the padding is not sent):

- broadcast_obj: every piece is broadcast with the array broadcast's
  algorithms (binomial tree when small, pipelined chain when large). The root
  sends from its objects' own memory: no copy at all on the root.
- all_gather_obj: an all-gather of fixed 256-byte slots (each frame's size,
  and the frame itself when it fits), with the array all-gather's algorithm;
  then, for larger frames, an all-gather of the frames into one buffer: in
  equal padded blocks by the log-step schedule where the frames are of
  near-equal sizes and it is chosen, else by the ring in variable blocks.
- gather_obj / scatter_obj: linear: the root receives from / sends to each
  rank in turn (the root's link is the bottleneck either way).

An error before anything is sent (an object that does not pickle, a bad
`objs` on the scatter root) is announced to the other ranks with a negative
meta (k = -1: ValueError, k = -2: the object could not be pickled; the message
follows), so every rank raises instead of waiting for a timeout.

Copies. `broadcast_obj` returns `obj` itself on the root and a copy elsewhere;
the other collectives return unpickled copies everywhere, including a rank's
own entry (as mpi4py does). Size-1 groups follow the same rules.
"""
import functools
import pickle
import struct

import numpy as np

from .._algorithms import choose, logstep
from .._plan import even, single, slots
from .._dtypes import DT_BYTES
from .._engine import ANY_SOURCE, ANY_TAG, Status
from .._errors import CommError, MismatchError
from .._wire import FLAG_OBJECT
from .collectives import _g, _run_broadcast, broadcast_slot, gather_slots
from .p2p import _src, _tag

__all__ = ["send_obj", "recv_obj", "broadcast_obj", "all_gather_obj", "gather_obj", "scatter_obj"]

ALIGN = 64
OOB_MIN_BYTES = 64 << 10  # smaller PickleBuffers are serialized in-band
COALESCE_BYTES = 256 << 10  # a point-to-point frame up to this size is sent as one contiguous piece
HEAD_COPY_BYTES = 1 << 20  # a stream up to this size is copied next to the table (one piece)
_ZEROS = np.zeros(ALIGN, dtype=np.uint8)
_ERR_VALUE, _ERR_PICKLE = -1, -2


def _align(n):
    return (n + ALIGN - 1) & ~(ALIGN - 1)


_STREAM_AT = _align(16)  # the pickle stream's offset in a frame of no out-of-band buffer (its table: k = 0, length)
_Q2 = struct.Struct("<qq")  # two little-endian int64: a frame table's head, a slot's head
_Q4 = struct.Struct("<qqqq")


def _u8(buf):
    """A flat uint8 ndarray over any contiguous buffer (no copy)."""
    if isinstance(buf, np.ndarray):
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _addr(a):
    return a.ctypes.data


def _move(op, dst, src, u8):
    """Send u8 to group rank dst or receive it from src: a one-step plan of collective `op`."""
    op.run(single(dst, src), slots(_addr(u8), _addr(u8)), even(u8.nbytes, 1))


def _empty(nbytes):
    """An uninitialised uint8 array of nbytes starting at a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + nbytes]


def layout(k, stream_len, lens):
    """(stream offset, buffer offsets, frame size) of a frame with this table."""
    if k != len(lens):
        raise ValueError(f"table says {k} buffers but lists {len(lens)}")
    off = _align(8 * (2 + k))
    stream_off, end = off, off + stream_len
    offs = []
    for n in lens:
        o = _align(end)
        offs.append(o)
        end = o + n
    return stream_off, offs, end


class Frame:
    """An object serialized for the wire: table, pickle stream and out-of-band buffers."""

    __slots__ = ("stream", "buffers", "lens", "_table", "stream_off", "buf_offs", "nbytes")

    def __init__(self, obj):
        buffers = []

        def keep(pb):
            try:
                mv = pb.raw()
            except BufferError:  # not contiguous: let pickle handle it in-band
                return True
            if mv.nbytes < OOB_MIN_BYTES:
                return True  # in-band
            buffers.append(mv)
            return False  # out-of-band

        self.stream = pickle.dumps(obj, protocol=5, buffer_callback=keep)
        self._table = None  # made when first asked for: a small object's slot is written without it
        if not buffers:  # (most objects: layout() of no buffer)
            self.buffers, self.lens, self.buf_offs = [], [], []
            self.stream_off, self.nbytes = _STREAM_AT, _STREAM_AT + len(self.stream)
            return
        self.buffers = [_u8(mv) for mv in buffers]
        self.lens = [b.nbytes for b in self.buffers]
        self.stream_off, self.buf_offs, self.nbytes = layout(len(self.buffers), len(self.stream), self.lens)

    @property
    def table(self):
        """int64 [number of out-of-band buffers, stream length, each buffer's length]."""
        if self._table is None:
            self._table = np.array([len(self.buffers), len(self.stream), *self.lens], dtype=np.int64)
        return self._table

    @property
    def meta(self):
        return np.array([len(self.buffers), len(self.stream), self.nbytes], dtype=np.int64)

    def assemble(self, out=None):
        """The whole frame as one contiguous uint8 array (into `out` if given)."""
        if out is None:
            out = _empty(self.nbytes)
        tb = self.table.view(np.uint8)
        out[:tb.nbytes] = tb
        out[tb.nbytes:self.stream_off] = 0
        end = self.stream_off + len(self.stream)
        out[self.stream_off:end] = _u8(self.stream)
        for o, b in zip(self.buf_offs, self.buffers):
            out[end:o] = 0
            out[o:o + b.nbytes] = b
            end = o + b.nbytes
        out[end:] = 0  # trailing alignment padding: zero, as on the wire
        return out

    def wire(self):
        """The frame as consecutive uint8 arrays, padding included, mostly without copying."""
        if self.nbytes <= COALESCE_BYTES:
            return [self.assemble()]
        first = self.buf_offs[0] if self.buffers else self.nbytes
        if len(self.stream) <= HEAD_COPY_BYTES:
            head = np.zeros(first, dtype=np.uint8)  # table, stream and padding in one piece
            head[:self.table.nbytes] = self.table.view(np.uint8)
            head[self.stream_off:self.stream_off + len(self.stream)] = _u8(self.stream)
            pieces = [head]
        else:
            pre = np.zeros(self.stream_off, dtype=np.uint8)
            pre[:self.table.nbytes] = self.table.view(np.uint8)
            pieces = [pre, _u8(self.stream)]
            pad = first - self.stream_off - len(self.stream)
            if pad:
                pieces.append(_ZEROS[:pad])
        for i, b in enumerate(self.buffers):
            pieces.append(b)
            if i + 1 < len(self.buffers):
                pad = self.buf_offs[i + 1] - self.buf_offs[i] - b.nbytes
                if pad:
                    pieces.append(_ZEROS[:pad])
        return pieces


def loads(frame):
    """The object in a received frame (a uint8 ndarray); arrays in it are views of the frame."""
    n = frame.nbytes
    if n < 16:
        raise CommError(f"object frame of {n} bytes is too short")
    k, slen = (int(v) for v in frame[:16].view(np.int64))
    if k < 0 or slen < 0 or 8 * (2 + k) > n:
        raise CommError(f"corrupt object frame: table says {k} buffers, stream of {slen} bytes, frame {n}")
    lens = [int(v) for v in frame[16:16 + 8 * k].view(np.int64)]
    if any(v < 0 for v in lens):
        raise CommError("corrupt object frame: negative buffer length")
    soff, offs, end = layout(k, slen, lens)
    if end != n:
        raise CommError(f"corrupt object frame: its table describes {end} bytes, {n} arrived")
    mv = memoryview(frame)
    return pickle.loads(mv[soff:soff + slen], buffers=[mv[o:o + ln] for o, ln in zip(offs, lens)])


def _copy(obj):
    """What a receiver would get: a pickled-and-unpickled copy of obj."""
    return loads(Frame(obj).assemble())


def _frame_or_error(obj):
    """(Frame, None) or (None, exception) when obj cannot be pickled."""
    try:
        return Frame(obj), None
    except Exception as exc:  # pickling runs user code: anything can come out
        return None, exc


# ---------------------------------------------------------- piece protocol
def _send_frame(frame, move):
    """Move a frame out as pieces: meta, buffer lengths, stream, buffers."""
    move(frame.meta)
    if frame.buffers:
        move(frame.table[2:])
    move(_u8(frame.stream))
    for b in frame.buffers:
        move(b)


def _send_error(kind, message, move):
    msg = np.frombuffer(message.encode("utf-8", "replace"), dtype=np.uint8)
    move(np.array([kind, msg.nbytes, 0], dtype=np.int64))
    if msg.nbytes:
        move(msg)


class _RemoteError:
    """What a receiver gets instead of a frame when the sender announced a failure."""

    def __init__(self, kind, message):
        self.kind, self.message = kind, message

    def exception(self, prefix):
        cls = ValueError if self.kind == _ERR_VALUE else CommError
        return cls(f"{prefix}: {self.message}")


def _recv_frame(move, what, peer):
    """Receive a frame moved as pieces by _send_frame; returns the frame or a _RemoteError."""
    meta = np.empty(3, dtype=np.int64)
    move(meta)
    k, slen, nbytes = (int(v) for v in meta)
    if k < 0:
        msg = np.empty(max(slen, 0), dtype=np.uint8)
        if slen > 0:
            move(msg)
        return _RemoteError(k, msg.tobytes().decode("utf-8", "replace"))
    if slen < 0 or nbytes < 8 * (2 + k):
        raise MismatchError(f"{what}: rank {peer} announced an invalid object frame "
                            f"({k} buffers, stream {slen} bytes, {nbytes} bytes)", rank=peer)
    frame = _empty(nbytes)
    table = frame[:8 * (2 + k)].view(np.int64)
    table[:2] = (k, slen)
    if k:
        move(table[2:])
    lens = [int(v) for v in table[2:]]
    soff, offs, end = layout(k, slen, lens)
    if end != nbytes or any(v < 0 for v in lens):
        raise MismatchError(f"{what}: rank {peer} sent buffer lengths that do not add up to "
                            f"its frame of {nbytes} bytes", rank=peer)
    frame[8 * (2 + k):soff] = 0
    move(frame[soff:soff + slen])
    end = soff + slen
    for o, n in zip(offs, lens):
        frame[end:o] = 0  # alignment padding is zero here as on the sender
        if n:
            move(frame[o:o + n])
        end = o + n
    frame[end:] = 0
    return frame


# ----------------------------------------------------------- point-to-point
def send_obj(obj, dst, tag=0, *, group=None):
    """Send a picklable object to rank dst (MPI semantics: a blocking send of its pickle)."""
    g = _g(group)
    dst, tag = g.check_rank(dst, "dst"), _tag(tag, False)
    frame = Frame(obj)
    pieces = frame.wire() if dst != g.rank() else [frame.assemble()]
    g.engine.send(g.p2p, dst, pieces, tag=tag, dtype=DT_BYTES, count=frame.nbytes, flags=FLAG_OBJECT,
                  what=f"send_obj(tag={tag})", block=True)


def recv_obj(src=ANY_SOURCE, tag=ANY_TAG, *, status=False, group=None):
    """Receive an object sent with send_obj; `status=True` returns (obj, Status)."""
    g = _g(group)
    src, tag = _src(g, src), _tag(tag, True)

    def finish(msg, payload):
        obj = loads(payload)
        return (obj, Status(msg.source, msg.tag, msg.nbytes, msg.count, msg.dtype)) if status else obj

    return g.engine.recv(g.p2p, src, tag, None, finish, what=f"recv_obj(tag={tag})", block=True, check=None)


# -------------------------------------------------------------- collectives
# broadcast_obj and all_gather_obj start with one fixed-size round: each rank's frame size (or a
# negative error kind) in a slot of SLOT_BYTES, with the frame itself when it fits, so a small
# object takes one collective, on the one-call path when the group is idle. Only when a frame does
# not fit does a second collective move the frames, as every rank knows from the first round.
SLOT_BYTES = 256
_SLOT_HEAD = 16  # int64 frame size (or error kind), int64 error message length


_SMALL = SLOT_BYTES - _SLOT_HEAD - _STREAM_AT  # the longest pickle stream a slot holds with its frame's table
_SCALARS = frozenset((int, float, bool, type(None), str, bytes, complex))  # pickled with no buffer of their own
_NOT_SMALL = object()  # _small_loads: a slot the general reading takes


def _small_stream(obj):
    """obj's pickle stream where it fits a first-round slot with no out-of-band buffer (the usual
    object of an object collective: a number, a short string, a small dict), else None: the general
    path (Frame, which also reports an object that cannot be pickled)."""
    try:
        if type(obj) in _SCALARS:
            stream = pickle.dumps(obj, 5)
        else:
            oob = []  # any PickleBuffer (an array, a bytearray): the general path decides in- or out-of-band
            stream = pickle.dumps(obj, 5, buffer_callback=oob.append)
            if oob:
                return None
    except Exception:  # noqa: BLE001  (Frame pickles it again and carries the error to every rank)
        return None
    return stream if len(stream) <= _SMALL else None


def _put_small(mv, at, stream):
    """Write the slot at byte `at` of mv (zeros) of a frame of no out-of-band buffer whose pickle stream
    fits it (at most _SMALL bytes): the slot's head, the frame's table, the stream (the padding between
    them: the slot's zeros)."""
    k = len(stream)
    _Q4.pack_into(mv, at, _STREAM_AT + k, 0, 0, k)
    at += _SLOT_HEAD + _STREAM_AT
    mv[at:at + k] = stream


def _small_loads(mv, at):
    """The object of the slot at byte `at` of mv where it holds a frame _put_small wrote (the usual
    object), unpickled where it lies; _NOT_SMALL for any other slot (an error, a frame of out-of-band
    buffers, a large one: the general reading)."""
    size, _, k, slen = _Q4.unpack_from(mv, at)
    if size < 0 or k or size != _STREAM_AT + slen or slen > _SMALL:
        return _NOT_SMALL
    at += _SLOT_HEAD + _STREAM_AT
    return pickle.loads(mv[at:at + slen])



def _fill_slot(slot, frame, err):
    """This rank's first-round slot (uint8 zeros, SLOT_BYTES): frame size and the frame if it fits, or the error."""
    if err is None and not frame.buffers and frame.nbytes <= SLOT_BYTES - _SLOT_HEAD:  # the usual small object
        _put_small(memoryview(slot), 0, frame.stream)
        return
    head = slot[:_SLOT_HEAD].view(np.int64)
    if err is not None:
        msg = f"{type(err).__name__}: {err}".encode("utf-8", "replace")[:SLOT_BYTES - _SLOT_HEAD]
        head[:] = (_ERR_PICKLE, len(msg))
        slot[_SLOT_HEAD:_SLOT_HEAD + len(msg)] = np.frombuffer(msg, np.uint8)
    else:
        head[:] = (frame.nbytes, 0)
        if frame.nbytes <= SLOT_BYTES - _SLOT_HEAD:
            frame.assemble(slot[_SLOT_HEAD:_SLOT_HEAD + frame.nbytes])


def _slot_loads(flat, mv, at, size):
    """The object of the frame of `size` bytes at byte `at` of the uint8 array `flat` (mv: a memoryview
    of it): unpickled straight from mv where it has no out-of-band buffer, else by loads()."""
    k, slen = _Q2.unpack_from(mv, at)
    if k == 0 and size == _STREAM_AT + slen:
        return pickle.loads(mv[at + _STREAM_AT:at + size])
    return loads(flat[at:at + size])


def _slot_error(slot):
    """The error message a first-round slot carries, or None."""
    kind, mlen = _Q2.unpack_from(slot)
    if kind >= 0:
        return None
    return slot[_SLOT_HEAD:_SLOT_HEAD + max(0, min(mlen, SLOT_BYTES - _SLOT_HEAD))].tobytes().decode("utf-8", "replace")


def _broadcast_frame(g, frame, root):
    """Second round of broadcast_obj: root's whole frame (larger than a slot), moved in pieces."""
    op = g.op("broadcast_obj", DT_BYTES, 0, 0, root, 0)

    def move(a):
        u8 = _u8(a)
        if u8.nbytes:
            _run_broadcast(op, g, _addr(u8), u8.nbytes, root)

    if frame is not None:
        _send_frame(frame, move)
        return None
    got = _recv_frame(move, op.what, g.world[root])
    if isinstance(got, _RemoteError):  # pragma: no cover - the first round carries the root's errors
        raise got.exception(f"broadcast_obj: root {root} could not pickle its object")
    return loads(got)


def _all_gather_frames(g, frame, lens):
    """Second round of all_gather_obj: every rank's frame (lens: their sizes, one larger than a slot).
    Frames of near-equal sizes go in equal padded blocks, by the all-gather's log-step schedule where
    it would take one (ceil(log2 n) steps, not the ring's n - 1); others by the ring, packed."""
    n, me = g.size(), g.rank()
    op = g.op("all_gather_obj", DT_BYTES, 0, n, 0, 0)
    width = _align(max(lens))
    if n > 3 and n * width <= 2 * sum(lens) and choose("all_gather", n * width, n) == "bruck":
        buf = _empty(n * width)
        frame.assemble(buf[me * width:me * width + lens[me]])
        plan = logstep.all_gather(n, me)
        op.run(plan, slots(res=_addr(buf), scratch=g.scratch(n * width) if plan.name == "bruck" else 0),
               even(n * width, 1))
        return [loads(buf[r * width:r * width + ln]) for r, ln in enumerate(lens)]
    offs, total = [], 0
    for ln in lens:
        offs.append(total)
        total = _align(total + ln)
    buf = _empty(total)
    frame.assemble(buf[offs[me]:offs[me] + lens[me]])
    # unit r: rank r's frame and the padding after it, up to the next 64-byte boundary
    op.run(g.ring_all_gather(), slots(res=_addr(buf)), np.array(offs + [total], dtype=np.int64))
    return [loads(buf[o:o + ln]) for o, ln in zip(offs, lens)]


def _gather_obj_impl(obj, root=0, *, group=None):
    """Every rank's object as a list on root (unpickled copies), None elsewhere."""
    g = _g(group)
    root = g.check_rank(root, "root")
    n, me = g._size, g._rank
    if n == 1:
        return [_copy(obj)]
    frame, err = _frame_or_error(obj)
    op = g.op("gather_obj", DT_BYTES, 0, n, root, 0)
    if me != root:
        def move(a):
            _move(op, root, None, _u8(a))

        if err is not None:
            _send_error(_ERR_PICKLE, f"{type(err).__name__}: {err}", move)
            raise err
        _send_frame(frame, move)
        return None
    out, failed = [None] * n, []
    for r in range(n):
        if r == me:
            if err is None:
                out[r] = loads(frame.assemble())
            continue

        def move(a, r=r):
            _move(op, None, r, _u8(a))

        got = _recv_frame(move, op.what, g.world[r])
        if isinstance(got, _RemoteError):
            failed.append(f"rank {r}: {got.message}")
        else:
            out[r] = loads(got)
    if err is not None:
        raise err
    if failed:
        raise CommError("gather_obj: objects could not be pickled on " + "; ".join(failed))
    return out


def _scatter_obj_impl(objs, root=0, *, group=None):
    """Root passes a sequence of `size` objects; rank r gets (an unpickled copy of) objs[r].

    Non-roots pass None (anything they pass is ignored). A root `objs` of the
    wrong length raises ValueError on every rank.
    """
    g = _g(group)
    root = g.check_rank(root, "root")
    n, me = g._size, g._rank
    problem = frames = None
    if me == root:
        try:
            count = len(objs)
        except TypeError:
            problem = (_ERR_VALUE, ValueError(f"scatter_obj: the root must pass a sequence of {n} objects, "
                                              f"got {type(objs).__name__}"))
        else:
            if count != n:
                problem = (_ERR_VALUE, ValueError(f"scatter_obj: the root passed {count} objects "
                                                  f"for a group of size {n}"))
        if problem is None:
            frames = []
            for i in range(n):
                frame, err = _frame_or_error(objs[i])
                if err is not None:
                    problem = (_ERR_PICKLE, err)
                    break
                frames.append(frame)
        if n == 1:
            if problem is not None:
                raise problem[1]
            return loads(frames[0].assemble())
    elif n == 1:  # pragma: no cover - a size-1 group has only the root
        raise AssertionError
    op = g.op("scatter_obj", DT_BYTES, 0, n, root, 0)
    if me == root:
        for r in range(n):
            if r == me:
                continue

            def move(a, r=r):
                _move(op, r, None, _u8(a))

            if problem is not None:
                kind, exc = problem
                _send_error(kind, str(exc) if kind == _ERR_VALUE else f"{type(exc).__name__}: {exc}", move)
            else:
                _send_frame(frames[r], move)
        if problem is not None:
            raise problem[1]
        return loads(frames[me].assemble())

    def move(a):
        _move(op, None, root, _u8(a))

    got = _recv_frame(move, op.what, g.world[root])
    if isinstance(got, _RemoteError):
        if got.kind == _ERR_VALUE:
            raise ValueError(f"{got.message} (reported by the root, rank {root})")
        raise CommError(f"scatter_obj: root {root} could not pickle an object: {got.message}")
    return loads(got)


# Each object collective is one or two collectives of its group's ordered stream.
def broadcast_obj(obj, root=0, *, group=None):
    """Root's object on every rank: `obj` itself on the root, an unpickled copy elsewhere."""
    g = _g(group)
    root = g.check_rank(root, "root")
    if g.size() == 1:
        return obj
    is_root = g.rank() == root
    frame = err = None
    slot = np.zeros(SLOT_BYTES, np.uint8)
    if is_root:
        stream = _small_stream(obj)
        if stream is not None:  # the usual small object: the slot written straight from its pickle
            _put_small(memoryview(slot), 0, stream)
        else:
            frame, err = _frame_or_error(obj)
            _fill_slot(slot, frame, err)
    broadcast_slot(slot, root, "broadcast_obj", g)
    if err is not None:
        raise err
    if not is_root:  # a small frame (the usual case): unpickled where it lies
        got = _small_loads(memoryview(slot), 0)
        if got is not _NOT_SMALL:
            return got
    problem = _slot_error(slot)
    if problem is not None:
        raise CommError(f"broadcast_obj: root {root} could not pickle its object: {problem}")
    size = _Q2.unpack_from(slot)[0]
    if size > SLOT_BYTES - _SLOT_HEAD:
        got = g.stream.run(_broadcast_frame, g, frame, root)
        return obj if is_root else got
    return obj if is_root else _slot_loads(slot, memoryview(slot), _SLOT_HEAD, size)


def all_gather_obj(obj, *, group=None):
    """Every rank's object, in rank order (unpickled copies, this rank's included)."""
    g = _g(group)
    n, me = g.size(), g.rank()
    if n == 1:
        return [_copy(obj)]
    flat = np.zeros(n * SLOT_BYTES, np.uint8)
    mv = memoryview(flat)
    mine = me * SLOT_BYTES
    stream = _small_stream(obj)
    frame = err = None
    if stream is not None:  # the usual small object: its slot written straight from its pickle
        _put_small(mv, mine, stream)
    else:
        frame, err = _frame_or_error(obj)
        _fill_slot(flat[mine:mine + SLOT_BYTES], frame, err)
    gather_slots(flat[mine:mine + SLOT_BYTES], flat, "all_gather_obj", g)
    if err is not None:
        raise err
    out = []
    for r in range(n):  # every slot a small frame (the usual case): each unpickled where it lies
        got = _small_loads(mv, r * SLOT_BYTES)
        if got is _NOT_SMALL:
            break
        out.append(got)
    else:
        return out
    lens = [_Q2.unpack_from(mv, r * SLOT_BYTES)[0] for r in range(n)]
    bad = [r for r in range(n) if lens[r] < 0]
    if bad:
        raise CommError(f"all_gather_obj: rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} "
                        f"could not pickle {'their objects' if len(bad) > 1 else 'its object'}")
    if max(lens) > SLOT_BYTES - _SLOT_HEAD:
        return g.stream.run(_all_gather_frames, g, frame if frame is not None else Frame(obj), lens)
    return [_slot_loads(flat, mv, r * SLOT_BYTES + _SLOT_HEAD, lens[r]) for r in range(n)]


def gather_obj(obj, root=0, *, group=None):
    """Every rank's object as a list on root (unpickled copies), None elsewhere."""
    g = _g(group)
    return g.stream.run(functools.partial(_gather_obj_impl, obj, root, group=g))


def scatter_obj(objs, root=0, *, group=None):
    """Root passes a sequence of `size` objects; rank r gets (an unpickled copy of) objs[r]."""
    g = _g(group)
    return g.stream.run(functools.partial(_scatter_obj_impl, objs, root, group=g))
