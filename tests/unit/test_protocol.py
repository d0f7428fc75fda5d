"""The wire header and Decoder, in-process: no sockets."""
import random

import pytest

from commlib import _wire as P
from commlib._dtypes import DT_BYTES

pytestmark = pytest.mark.timeout(60)


def sample(**kw):
    fields = dict(kind=P.KIND_COLL, coll=P.COLL["all_reduce"], dtype=11, op=0, flags=0, group=7, root=3,
                  shape=P.shape_hash((4, 5)), seq=2**40 + 5, tag=-1, count=2**33 + 1, nbytes=0)
    fields.update(kw)
    return fields


def test_round_trip_keeps_every_field_including_64_bit_lengths():
    f = sample(nbytes=2**36 + 3, tag=2**62)
    data = P.encode(**f)
    assert len(data) == P.HEADER_NBYTES == 56
    h = P.decode(data)
    for name, value in f.items():
        assert getattr(h, name) == value, name
    assert h.encode() == data


def test_header_is_little_endian_with_magic_first():
    data = P.encode(**sample(count=1))
    assert data[:4] == P.MAGIC
    assert data[4] == P.PROTOCOL_VERSION
    assert int.from_bytes(data[40:48], "little") == 1  # count sits at a fixed offset


@pytest.mark.parametrize("n", [0, 1, 55, 57])
def test_truncated_or_long_header_is_a_protocol_error(n):
    with pytest.raises(P.ProtocolError, match="truncated header"):
        P.decode(b"\0" * n)


@pytest.mark.parametrize("offset,value,msg", [
    (0, b"XXXX", "bad magic"),
    (4, bytes([99]), "protocol version 99"),
    (5, bytes([9]), "unknown frame kind"),
    (6, bytes([200]), "unknown collective"),
    (7, bytes([77]), "unknown dtype"),
])
def test_corrupt_fields_are_named(offset, value, msg):
    data = bytearray(P.encode(**sample()))
    data[offset:offset + len(value)] = value
    with pytest.raises(P.ProtocolError, match=msg):
        P.decode(bytes(data))


def test_huge_declared_length_is_refused_before_buffering():
    data = P.encode(**sample(kind=P.KIND_P2P, nbytes=P.MAX_FRAME_NBYTES + 1))
    with pytest.raises(P.ProtocolError, match="exceeds the limit"):
        P.decode(data)
    dec = P.Decoder(max_nbytes=1024)
    dec.feed(P.encode(**sample(kind=P.KIND_P2P, dtype=DT_BYTES, nbytes=1025)))
    with pytest.raises(P.ProtocolError, match="receiver's limit of 1024"):
        dec.next_frame()


def test_decoder_fed_one_byte_at_a_time_reassembles_frames():
    payloads = [b"", b"x", bytes(range(256)) * 3]
    stream = b"".join(P.encode(**sample(kind=P.KIND_P2P, dtype=DT_BYTES, tag=i, nbytes=len(p))) + p
                      for i, p in enumerate(payloads))
    dec = P.Decoder()
    frames = []
    for b in stream:
        dec.feed(bytes([b]))
        while (got := dec.next_frame()) is not P.NEED_DATA:
            frames.append(got)
    assert [(h.tag, p) for h, p in frames] == list(enumerate(payloads))
    assert dec.buffered == 0


def test_decoder_in_random_slices_matches_whole_stream():
    rng = random.Random(5)
    frames = [(i, bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))) for i in range(40)]
    stream = b"".join(P.encode(**sample(kind=P.KIND_P2P, dtype=DT_BYTES, tag=t, nbytes=len(p))) + p
                      for t, p in frames)
    dec, out, i = P.Decoder(), [], 0
    while i < len(stream):
        k = rng.randrange(1, 200)
        dec.feed(stream[i:i + k])
        i += k
        while (got := dec.next_frame()) is not P.NEED_DATA:
            out.append((got[0].tag, got[1]))
    assert out == frames


def test_describe_names_the_collective_and_its_arguments():
    h = P.decode(P.encode(**sample(coll=P.COLL["broadcast"], dtype=7, count=8, seq=16, root=0)))
    assert h.describe() == "broadcast #16 (int64, 8, root=0)"
    h = P.decode(P.encode(**sample(count=1024, seq=17)))
    assert h.describe() == "all_reduce #17 (float32, 1024, op=sum)"


def test_shape_hash_distinguishes_transposed_shapes():
    assert P.shape_hash((3, 4)) != P.shape_hash((4, 3))
    assert P.shape_hash((3, 4)) == P.shape_hash([3, 4])
