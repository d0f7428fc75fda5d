"""The object variants in-process: frame layout and framing, the piece protocol, size-1 semantics."""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import commlib
from commlib._api import objects as ob
from commlib._errors import CommError, MismatchError
from commlib._engine import ANY_SOURCE, ANY_TAG, Engine, Group

pytestmark = pytest.mark.timeout(60)
BIG = ob.OOB_MIN_BYTES


class Thing:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return type(other) is Thing and self.a == other.a and np.array_equal(self.b, other.b)


def same(a, b):
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and \
            np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def sample():
    rg = np.random.default_rng(5)
    return {
        "big": rg.standard_normal(BIG // 8 * 3),
        "big_f": np.asfortranarray(rg.integers(0, 9, (300, 200), dtype=np.int32)),
        "strided": rg.standard_normal((400, 100))[::2],
        "small": np.arange(7, dtype=np.int16),
        "bytes": b"abc" * 10,
        "none": None,
        "nested": [1, (2, {"x": Thing(3, np.ones(BIG, dtype=np.uint8))})],
    }


# ------------------------------------------------------------------ layout
def test_layout_aligns_stream_and_buffers():
    soff, offs, end = ob.layout(3, 100, [10, 0, 1000])
    assert soff == 64  # table of 5 int64 = 40 bytes, padded
    assert offs == [192, 256, 256]
    assert end == 256 + 1000
    assert all(o % ob.ALIGN == 0 for o in [soff] + offs)
    assert ob.layout(0, 5, []) == (64, [], 69)
    soff, offs, end = ob.layout(7, 1, [1] * 7)  # table of 72 bytes
    assert soff == 128 and offs[0] == 192
    with pytest.raises(ValueError):
        ob.layout(2, 1, [1])


def test_layout_is_64_bit():
    huge = 5 << 30
    soff, offs, end = ob.layout(2, 3 << 30, [huge, huge])
    assert offs[0] == ob._align(soff + (3 << 30)) and end == offs[1] + huge == (13 << 30) + 64


# ------------------------------------------------------------------ frames
def test_small_objects_stay_in_band():
    f = ob.Frame({"a": np.arange(BIG // 8 - 1, dtype=np.int64), "b": [1, 2]})
    assert f.buffers == [] and f.nbytes == 64 + len(f.stream)
    assert list(f.table) == [0, len(f.stream)]


def test_large_contiguous_arrays_go_out_of_band_without_copy():
    obj = sample()
    f = ob.Frame(obj)
    assert len(f.buffers) == 3  # big, big_f, the Thing's array; the strided one is packed in-band
    assert len(f.stream) < obj["strided"].nbytes + 4096  # no out-of-band array in the stream
    assert np.shares_memory(f.buffers[0], obj["big"]) and np.shares_memory(f.buffers[1], obj["big_f"])
    assert f.lens == [obj["big"].nbytes, obj["big_f"].nbytes, BIG]
    assert list(f.table) == [3, len(f.stream)] + f.lens


def test_assemble_and_loads_round_trip():
    obj = sample()
    f = ob.Frame(obj)
    frame = f.assemble()
    assert frame.nbytes == f.nbytes and frame.ctypes.data % ob.ALIGN == 0
    got = ob.loads(frame)
    assert same(got, obj)
    assert got["big_f"].flags.f_contiguous
    for key in ("big", "big_f"):  # rebuilt on the received bytes: views of the frame, writable, aligned
        assert np.shares_memory(got[key], frame) and got[key].flags.writeable and got[key].flags.aligned
    assert not np.shares_memory(got["big"], obj["big"])
    # padding is zero
    soff = f.stream_off
    assert not frame[f.table.nbytes:soff].any()
    end = soff + len(f.stream)
    assert not frame[end:f.buf_offs[0]].any()


@pytest.mark.parametrize("case", ["small", "buffers", "big_stream", "big_stream_only", "many"])
def test_wire_pieces_concatenate_to_the_frame(case):
    rg = np.random.default_rng(1)
    obj = {
        "small": {"x": 1},
        "buffers": sample(),
        "big_stream": {"s": rg.bytes(ob.HEAD_COPY_BYTES + 3), "a": rg.standard_normal(BIG)},
        "big_stream_only": rg.bytes(ob.COALESCE_BYTES * 5 + 1),
        "many": [rg.standard_normal(BIG // 8 + i) for i in range(9)],
    }[case]
    f = ob.Frame(obj)
    pieces = f.wire()
    assert sum(p.nbytes for p in pieces) == f.nbytes
    assert all(p.dtype == np.uint8 and p.ndim == 1 for p in pieces)
    joined = np.concatenate(pieces)
    assert joined.tobytes() == f.assemble().tobytes()
    if f.nbytes > ob.COALESCE_BYTES:
        for b in f.buffers:  # each out-of-band buffer goes out from its own memory
            assert any(p is b for p in pieces)
    assert same(ob.loads(joined), obj)


def test_unpicklable_object_raises_the_pickling_error():
    import threading

    with pytest.raises(TypeError):
        ob.Frame({"lock": threading.Lock()})
    frame, err = ob._frame_or_error(threading.Lock())
    assert frame is None and isinstance(err, TypeError)


@pytest.mark.parametrize("corrupt", ["short", "negative_k", "k_too_big", "wrong_total", "negative_len"])
def test_loads_rejects_corrupt_frames(corrupt):
    f = ob.Frame({"a": np.arange(BIG, dtype=np.uint8)})
    frame = f.assemble().copy()
    table = frame[:8 * 3].view(np.int64)
    if corrupt == "short":
        frame = frame[:10]
    elif corrupt == "negative_k":
        table[0] = -1
    elif corrupt == "k_too_big":
        table[0] = 1 << 40
    elif corrupt == "wrong_total":
        frame = frame[:-1]
    elif corrupt == "negative_len":
        table[2] = -5
    with pytest.raises(CommError):
        ob.loads(frame)


# ------------------------------------------------------------ first-round slots
SMALL = [0, -7, 2 ** 70, 3.5, None, True, "héllo", b"x" * 100, (1, "a", None), {"k": [1, 2.0]},
         np.arange(5, dtype=np.int16), np.float32(1.5), frozenset({1, 2}), complex(1, -2)]


@pytest.mark.parametrize("obj", SMALL, ids=lambda o: type(o).__name__)
def test_a_small_object_slot_is_its_frame_as_assembled(obj):
    """The slot written without assembling (the usual small object) holds exactly the bytes of the
    general path: the frame's size, 0, then Frame.assemble()'s frame (its table made on demand)."""
    f = ob.Frame(obj)
    assert f.nbytes <= ob.SLOT_BYTES - ob._SLOT_HEAD and not f.buffers
    fast = np.zeros(ob.SLOT_BYTES, np.uint8)
    ob._fill_slot(fast, f, None)
    want = np.zeros(ob.SLOT_BYTES, np.uint8)
    want[:ob._SLOT_HEAD].view(np.int64)[:] = (f.nbytes, 0)
    want[ob._SLOT_HEAD:ob._SLOT_HEAD + f.nbytes] = f.assemble()
    assert fast.tobytes() == want.tobytes()
    assert f.table.tolist() == [0, len(f.stream)]
    got = ob._slot_loads(fast, memoryview(fast), ob._SLOT_HEAD, f.nbytes)
    assert same(got, obj) and same(ob.loads(want[ob._SLOT_HEAD:ob._SLOT_HEAD + f.nbytes]), obj)


@pytest.mark.parametrize("corrupt", ["k", "size", "stream_len"])
def test_a_corrupt_slot_is_refused_by_loads(corrupt):
    """A slot whose frame is not what its head says goes to loads(), which refuses it."""
    f = ob.Frame({"a": 1})
    slot = np.zeros(ob.SLOT_BYTES, np.uint8)
    ob._fill_slot(slot, f, None)
    table = slot[ob._SLOT_HEAD:ob._SLOT_HEAD + 16].view(np.int64)
    size = f.nbytes
    if corrupt == "k":
        table[0] = 1
    elif corrupt == "size":
        size += 8
    else:
        table[1] += 3
    with pytest.raises(CommError):
        ob._slot_loads(slot, memoryview(slot), ob._SLOT_HEAD, size)


# ------------------------------------------------------------ piece protocol
class Pipe:
    """An in-memory stand-in for a connection: the sender's moves are replayed by the receiver."""

    def __init__(self):
        self.pieces = []

    def send(self, a):
        self.pieces.append(ob._u8(a).copy())

    def recv(self, a):
        p = self.pieces.pop(0)
        u8 = ob._u8(a)
        assert p.nbytes == u8.nbytes, "the receiver must post exactly the length that was sent"
        u8[:] = p


def test_piece_protocol_round_trip():
    for obj in (sample(), None, {"x": 1}, [np.ones(BIG * 2, dtype=np.float32)]):
        pipe = Pipe()
        f = ob.Frame(obj)
        ob._send_frame(f, pipe.send)
        assert len(pipe.pieces) == 2 + (1 if f.buffers else 0) + len(f.buffers)
        frame = ob._recv_frame(pipe.recv, "test", 0)
        assert pipe.pieces == []
        assert frame.nbytes == f.nbytes and frame.ctypes.data % ob.ALIGN == 0
        assert frame.tobytes() == f.assemble().tobytes()
        assert same(ob.loads(frame), obj)


def test_piece_protocol_carries_errors():
    pipe = Pipe()
    ob._send_error(ob._ERR_VALUE, "scatter_obj: the root passed 3 objects", pipe.send)
    got = ob._recv_frame(pipe.recv, "test", 0)
    assert isinstance(got, ob._RemoteError) and got.kind == ob._ERR_VALUE
    assert isinstance(got.exception("x"), ValueError) and "3 objects" in str(got.exception("x"))
    ob._send_error(ob._ERR_PICKLE, "TypeError: no", pipe.send)
    got = ob._recv_frame(pipe.recv, "test", 0)
    assert type(got.exception("y")) is CommError


def test_piece_protocol_refuses_an_inconsistent_announcement():
    pipe = Pipe()
    pipe.send(np.array([1, 10, 100], dtype=np.int64))  # one buffer, but a frame too small for the lengths
    pipe.send(np.array([1000], dtype=np.int64))
    with pytest.raises(MismatchError):
        ob._recv_frame(pipe.recv, "test", 3)


# ------------------------------------------------------------- size-1 groups
@pytest.fixture
def solo():
    return Group(None, Engine(None), 0, [0], 0, 5.0)


def test_singleton_point_to_point(solo):
    obj = sample()
    ob.send_obj(obj, 0, tag=4, group=solo)
    ob.send_obj("second", 0, tag=4, group=solo)
    ob.send_obj("other tag", 0, tag=9, group=solo)
    got, st = ob.recv_obj(ANY_SOURCE, 9, status=True, group=solo)
    assert got == "other tag" and (st.source, st.tag) == (0, 9)
    got = ob.recv_obj(group=solo)
    assert same(got, obj) and not np.shares_memory(got["big"], obj["big"])
    assert ob.recv_obj(0, ANY_TAG, group=solo) == "second"
    with pytest.raises(CommError, match="wait forever"):
        ob.recv_obj(group=solo)


def test_singleton_objects_and_arrays_keep_order_and_kind(solo):
    commlib.send(np.arange(3), 0, tag=1, group=solo)
    ob.send_obj({"o": 1}, 0, tag=1, group=solo)
    commlib.send(np.arange(4), 0, tag=1, group=solo)
    with pytest.raises(MismatchError, match="an array"):
        ob.recv_obj(0, 1, group=solo)  # the oldest message on tag 1 is an array
    with pytest.raises(MismatchError, match="object"):
        commlib.recv((3,), np.int64, 0, tag=1, group=solo)  # then the object
    assert np.array_equal(commlib.recv((4,), np.int64, 0, tag=1, group=solo), np.arange(4))


def test_singleton_collectives(solo):
    obj = sample()
    assert ob.broadcast_obj(obj, group=solo) is obj  # the identity
    for got in (ob.all_gather_obj(obj, group=solo), ob.gather_obj(obj, group=solo)):
        assert isinstance(got, list) and len(got) == 1 and same(got[0], obj)
        assert not np.shares_memory(got[0]["big"], obj["big"])  # copies, as at any size
    got = ob.scatter_obj([obj], group=solo)
    assert same(got, obj) and got is not obj
    assert ob.scatter_obj((5,), group=solo) == 5


def test_singleton_argument_errors(solo):
    with pytest.raises(ValueError, match="2 objects"):
        ob.scatter_obj([1, 2], group=solo)
    with pytest.raises(ValueError, match="sequence"):
        ob.scatter_obj(None, group=solo)
    with pytest.raises(ValueError):
        ob.broadcast_obj(1, root=1, group=solo)
    with pytest.raises(ValueError):
        ob.gather_obj(1, root=-1, group=solo)
    with pytest.raises(ValueError):
        ob.send_obj(1, 1, group=solo)
    with pytest.raises(ValueError):
        ob.send_obj(1, 0, tag=-1, group=solo)
    with pytest.raises(ValueError):
        ob.recv_obj(0, tag=-5, group=solo)


def test_init_outside_a_launcher_gives_a_working_singleton():
    """commlib.init() with no launcher environment: every object function works on the size-1 world."""
    code = textwrap.dedent("""
        import numpy as np, commlib
        from commlib._api.objects import *
        g = commlib.init()
        assert g.size() == 1 and g.rank() == 0
        a = np.arange(100000.0)
        send_obj({"a": a}, 0, tag=2)
        assert np.array_equal(recv_obj()["a"], a)
        assert broadcast_obj("x") == "x"
        assert all_gather_obj(1) == [1] and gather_obj(2) == [2] and scatter_obj([3]) == 3
        print("SINGLETON OK")
    """)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMMLIB_", "SLURM_")) and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                                    "MASTER_PORT", "LOCAL_RANK")}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0 and "SINGLETON OK" in proc.stdout, proc.stderr


def test_pickle_protocol_5_out_of_band_is_what_we_rely_on():
    """numpy rebuilds an out-of-band array on the buffer it is given (the receive-side zero copy)."""
    a = np.arange(BIG, dtype=np.float64)
    bufs = []
    s = pickle.dumps(a, protocol=5, buffer_callback=bufs.append)
    target = bytearray(bufs[0].raw())
    b = pickle.loads(s, buffers=[memoryview(target)])
    assert np.array_equal(a, b) and np.shares_memory(b, np.frombuffer(target, dtype=np.uint8))
