"""commlib.MPI pieces that need no second rank: the message parser, datatypes, ops, Status,
requests and Compute_dims, checked in-process on the size-1 world."""
import array
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest

from commlib import MPI
from commlib._errors import CommError
from commlib.MPI._bufspec import parse_recv, parse_send, parse_vector


# ------------------------------------------------------------------ the message argument
def test_bare_buffers_infer_datatype_and_count():
    for buf, dt, count in [(np.zeros(5, "d"), MPI.DOUBLE, 5), (np.zeros((2, 3), "i"), MPI.INT, 6),
                           (array.array("f", [1, 2]), MPI.FLOAT, 2), (bytearray(7), MPI.BYTE, 7),
                           (b"abc", MPI.BYTE, 3), (np.array(3, "l"), MPI.LONG, 1),
                           (np.zeros(4, np.complex128), MPI.C_DOUBLE_COMPLEX, 4),
                           (np.zeros(2, np.bool_), MPI.C_BOOL, 2)]:
        m = parse_send(buf)
        assert (m.datatype, m.count) == (dt, count), buf


def test_datatype_wins_and_reinterprets_bytes():
    a = np.arange(4, dtype="d")
    m = parse_send([a, "i"])
    assert m.datatype == MPI.INT and m.count == 8
    assert m.array.tobytes() == a.tobytes()
    m = parse_send([a, MPI.BYTE])
    assert m.count == 32


@pytest.mark.parametrize("spec, count, first", [
    (lambda a: [a, 3], 3, 0), (lambda a: [a, 3, MPI.INT], 3, 0), (lambda a: [a, (3, 2), MPI.INT], 3, 2),
    (lambda a: [a, 3, 2, MPI.INT], 3, 2), (lambda a: (a, 4, "i"), 4, 0)])
def test_count_and_displacement_forms(spec, count, first):
    a = np.arange(10, dtype="i")
    m = parse_recv(spec(a))
    assert m.count == count and list(m.array) == list(range(first, first + count))
    m.array[0] = -1  # a view: a receive writes in place
    assert a[first] == -1


def test_none_and_zero_length_messages():
    for spec in (None, [None, MPI.INT], [None, 0, MPI.INT], [None, (0, None), MPI.DOUBLE]):
        assert parse_send(spec).count == 0


def test_fortran_and_slice_views_are_written_in_place():
    f = np.zeros((3, 4), order="F")
    col = f[:, 1]
    m = parse_recv(col)
    m.array[:] = 7
    assert (f[:, 1] == 7).all() and f.sum() == 21
    parse_recv(f).array[:] = 1  # Fortran-contiguous as a whole
    assert (f == 1).all()
    a = np.zeros(10)
    parse_recv(a[2:5]).array[:] = 3
    assert list(a) == [0, 0, 3, 3, 3, 0, 0, 0, 0, 0]


def test_bad_buffers_raise_buffer_error():
    with pytest.raises(BufferError):
        parse_recv(np.zeros(10)[::2])
    with pytest.raises(BufferError):
        parse_send(np.zeros((4, 4))[:, :2])
    with pytest.raises(BufferError):
        parse_recv(b"read only")
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(BufferError):
        parse_recv(ro)
    parse_send(ro)  # sending from read-only memory is fine


def test_counts_that_do_not_fit_raise():
    with pytest.raises(ValueError):
        parse_send([np.zeros(4, "i"), 5, MPI.INT])
    with pytest.raises(ValueError):
        parse_send([np.zeros(4, "i"), 2, 3, MPI.INT])
    with pytest.raises(ValueError):
        parse_send([bytearray(7), MPI.INT])  # 7 bytes are not whole ints
    with pytest.raises(TypeError):
        parse_send(object())


def test_vector_forms():
    buf = np.arange(10, dtype="d")
    for spec in ([buf, [1, 2, 3]], [buf, ([1, 2, 3], None)], [buf, ([1, 2, 3], [0, 1, 3]), MPI.DOUBLE],
                 [buf, np.array([1, 2, 3]), [0, 1, 3], "d"]):
        v = parse_vector(spec, 3, False)
        assert [list(v.block(i)) for i in range(3)] == [[0.0], [1.0, 2.0], [3.0, 4.0, 5.0]]
    v = parse_vector([buf, 2, 4, "d"], 2, False)  # one count for all, displs as a stride
    assert [list(v.block(i)) for i in range(2)] == [[0.0, 1.0], [4.0, 5.0]]
    v = parse_vector(np.arange(6.0), 3, False)  # no counts: equal blocks
    assert v.counts == [2, 2, 2]
    assert parse_vector(np.arange(7.0), 3, False).counts == [3, 2, 2]  # the first len % size get one more
    v = parse_vector([np.arange(6.0), (2, 4), "d"], 2, False)  # a tuple is always (counts, displs)
    assert [list(v.block(i)) for i in range(2)] == [[0.0, 1.0], [4.0, 5.0]]
    v = parse_vector([np.arange(6.0), [2, 4]], 2, False)  # a list is counts
    assert v.counts == [2, 4]
    with pytest.raises(ValueError):
        parse_vector([buf, [4, 4, 4]], 3, False)


# ------------------------------------------------------------------ datatypes
def test_datatype_objects():
    assert MPI.DOUBLE.Get_size() == MPI.DOUBLE.size == 8 and MPI.DOUBLE.Get_extent() == (0, 8)
    assert MPI.INT.tocode() == "i" and MPI.Datatype.fromcode("d") == MPI.DOUBLE
    assert MPI.DOUBLE.Get_name() == "MPI_DOUBLE" and MPI.DOUBLE.Commit() is MPI.DOUBLE
    with pytest.raises(MPI.Exception):
        MPI.INT.Free()
    row = MPI.DOUBLE.Create_contiguous(3).Commit()
    assert row.size == 24 and not row.is_predefined
    m = parse_send([np.zeros((4, 3)), 2, row])
    assert m.count == 2 and m.array.size == 6
    dup = MPI.INT.Dup()
    assert dup != MPI.INT and MPI.Datatype(dup) == dup and dup.size == 4  # a new handle, as MPI's Dup
    dup.Free()
    assert not dup and MPI.LONG_DOUBLE == MPI.DATATYPE_NULL
    with pytest.raises(ValueError):
        parse_send([np.zeros(2), MPI.DATATYPE_NULL])
    with pytest.raises(KeyError):
        parse_send([np.zeros(2), "\0"])
    with pytest.raises(BufferError):
        parse_send(np.zeros(2, ">f8"))
    m = parse_send([np.arange(4.0), 1, 1, None])  # None in the datatype slot: inferred
    assert m.count == 1 and m.array[0] == 1.0
    assert parse_send([np.arange(4.0), (2, None), None]).count == 2


# ------------------------------------------------------------------ ops
def test_ops_on_objects_and_buffers():
    assert MPI.SUM(2, 3) == 5 and MPI.SUM([1], [2]) == [1, 2] and MPI.MAX(1, 5) == 5 and MPI.MIN(1, 5) == 1
    assert MPI.LAND(1, 0) is False and MPI.LOR(0, 2) is True and MPI.LXOR(1, 1) is False
    assert MPI.MAXLOC((3, 2), (3, 1)) == (3, 1) and MPI.MINLOC((1, 5), (2, 0)) == (1, 5)
    assert MPI.REPLACE(1, 2) == 2 and MPI.NO_OP(1, 2) == 1
    assert MPI.SUM.Is_commutative() and MPI.SUM.is_predefined
    inout = np.array([1, 2, 3], "i")
    MPI.SUM.Reduce_local(np.array([10, 20, 30], "i"), inout)
    assert list(inout) == [11, 22, 33]
    MPI.LAND.Reduce_local(np.array([1, 0, 2], "i"), inout)
    assert list(inout) == [1, 0, 1]
    with pytest.raises(ValueError):
        MPI.SUM.Reduce_local(np.zeros(2, "i"), np.zeros(3, "i"))


def test_user_op():
    def minus(a, b, datatype=None):
        if datatype is None:
            return a - b
        x = np.frombuffer(a, dtype=datatype.Get_name() == "MPI_INT" and "i" or "d")
        y = np.frombuffer(b, dtype=x.dtype)
        y[:] = x - y

    op = MPI.Op.Create(minus, commute=False)
    assert not op.Is_commutative() and not op.is_predefined and op(10, 3) == 7
    inout = np.array([1, 1], "i")
    op.Reduce_local(np.array([5, 7], "i"), inout)
    assert list(inout) == [4, 6]
    op.Free()
    assert op == MPI.OP_NULL


# ------------------------------------------------------------------ status, requests, exceptions
def test_status():
    s = MPI.Status()
    assert (s.source, s.tag, s.error, s.Get_count()) == (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS, 0)
    s.source, s.tag = 3, 4
    t = MPI.Status(s)
    assert (t.Get_source(), t.Get_tag()) == (3, 4) and not t.Is_cancelled()


def test_null_requests_and_self_messages():
    comm = MPI.COMM_SELF
    assert MPI.Request().Wait() and MPI.Request.Waitany([MPI.REQUEST_NULL]) == MPI.UNDEFINED
    assert MPI.Request.Testall([]) and MPI.Request.waitsome([MPI.Request()]) == (None, None)
    req = comm.isend({"x": 1}, 0, tag=5)
    st = MPI.Status()
    assert comm.recv(source=0, tag=5, status=st) == {"x": 1}
    assert st.Get_count() == len(pickle.dumps({"x": 1}, pickle.HIGHEST_PROTOCOL))
    assert req.wait() is None and not req and req == MPI.REQUEST_NULL
    r = comm.Irecv(np.empty(3, "i"), 0, 6)
    assert not r.Test() and r
    r.Cancel()
    r.Wait(st)
    assert st.Is_cancelled()


def test_exceptions_and_constants():
    import commlib as cl

    assert issubclass(cl.CommError, MPI.Exception) and issubclass(MPI.Exception, RuntimeError)
    e = MPI.Exception(MPI.ERR_TRUNCATE)
    assert e.Get_error_class() == MPI.ERR_TRUNCATE and e == MPI.ERR_TRUNCATE and "TRUNCATE" in e.Get_error_string()
    assert len({MPI.ANY_SOURCE, MPI.PROC_NULL, MPI.ROOT, MPI.ANY_TAG}) == 4
    assert MPI.Get_version() == (4, 1) and MPI.get_vendor()[0] == "commlib" and MPI.Is_initialized()
    assert MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) >= 32767
    with pytest.raises(MPI.Exception):
        MPI.COMM_WORLD.Free()
    names = [n for n in dir(MPI) if n.startswith("ERR_") and n != "ERR_LASTCODE"]
    assert len({getattr(MPI, n) for n in names}) == len(names)  # every error class its own number
    win = MPI.Win.Create(None)  # a window of no memory, on COMM_SELF
    assert win.Get_attr(MPI.WIN_SIZE) == 0 and win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_CREATE
    win.Free()
    assert win == MPI.WIN_NULL


@pytest.mark.parametrize("n, dims, want", [(12, 2, [4, 3]), (16, 2, [4, 4]), (6, 3, [3, 2, 1]),
                                           (24, [0, 2, 0], [4, 2, 3]), (7, 2, [7, 1]), (1, 2, [1, 1])])
def test_compute_dims(n, dims, want):
    assert MPI.Compute_dims(n, dims) == want


def test_truncation_to_self_is_the_receivers_error():
    comm = MPI.COMM_SELF
    r = comm.Irecv(np.zeros(2), 0, 7)
    comm.Send(np.arange(5.0), 0, 7)  # the sender is not hurt by the receiver's short buffer
    with pytest.raises(MPI.Exception) as err:
        r.Wait()
    assert err.value.Get_error_class() == MPI.ERR_TRUNCATE
    comm.Send(np.arange(2.0), 0, 8)  # and the communicator goes on working
    got = np.zeros(2)
    comm.Recv(got, 0, 8)
    assert list(got) == [0.0, 1.0]


def test_out_of_scope_features_raise_not_implemented():
    with pytest.raises(NotImplementedError):
        MPI.File.Open(MPI.COMM_SELF, "x")


def test_a_spawned_program_that_exits_before_joining_fails_spawn_at_once():
    t0 = time.monotonic()
    with pytest.raises(MPI.Exception, match="exited with code 3 before it joined") as info:
        MPI.COMM_SELF.Spawn(sys.executable, ["-c", "raise SystemExit(3)"])
    assert info.value.Get_error_class() == MPI.ERR_SPAWN and time.monotonic() - t0 < 10
    with pytest.raises(MPI.Exception, match="cannot start"):
        MPI.COMM_SELF.Spawn("/nonexistent/program")
    # one child of three fails: the other two, waiting for their job's missing rank, are stopped at once
    code = ("import os, sys\nif os.environ['COMMLIB_RANK'] == '0':\n    sys.exit(4)\n"
            "from commlib import MPI  # commlib-spawn-test-child")
    with pytest.raises(MPI.Exception, match="exited with code 4"):
        MPI.COMM_SELF.Spawn(sys.executable, ["-c", code], maxprocs=3)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "commlib-spawn-test-child" not in ps


def test_spawn_info_places_children_and_bad_placements_are_info_errors(tmp_path):
    """info host/hostfile/wdir: a child on this host (by name, from a host file) runs in wdir; a
    malformed host list, both keys, an unreadable host file and a missing wdir are refused before
    anything starts, with the key named."""
    (tmp_path / "hosts").write_text("# this host only\nlocalhost slots=1\n")
    code = "import os\nfrom commlib import MPI\np = MPI.Comm.Get_parent()\np.send(os.getcwd(), 0)\np.Disconnect()"
    for info in ({"host": "localhost", "wdir": str(tmp_path)},
                 MPI.Info.Create({"hostfile": str(tmp_path / "hosts"), "wdir": str(tmp_path)})):
        inter = MPI.COMM_SELF.Spawn(sys.executable, ["-c", code], info=info)
        assert inter.recv(source=0) == str(tmp_path)
        inter.Disconnect()
    bad = [({"host": "a:0"}, MPI.ERR_INFO, "info host: bad host entry 'a:0'"),
           ({"host": "a", "hostfile": "h"}, MPI.ERR_INFO, "both 'host' and 'hostfile'"),
           ({"hostfile": str(tmp_path / "none")}, MPI.ERR_INFO, "cannot read hostfile"),
           ({"wdir": str(tmp_path / "none")}, MPI.ERR_SPAWN, "wdir .* is not a directory")]
    for info, cls, match in bad:
        with pytest.raises(MPI.Exception, match=match) as err:
            MPI.COMM_SELF.Spawn(sys.executable, ["-c", "pass"], info=info)
        assert err.value.Get_error_class() == cls


def test_a_matched_probe_on_one_rank_takes_a_message_to_self_or_refuses_to_wait_forever():
    comm = MPI.COMM_WORLD
    comm.send("x", 0, 3)
    msg = comm.mprobe(0, 3)
    assert comm.Iprobe(0, 3) is False  # claimed: no longer visible
    assert msg.recv() == "x" and msg == MPI.MESSAGE_NULL
    assert comm.Improbe(0, 3) is None
    with pytest.raises(CommError, match="would wait forever"):
        comm.Mprobe(0, 3)


def test_cartesian_neighbours_on_one_rank():
    ring = MPI.COMM_WORLD.Create_cart([1], periods=True)  # one flag for every dimension
    assert isinstance(ring, MPI.Topocomm) and ring.is_topo
    assert ring.Shift(0, 1) == (0, 0) and ring.inoutedges == ([0, 0], [0, 0]) and ring.degrees == (2, 2)
    line = MPI.COMM_WORLD.Create_cart([1, 1])
    assert line.inedges == [MPI.PROC_NULL] * 4 and line.Get_topo() == ([1, 1], [0, 0], [0, 0])
    assert MPI.COMM_WORLD.Cart_map([1]) == 0


class _DLPackOnly:
    """An array that offers DLPack and no buffer protocol, whose producer frees the managed tensor
    with its capsule (as mpi4py's test DLPackArray does): the consumer must keep the capsule."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_a_dlpack_array_is_a_buffer_viewed_in_place():
    a = np.arange(6, dtype=np.int16)
    m = parse_recv(_DLPackOnly(a))
    assert m.datatype == MPI.SHORT and m.count == 6
    m.array[:] = 9  # received in place
    assert (a == 9).all()
    m = parse_send([_DLPackOnly(np.arange(4.0)), 2, MPI.DOUBLE])
    assert m.array.tolist() == [0.0, 1.0]
    with pytest.raises(TypeError, match="DLPack array"):
        parse_send(object())


def test_dlpack_views_of_torch_tensors_keep_them_alive():
    torch = pytest.importorskip("torch")
    from commlib._kernels import dlpack_view

    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    v = dlpack_view(t.t())  # Fortran order: the memory, flat
    assert v.shape == (12,) and v.tolist() == list(range(12))
    w = dlpack_view(torch.arange(5, dtype=torch.int64)[1:])  # an offset into the storage
    del t
    import gc
    gc.collect()
    assert w.tolist() == [1, 2, 3, 4] and v[0] == 0.0
    m = parse_recv(torch.zeros(3, dtype=torch.complex64))
    assert m.datatype == MPI.C_FLOAT_COMPLEX
    b = dlpack_view(torch.ones(2, dtype=torch.bfloat16))  # no NumPy dtype: its bytes, as mpi4py takes it
    assert b.dtype == np.uint8 and b.tolist() == [0x80, 0x3F] * 2
    with pytest.raises(BufferError, match="not contiguous"):
        dlpack_view(torch.zeros(4, 4)[:, :2])


class _FakeDevice:
    """A DLPack producer that says its (host) memory is on a CUDA device, or a CAI array: as mpi4py's
    tests make them. `address` overrides the data pointer (unmapped memory stands for a real GPU's)."""

    def __init__(self, a, address=None):
        self._a = a
        data = a.ctypes.data if address is None else address
        self.__cuda_array_interface__ = {"version": 3, "data": (data, False), "typestr": a.dtype.str,
                                         "shape": a.shape, "strides": None}

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA

    def __dlpack__(self, stream=None, max_version=None, copy=None):
        assert stream == -1  # mpi4py's convention for a device tensor: no stream to order against
        return self._a.__dlpack__(max_version=max_version)


def test_device_memory_is_taken_where_the_host_can_reach_it_and_refused_elsewhere():
    import mmap
    from commlib._kernels import cai_view, dlpack_view

    a = np.arange(6, dtype=np.int32)
    assert dlpack_view(_FakeDevice(a)).tolist() == list(range(6))
    v = cai_view(_FakeDevice(a), True)
    v[:] = 7
    assert (a == 7).all() and v.base is not None
    m = parse_recv(_CAIOnly(a))  # the message parser finds the interface
    m.array[:] = 3
    assert (a == 3).all() and m.datatype == MPI.INT
    ro = mmap.mmap(-1, 4096, prot=mmap.PROT_READ)
    raddr = np.frombuffer(ro, np.uint8).ctypes.data
    readable = _FakeDevice(np.zeros(1024, np.int32), address=raddr)
    assert cai_view(readable).sum() == 0  # readable host memory is taken for a send...
    with pytest.raises(BufferError, match="not writable from the host"):
        cai_view(readable, True)  # ... and refused for a receive
    with pytest.raises(BufferError, match="not readable from the host"):
        cai_view(_FakeDevice(a, address=0x1000))  # the first page is never mapped: a device pointer
    bad = _FakeDevice(a)
    bad.__cuda_array_interface__["mask"] = True
    with pytest.raises(BufferError, match="masked"):
        cai_view(bad)
    bad.__cuda_array_interface__ = {"data": (a.ctypes.data, False)}
    with pytest.raises(KeyError):
        cai_view(bad)


class _CAIOnly:
    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = {"version": 3, "data": (a.ctypes.data, False), "typestr": a.dtype.str,
                                         "shape": a.shape}


class _DLPackV1:
    """A DLPack 1.x producer (numpy's, forwarded): versioned capsules carry the read-only flag."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_versioned_dlpack_capsules_and_their_read_only_flag():
    from commlib._kernels import dlpack_view

    a = np.arange(4.0)
    v = dlpack_view(_DLPackV1(a))
    v[0] = 7.0
    assert a[0] == 7.0 and v.flags.writeable
    ro = np.arange(3, dtype=np.int32)
    ro.flags.writeable = False
    assert not dlpack_view(_DLPackV1(ro)).flags.writeable
    assert parse_send(_DLPackV1(ro)).array.tolist() == [0, 1, 2]
    with pytest.raises(BufferError, match="read-only"):
        parse_recv(_DLPackV1(ro))


def test_get_address_and_address_arithmetic():
    import array
    a = array.array("i", range(10))
    assert MPI.Get_address(a) == a.buffer_info()[0]
    n = np.arange(4.0)
    assert MPI.Get_address(n) == n.ctypes.data
    assert MPI.Get_address(None) == MPI.Get_address(MPI.BOTTOM) == MPI.BOTTOM
    assert MPI.Aint_add(100, 4) == 104 and MPI.Aint_diff(108, 100) == 8
    with pytest.raises(BufferError, match="not contiguous"):
        MPI.Get_address(np.zeros((4, 4))[:, ::2])


def test_mpi_buffer_views_allocates_and_slices_memory():
    import array
    b = MPI.buffer()
    assert (b.address, b.nbytes, b.readonly, b.obj, len(b)) == (0, 0, False, None, 0)
    with pytest.raises(TypeError):
        MPI.buffer(3)
    ro = MPI.buffer(b"abc")
    assert ro.readonly and ro.obj == b"abc" and ro.tobytes() == b"abc"
    with pytest.raises(TypeError, match="read-only"):
        ro[0] = 1
    a = array.array("i", [1, 2, 3])
    w = MPI.buffer.frombuffer(a)
    assert w.address == a.buffer_info()[0] and w.nbytes == 12 and not w.readonly
    w.cast("i")[1] = 7
    assert a[1] == 7 and w.cast("i", (3, 1))[2, 0] == 3
    w[0:4] = bytes(4)
    assert a[0] == 0
    with pytest.raises(ValueError, match="slice length"):
        w[0:2] = w[1:4]
    with pytest.raises(IndexError):
        w[12]
    with pytest.raises(IndexError, match="step"):
        w[::2]
    assert w[-12] == 0 and w[4:8].tobytes() == (7).to_bytes(4, "little")
    assert MPI.buffer.frombuffer(a, readonly=True).readonly and w.toreadonly().readonly
    m = MPI.Alloc_mem(16)
    assert isinstance(m, MPI.buffer) and m.nbytes == 16 and m.address != 0 and m[15] == 0
    memoryview(m)[:] = b"x" * 16
    f = MPI.buffer.fromaddress(m.address, 16)
    assert f.tobytes() == b"x" * 16 and f.obj is None
    MPI.Free_mem(m)
    assert (m.address, m.nbytes) == (0, 0)
    with pytest.raises(ValueError):
        MPI.buffer.fromaddress(0, 1)
    with pytest.raises(ValueError):
        MPI.buffer.allocate(-1)
    with pytest.raises(BufferError, match="read-only"):
        MPI.Attach_buffer(MPI.buffer(b"abc"))
    with pytest.raises(BufferError, match="read-only"):
        MPI.Attach_buffer(b"abc")
    for writable in (np.zeros(4), bytearray(0), MPI.Alloc_mem(8)):
        MPI.Attach_buffer(writable)
        assert MPI.Detach_buffer() is writable
    d = MPI.buffer(_CAIOnly(np.arange(3, dtype=np.uint8)))  # a CUDA-array-interface object, on the host
    assert bytes(memoryview(d)) == bytes([0, 1, 2]) and d.nbytes == 3  # messages move it...
    with pytest.raises(BufferError, match="device type 2"):
        d.tobytes()  # ... but, as mpi4py, the buffer does not read device memory itself


def test_handles_name_an_objects_state_and_give_it_back():
    comm = MPI.COMM_WORLD
    dt = MPI.DOUBLE.Create_vector(2, 1, 3)
    for obj in (comm, MPI.COMM_SELF, MPI.COMM_NULL, MPI.INT, dt, MPI.DATATYPE_NULL, MPI.SUM, MPI.OP_NULL,
                MPI.REQUEST_NULL, MPI.MESSAGE_NULL, MPI.MESSAGE_NO_PROC, comm.Get_group(), MPI.Info.Create(),
                MPI.INFO_NULL):
        h = obj.handle
        assert isinstance(h, int) and obj.toint() == obj.py2f() == h
        back = type(obj).fromhandle(h)
        assert back == obj and type(obj).fromint(h) == obj and type(obj).f2py(h) == obj, obj
        assert (h == 0) == (not obj), obj  # null objects are handle 0
    assert MPI.Datatype(dt).handle == dt.handle != dt.Dup().handle  # a copy is the same handle, a Dup a new one
    r = comm.Recv_init(bytearray(0), 0, 0)
    assert MPI.Prequest.fromhandle(r.handle) == r
    with pytest.raises(ValueError, match="no MPI object"):
        MPI.Datatype.fromhandle(12345)
