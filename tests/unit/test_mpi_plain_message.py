"""The message forms commlib.MPI's Send/Recv take in one compiled call (`_buffer.plain_message`).

[array, datatype] and [array, count, datatype] whose array is C-contiguous, of the datatype's own base
type (and writable, for a receive), are viewed in place with their wire code; every other form is
left to the full parser, which raises what it deserves. In-process: no launcher.
"""
import numpy as np
import pytest

from commlib import MPI
from commlib.MPI._buffer import plain_message
from commlib.MPI._bufspec import parse_recv, parse_send

pytestmark = pytest.mark.timeout(30)


def test_the_plain_forms_are_views_of_the_callers_memory_with_their_wire_code():
    a = np.arange(6.0).reshape(2, 3)
    got, wire = plain_message([a, MPI.DOUBLE], False)
    assert wire == MPI.DOUBLE._wire and np.shares_memory(got, a) and got.size == 6
    got, wire = plain_message((a, 4, MPI.DOUBLE), True)
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0] and np.shares_memory(got, a)
    assert plain_message([a, 6, MPI.DOUBLE], False)[0] is a  # all of it: the array itself
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        got, wire = plain_message([a, 2, pair], False)
        assert got.size == 4 and wire == MPI.DOUBLE._wire
        assert plain_message([a, pair], False)[0].size == 6  # 3 pairs: the whole array
        assert plain_message([np.zeros(5), pair], False) is None  # not whole pairs: the parser's error
    finally:
        pair.Free()


@pytest.mark.parametrize("spec", [
    lambda: [np.zeros(4, "f"), MPI.DOUBLE],          # another base type: reinterpreted by the parser
    lambda: [np.zeros(8)[::2], MPI.DOUBLE],          # not contiguous
    lambda: [memoryview(bytearray(16)), MPI.DOUBLE], # another kind of buffer
    lambda: [np.zeros(4), "d"],                      # a typecode, not a Datatype
    lambda: [np.zeros(4), np.int64(2), MPI.DOUBLE],  # a count that is not an int
    lambda: [np.zeros(4), 5, MPI.DOUBLE],            # more than the buffer holds
    lambda: [np.zeros(4), 2, 0, MPI.DOUBLE],         # a displacement
    lambda: [np.zeros(4), (2, 1), MPI.DOUBLE],       # (count, displ)
], ids=["other-base", "strided", "memoryview", "typecode", "np-count", "too-many", "displ", "count-displ"])
def test_anything_else_is_left_to_the_parser(spec):
    assert plain_message(spec(), False) is None


def test_a_read_only_array_is_plain_for_a_send_only():
    a = np.zeros(3)
    a.flags.writeable = False
    assert plain_message([a, MPI.DOUBLE], False) is not None
    assert plain_message([a, MPI.DOUBLE], True) is None
    with pytest.raises(BufferError):
        parse_recv([a, MPI.DOUBLE])


def test_the_parser_gives_the_same_message_and_refuses_a_count_beyond_the_buffer():
    a = np.arange(8.0)
    m = parse_send([a, 3, MPI.DOUBLE])
    assert m.array.tolist() == [0.0, 1.0, 2.0] and m.count == 3 and m.given and m.rest.size == 8
    m = parse_recv((a, MPI.DOUBLE))
    assert m.count == 8 and not m.given and np.shares_memory(m.array, a)
    with pytest.raises(ValueError, match="needs 72 bytes, the buffer has 64"):
        parse_send([a, 9, MPI.DOUBLE])


def test_the_parser_views_bytearray_and_mmap_buffers_in_place_as_the_osu_benchmarks_pass_them():
    import mmap

    m = mmap.mmap(-1, 64)
    msg = parse_recv([m, 16, MPI.BYTE])
    msg.array[:] = 7
    assert bytes(m[:17]) == b"\x07" * 16 + b"\x00" and msg.datatype is MPI.BYTE
    b = bytearray(16)
    parse_recv([b, MPI.DOUBLE]).array[:] = 1.5
    assert np.frombuffer(b, "d").tolist() == [1.5, 1.5]
    assert plain_message([b, MPI.DOUBLE], True) is None  # (the one call takes these as buffers: raw_message)
    with pytest.raises(ValueError):
        parse_send([bytearray(15), MPI.DOUBLE])  # not whole doubles
    ro = mmap.mmap(-1, 16, access=mmap.ACCESS_READ)
    assert parse_send([ro, MPI.BYTE]).count == 16
    with pytest.raises(BufferError):
        parse_recv([ro, MPI.BYTE])


def test_raw_message_gives_the_buffer_itself_with_bytes_count_and_wire():
    import mmap

    from commlib.MPI._buffer import raw_message

    m = mmap.mmap(-1, 64)
    assert raw_message([m, 16, MPI.BYTE]) == (m, 16, 16, MPI.BYTE._wire)
    b = bytearray(32)
    assert raw_message([b, MPI.DOUBLE]) == (b, 32, 4, MPI.DOUBLE._wire)
    assert raw_message((b, 3, MPI.DOUBLE)) == (b, 24, 3, MPI.DOUBLE._wire)
    pair = MPI.DOUBLE.Create_contiguous(2).Commit()
    try:
        assert raw_message([b, pair]) == (b, 32, 4, MPI.DOUBLE._wire)  # 2 pairs: 4 doubles on the wire
    finally:
        pair.Free()
    for spec in ([b, 5, MPI.DOUBLE], [bytearray(12), MPI.DOUBLE], [b, np.int64(1), MPI.DOUBLE], [b, 1, 0, MPI.DOUBLE],
                 [np.zeros(4), MPI.DOUBLE], [b, "d"], [bytes(8), MPI.DOUBLE]):
        assert raw_message(spec) is None, spec
