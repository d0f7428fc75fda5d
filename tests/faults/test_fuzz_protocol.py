"""Fuzz the wire parser: `_protocol.decode` and `_protocol.Decoder`, in-process (sans-IO).

Whatever bytes arrive, in whatever slices: the only outcomes are frames,
NEED_DATA or ProtocolError (a CommError) -- never another exception, never a
hang (every loop below is bounded by the bytes fed) and never a buffer larger
than what was fed (a declared length above the receiver's limit is refused
before anything is stored). Inputs: random bytes, valid headers with random
fields, valid headers with bytes flipped/overwritten/truncated, and streams
of several frames cut at random points.
"""
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import commlib as cl
from commlib import _wire as P
from faultlib import record_figure

H = P.HEADER_NBYTES
MAX_NBYTES = 4096  # the Decoder's limit in these tests
COUNTS = {}

# Valid-looking fields: every header the encoder can produce, including extreme values.
u8, u32, u64 = st.integers(0, 255), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
fields = st.fixed_dictionaries({
    "kind": st.sampled_from([P.KIND_COLL, P.KIND_P2P]) | u8,
    "coll": st.integers(0, len(P.COLL_NAMES) - 1) | u8,
    "dtype": st.integers(0, 14) | st.just(255) | u8,
    "op": st.integers(0, 8) | u8,
    "flags": u8,
    "group": u32,
    "root": st.integers(-(2**31), 2**31 - 1),
    "shape": u32,
    "seq": u64,
    "tag": st.integers(-(2**63), 2**63 - 1),
    "count": u64,
    "nbytes": st.integers(0, 2 * MAX_NBYTES) | u64,
})


def header_bytes(f):
    return P.encode(f["kind"], f["coll"], f["dtype"], f["op"], f["flags"], f["group"], f["root"], f["shape"],
                    f["seq"], f["tag"], f["count"], f["nbytes"])


@st.composite
def mutated_header(draw):
    raw = bytearray(header_bytes(draw(fields)))
    for _ in range(draw(st.integers(0, 4))):
        how = draw(st.sampled_from(["flip", "set", "truncate", "extend"]))
        if how == "flip" and raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "set" and raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw[i] = draw(u8)
        elif how == "truncate":
            del raw[draw(st.integers(0, len(raw))):]
        else:
            raw += draw(st.binary(max_size=8))
    return bytes(raw)


@st.composite
def stream(draw):
    """Several frames (valid small payloads, mutated headers, random junk) and random cut points."""
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        choice = draw(st.sampled_from(["frame", "frame", "mutated", "junk"]))
        if choice == "frame":
            f = draw(fields)
            f["nbytes"] = draw(st.integers(0, 300))
            f["kind"], f["coll"] = draw(st.sampled_from([P.KIND_COLL, P.KIND_P2P])), draw(st.integers(0, 15))
            f["dtype"] = draw(st.integers(0, 14) | st.just(255))
            parts.append(header_bytes(f) + draw(st.binary(min_size=f["nbytes"], max_size=f["nbytes"])))
        elif choice == "mutated":
            parts.append(draw(mutated_header()))
        else:
            parts.append(draw(st.binary(max_size=200)))
    data = b"".join(parts)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    return data, cuts


def _check_header(h):
    """Invariants of any header that decode() accepted."""
    assert h.kind in (P.KIND_COLL, P.KIND_P2P)
    assert 0 <= h.coll < len(P.COLL_NAMES)
    assert h.nbytes <= P.MAX_FRAME_NBYTES
    assert P.decode(h.encode()) == h  # round trip


def _decode_only(data):
    try:
        h = P.decode(data)
    except P.ProtocolError as e:
        assert isinstance(e, cl.CommError)
        return "error"
    assert len(data) == H
    _check_header(h)
    return "header"


def _feed(data, cuts):
    """Feed data to a fresh Decoder in the given slices; return what came out."""
    d = P.Decoder(max_nbytes=MAX_NBYTES)
    out, fed, consumed = [], 0, 0
    bounds = [0] + [c for c in cuts] + [len(data)]
    for a, b in zip(bounds, bounds[1:]):
        d.feed(data[a:b])
        fed += b - a
        for _ in range(fed // H + 2):  # at most one frame per header's worth of bytes, plus NEED_DATA
            try:
                frame = d.next_frame()
            except P.ProtocolError as e:
                assert isinstance(e, cl.CommError)
                assert d.buffered <= fed - consumed  # nothing allocated beyond what was fed
                return out, "error"
            if frame is P.NEED_DATA:
                break
            h, payload = frame
            _check_header(h)
            assert h.nbytes <= MAX_NBYTES and len(payload) == h.nbytes
            consumed += H + h.nbytes
            assert consumed <= fed
            out.append(frame)
        else:
            pytest.fail("next_frame kept returning frames beyond the bytes fed")
        pending = H if d._header is not None else 0  # a header waiting for its payload
        assert d.buffered == fed - consumed - pending
    return out, "ok"


def _count(name):
    COUNTS[name] = COUNTS.get(name, 0) + 1


FUZZ = settings(max_examples=2000, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.timeout(120)
@FUZZ
@given(st.binary(max_size=2 * H) | st.binary(min_size=H, max_size=H))
def test_decode_random_bytes(data):
    _count("decode(random bytes)")
    _decode_only(data)


@pytest.mark.timeout(120)
@FUZZ
@given(mutated_header())
def test_decode_mutated_headers(data):
    _count("decode(mutated header)")
    _decode_only(data)


@pytest.mark.timeout(120)
@settings(FUZZ, max_examples=600)
@given(stream())
def test_decoder_streams_in_random_slices(s):
    _count("Decoder(stream in random slices)")
    data, cuts = s
    frames, _ = _feed(data, cuts)
    # The same bytes fed one byte at a time give the same frames.
    frames1, _ = _feed(data, list(range(1, len(data))))
    assert [(h.encode(), p) for h, p in frames] == [(h.encode(), p) for h, p in frames1]


@pytest.mark.parametrize("kind", [P.KIND_COLL, P.KIND_P2P])
def test_describe_never_raises_on_a_decoded_header(kind):
    """Error messages are built from headers a peer sent (status_error's MISMATCH path):
    describe() must not crash on any header decode() accepts. Exhaustive over coll x dtype x op."""
    bad = []
    for coll in range(len(P.COLL_NAMES)):
        for dtype in list(range(15)) + [255]:
            for op in range(256):
                try:
                    h = P.decode(P.encode(kind, coll, dtype, op, 0, 1, 0, 0, 2, 0, 8, 0))
                except P.ProtocolError:
                    assert op >= 9, (coll, dtype, op)  # only unknown op codes are refused here
                    continue
                _count("Header.describe() (exhaustive)")
                try:
                    assert isinstance(h.describe(), str)
                except Exception as e:  # noqa: BLE001 - collected and reported below
                    bad.append((P.COLL_NAMES[coll], dtype, op, repr(e)))
    assert not bad, f"{len(bad)} decodable headers crash describe(), e.g. {bad[:3]}"


@pytest.mark.timeout(60)
def test_seeded_mutation_sweep():
    """Hypothesis is thorough but slow here; a plain seeded loop adds volume (bounded in count and time)."""
    import random

    rng = random.Random(20240606)
    valid = [header_bytes({"kind": k, "coll": c, "dtype": dt, "op": 0, "flags": 0, "group": 7, "root": 1,
                           "shape": 0, "seq": 3, "tag": 0, "count": 10, "nbytes": nb})
             for k in (1, 2) for c in (0, 1, 4) for dt in (0, 11, 255) for nb in (0, 40, MAX_NBYTES + 1)]
    deadline = time.monotonic() + 8.0
    tried = 0
    while tried < 300_000 and time.monotonic() < deadline:
        raw = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 3)):
            raw[rng.randrange(H)] = rng.randrange(256)
        data = bytes(raw)
        if _decode_only(data) == "header" and tried % 8 == 0:
            tail = rng.randbytes(rng.randint(0, 64))
            _feed(data + tail, sorted(rng.sample(range(len(data) + len(tail) + 1), 3)))
        tried += 1
    COUNTS["seeded mutation sweep (decode, some via Decoder)"] = tried


def test_huge_declared_length_is_refused_before_buffering():
    for declared in (MAX_NBYTES + 1, P.MAX_FRAME_NBYTES, P.MAX_FRAME_NBYTES + 1, 2**64 - 1):
        d = P.Decoder(max_nbytes=MAX_NBYTES)
        d.feed(P.encode(P.KIND_P2P, 0, 255, 0, 1, 0, 0, 0, 0, 0, 0, declared))
        with pytest.raises(P.ProtocolError):
            d.next_frame()
        assert d.buffered == H


def test_fuzz_counts_recorded():
    """Runs last in this module: record how many inputs the fuzzers tried."""
    total = sum(COUNTS.values())
    if total:
        record_figure("protocol fuzz inputs tried", f"{total} ({COUNTS}); failures are reported by the tests above")
