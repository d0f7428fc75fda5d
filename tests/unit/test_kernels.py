"""commlib._kernels: reductions bit-exact against numpy/ml_dtypes, pack/unpack."""
import platform
import zlib

import numpy as np
import pytest

from commlib import _dtypes
from commlib import _kernels as K

try:
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

OPS = _dtypes.OP_NAMES
ALL_DTYPES = list(_dtypes.DTYPE_NAMES)
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
LEVELS = list(range(K._cpu_simd_level() + 1))
X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def dt_of(name):
    if name == "bfloat16":
        pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@pytest.fixture(params=LEVELS, ids=lambda v: ["baseline", "avx2", "avx512"][v])
def level(request):
    old = K.simd_level()
    assert K._set_simd_level(request.param) == request.param
    yield request.param
    K._set_simd_level(old)


def bits(a):
    """Bit pattern of every scalar component (complex -> two floats)."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        a = a.view(np.float32 if a.dtype.itemsize == 8 else np.float64)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(UINT[a.dtype.itemsize])


def isnan_bits(a):
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        a = a.view(np.float32 if a.dtype.itemsize == 8 else np.float64)
    if a.dtype.kind in "biu":
        return np.zeros(a.shape, bool)
    return np.isnan(a.astype(np.float32) if a.dtype.itemsize == 2 else a)


def rand(dt, n, rng, special=True):
    """Random values of dtype dt; floats get zeros of both signs, inf and NaN mixed in."""
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
    if dt.itemsize == 2:  # float16 / bfloat16: random bit patterns
        return rng.integers(0, 1 << 16, n, dtype=np.uint16).view(dt)
    if dt.kind == "c":
        x = (rng.standard_normal(n) * 10 + 1j * rng.standard_normal(n) * 10).astype(dt)
        if special and n > 4:
            x[::7] = 0
            x[3::11] = 1j
        return x
    x = (rng.standard_normal(n) * 100).astype(dt)
    if special and n > 4:
        x[::5] = 0.0
        x[1::9] = -0.0
        x[2::13] = np.inf
        x[3::17] = -np.inf
        x[4::19] = np.nan
        x[5::23] = -np.nan
    return x


def reference(a, b, op, level_=1):
    """numpy's (and ml_dtypes') answer for dst = op(a, b)."""
    dt = a.dtype
    with np.errstate(all="ignore"):
        if op in ("land", "lor"):
            f = np.logical_and if op == "land" else np.logical_or
            return f(a, b).astype(dt)
        if op == "prod" and dt.kind == "c" and level_ == 0 and X86:
            # baseline loop on x86: the plain (unfused) formula, as numpy's SSE2 loop
            ar, ai, br, bi = a.real, a.imag, b.real, b.imag
            out = np.empty_like(a)
            out.real = ar * br - ai * bi
            out.imag = ar * bi + ai * br
            return out
        f = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
             "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        return f(a, b)


def assert_same(got, want, op):
    """Bit-exact, except that two NaN results need not share sign/payload for
    arithmetic ops (min/max/land/lor must be exact: they return input bits)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    gb, wb = bits(got), bits(want)
    if op in ("sum", "prod"):
        gn, wn = isnan_bits(got), isnan_bits(want)
        np.testing.assert_array_equal(gn, wn)
        np.testing.assert_array_equal(gb[~wn], wb[~wn])
    else:
        np.testing.assert_array_equal(gb, wb)


# ------------------------------------------------------------------ every pair

@pytest.mark.parametrize("dtname", ALL_DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_every_pair(dtname, op, level):
    dt = dt_of(dtname)
    code, opc = _dtypes.dtype_code(dt), _dtypes.op_code(op)
    rng = np.random.default_rng(zlib.crc32(f"{dtname}/{op}".encode()))  # same inputs every run
    if not _dtypes.legal(code, opc):
        a = np.zeros(4, dt)
        with pytest.raises(ValueError) as e:
            K.reduce_into(a, a.copy(), op)
        assert op in str(e.value) and dtname in str(e.value)
        return
    for n in (0, 1, 7, 31, 1023, 4097):
        a, b = rand(dt, n, rng), rand(dt, n, rng)
        want = reference(a, b, op, level)
        got = a.copy()
        assert K.reduce_into(got, b, op) is got
        assert_same(got, want, op)
        # unaligned-to-vector views at an odd element offset
        if n > 1:
            got = a.copy()
            K.reduce_into(got[1:], b[1:], op)
            assert_same(got[1:], want[1:], op)
            assert_same(got[:1], a[:1], op)


@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_half_all_bit_patterns(dtname, op, level):
    """Every 16-bit pattern (NaN, inf, subnormals) against many partners."""
    dt = dt_of(dtname)
    rng = np.random.default_rng(7)
    a = np.arange(1 << 16, dtype=np.uint16).view(dt)
    for _ in range(3):
        b = rng.integers(0, 1 << 16, 1 << 16, dtype=np.uint16).view(dt)
        got = a.copy()
        K.reduce_into(got, b, op)
        assert_same(got, reference(a, b, op), op)
    # subnormal + subnormal, and sums that round to the exact tie
    sub = np.arange(0, 0x400, dtype=np.uint16).view(dt) if dtname == "float16" else \
        np.arange(0, 0x80, dtype=np.uint16).view(dt)
    got = sub.copy()
    K.reduce_into(got, sub[::-1].copy(), op)
    assert_same(got, reference(sub, sub[::-1], op), op)


@pytest.mark.parametrize("dtname", ["float16", "bfloat16"])
def test_half_products_rounding_into_subnormals(dtname, level):
    """Every pattern times partners that scale it into the subnormal range.
    A float32 product rounds to a half subnormal by a shift that drops up to
    11 bits: a kept half-way pattern is a tie only if the dropped bits are all
    zero (a sticky-bit slip here rounded 1 in ~4000 random float16 products
    one unit low)."""
    dt = dt_of(dtname)
    a = np.arange(1 << 16, dtype=np.uint16).view(dt)
    exp_bits = 10 if dtname == "float16" else 7
    for e in range(1, 18):                     # partner exponents 2^-14 .. 2^2 (float16)
        for frac in (0, 1, 0x55, 0x3ff, 0x201):
            bb = (e << exp_bits) | (frac & ((1 << exp_bits) - 1))
            b = np.full(1 << 16, bb, dtype=np.uint16).view(dt)
            got = a.copy()
            K.reduce_into(got, b, "prod")
            assert_same(got, reference(a, b, "prod"), "prod")


def test_min_max_nan_and_zero_choice(level):
    """Which NaN and which zero: numpy's exact choice."""
    for dtname in ("float32", "float64", "float16", "bfloat16"):
        dt = dt_of(dtname)
        a = np.array([0.0, -0.0, np.nan, 1, np.nan, -np.nan, 2, -np.inf], dtype=dt)
        b = np.array([-0.0, 0.0, 1, np.nan, -np.nan, np.nan, 2, np.inf], dtype=dt)
        for op in ("min", "max"):
            got = a.copy()
            K.reduce_into(got, b, op)
            assert_same(got, reference(a, b, op), op)


def test_integer_wrap():
    for dtname in ("int8", "int16", "int32", "int64", "uint8", "uint64"):
        dt = np.dtype(dtname)
        info = np.iinfo(dt)
        a = np.array([info.max, info.min, info.max, -1 if dt.kind == "i" else 3], dt)
        b = np.array([1, -1 if dt.kind == "i" else info.max, info.max, info.min], dt)
        for op in ("sum", "prod"):
            got = a.copy()
            K.reduce_into(got, b, op)
            with np.errstate(all="ignore"):
                np.testing.assert_array_equal(got, reference(a, b, op))


def test_bool_semantics():
    a = np.array([0, 0, 1, 1], bool)
    b = np.array([0, 1, 0, 1], bool)
    table = {"sum": [0, 1, 1, 1], "max": [0, 1, 1, 1], "lor": [0, 1, 1, 1], "bor": [0, 1, 1, 1],
             "prod": [0, 0, 0, 1], "min": [0, 0, 0, 1], "land": [0, 0, 0, 1], "band": [0, 0, 0, 1],
             "bxor": [0, 1, 1, 0]}
    for op, want in table.items():
        got = a.copy()
        K.reduce_into(got, b, op)
        np.testing.assert_array_equal(got, np.array(want, bool))


def test_logical_on_floats_and_complex():
    a = np.array([0.0, np.nan, -0.0, 2.0], np.float32)
    b = np.array([1.0, 1.0, 3.0, 0.0], np.float32)
    got = a.copy()
    K.reduce_into(got, b, "land")
    assert got.tolist() == [0.0, 1.0, 0.0, 0.0]
    c = np.array([0, 1j, 0, 2 + 0j], np.complex128)
    d = np.array([1j, 1, 0, 0], np.complex128)
    got = c.copy()
    K.reduce_into(got, d, "lor")
    assert got.tolist() == [1 + 0j, 1 + 0j, 0j, 1 + 0j]


def test_complex_prod_finite_bit_exact():
    rng = np.random.default_rng(3)
    for dt in (np.complex64, np.complex128):
        a, b = rand(np.dtype(dt), 1001, rng, special=False), rand(np.dtype(dt), 1001, rng, special=False)
        got = a.copy()
        K.reduce_into(got, b, "prod")
        assert_same(got, a * b, "sum")  # current (best) level vs numpy itself


# ------------------------------------------------------------------ layouts

@pytest.mark.parametrize("dtname", ["int32", "float64", "float16", "bfloat16", "complex64", "bool"])
def test_layouts(dtname):
    dt = dt_of(dtname)
    rng = np.random.default_rng(11)
    base_a = rand(dt, 600, rng).reshape(20, 30)
    base_b = rand(dt, 600, rng).reshape(20, 30)
    cases = [
        (lambda x: x[:, ::2], lambda x: x[:, ::2]),          # strided both
        (lambda x: x[::-1], lambda x: x[::-1, ::-1]),         # negative strides
        (lambda x: x.T, lambda x: x.T),                       # F-contiguous both
        (lambda x: x, lambda x: np.asfortranarray(x)),        # C dst, F src
        (lambda x: x.T, lambda x: np.ascontiguousarray(x.T)),  # F dst, C src
        (lambda x: x[1:, 3:], lambda x: x[:-1, :-3]),
    ]
    for op in ("sum", "prod" if dt.kind == "c" else "max"):
        for fd, fs in cases:
            a = base_a.copy()
            dv, sv = fd(a), fs(base_b.copy())
            want = reference(dv.copy(), sv.copy(), op)
            K.reduce_into(dv, sv, op)
            assert_same(dv, want, op)
            # untouched parts of the base stay as they were
            mask = np.ones(a.shape, bool)
            fd(mask)[...] = False
            assert_same(a[mask], base_a[mask], "max")


def test_in_place_and_overlap():
    rng = np.random.default_rng(5)
    a = rng.integers(-100, 100, 1000).astype(np.int64)
    x = a.copy()
    K.reduce_into(x, x, "sum")
    np.testing.assert_array_equal(x, a * 2)
    x = a.copy()
    K.reduce_into(x[1:], x[:-1], "sum")  # src behind dst: numpy reads src first
    y = a.copy()
    np.add(y[1:], y[:-1], out=y[1:])
    np.testing.assert_array_equal(x, y)
    x = a.copy()
    K.reduce_into(x[:-1], x[1:], "sum")
    y = a.copy()
    np.add(y[:-1], y[1:], out=y[:-1])
    np.testing.assert_array_equal(x, y)
    f = rng.standard_normal(1000).astype(np.float16)
    g = f.copy()
    K.reduce_into(g, g, "sum")
    assert_same(g, f + f, "sum")


def test_misaligned_and_bytes_like():
    raw = np.zeros(8 * 100 + 1, np.uint8)
    a = raw[1:].view(np.float64)  # misaligned
    assert not a.flags.aligned
    a[:] = np.arange(100)
    K.reduce_into(a, np.ones(100), "sum")
    np.testing.assert_array_equal(a, np.arange(100) + 1)
    buf = bytearray(b"\x01\x02\x03")
    assert K.reduce_into(buf, bytearray(b"\x01\x01\x01"), "sum") is buf
    assert buf == bytearray(b"\x02\x03\x04")


def test_0d_and_reduceop_enum():
    a = np.array(3.0)
    K.reduce_into(a, np.array(4.0), _dtypes.ReduceOp.MAX)
    assert a == 4.0


def test_errors():
    a = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="float64"):
        K.reduce_into(a, np.zeros(4), "sum")
    with pytest.raises(ValueError, match="shape"):
        K.reduce_into(a, np.zeros(5, np.float32), "sum")
    with pytest.raises(ValueError, match="unknown"):
        K.reduce_into(a, a.copy(), "mean")
    r = np.zeros(4, np.float32)
    r.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        K.reduce_into(r, a, "sum")
    with pytest.raises(TypeError, match="unsupported"):
        K.reduce_into(np.zeros(2, "U3"), np.zeros(2, "U3"), "sum")
    with pytest.raises(ValueError, match="bxor.*float32"):
        K.reduce_into(a, a.copy(), "bxor")
    with pytest.raises(ValueError, match="max.*complex64"):
        K.reduce_into(np.zeros(2, np.complex64), np.zeros(2, np.complex64), "max")


# ------------------------------------------------------------------ pack / unpack

def random_view(rng, dt):
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(rng.integers(0, 5)) if rng.random() < 0.15 else int(rng.integers(1, 7))
                  for _ in range(ndim))
    big = tuple(s * 3 + 1 for s in shape)
    base = rand(dt, int(np.prod(big)), rng, special=False).reshape(big)
    idx = []
    for s in shape:
        step = int(rng.choice([1, 1, 2, 3, -1, -2]))
        if step > 0:
            start = int(rng.integers(0, 2))
            idx.append(slice(start, start + s * step, step))
        else:
            start = int(rng.integers(s * -step - 1, s * 3 + 1)) if s else 0
            idx.append(slice(start, start - s * -step if start - s * -step >= 0 else None, step))
    v = base[tuple(idx)]
    if ndim >= 2 and rng.random() < 0.5:
        v = v.transpose(rng.permutation(ndim))
    return v


@pytest.mark.parametrize("dtname", ["bool", "int8", "int16", "float32", "float64",
                                    "complex128", "bfloat16"])
def test_pack_unpack_random(dtname):
    dt = dt_of(dtname)
    rng = np.random.default_rng(17)
    for _ in range(120):
        v = random_view(rng, dt)
        want = np.ascontiguousarray(v)
        buf = bytearray(v.nbytes)
        assert K.pack(v, buf) is buf
        assert bytes(buf) == want.tobytes()
        out = np.zeros(v.nbytes, np.uint8)
        K.pack(v, out)
        assert out.tobytes() == want.tobytes()
        # unpack into a C-ordered array and into a different strided layout
        target = np.empty_like(v, order="C")
        strided = random_like(rng, v)
        K.unpack(bytes(buf), strided)
        assert bits(strided).tobytes() == bits(want).tobytes()
        K.unpack(buf, target)
        assert target.tobytes() == want.tobytes()


def random_like(rng, v):
    """A writable non-contiguous array with v's shape and dtype."""
    if v.ndim == 0:
        return np.zeros((), v.dtype)
    big = np.zeros(tuple(s * 2 + 1 for s in v.shape), v.dtype)
    idx = tuple(slice(None, None, -2) if rng.random() < 0.5 else slice(None, 2 * s, 2)
                for s in v.shape)
    out = big[idx][tuple(slice(0, s) for s in v.shape)]
    assert out.shape == v.shape
    return out


def test_pack_unpack_round_trip_transpose():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.int32).reshape(2, 3, 4, 5).transpose(3, 1, 0, 2)[::-1, :, :, ::2]
    buf = np.empty(a.nbytes, np.uint8)
    K.pack(a, buf)
    assert buf.tobytes() == np.ascontiguousarray(a).tobytes()
    back2 = np.zeros(a.shape, np.int32)
    K.unpack(buf, back2)
    np.testing.assert_array_equal(back2, a)
    b = np.zeros((5, 3, 2, 4), np.int32)[:, :, :, ::-2]
    K.unpack(buf, b)
    np.testing.assert_array_equal(b, a)


def test_pack_errors():
    a = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="bytes"):
        K.pack(a, bytearray(47))
    with pytest.raises(ValueError, match="writable"):
        K.pack(a, bytes(48))
    with pytest.raises(ValueError, match="writable contiguous"):
        K.pack(a, np.zeros(96, np.uint8)[::2])
    with pytest.raises(ValueError, match="bytes"):
        K.unpack(bytes(49), a)
    r = np.zeros(3)
    r.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        K.unpack(bytes(24), r)
    K.pack(np.zeros((0, 3)), bytearray(0))
    K.unpack(b"", np.zeros((4, 0)))


def test_itemsize_and_level():
    assert K.simd_level() in (0, 1, 2)
    assert K._cpu_simd_level() >= K.simd_level()


def test_plain_pair_says_when_buffers_go_straight_to_the_one_call_path():
    from commlib._kernels import plain, plain_pair
    s = np.ones((2, 3), np.float32)
    assert plain_pair(s, np.empty((2, 3), np.float32), 1) == 1
    assert plain_pair(s, np.empty((6, 3), np.float32), 3) == 1
    assert plain_pair(s, np.empty(18, np.float32), 3) == 2  # same elements, flatten first
    assert plain_pair(s, np.empty((3, 2, 3), np.float32), 3) == 2
    assert plain_pair(np.array(1.0, np.float32), np.empty(4, np.float32), 4) == 1  # a 0-d block
    assert plain_pair(np.array(1.0, np.float32), np.empty((4, 1), np.float32), 4) == 2
    refused = [
        (s, np.empty((2, 3), np.float64), 1),  # dtypes differ
        (s, np.empty((2, 4), np.float32), 1),  # sizes differ
        (s, np.empty((6, 3), np.float32), 2),  # not mult times
        (s[:, ::2], np.empty((2, 2), np.float32), 1),  # strided send
        (s, np.empty((2, 6), np.float32)[:, ::2], 1),  # strided receive
        (s, np.empty((2, 3), np.float32).astype(">f4"), 1),  # another byte order
        (s.tolist(), np.empty((2, 3), np.float32), 1),  # not arrays
        (s, bytearray(24), 1),
    ]
    ro = np.empty((2, 3), np.float32)
    ro.flags.writeable = False
    refused.append((s, ro, 1))  # a read-only receive
    for a, b, mult in refused:
        assert plain_pair(a, b, mult) == 0, (a, b, mult)
    assert plain(s, True) and plain(ro, False) and not plain(ro, True)
    assert not plain(s[:, ::2], False) and not plain(s.tolist(), False)
