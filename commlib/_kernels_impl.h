/* C core of commlib._kernels: element-wise reductions dst = op(dst, src) for
 * every (dtype, op) pair, and N-d strided pack/unpack.
 *
 * Included by _kernels.pyx only (after Python.h, so Py_ssize_t is defined).
 *
 * Speed: every loop is compiled twice, once for the baseline ISA of the build
 * (SSE2 on x86-64) and, on x86-64 with GCC/Clang, twice more with
 * __attribute__((target(...))) for AVX2+FMA+F16C and for AVX-512 (F/BW/DQ/VL).
 * cl_set_level() picks one table at import from CPUID, so a build never
 * requires a CPU feature it did not check.
 * Most loops are plain C that GCC -O3 vectorises; float16 sum/prod use F16C
 * intrinsics (vcvtph2ps / vcvtps2ph round to nearest even, like numpy).
 *
 * Semantics (bit for bit equal to numpy / ml_dtypes on the same machine):
 *  - signed integers wrap: arithmetic is done in the unsigned type;
 *  - float min/max: isnan(a) || a > b ? a : b (a = dst), which is what numpy's
 *    np.maximum returns, including which NaN and which zero; float16 uses
 *    numpy's npy_half rule (>=, so equal values keep a), bfloat16 ml_dtypes'
 *    rule (>, so equal values give b). Both return one of the input bit patterns;
 *  - float16/bfloat16 sum/prod: widen to float32, operate, round once to
 *    nearest even (bfloat16 NaN -> sign|0x7fc0 as ml_dtypes does);
 *  - complex prod: re = fma(ar, br, -(ai*bi)), im = fma(ar, bi, ai*br) where
 *    numpy's own SIMD loop uses FMA (x86 with AVX2+FMA, aarch64), else the
 *    plain formula; FP contraction is switched off everywhere else so the
 *    compiler cannot change rounding behind our back;
 *  - land/lor: non-zero (NaN included; complex: either part) is true; the
 *    result is 0 or 1 in the same dtype.
 */
#ifndef COMMLIB_KERNELS_IMPL_H
#define COMMLIB_KERNELS_IMPL_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define CL_X86 1
#include <immintrin.h>
#define CL_AVX2 __attribute__((target("avx2,fma,f16c")))
/* x86-64-v4 subset; 512-bit vectors (GCC would otherwise prefer 256-bit) */
#define CL_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,prefer-vector-width=512")))
#endif

/* Codes: same numbers as DT_* / OP_* in _kernels.pxd and _dtypes.py
 * (checked against the Cython enums when the module is imported). */
enum {
    CL_BOOL, CL_INT8, CL_UINT8, CL_INT16, CL_UINT16, CL_INT32, CL_UINT32,
    CL_INT64, CL_UINT64, CL_FLOAT16, CL_BFLOAT16, CL_FLOAT32, CL_FLOAT64,
    CL_COMPLEX64, CL_COMPLEX128, CL_N_DTYPES
};
enum {
    CL_SUM, CL_PROD, CL_MIN, CL_MAX, CL_LAND, CL_LOR, CL_BAND, CL_BOR, CL_BXOR,
    CL_N_OPS
};

typedef void (*cl_loop)(void* d_, const void* s_, Py_ssize_t n);
typedef struct { float re, im; } cl_c64;
typedef struct { double re, im; } cl_c128;

static const Py_ssize_t cl_itemsize[CL_N_DTYPES] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 8, 16};

/* ------------------------------------------------------------------ */
/* Scalar helpers (all inlined into the loops)                          */

static inline float cl_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t cl_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* numpy's npy_halfbits_to_floatbits (exact, keeps NaN payloads) */
static inline float cl_h2f(uint16_t h) {
    uint32_t h_exp = h & 0x7c00u, f_sgn = ((uint32_t)h & 0x8000u) << 16, f_sig;
    uint16_t h_sig;
    if (h_exp == 0x0000u) {
        h_sig = h & 0x03ffu;
        if (h_sig == 0) return cl_bits_f32(f_sgn);
        h_sig <<= 1;
        while ((h_sig & 0x0400u) == 0) { h_sig <<= 1; h_exp++; }
        uint32_t f_exp = ((uint32_t)(127 - 15 - h_exp)) << 23;
        f_sig = ((uint32_t)(h_sig & 0x03ffu)) << 13;
        return cl_bits_f32(f_sgn + f_exp + f_sig);
    }
    if (h_exp == 0x7c00u)
        return cl_bits_f32(f_sgn + 0x7f800000u + (((uint32_t)(h & 0x03ffu)) << 13));
    return cl_bits_f32(f_sgn + (((uint32_t)(h & 0x7fffu) + 0x1c000u) << 13));
}

/* numpy's npy_floatbits_to_halfbits: round to nearest even, overflow to inf,
 * NaN keeps its sign and the top of its payload (and stays a NaN). */
static inline uint16_t cl_f2h(float x) {
    uint32_t f = cl_f32_bits(x), f_exp, f_sig;
    uint16_t h_sgn = (uint16_t)((f & 0x80000000u) >> 16), h_exp, h_sig;
    f_exp = f & 0x7f800000u;
    if (f_exp >= 0x47800000u) {
        if (f_exp == 0x7f800000u) {
            f_sig = f & 0x007fffffu;
            if (f_sig != 0) {
                uint16_t ret = (uint16_t)(0x7c00u + (f_sig >> 13));
                if (ret == 0x7c00u) ret++;
                return h_sgn + ret;
            }
            return (uint16_t)(h_sgn + 0x7c00u);
        }
        return (uint16_t)(h_sgn + 0x7c00u);
    }
    if (f_exp <= 0x38000000u) {
        if (f_exp < 0x33000000u) return h_sgn;
        f_exp >>= 23;
        f_sig = 0x00800000u + (f & 0x007fffffu);
        f_sig >>= (113 - f_exp);
        /* The shift drops up to 11 bits: a tie (0x1000 left, last kept bit
         * even) is only a tie if every dropped bit was 0 as well. */
        if ((f_sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu) != 0)
            f_sig += 0x00001000u;
        h_sig = (uint16_t)(f_sig >> 13);
        return (uint16_t)(h_sgn + h_sig);
    }
    h_exp = (uint16_t)((f_exp - 0x38000000u) >> 13);
    f_sig = f & 0x007fffffu;
    if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
    h_sig = (uint16_t)(f_sig >> 13);
    h_sig += h_exp; /* a carry into the exponent is the correct result */
    return (uint16_t)(h_sgn + h_sig);
}

static inline float cl_bf2f(uint16_t h) { return cl_bits_f32((uint32_t)h << 16); }

/* ml_dtypes' float32 -> bfloat16: NaN -> sign|0x7fc0, else round to nearest even. */
static inline uint16_t cl_f2bf(float x) {
    uint32_t u = cl_f32_bits(x);
    uint16_t nan = (uint16_t)((u >> 16) & 0x8000u) | 0x7fc0u;
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return ((u & 0x7fffffffu) > 0x7f800000u) ? nan : r;
}

/* Total order key of a 16-bit float with -0 == +0 (NaN handled separately). */
static inline int16_t cl_key16(uint16_t h) {
    int16_t m = (int16_t)(h & 0x7fff);
    return (h & 0x8000u) ? (int16_t)-m : m;  /* int16 lanes: twice as many per vector as int32 */
}
#define CL_H_ISNAN(h) (((h) & 0x7fffu) > 0x7c00u)
#define CL_BF_ISNAN(h) (((h) & 0x7fffu) > 0x7f80u)

/* ------------------------------------------------------------------ */
/* Loop generator: EXPR is an expression in a = dst[i], b = src[i].      */

#define CL_BODY(T, EXPR)                                                   \
    T* d = (T*)d_;                                                         \
    const T* s = (const T*)s_;                                             \
    for (Py_ssize_t i = 0; i < n; i++) {                                   \
        T a = d[i];                                                        \
        T b = s[i];                                                        \
        d[i] = (T)(EXPR);                                                  \
    }

/* Software prefetch distance in bytes. With it, and with 256-byte blocks of
 * constant trip count (which GCC vectorises and unrolls completely), the
 * loops keep enough cache lines in flight to run at memory speed even when
 * an element takes several instructions (16-bit floats, NaN-aware max). */
#ifndef CL_PF
#define CL_PF 2048
#endif
#define CL_BLOCK 256

#define CL_BODY_PF(T, EXPR)                                                \
    T* d = (T*)d_;                                                         \
    const T* s = (const T*)s_;                                             \
    Py_ssize_t i = 0;                                                      \
    for (; i + (Py_ssize_t)(CL_BLOCK / sizeof(T)) <= n; i += CL_BLOCK / sizeof(T)) { \
        for (int l = 0; l < CL_BLOCK; l += 64) {                           \
            __builtin_prefetch((const char*)(d + i) + CL_PF + l, 1);       \
            __builtin_prefetch((const char*)(s + i) + CL_PF + l, 0);       \
        }                                                                  \
        T* dd = d + i;                                                     \
        const T* ss = s + i;                                               \
        for (int j = 0; j < (int)(CL_BLOCK / sizeof(T)); j++) {            \
            T a = dd[j];                                                   \
            T b = ss[j];                                                   \
            dd[j] = (T)(EXPR);                                             \
        }                                                                  \
    }                                                                      \
    for (; i < n; i++) {                                                   \
        T a = d[i];                                                        \
        T b = s[i];                                                        \
        d[i] = (T)(EXPR);                                                  \
    }

#ifdef CL_X86
#define CL_DEF(NAME, T, EXPR)                                              \
    static void NAME##_base(void* d_, const void* s_, Py_ssize_t n) { CL_BODY_PF(T, EXPR) } \
    CL_AVX2 static void NAME##_avx2(void* d_, const void* s_, Py_ssize_t n) { CL_BODY_PF(T, EXPR) } \
    CL_AVX512 static void NAME##_avx512(void* d_, const void* s_, Py_ssize_t n) { CL_BODY_PF(T, EXPR) }
#else
#define CL_DEF(NAME, T, EXPR)                                              \
    static void NAME##_base(void* d_, const void* s_, Py_ssize_t n) { CL_BODY_PF(T, EXPR) }
#endif

/* Integers: W is the unsigned type the arithmetic is done in (>= 32 bits so
 * that uint16*uint16 does not promote to a signed int and overflow). */
#define CL_INT_LOOPS(P, T, W)                                              \
    CL_DEF(P##_sum, T, (W)a + (W)b)                                        \
    CL_DEF(P##_prod, T, (W)a * (W)b)                                       \
    CL_DEF(P##_min, T, a < b ? a : b)                                      \
    CL_DEF(P##_max, T, a > b ? a : b)                                      \
    CL_DEF(P##_land, T, (a != 0) & (b != 0))                               \
    CL_DEF(P##_lor, T, (a != 0) | (b != 0))                                \
    CL_DEF(P##_band, T, a & b)                                             \
    CL_DEF(P##_bor, T, a | b)                                              \
    CL_DEF(P##_bxor, T, a ^ b)

CL_INT_LOOPS(cl_i8, int8_t, uint32_t)
CL_INT_LOOPS(cl_u8, uint8_t, uint32_t)
CL_INT_LOOPS(cl_i16, int16_t, uint32_t)
CL_INT_LOOPS(cl_u16, uint16_t, uint32_t)
CL_INT_LOOPS(cl_i32, int32_t, uint32_t)
CL_INT_LOOPS(cl_u32, uint32_t, uint32_t)
CL_INT_LOOPS(cl_i64, int64_t, uint64_t)
CL_INT_LOOPS(cl_u64, uint64_t, uint64_t)

/* bool (one byte, 0/1; any non-zero byte is read as true) */
CL_DEF(cl_b_or, uint8_t, (a != 0) | (b != 0))
CL_DEF(cl_b_and, uint8_t, (a != 0) & (b != 0))
CL_DEF(cl_b_xor, uint8_t, (a != 0) ^ (b != 0))

/* float32 / float64 */
#define CL_FLOAT_LOOPS(P, T)                                               \
    CL_DEF(P##_sum, T, a + b)                                              \
    CL_DEF(P##_prod, T, a * b)                                             \
    CL_DEF(P##_min, T, (a != a || a < b) ? a : b)                          \
    CL_DEF(P##_max, T, (a != a || a > b) ? a : b)                          \
    CL_DEF(P##_land, T, (a != 0) & (b != 0))                               \
    CL_DEF(P##_lor, T, (a != 0) | (b != 0))

CL_FLOAT_LOOPS(cl_f32, float)
CL_FLOAT_LOOPS(cl_f64, double)

/* float16: min/max/land/lor on the bits (no conversion, vectorises anywhere) */
CL_DEF(cl_f16_min, uint16_t,
       (CL_H_ISNAN(a) || (!CL_H_ISNAN(b) && cl_key16(a) <= cl_key16(b))) ? a : b)
CL_DEF(cl_f16_max, uint16_t,
       (CL_H_ISNAN(a) || (!CL_H_ISNAN(b) && cl_key16(a) >= cl_key16(b))) ? a : b)
CL_DEF(cl_f16_land, uint16_t, ((a & 0x7fffu) != 0 && (b & 0x7fffu) != 0) ? 0x3c00u : 0u)
CL_DEF(cl_f16_lor, uint16_t, ((a & 0x7fffu) != 0 || (b & 0x7fffu) != 0) ? 0x3c00u : 0u)

static void cl_f16_sum_base(void* d_, const void* s_, Py_ssize_t n) {
    CL_BODY(uint16_t, cl_f2h(cl_h2f(a) + cl_h2f(b)))
}
static void cl_f16_prod_base(void* d_, const void* s_, Py_ssize_t n) {
    CL_BODY(uint16_t, cl_f2h(cl_h2f(a) * cl_h2f(b)))
}

#ifdef CL_X86
/* F16C: 8 halves per step, the tail through a zero-padded stack buffer so
 * that every element sees exactly the same conversions. */
#define CL_F16C_TAIL(VOP)                                                  \
        for (; i < n; i += 8) {                                            \
            uint16_t ta[8] = {0}, tb[8] = {0};                             \
            Py_ssize_t k = n - i < 8 ? n - i : 8;                          \
            memcpy(ta, d + i, (size_t)k * 2);                              \
            memcpy(tb, s + i, (size_t)k * 2);                              \
            __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)ta)); \
            __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)tb)); \
            _mm_storeu_si128((__m128i*)ta, _mm256_cvtps_ph(VOP(a0, b0), _MM_FROUND_TO_NEAREST_INT)); \
            memcpy(d + i, ta, (size_t)k * 2);                              \
        }
#define CL_F16C_LOOP(NAME, VOP)                                            \
    CL_AVX2 static void NAME(void* d_, const void* s_, Py_ssize_t n) {     \
        uint16_t* d = (uint16_t*)d_;                                       \
        const uint16_t* s = (const uint16_t*)s_;                           \
        Py_ssize_t i = 0;                                                  \
        for (; i + 16 <= n; i += 16) {                                     \
            if ((i & 31) == 0) {                                           \
                _mm_prefetch((const char*)(d + i) + CL_PF, _MM_HINT_T0);     \
                _mm_prefetch((const char*)(s + i) + CL_PF, _MM_HINT_T0);     \
            }                                                              \
            __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(d + i)));     \
            __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(d + i + 8))); \
            __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i)));     \
            __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(s + i + 8))); \
            _mm_storeu_si128((__m128i*)(d + i), _mm256_cvtps_ph(VOP##_256(a0, b0), _MM_FROUND_TO_NEAREST_INT)); \
            _mm_storeu_si128((__m128i*)(d + i + 8), _mm256_cvtps_ph(VOP##_256(a1, b1), _MM_FROUND_TO_NEAREST_INT)); \
        }                                                                  \
        CL_F16C_TAIL(VOP##_256)                                            \
    }
#define CL_F16_512_LOOP(NAME, VOP)                                         \
    CL_AVX512 static void NAME(void* d_, const void* s_, Py_ssize_t n) {   \
        uint16_t* d = (uint16_t*)d_;                                       \
        const uint16_t* s = (const uint16_t*)s_;                           \
        Py_ssize_t i = 0;                                                  \
        for (; i + 32 <= n; i += 32) {                                     \
            _mm_prefetch((const char*)(d + i) + CL_PF, _MM_HINT_T0);         \
            _mm_prefetch((const char*)(s + i) + CL_PF, _MM_HINT_T0);         \
            __m512 a0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(d + i)));      \
            __m512 a1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(d + i + 16))); \
            __m512 b0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + i)));      \
            __m512 b1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(s + i + 16))); \
            _mm256_storeu_si256((__m256i*)(d + i), _mm512_cvtps_ph(VOP##_512(a0, b0), _MM_FROUND_TO_NEAREST_INT)); \
            _mm256_storeu_si256((__m256i*)(d + i + 16), _mm512_cvtps_ph(VOP##_512(a1, b1), _MM_FROUND_TO_NEAREST_INT)); \
        }                                                                  \
        CL_F16C_TAIL(VOP##_256)                                            \
    }
#define CL_ADD_256 _mm256_add_ps
#define CL_MUL_256 _mm256_mul_ps
#define CL_ADD_512 _mm512_add_ps
#define CL_MUL_512 _mm512_mul_ps
CL_F16C_LOOP(cl_f16_sum_avx2, CL_ADD)
CL_F16C_LOOP(cl_f16_prod_avx2, CL_MUL)
CL_F16_512_LOOP(cl_f16_sum_avx512, CL_ADD)
CL_F16_512_LOOP(cl_f16_prod_avx512, CL_MUL)
#endif

/* bfloat16: conversions are shifts and integer rounding. Plain C for the
 * baseline; on x86 explicit intrinsics (GCC's own vectorisation of the C
 * version runs at about a third of memory speed). A bfloat16 widens to float32
 * by interleaving it with zero words (unpacklo/hi_epi16) and narrows back with
 * packus_epi32, both within 128-bit lanes, so element order is preserved. */
static void cl_bf16_sum_base(void* d_, const void* s_, Py_ssize_t n) {
    CL_BODY(uint16_t, cl_f2bf(cl_bf2f(a) + cl_bf2f(b)))
}
static void cl_bf16_prod_base(void* d_, const void* s_, Py_ssize_t n) {
    CL_BODY(uint16_t, cl_f2bf(cl_bf2f(a) * cl_bf2f(b)))
}

#ifdef CL_X86
CL_AVX2 static inline __m256i cl_bf_round256(__m256 r) {
    __m256i u = _mm256_castps_si256(r);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rne = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    __m256i nan = _mm256_or_si256(_mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)),
                                  _mm256_set1_epi32(0x7fc00000));
    __m256 isnan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
    __m256i out = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rne),
                                                       _mm256_castsi256_ps(nan), isnan));
    return _mm256_srli_epi32(out, 16);
}
CL_AVX512 static inline __m512i cl_bf_round512(__m512 r) {
    __m512i u = _mm512_castps_si512(r);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i rne = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    __m512i nan = _mm512_or_si512(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                                  _mm512_set1_epi32(0x7fc00000));
    __mmask16 isnan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    return _mm512_srli_epi32(_mm512_mask_blend_epi32(isnan, rne, nan), 16);
}
#define CL_BF_LOOP(NAME, ATTR, W, VI, VF, PFX, ROUND, VOP)                 \
    ATTR static inline void NAME##_block(uint16_t* d, const uint16_t* s) { \
        VI z = PFX##_setzero_si##W();                                      \
        VI a = PFX##_loadu_si##W((const VI*)d);                            \
        VI b = PFX##_loadu_si##W((const VI*)s);                            \
        VF alo = PFX##_castsi##W##_ps(PFX##_unpacklo_epi16(z, a));         \
        VF ahi = PFX##_castsi##W##_ps(PFX##_unpackhi_epi16(z, a));         \
        VF blo = PFX##_castsi##W##_ps(PFX##_unpacklo_epi16(z, b));         \
        VF bhi = PFX##_castsi##W##_ps(PFX##_unpackhi_epi16(z, b));         \
        VI lo = ROUND(VOP(alo, blo));                                      \
        VI hi = ROUND(VOP(ahi, bhi));                                      \
        PFX##_storeu_si##W((VI*)d, PFX##_packus_epi32(lo, hi));            \
    }                                                                      \
    ATTR static void NAME(void* d_, const void* s_, Py_ssize_t n) {        \
        uint16_t* d = (uint16_t*)d_;                                       \
        const uint16_t* s = (const uint16_t*)s_;                           \
        const Py_ssize_t L = W / 16;                                       \
        Py_ssize_t i = 0;                                                  \
        for (; i + L <= n; i += L) {                                       \
            if ((i & 31) == 0) {                                           \
                _mm_prefetch((const char*)(d + i) + CL_PF, _MM_HINT_T0);     \
                _mm_prefetch((const char*)(s + i) + CL_PF, _MM_HINT_T0);     \
            }                                                              \
            NAME##_block(d + i, s + i);                                    \
        }                                                                  \
        if (i < n) {                                                       \
            uint16_t ta[W / 16] = {0}, tb[W / 16] = {0};                   \
            memcpy(ta, d + i, (size_t)(n - i) * 2);                        \
            memcpy(tb, s + i, (size_t)(n - i) * 2);                        \
            NAME##_block(ta, tb);                                          \
            memcpy(d + i, ta, (size_t)(n - i) * 2);                        \
        }                                                                  \
    }
CL_BF_LOOP(cl_bf16_sum_avx2, CL_AVX2, 256, __m256i, __m256, _mm256, cl_bf_round256, _mm256_add_ps)
CL_BF_LOOP(cl_bf16_prod_avx2, CL_AVX2, 256, __m256i, __m256, _mm256, cl_bf_round256, _mm256_mul_ps)
CL_BF_LOOP(cl_bf16_sum_avx512, CL_AVX512, 512, __m512i, __m512, _mm512, cl_bf_round512, _mm512_add_ps)
CL_BF_LOOP(cl_bf16_prod_avx512, CL_AVX512, 512, __m512i, __m512, _mm512, cl_bf_round512, _mm512_mul_ps)
#endif
CL_DEF(cl_bf16_min, uint16_t,
       (CL_BF_ISNAN(a) || (!CL_BF_ISNAN(b) && cl_key16(a) < cl_key16(b))) ? a : b)
CL_DEF(cl_bf16_max, uint16_t,
       (CL_BF_ISNAN(a) || (!CL_BF_ISNAN(b) && cl_key16(a) > cl_key16(b))) ? a : b)
CL_DEF(cl_bf16_land, uint16_t, ((a & 0x7fffu) != 0 && (b & 0x7fffu) != 0) ? 0x3f80u : 0u)
CL_DEF(cl_bf16_lor, uint16_t, ((a & 0x7fffu) != 0 || (b & 0x7fffu) != 0) ? 0x3f80u : 0u)

/* complex: explicit loops over (re, im) pairs */
#define CL_CPLX_LOOPS(P, C, R, FMA, SFX, ATTR, USE_FMA)                    \
    ATTR static void P##_sum##SFX(void* d_, const void* s_, Py_ssize_t n) { \
        R* d = (R*)d_;                                                     \
        const R* s = (const R*)s_;                                         \
        for (Py_ssize_t i = 0; i < 2 * n; i++) d[i] = d[i] + s[i];         \
    }                                                                      \
    ATTR static void P##_prod##SFX(void* d_, const void* s_, Py_ssize_t n) { \
        C* d = (C*)d_;                                                     \
        const C* s = (const C*)s_;                                         \
        for (Py_ssize_t i = 0; i < n; i++) {                               \
            R ar = d[i].re, ai = d[i].im, br = s[i].re, bi = s[i].im;      \
            R re, im;                                                      \
            if (USE_FMA) { re = FMA(ar, br, -(ai * bi)); im = FMA(ar, bi, ai * br); } \
            else { R p = ar * br, q = ai * bi, r = ar * bi, t = ai * br; re = p - q; im = r + t; } \
            d[i].re = re;                                                  \
            d[i].im = im;                                                  \
        }                                                                  \
    }                                                                      \
    ATTR static void P##_land##SFX(void* d_, const void* s_, Py_ssize_t n) { \
        C* d = (C*)d_;                                                     \
        const C* s = (const C*)s_;                                         \
        for (Py_ssize_t i = 0; i < n; i++) {                               \
            int t = (d[i].re != 0 || d[i].im != 0) && (s[i].re != 0 || s[i].im != 0); \
            d[i].re = (R)t;                                                \
            d[i].im = 0;                                                   \
        }                                                                  \
    }                                                                      \
    ATTR static void P##_lor##SFX(void* d_, const void* s_, Py_ssize_t n) { \
        C* d = (C*)d_;                                                     \
        const C* s = (const C*)s_;                                         \
        for (Py_ssize_t i = 0; i < n; i++) {                               \
            int t = (d[i].re != 0 || d[i].im != 0) || (s[i].re != 0 || s[i].im != 0); \
            d[i].re = (R)t;                                                \
            d[i].im = 0;                                                   \
        }                                                                  \
    }

#if defined(__aarch64__) || defined(__FMA__)
#define CL_BASE_FMA 1 /* numpy's baseline SIMD multiply is fused here too */
#else
#define CL_BASE_FMA 0
#endif
CL_CPLX_LOOPS(cl_c64, cl_c64, float, fmaf, _base, , CL_BASE_FMA)
CL_CPLX_LOOPS(cl_c128, cl_c128, double, fma, _base, , CL_BASE_FMA)
#ifdef CL_X86
CL_CPLX_LOOPS(cl_c64, cl_c64, float, __builtin_fmaf, _avx2, CL_AVX2, 1)
CL_CPLX_LOOPS(cl_c128, cl_c128, double, __builtin_fma, _avx2, CL_AVX2, 1)
CL_CPLX_LOOPS(cl_c64, cl_c64, float, __builtin_fmaf, _avx512, CL_AVX512, 1)
CL_CPLX_LOOPS(cl_c128, cl_c128, double, __builtin_fma, _avx512, CL_AVX512, 1)
#endif

/* ------------------------------------------------------------------ */
/* Dispatch tables: [dtype][op], NULL = illegal pair.                    */

#define CL_ROW_INT(P, S)                                                   \
    {P##_sum##S, P##_prod##S, P##_min##S, P##_max##S, P##_land##S,         \
     P##_lor##S, P##_band##S, P##_bor##S, P##_bxor##S}
#define CL_ROW_FLOAT(P, S)                                                 \
    {P##_sum##S, P##_prod##S, P##_min##S, P##_max##S, P##_land##S,         \
     P##_lor##S, NULL, NULL, NULL}
#define CL_ROW_CPLX(P, S)                                                  \
    {P##_sum##S, P##_prod##S, NULL, NULL, P##_land##S, P##_lor##S, NULL, NULL, NULL}
#define CL_TABLE(S, F16SUM, F16PROD, BF16SUM, BF16PROD)                                       \
    {                                                                      \
        {cl_b_or##S, cl_b_and##S, cl_b_and##S, cl_b_or##S, cl_b_and##S,    \
         cl_b_or##S, cl_b_and##S, cl_b_or##S, cl_b_xor##S},                \
        CL_ROW_INT(cl_i8, S), CL_ROW_INT(cl_u8, S),                        \
        CL_ROW_INT(cl_i16, S), CL_ROW_INT(cl_u16, S),                      \
        CL_ROW_INT(cl_i32, S), CL_ROW_INT(cl_u32, S),                      \
        CL_ROW_INT(cl_i64, S), CL_ROW_INT(cl_u64, S),                      \
        {F16SUM, F16PROD, cl_f16_min##S, cl_f16_max##S, cl_f16_land##S,    \
         cl_f16_lor##S, NULL, NULL, NULL},                                 \
        {BF16SUM, BF16PROD, cl_bf16_min##S, cl_bf16_max##S, cl_bf16_land##S, \
         cl_bf16_lor##S, NULL, NULL, NULL},                                \
        CL_ROW_FLOAT(cl_f32, S), CL_ROW_FLOAT(cl_f64, S),                  \
        CL_ROW_CPLX(cl_c64, S), CL_ROW_CPLX(cl_c128, S),                   \
    }

static const cl_loop cl_table_base[CL_N_DTYPES][CL_N_OPS] =
    CL_TABLE(_base, cl_f16_sum_base, cl_f16_prod_base, cl_bf16_sum_base, cl_bf16_prod_base);
#ifdef CL_X86
static const cl_loop cl_table_avx2[CL_N_DTYPES][CL_N_OPS] =
    CL_TABLE(_avx2, cl_f16_sum_avx2, cl_f16_prod_avx2, cl_bf16_sum_avx2, cl_bf16_prod_avx2);
static const cl_loop cl_table_avx512[CL_N_DTYPES][CL_N_OPS] =
    CL_TABLE(_avx512, cl_f16_sum_avx512, cl_f16_prod_avx512, cl_bf16_sum_avx512, cl_bf16_prod_avx512);
#endif

/* The table in use; set by cl_set_level() when the module is imported. */
static const cl_loop (*cl_table)[CL_N_OPS] = cl_table_base;

/* Best loop set this CPU runs: 2 = AVX-512 (F, BW, DQ, VL), 1 = AVX2+FMA+F16C,
 * 0 = baseline. */
static int cl_cpu_level(void) {
#ifdef CL_X86
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          __builtin_cpu_supports("f16c")))
        return 0;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return 2;
    return 1;
#else
    return 0;
#endif
}

/* Select the loops: the highest level <= `level` that the CPU runs.
 * Returns the level in use. */
static int cl_set_level(int level) {
    int cpu = cl_cpu_level();
    if (level > cpu) level = cpu;
#ifdef CL_X86
    if (level >= 2) { cl_table = cl_table_avx512; return 2; }
    if (level == 1) { cl_table = cl_table_avx2; return 1; }
#endif
    cl_table = cl_table_base;
    return 0;
}

static inline int cl_reduce(void* dst, const void* src, Py_ssize_t count, int dtype, int op) {
    if ((unsigned)dtype >= CL_N_DTYPES || (unsigned)op >= CL_N_OPS) return -1;
    cl_loop f = cl_table[dtype][op];
    if (f == NULL) return -1;
    if (count > 0) f(dst, src, count);
    return 0;
}

static inline Py_ssize_t cl_itemsize_of(int dtype) {
    return ((unsigned)dtype < CL_N_DTYPES) ? cl_itemsize[dtype] : 0;
}

/* ------------------------------------------------------------------ */
/* Strided pack / unpack                                                */

#define CL_MAXDIMS 64

/* Merge dimensions that are contiguous with each other (and drop size-1
 * dimensions) so the innermost run is as long as possible. Returns the new
 * ndim (>= 1), or -1 if the array is empty. */
static int cl_simplify(int ndim, const Py_ssize_t* shape, const Py_ssize_t* strides,
                       Py_ssize_t* sh, Py_ssize_t* st) {
    int m = 0;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] == 0) return -1;
        if (shape[k] == 1) continue;
        if (m > 0 && st[m - 1] == shape[k] * strides[k]) {
            sh[m - 1] *= shape[k];
            st[m - 1] = strides[k];
        } else {
            sh[m] = shape[k];
            st[m] = strides[k];
            m++;
        }
    }
    if (m == 0) { sh[0] = 1; st[0] = 0; m = 1; }
    return m;
}

/* Copy one strided row of n elements between a strided and a contiguous side. */
static inline void cl_row(char* d, Py_ssize_t ds, const char* s, Py_ssize_t ss,
                          Py_ssize_t n, Py_ssize_t isz) {
    if (ds == isz && ss == isz) { memcpy(d, s, (size_t)(n * isz)); return; }
    switch (isz) {
#define CL_ROW_CASE(K, T)                                                  \
    case K:                                                                \
        for (Py_ssize_t i = 0; i < n; i++) { T v; memcpy(&v, s + i * ss, K); memcpy(d + i * ds, &v, K); } \
        return;
        CL_ROW_CASE(1, uint8_t)
        CL_ROW_CASE(2, uint16_t)
        CL_ROW_CASE(4, uint32_t)
        CL_ROW_CASE(8, uint64_t)
        CL_ROW_CASE(16, cl_c128)
#undef CL_ROW_CASE
    default:
        for (Py_ssize_t i = 0; i < n; i++) memcpy(d + i * ds, s + i * ss, (size_t)isz);
    }
}

/* dir 0: strided src -> contiguous dst (pack); dir 1: contiguous src -> strided dst. */
static void cl_copy_nd(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                       const Py_ssize_t* strides, Py_ssize_t isz, int dir) {
    Py_ssize_t sh[CL_MAXDIMS], st[CL_MAXDIMS], idx[CL_MAXDIMS];
    if (ndim <= 0) { memcpy(dst, src, (size_t)isz); return; }
    if (ndim > CL_MAXDIMS) { /* numpy never makes these; recurse on the first axis */
        Py_ssize_t inner = isz;
        for (int k = 1; k < ndim; k++) inner *= shape[k];
        for (Py_ssize_t i = 0; i < shape[0]; i++) {
            if (dir == 0) cl_copy_nd(src + i * strides[0], dst + i * inner, ndim - 1, shape + 1, strides + 1, isz, 0);
            else cl_copy_nd(src + i * inner, dst + i * strides[0], ndim - 1, shape + 1, strides + 1, isz, 1);
        }
        return;
    }
    int m = cl_simplify(ndim, shape, strides, sh, st);
    if (m < 0) return;
    Py_ssize_t n = sh[m - 1], rs = st[m - 1], rowbytes = n * isz;
    Py_ssize_t rows = 1;
    for (int k = 0; k < m - 1; k++) { rows *= sh[k]; idx[k] = 0; }
    const char* strided = (dir == 0) ? src : dst;
    char* flat = (dir == 0) ? dst : (char*)src;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (dir == 0) cl_row(flat, isz, strided, rs, n, isz);
        else cl_row((char*)strided, rs, flat, isz, n, isz);
        flat += rowbytes;
        /* odometer over the outer dimensions */
        for (int k = m - 2; k >= 0; k--) {
            strided += st[k];
            if (++idx[k] < sh[k]) break;
            strided -= st[k] * sh[k];
            idx[k] = 0;
        }
    }
}

#endif /* COMMLIB_KERNELS_IMPL_H */
