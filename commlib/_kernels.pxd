# cython: language_level=3
# C interface of the reduction and packing kernels, cimported by _io.pyx.
# The DT_* and OP_* numbers equal the wire codes in _dtypes.py: never renumber.

cdef enum:
    DT_BOOL = 0
    DT_INT8 = 1
    DT_UINT8 = 2
    DT_INT16 = 3
    DT_UINT16 = 4
    DT_INT32 = 5
    DT_UINT32 = 6
    DT_INT64 = 7
    DT_UINT64 = 8
    DT_FLOAT16 = 9
    DT_BFLOAT16 = 10
    DT_FLOAT32 = 11
    DT_FLOAT64 = 12
    DT_COMPLEX64 = 13
    DT_COMPLEX128 = 14
    N_DTYPES = 15

cdef enum:
    OP_SUM = 0
    OP_PROD = 1
    OP_MIN = 2
    OP_MAX = 3
    OP_LAND = 4
    OP_LOR = 5
    OP_BAND = 6
    OP_BOR = 7
    OP_BXOR = 8
    N_OPS = 9

# dst[i] = op(dst[i], src[i]) for i < count. Returns 0, or -1 when the
# (dtype, op) pair is illegal or a code is out of range (nothing is written then).
# Safe to call without the GIL; never raises.
cdef int reduce_raw(void* dst, const void* src, Py_ssize_t count, int dtype, int op) noexcept nogil

# Element size in bytes of a dtype code, or 0 for an unknown code.
cdef Py_ssize_t itemsize_of(int dtype) noexcept nogil

# Copy an N-d strided array (byte strides, may be negative) into a contiguous
# buffer in C order, and back. No allocation; never raises.
cdef void pack_raw(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                   const Py_ssize_t* strides, Py_ssize_t itemsize) noexcept nogil
cdef void unpack_raw(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                     const Py_ssize_t* strides, Py_ssize_t itemsize) noexcept nogil
