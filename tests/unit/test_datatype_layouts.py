"""Derived datatypes in-process: each constructor's typemap against the elements NumPy indexing picks,
bounds and extents as MPI defines them, packing and unpacking through the kernel, decode/recreate."""
import pickle

import numpy as np
import pytest

from commlib import MPI
from commlib.MPI._bufspec import parse_send
from commlib.MPI._datatypes import pack_into, unpack_from
from commlib._kernels import typemap_copy


def picked(dt, buf, count=1):
    """The elements `count` elements of dt pick from buf, in typemap order, packed by the kernel."""
    u8 = buf.view(np.uint8).reshape(-1)
    out = np.empty(count * dt.size, np.uint8)
    typemap_copy(u8, out, dt._runs, count, dt.extent, 0, True)
    return out.view(buf.dtype)


def test_vector_indexed_and_their_byte_forms_pick_what_numpy_indexing_picks():
    a = np.arange(60.0)
    v = MPI.DOUBLE.Create_vector(4, 2, 5)
    assert (v.size, v.extent, v.Get_true_extent()) == (64, (3 * 5 + 2) * 8, (0, 17 * 8))
    assert picked(v, a).tolist() == [0, 1, 5, 6, 10, 11, 15, 16]
    assert picked(v, a, 2).tolist()[8:] == [17, 18, 22, 23, 27, 28, 32, 33]  # the next element: one extent on
    hv = MPI.DOUBLE.Create_hvector(3, 1, 24)
    assert picked(hv, a).tolist() == [0, 3, 6]
    ix = MPI.DOUBLE.Create_indexed([2, 1, 3], [7, 0, 3])  # typemap order, not memory order
    assert picked(ix, a).tolist() == [7, 8, 0, 3, 4, 5] and ix.Get_extent() == (0, 9 * 8)
    assert picked(MPI.DOUBLE.Create_hindexed([1, 2], [16, 40]), a).tolist() == [2, 5, 6]
    assert picked(MPI.DOUBLE.Create_indexed_block(2, [4, 1]), a).tolist() == [4, 5, 1, 2]
    assert picked(MPI.DOUBLE.Create_hindexed_block(1, [8, 0]), a).tolist() == [1, 0]
    nested = v.Create_contiguous(2)  # two vectors, the second one extent on
    assert picked(nested, a).tolist() == picked(v, a, 2).tolist()
    assert MPI.DOUBLE.Create_contiguous(4)._simple and not v._simple


@pytest.mark.parametrize("order", ["C", "F"])
def test_subarray_and_darray_pick_numpy_slices(order):
    sizes, sub, start = [4, 5, 6], [2, 3, 2], [1, 2, 3]
    a = np.arange(np.prod(sizes), dtype=np.int32).reshape(sizes, order=order)
    mpi_order = MPI.ORDER_C if order == "C" else MPI.ORDER_FORTRAN
    t = MPI.INT.Create_subarray(sizes, sub, start, order=mpi_order)
    want = a[1:3, 2:5, 3:5].ravel(order=order)
    assert picked(t, a.ravel(order="K")).tolist() == want.tolist()
    assert t.Get_extent() == (0, a.nbytes) and t.size == want.nbytes
    # a 2 x 3 process grid over an 8 x 9 array: BLOCK rows, CYCLIC columns
    g = np.arange(72, dtype=np.int32).reshape(8, 9, order=order)
    for rank in range(6):
        d = MPI.INT.Create_darray(6, rank, [8, 9], [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC],
                                  [MPI.DISTRIBUTE_DFLT_DARG] * 2, [2, 3], mpi_order)
        pr, pc = divmod(rank, 3)
        mine = g[pr * 4:(pr + 1) * 4, pc::3]
        assert picked(d, g.ravel(order="K")).tolist() == mine.ravel(order=order).tolist(), rank
        assert d.extent == g.nbytes


def test_struct_resized_and_bounds():
    rec = np.dtype([("i", np.int32), ("x", np.float64), ("c", "S2")], align=True)
    s = MPI.Datatype.Create_struct([1, 1, 2], [0, 8, 16], [MPI.INT, MPI.DOUBLE, MPI.CHAR])
    assert s.size == 14 and s.extent == 24 == rec.itemsize  # padded to the double's alignment
    assert s._mixed and not s._simple and s._base == np.uint8
    data = np.array([(1, 2.5, b"xy"), (3, 4.5, b"zw")], rec)
    got = picked(s, data.view(np.uint8), 2)
    assert got.tobytes() == b"".join(r.tobytes()[0:4] + r.tobytes()[8:18] for r in data)
    r = MPI.INT.Create_resized(-4, 12)
    assert r.Get_extent() == (-4, 12) and r.Get_true_extent() == (0, 4) and r.ub == 8
    empty = MPI.INT.Create_contiguous(0)
    assert (empty.size, empty.extent) == (0, 0)
    with pytest.raises(MPI.Exception):
        MPI.INT.Create_vector(-1, 1, 1)
    with pytest.raises(ValueError, match="reach bytes"):
        parse_send([np.zeros(10), 1, MPI.DOUBLE.Create_vector(2, 1, 10)])
    assert MPI.DOUBLE_INT.Get_extent() == (0, 16) and MPI.DOUBLE_INT.size == 12
    assert MPI.Datatype.Get_value_index(MPI.FLOAT, MPI.INT) is MPI.FLOAT_INT
    assert MPI.Datatype.Get_value_index(MPI.FLOAT, MPI.FLOAT) == MPI.DATATYPE_NULL


def test_pack_unpack_and_external32_round_trips():
    v = MPI.INT.Create_vector(3, 1, 2)
    a = np.arange(10, dtype=np.int32)  # holds two whole elements (extent 5 ints)
    out = bytearray(v.Pack_size(2) + 3)
    end = pack_into(v, a, out, 3, None)
    assert end == 3 + 24 and np.frombuffer(bytes(out[3:]), np.int32).tolist() == [0, 2, 4, 5, 7, 9]
    back = np.full(10, -1, np.int32)
    assert unpack_from(v, out, 3, back, None) == end
    assert back.tolist() == [0, -1, 2, -1, 4, 5, -1, 7, -1, 9]
    ext = bytearray(MPI.LONG.Pack_external_size("external32", 2))
    assert len(ext) == 8  # external32 longs are 4 bytes
    MPI.LONG.Pack_external("external32", np.array([1, -2], np.int64), ext, 0)
    assert np.frombuffer(bytes(ext), ">i4").tolist() == [1, -2]
    got = np.zeros(2, np.int64)
    MPI.LONG.Unpack_external("external32", ext, 0, got)
    assert got.tolist() == [1, -2]
    with pytest.raises(MPI.Exception):
        MPI.INT.Pack(np.zeros(4, np.int32), bytearray(8), 0)  # 16 bytes into 8


def test_decode_contents_and_pickle_recreate_every_combiner():
    made = [MPI.DOUBLE.Dup(), MPI.DOUBLE.Create_contiguous(3), MPI.DOUBLE.Create_vector(2, 3, 4),
            MPI.DOUBLE.Create_hvector(2, 1, 24), MPI.INT.Create_indexed([1, 2], [3, 0]),
            MPI.INT.Create_hindexed([2, 1], [8, 0]), MPI.INT.Create_indexed_block(2, [0, 5]),
            MPI.INT.Create_hindexed_block(1, [4, 0]), MPI.INT.Create_resized(0, 16),
            MPI.Datatype.Create_struct([1, 2], [0, 8], [MPI.DOUBLE, MPI.INT]),
            MPI.INT.Create_subarray([4, 4], [2, 2], [1, 1]),
            MPI.INT.Create_darray(4, 1, [8], [MPI.DISTRIBUTE_CYCLIC], [2], [4], MPI.ORDER_C)]
    for t in made:
        old, combiner, params = t.decode()
        again = pickle.loads(pickle.dumps(t))
        assert again.decode()[1:] == (combiner, params), combiner
        assert again._blocks.tolist() == t._blocks.tolist() and again.Get_extent() == t.Get_extent(), combiner
        ni, na, nc, nd, comb = t.Get_envelope()
        i, a, c, d = t.Get_contents()
        assert (len(i), len(a), len(c), len(d)) == (ni, na, nc, nd) and comb == t.combiner
        for dt in d:
            if not dt.is_predefined:
                dt.Free()  # a new handle: freeing it leaves t whole
        assert t.size > 0
    assert MPI.DOUBLE.decode() == (MPI.DOUBLE, "NAMED", {})
    assert MPI.Datatype.Create_f90_integer(3) == MPI.INTEGER2 and MPI.Datatype.Create_f90_real(6, 30).size == 4


def test_the_kernel_walks_folded_runs():
    assert MPI.DOUBLE.Create_vector(1000, 1, 8)._runs.tolist() == [[0, 8, 64, 1000]]  # one row, not 1000
    sub = MPI.INT.Create_subarray([4, 5, 6], [2, 3, 2], [1, 2, 3])
    assert sub._runs.tolist() == [[180, 8, 24, 3], [300, 8, 24, 3]]
    mixed = MPI.INT.Create_hindexed([1, 1, 1, 2, 1, 1], [0, 8, 16, 40, 100, 104])
    rows = mixed._runs.tolist()
    assert sum(r[1] * r[3] for r in rows) == mixed.size
    a = np.arange(40, dtype=np.int32)
    assert picked(mixed, a).tolist() == [0, 2, 4, 10, 11, 25, 26]


def test_bottom_messages_reach_only_this_process_memory():
    a = np.arange(4, dtype=np.int32)
    t = MPI.Datatype.Create_struct([2], [MPI.Get_address(a) + 4], [MPI.INT])
    m = parse_send([MPI.BOTTOM, 1, t])
    assert m.array.tolist() == [1, 2]
    bogus = MPI.Datatype.Create_struct([2], [0x1000], [MPI.INT])  # the never-mapped first pages
    with pytest.raises(BufferError, match="MPI.BOTTOM"):
        parse_send([MPI.BOTTOM, 1, bogus])
    assert parse_send([MPI.BOTTOM, "B"]).count == 0  # BOTTOM alone holds nothing


def test_freeing_the_parts_leaves_a_made_type_whole():
    inner = MPI.DOUBLE.Create_vector(2, 1, 3)
    outer = MPI.Datatype.Create_struct([1, 1], [0, 64], [inner, MPI.INT])
    inner.Free()  # allowed in MPI once outer exists
    assert outer.decode()[2]["datatypes"][0].size == 16 and pickle.loads(pickle.dumps(outer)).size == outer.size


def test_one_call_pack_and_unpack_of_an_array_message():
    """derived_pack/space/unpack, the point-to-point fast path: the same bytes as typemap_copy, a
    partial last element written only as far as it arrived, and None wherever the general path
    must decide (not an ndarray, not C-contiguous, read-only for a receive, reaching outside)."""
    from commlib._kernels import derived_pack, derived_space, derived_unpack
    a = np.arange(48.0).reshape(6, 8)
    col = MPI.DOUBLE.Create_vector(6, 1, 8)
    packed = derived_pack(a, col._plan, 1)
    assert packed.dtype == np.uint8 and packed.view(np.float64).tolist() == a[:, 0].tolist()
    pair = MPI.DOUBLE.Create_vector(2, 1, 3).Create_resized(0, 8)  # 2 doubles each, one row apart
    assert derived_pack(a, pair._plan, 3).view(np.float64).tolist() == [0, 3, 1, 4, 2, 5]

    out = np.full((6, 8), -1.0)
    space = derived_space(out, col._plan, 1)
    assert space.nbytes == 48
    space[:] = packed
    assert derived_unpack(out, col._plan, 1, space, 48) == 48
    assert (out[:, 0] == a[:, 0]).all() and (out[:, 1:] == -1).all()

    b = a + 0.1  # low bytes that are not zero: a half-written double shows
    out[:] = -1
    space = derived_space(out, pair._plan, 3)
    space[:] = derived_pack(b, pair._plan, 3)
    derived_unpack(out, pair._plan, 3, space, 2 * 16 + 4)  # two whole elements, then half a double
    flat, src = out.reshape(-1), b.reshape(-1)
    assert flat[[0, 3, 1, 4]].tolist() == src[[0, 3, 1, 4]].tolist() and flat[5] == -1
    half = flat[2:3].view(np.uint8)
    assert half[:4].tolist() == src[2:3].view(np.uint8)[:4].tolist()  # what arrived of element 2
    assert half[4:].tolist() == np.array([-1.0]).view(np.uint8)[4:].tolist()  # the rest left as it was

    assert derived_pack(a[:, ::2], col._plan, 1) is None  # not C-contiguous
    assert derived_pack(a.reshape(-1).tolist(), col._plan, 1) is None  # not an ndarray
    assert derived_pack(a, col._plan, 2) is None  # 2 columns of 6 rows reach past 48 doubles
    assert derived_pack(a, col._plan, -1) is None
    ro = a.copy()
    ro.flags.writeable = False
    assert derived_pack(ro, col._plan, 1) is not None and derived_space(ro, col._plan, 1) is None
    with pytest.raises(ValueError):
        derived_unpack(out, col._plan, 1, np.empty(48, np.uint8), 56)  # more bytes than the receive holds
    assert MPI.DOUBLE._plan is None and MPI.DOUBLE.Create_contiguous(3)._plan is None  # plain views: no plan


def test_a_typemap_is_made_on_first_use_and_survives_its_components_being_freed():
    """Making, measuring and freeing a type builds no typemap (mpi4py's suites make ~180,000 types a rank);
    one made later from components the program has freed meanwhile is still the whole type, and the
    handles of one type stay equal before and after it is built."""
    a = np.arange(60.0)
    v = MPI.DOUBLE.Create_vector(4, 2, 5)
    nested = v.Create_contiguous(2)
    sub = MPI.DOUBLE.Create_subarray([4, 5, 6], [2, 3, 4], [1, 1, 1])
    assert nested.Get_extent() == (0, 2 * 17 * 8) and sub.size == 24 * 8
    assert nested._lay.blocks is None and v._lay.blocks is None and sub._lay.blocks is None
    copy = MPI.Datatype(nested)
    assert copy == nested and copy._lay is nested._lay
    expect = [0, 1, 5, 6, 10, 11, 15, 16, 17, 18, 22, 23, 27, 28, 32, 33]
    v.Free()  # its layout lives on in nested's
    assert picked(nested, a).tolist() == expect and picked(copy, a).tolist() == expect
    assert copy == nested and nested._lay.blocks is not None
    grid = np.arange(120.0).reshape(4, 5, 6)
    assert picked(sub, grid).tolist() == grid[1:3, 1:4, 1:5].ravel().tolist()
    assert not nested._simple and nested._plan[0] is nested._runs
