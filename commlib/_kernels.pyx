# cython: language_level=3, boundscheck=False, wraparound=False
"""Element-wise reduction and strided pack/unpack kernels.

Inner tier (cimported by _io.pyx through _kernels.pxd): reduce_raw,
itemsize_of, pack_raw, unpack_raw -- raw pointers, no GIL, cannot fail.
The loops are C in _kernels_impl.h (compiled for the baseline ISA and for
AVX2+FMA+F16C and AVX-512, chosen at import from CPUID).

Outer tier (Python): reduce_into, pack, unpack -- check arguments with the
GIL held, then make one nogil call; array_at -- a NumPy view of memory another
library owns (the torch front-end's tensors), made without DLPack's capsule.
"""
cimport numpy as cnp
from cpython.ref cimport Py_INCREF

cdef extern from "numpy/arrayobject.h":
    object PyArray_NewFromDescr(type subtype, void* descr, int nd, cnp.npy_intp* dims, cnp.npy_intp* strides,
                                void* data, int flags, object obj)
from cpython.buffer cimport (
    PyObject_GetBuffer, PyBuffer_Release, PyBuffer_IsContiguous,
    PyBUF_STRIDES, PyBUF_WRITABLE, PyBUF_ND,
)

import sys
import warnings

import numpy as np

from commlib import _dtypes

cnp.import_array()


cdef extern from "_kernels_impl.h":
    int CL_N_DTYPES, CL_N_OPS
    int cl_reduce(void* dst, const void* src, Py_ssize_t count, int dtype, int op) nogil
    Py_ssize_t cl_itemsize_of(int dtype) nogil
    int cl_cpu_level() nogil
    int cl_set_level(int level) nogil
    void cl_copy_nd(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                    const Py_ssize_t* strides, Py_ssize_t isz, int dir) nogil


# ---------------------------------------------------------------- inner tier

cdef int reduce_raw(void* dst, const void* src, Py_ssize_t count, int dtype, int op) noexcept nogil:
    return cl_reduce(dst, src, count, dtype, op)


cdef Py_ssize_t itemsize_of(int dtype) noexcept nogil:
    return cl_itemsize_of(dtype)


cdef void pack_raw(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                   const Py_ssize_t* strides, Py_ssize_t itemsize) noexcept nogil:
    cl_copy_nd(src, dst, ndim, shape, strides, itemsize, 0)


cdef void unpack_raw(const char* src, char* dst, int ndim, const Py_ssize_t* shape,
                     const Py_ssize_t* strides, Py_ssize_t itemsize) noexcept nogil:
    cl_copy_nd(src, dst, ndim, shape, strides, itemsize, 1)


# The C header keeps its own copy of the codes; make sure they agree.
assert <int>CL_N_DTYPES == <int>N_DTYPES and <int>CL_N_OPS == <int>N_OPS
assert (DT_FLOAT16, DT_BFLOAT16, DT_COMPLEX128, OP_BXOR) == (9, 10, 14, 8)
assert tuple(_dtypes.DTYPE_NAMES) == (
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128")

_level = cl_set_level(99)
SIMD_NAMES = ("baseline", "AVX2+FMA+F16C", "AVX-512")


def simd_level():
    """Loop set in use: 0 baseline, 1 AVX2+FMA+F16C, 2 AVX-512 (see SIMD_NAMES)."""
    return _level


def _set_simd_level(int level):
    """Testing hook: use the best loop set <= level that the CPU runs.
    Returns the level now in use. Not thread-safe against running reductions."""
    global _level
    _level = cl_set_level(level)
    return _level


def _cpu_simd_level():
    return cl_cpu_level()


# ---------------------------------------------------------------- outer tier

cdef object _BF16 = _dtypes.BFLOAT16
cdef object _ndarray = np.ndarray
cdef dict _DT_CODE = {}  # numpy dtype -> code, filled on first use of each dtype
cdef dict _OP_CODE = {name: i for i, name in enumerate(_dtypes.OP_NAMES)}
cdef bytes _LEGAL = bytes([_dtypes.legal(d, o) for d in range(N_DTYPES) for o in range(N_OPS)])
# alignment the C loops need (numpy's dtype.alignment on x86-64)
cdef Py_ssize_t[15] _ALIGN = [1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 4, 8]


cdef object _bufview(a):
    # numpy cannot export a buffer of ml_dtypes' bfloat16: view its bits instead.
    if _BF16 is not None and a.dtype == _BF16:
        return a.view(np.uint16)
    return a


cdef void _extent(const Py_buffer* b, char** lo, char** hi) noexcept nogil:
    """Byte range [lo, hi) touched by a non-empty strided buffer."""
    cdef char* l = <char*>b.buf
    cdef char* h = <char*>b.buf
    cdef int k
    for k in range(b.ndim):
        if b.strides[k] < 0:
            l += (b.shape[k] - 1) * b.strides[k]
        else:
            h += (b.shape[k] - 1) * b.strides[k]
    lo[0] = l
    hi[0] = h + b.itemsize


cdef bint _same_layout(const Py_buffer* a, const Py_buffer* b) noexcept nogil:
    cdef int k
    if a.buf != b.buf:
        return False
    for k in range(a.ndim):
        if a.strides[k] != b.strides[k] and a.shape[k] > 1:
            return False
    return True


def reduce_into(dst, src, op):
    """dst = op(dst, src) element-wise, in place; returns dst.

    dst: a writable array (anything np.asarray turns into a writable array
    without copying); src: anything np.asarray accepts, same dtype and shape.
    op: name or ReduceOp. Illegal (op, dtype) pairs raise ValueError, dtype
    mismatches TypeError, shape mismatches ValueError.
    Aligned operands that are both C- or both F-contiguous and do not
    partially overlap go straight to the C loop; anything else is first
    copied into aligned contiguous scratch (and dst copied back).
    """
    d = dst if type(dst) is _ndarray else np.asarray(dst)
    s = src if type(src) is _ndarray else np.asarray(src)
    ddt = d.dtype
    if ddt is not s.dtype and ddt != s.dtype:
        raise TypeError(f"reduce_into: dtype mismatch: dst is {ddt}, src is {s.dtype}")
    if d.shape != s.shape:
        raise ValueError(f"reduce_into: shape mismatch: dst {d.shape}, src {s.shape}")
    code_obj = _DT_CODE.get(ddt)
    if code_obj is None:
        code_obj = _DT_CODE[ddt] = _dtypes.dtype_code(ddt)  # TypeError if unsupported
    cdef int dt = code_obj
    op_obj = _OP_CODE.get(op) if type(op) is str else None
    cdef int opc = _dtypes.op_code(op) if op_obj is None else op_obj
    if not _LEGAL[dt * N_OPS + opc]:
        _dtypes.check_op(dt, opc)  # raises ValueError naming both
    if not d.flags.writeable:
        raise ValueError("reduce_into: dst is read-only")
    if d.size == 0:
        return dst

    cdef Py_buffer bd, bs
    cdef int rc = -2
    cdef char* dlo
    cdef char* dhi
    cdef char* slo
    cdef char* shi
    cdef bint fast
    dv = d.view(np.uint16) if dt == DT_BFLOAT16 else d
    sv = s.view(np.uint16) if dt == DT_BFLOAT16 else s
    PyObject_GetBuffer(dv, &bd, PyBUF_STRIDES | PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(sv, &bs, PyBUF_STRIDES)
        try:
            fast = ((<Py_ssize_t>bd.buf) % _ALIGN[dt] == 0 and (<Py_ssize_t>bs.buf) % _ALIGN[dt] == 0
                    and ((PyBuffer_IsContiguous(&bd, b'C') and PyBuffer_IsContiguous(&bs, b'C'))
                         or (PyBuffer_IsContiguous(&bd, b'F') and PyBuffer_IsContiguous(&bs, b'F'))))
            if fast:
                _extent(&bd, &dlo, &dhi)
                _extent(&bs, &slo, &shi)
                # partial overlap: numpy semantics need src read before dst is written
                if dlo < shi and slo < dhi and not _same_layout(&bd, &bs):
                    fast = False
            if fast:
                with nogil:
                    rc = cl_reduce(bd.buf, bs.buf, bd.len // bd.itemsize, dt, opc)
        finally:
            PyBuffer_Release(&bs)
    finally:
        PyBuffer_Release(&bd)
    if rc == -2:
        _reduce_slow(d, s, dt, opc)
    elif rc != 0:  # pragma: no cover - the legality check ran first
        raise ValueError(f"reduce_into: op code {opc} is not defined for dtype code {dt}")
    return dst


cdef _reduce_slow(d, s, int dt, int opc):
    # One aligned C-contiguous copy of each operand that needs it (src always
    # copied, which also takes care of overlap); dst is copied back at the end.
    s = np.array(s, order="C", copy=True)
    dc = d if (d.flags.c_contiguous and d.flags.aligned) else np.array(d, order="C", copy=True)
    _reduce_contig(_bufview(dc), _bufview(s), d.size, dt, opc)
    if dc is not d:
        np.copyto(d, dc)


cdef _reduce_contig(d, s, Py_ssize_t count, int dt, int opc):
    cdef Py_buffer bd, bs
    cdef int rc
    PyObject_GetBuffer(d, &bd, PyBUF_STRIDES | PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(s, &bs, PyBUF_STRIDES)
        try:
            with nogil:
                rc = cl_reduce(bd.buf, bs.buf, count, dt, opc)
        finally:
            PyBuffer_Release(&bs)
    finally:
        PyBuffer_Release(&bd)
    if rc != 0:  # pragma: no cover - the legality check ran first
        raise ValueError(f"reduce_into: op code {opc} is not defined for dtype code {dt}")


def pack(src, dst):
    """Copy array src (any strides) into the writable contiguous buffer dst
    (exactly src.nbytes bytes) in C order; returns dst."""
    a = np.asarray(src)
    cdef Py_buffer ba, bd
    try:
        PyObject_GetBuffer(dst, &bd, PyBUF_ND | PyBUF_WRITABLE)
    except (BufferError, ValueError) as e:
        raise ValueError(f"pack: dst must be a writable contiguous buffer ({e})") from None
    try:
        if bd.len != a.nbytes:
            raise ValueError(f"pack: dst has {bd.len} bytes, src needs {a.nbytes}")
        PyObject_GetBuffer(_bufview(a), &ba, PyBUF_STRIDES)
        try:
            with nogil:
                pack_raw(<const char*>ba.buf, <char*>bd.buf, ba.ndim, ba.shape, ba.strides, ba.itemsize)
        finally:
            PyBuffer_Release(&ba)
    finally:
        PyBuffer_Release(&bd)
    return dst


def unpack(src, dst):
    """Copy the contiguous buffer src (exactly dst.nbytes bytes, C order) into
    the writable array dst (any strides); returns dst."""
    a = np.asarray(dst)
    if not a.flags.writeable:
        raise ValueError("unpack: dst is read-only")
    cdef Py_buffer ba, bs
    try:
        PyObject_GetBuffer(src, &bs, PyBUF_ND)
    except (BufferError, ValueError) as e:
        raise ValueError(f"unpack: src must be a contiguous buffer ({e})") from None
    try:
        if bs.len != a.nbytes:
            raise ValueError(f"unpack: src has {bs.len} bytes, dst needs {a.nbytes}")
        PyObject_GetBuffer(_bufview(a), &ba, PyBUF_STRIDES | PyBUF_WRITABLE)
        try:
            with nogil:
                unpack_raw(<const char*>bs.buf, <char*>ba.buf, ba.ndim, ba.shape, ba.strides, ba.itemsize)
        finally:
            PyBuffer_Release(&ba)
    finally:
        PyBuffer_Release(&bs)
    return dst


from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_ANY_CONTIGUOUS


def address(obj):
    """Address of the first byte of a contiguous buffer (numpy array, bytearray, ...).

    The caller keeps `obj` alive while the address is in use. A fraction of
    the cost of `ndarray.ctypes.data`, which matters on the small-message path.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_ANY_CONTIGUOUS)
    cdef Py_ssize_t addr = <Py_ssize_t>view.buf
    PyBuffer_Release(&view)
    return addr


cdef cnp.npy_intp _read_shape(shape, cnp.npy_intp* dims, exc, str what) except -1:
    """dims[:len(shape)] = shape: at most 32 dimensions, none negative (else `exc` naming `what`);
    returns the number of elements."""
    cdef int nd = len(shape), i
    cdef cnp.npy_intp size = 1
    if nd > 32:
        raise exc(f"{what}: {nd} dimensions (at most 32)")
    for i in range(nd):
        dims[i] = shape[i]
        if dims[i] < 0:
            raise exc(f"{what}: negative dimension in shape {tuple(shape)}")
        size *= dims[i]
    return size


def array_at(Py_ssize_t address, shape, cnp.dtype dtype not None, base not None):
    """A C-contiguous, writable NumPy array of `shape` and `dtype` over the memory at `address`,
    keeping `base` (the object that owns that memory) alive as its base.

    The caller vouches for the memory: it belongs to `base`, is C-contiguous and holds the
    whole array. For a front-end whose objects already know their address, shape and dtype:
    a torch tensor's view this way costs about a third of `np.from_dlpack`'s.
    """
    cdef cnp.npy_intp dims[32]
    cdef int nd = len(shape)
    cdef cnp.npy_intp size = _read_shape(shape, dims, ValueError, "array_at")
    if address == 0 and size:
        raise ValueError("array_at: a null address")
    return _view(<char*>address, dtype, nd, dims, NULL, cnp.NPY_ARRAY_CARRAY, base)


cdef object _view(char* data, cnp.dtype dtype, int nd, cnp.npy_intp* dims, cnp.npy_intp* strides, int flags,
                  object base):
    """An ndarray over memory that `base` owns (strides NULL: C order), holding `base` alive."""
    Py_INCREF(dtype)  # PyArray_NewFromDescr steals a reference to the descriptor
    arr = PyArray_NewFromDescr(np.ndarray, <void*>dtype, nd, dims, strides, <void*>data, flags, None)
    Py_INCREF(base)  # PyArray_SetBaseObject steals a reference to the base
    cnp.PyArray_SetBaseObject(<cnp.ndarray>arr, base)
    return arr


# ---------------------------------------------------------------- DLPack (a buffer from __dlpack__)
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

cdef extern from *:
    """
    typedef struct { int device_type; int device_id; } cl_DLDevice;
    typedef struct { unsigned char code; unsigned char bits; unsigned short lanes; } cl_DLDataType;
    typedef struct {
        void* data; cl_DLDevice device; int ndim; cl_DLDataType dtype;
        long long* shape; long long* strides; unsigned long long byte_offset;
    } cl_DLTensor;
    typedef struct cl_DLManagedTensor {
        cl_DLTensor dl_tensor; void* manager_ctx; void (*deleter)(struct cl_DLManagedTensor*);
    } cl_DLManagedTensor;
    typedef struct { unsigned int major; unsigned int minor; } cl_DLPackVersion;
    typedef struct cl_DLManagedTensorVersioned {
        cl_DLPackVersion version; void* manager_ctx; void (*deleter)(struct cl_DLManagedTensorVersioned*);
        unsigned long long flags; cl_DLTensor dl_tensor;
    } cl_DLManagedTensorVersioned;
    """
    ctypedef struct cl_DLDevice:
        int device_type
    ctypedef struct cl_DLDataType:
        unsigned char code
        unsigned char bits
        unsigned short lanes
    ctypedef struct cl_DLTensor:
        void* data
        cl_DLDevice device
        int ndim
        cl_DLDataType dtype
        long long* shape
        long long* strides
        unsigned long long byte_offset
    ctypedef struct cl_DLManagedTensor:
        cl_DLTensor dl_tensor
    ctypedef struct cl_DLPackVersion:
        unsigned int major
    ctypedef struct cl_DLManagedTensorVersioned:
        cl_DLPackVersion version
        unsigned long long flags
        cl_DLTensor dl_tensor


_DL_NUMPY = {(0, 8): "i1", (0, 16): "i2", (0, 32): "i4", (0, 64): "i8", (1, 8): "u1", (1, 16): "u2",
             (1, 32): "u4", (1, 64): "u8", (2, 16): "f2", (2, 32): "f4", (2, 64): "f8", (5, 64): "c8",
             (5, 128): "c16", (6, 8): "?"}
_DL_PAIRS = {32: "c8", 64: "c16"}  # two float lanes: a complex number
_U1 = np.dtype(np.uint8)


cdef bint _dl_contiguous(cl_DLTensor* t, bint fortran) noexcept:
    """t's elements are packed in C (or Fortran) order; dimensions of extent 1 have any stride."""
    cdef int k, i
    cdef long long expect = 1
    if t.strides == NULL:
        return True
    for k in range(t.ndim):
        i = k if fortran else t.ndim - 1 - k
        if t.shape[i] > 1 and t.strides[i] != expect:
            return False
        expect *= t.shape[i]
    return True


def dlpack_view(obj, bint writable=False):
    """A flat NumPy view of a DLPack array's memory, read as mpi4py reads one: `__dlpack_device__()`
    first, then the capsule (versioned first, then the legacy form; stream -1 off the CPU), read and
    kept alive as the view's base, never consumed. The tensor must be C- or Fortran-contiguous; its
    elements keep their NumPy dtype where there is one, otherwise (bfloat16, lanes, opaque handles)
    the view is of its bytes. Memory on a device is taken only where this process can reach it
    (managed or host-mapped memory, probed by the kernel): otherwise a BufferError. A read-only
    tensor gives a read-only view."""
    cdef cl_DLTensor* t
    cdef bint readonly = False
    cdef int i
    cdef Py_ssize_t count = 1, nbytes
    try:
        dlpack, device = obj.__dlpack__, obj.__dlpack_device__
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} has no __dlpack__ and __dlpack_device__") from None
    device_type, device_id = device()
    if not isinstance(device_type, int) or not isinstance(device_id, int):
        raise TypeError(f"dlpack: __dlpack_device__() returned {(device_type, device_id)!r}, not two ints")
    versioned = True
    try:
        capsule = (dlpack(max_version=(1, 0), copy=False) if device_type == 1
                   else dlpack(stream=-1, max_version=(1, 0), copy=False))
    except TypeError:  # a producer of DLPack before 1.0
        versioned = False
        capsule = dlpack() if device_type == 1 else dlpack(stream=-1)
    if versioned and PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        vm = <cl_DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if vm.version.major != 1:
            raise BufferError(f"dlpack: a {vm.version.major}.x capsule (commlib reads 1.x and the legacy form)")
        t = &vm.dl_tensor
        readonly = (vm.flags & 1) != 0
    elif not versioned and PyCapsule_IsValid(capsule, b"dltensor"):
        t = &(<cl_DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")).dl_tensor
    else:
        raise BufferError("dlpack: invalid capsule object (none, or already used)")
    if t.ndim < 0:
        raise BufferError(f"dlpack: number of dimensions is negative ({t.ndim})")
    if t.ndim > 0 and t.shape == NULL:
        raise BufferError("dlpack: shape is NULL")
    for i in range(t.ndim):
        if t.shape[i] < 0:
            raise BufferError(f"dlpack: shape[{i}] is negative ({t.shape[i]})")
        count *= t.shape[i]
    if not _dl_contiguous(t, False) and not _dl_contiguous(t, True):
        raise BufferError("dlpack: buffer is not contiguous")
    if t.dtype.lanes == 1:
        name = _DL_NUMPY.get((t.dtype.code, t.dtype.bits))
    else:
        name = _DL_PAIRS.get(t.dtype.bits) if t.dtype.code == 2 and t.dtype.lanes == 2 else None
    cdef cnp.dtype dt = np.dtype(name) if name is not None else _U1
    nbytes = count * ((t.dtype.bits * t.dtype.lanes + 7) // 8)
    cdef cnp.npy_intp dims[1]
    dims[0] = nbytes // dt.itemsize
    cdef char* data = <char*>t.data + t.byte_offset
    if device_type != 1 and nbytes and (not _probe(data, writable) or not _probe(data + nbytes - 1, writable)):
        raise BufferError(f"dlpack: the memory of a tensor on device type {device_type} is not "
                          f"{'writable' if writable else 'readable'} from the "
                          f"host: commlib moves host memory; copy the tensor to the host first")
    return _view(data, dt, 1, dims, NULL, (0 if readonly else cnp.NPY_ARRAY_WRITEABLE) | cnp.NPY_ARRAY_CARRAY_RO,
                 capsule)


def plain_pair(s, r, Py_ssize_t mult):
    """How a front-end's buffer call can hand (s, r) to commlib's one-call collectives, checked in
    one C call instead of a dozen Python attribute reads (the difference is most of a small call).

    0: not plain -- either is not an ndarray, either is not C-contiguous, r is not writable, the
    dtypes differ, or r does not hold `mult` times s's elements; 1: plain, and r's shape is s's
    with the first dimension times `mult` (mult 1: the same shape; a 0-d s: r is (mult,));
    2: plain in another shape (flatten both first).
    """
    cdef cnp.ndarray a, b
    cdef int i, nd
    if type(s) is not cnp.ndarray or type(r) is not cnp.ndarray:
        return 0
    a = <cnp.ndarray>s
    b = <cnp.ndarray>r
    if (not cnp.PyArray_IS_C_CONTIGUOUS(a) or not cnp.PyArray_IS_C_CONTIGUOUS(b) or not cnp.PyArray_ISWRITEABLE(b)
            or not cnp.PyArray_EquivTypes(<cnp.dtype>cnp.PyArray_DESCR(a), <cnp.dtype>cnp.PyArray_DESCR(b))
            or cnp.PyArray_SIZE(b) != cnp.PyArray_SIZE(a) * mult):
        return 0
    nd = cnp.PyArray_NDIM(a)
    if nd == 0:
        return 1 if cnp.PyArray_NDIM(b) == 1 else 2
    if cnp.PyArray_NDIM(b) != nd or cnp.PyArray_DIMS(b)[0] != cnp.PyArray_DIMS(a)[0] * mult:
        return 2
    for i in range(1, nd):
        if cnp.PyArray_DIMS(b)[i] != cnp.PyArray_DIMS(a)[i]:
            return 2
    return 1


def plain(a, bint writable):
    """a is a C-contiguous ndarray (and writable, if asked): a front-end's buffer fits the one-call path."""
    if type(a) is not cnp.ndarray or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a):
        return False
    return not writable or cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a)


# ---------------------------------------------------------------- CUDA array interface over host memory

from libc.errno cimport errno, EFAULT, EINTR, EAGAIN
from posix.unistd cimport read as _read, write as _write, getpid

cdef extern from "fcntl.h":
    int O_CLOEXEC, O_NONBLOCK
cdef extern from "unistd.h":
    int pipe2(int* fds, int flags)

cdef int _probe_fds[2]
cdef long _probe_pid = -1


cdef int _probe(char* p, bint writable) except -1:
    """1: the byte at p is readable (and writable, if asked) by this process, 0: it is not.
    The kernel does the access through a pipe, so unmapped or device memory is EFAULT, never a
    crash; a writable probe writes the byte back unchanged."""
    global _probe_pid
    cdef char keep
    cdef Py_ssize_t k
    if _probe_pid != getpid():  # one pipe a process (a forked child makes its own)
        if pipe2(_probe_fds, O_CLOEXEC | O_NONBLOCK) != 0:
            raise OSError(errno, "commlib: cannot make the pipe that checks host memory")
        _probe_pid = getpid()
    while True:
        k = _write(_probe_fds[1], p, 1)
        if k == 1:
            break
        if errno == EFAULT:
            return 0
        if errno != EINTR:
            raise OSError(errno, "commlib: checking host memory")
    if writable:
        k = _read(_probe_fds[0], p, 1)
        if k == 1:
            return 1
        _read(_probe_fds[0], &keep, 1)  # drain the byte the write left
        return 0
    _read(_probe_fds[0], &keep, 1)
    return 1


def _typed(cai, key, typ, optional=False):
    """cai[key] (KeyError when a mandatory key is missing), which must be a `typ` (TypeError)."""
    v = cai.get(key) if optional else cai[key]
    if v is not None and not isinstance(v, typ) or v is None and not optional:
        raise TypeError(f"__cuda_array_interface__: {key!r} must be a {typ.__name__}, got {type(v).__name__}")
    return v


def cai_view(obj, bint writable=False):
    """A NumPy view of an object's `__cuda_array_interface__` memory, read as mpi4py reads one
    (data, typestr, shape; strides optional; a mask is refused; a read-only interface refused for a
    receive), with `obj` as the view's base. commlib moves host memory only: the first and last bytes
    are probed by the kernel, and memory this process cannot reach (a GPU's) is a BufferError naming
    what to do, never a crash."""
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        raise TypeError(f"{type(obj).__name__} has no __cuda_array_interface__") from None
    if not isinstance(cai, dict):
        raise TypeError(f"__cuda_array_interface__: expected a dict, got {type(cai).__name__}")
    data, typestr, shape = _typed(cai, "data", tuple), _typed(cai, "typestr", str), _typed(cai, "shape", tuple)
    strides, descr = _typed(cai, "strides", tuple, True), _typed(cai, "descr", list, True)
    dev_ptr, readonly = data
    if cai.get("mask") is not None:
        raise BufferError("__cuda_array_interface__: cannot handle masked arrays")
    if readonly and writable:
        raise BufferError("__cuda_array_interface__: buffer is not writable")
    order, kind, itemsize = typestr[:1], typestr[1:2], int(typestr[2:])
    if order not in ("<", ">", "|"):
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} with unrecognized byte order")
    if order != "|" and (order == "<") != (sys.byteorder == "little"):
        raise BufferError(f"__cuda_array_interface__: typestr {typestr!r} with non-native byte order")
    if descr is not None and (len(descr) != 1 or descr[0] != ("", typestr)):
        warnings.warn("__cuda_array_interface__: ignoring 'descr' key", RuntimeWarning, stacklevel=3)
    name = "=" + kind + str(itemsize) if kind in ("b", "i", "u", "f", "c") else None
    try:  # a type NumPy has keeps its elements; any other is its bytes (mpi4py's format "B")
        dt = np.dtype(name) if name is not None and (kind != "b" or itemsize == 1) else None
    except TypeError:
        dt = None
    if dt is None:
        dt = np.dtype((np.void, itemsize)) if itemsize > 0 else _U1
    cdef int nd = len(shape), i
    cdef cnp.npy_intp dims[32]
    cdef cnp.npy_intp st[32]
    cdef cnp.npy_intp size = _read_shape(shape, dims, BufferError, "__cuda_array_interface__")
    if strides is not None:
        if len(strides) != nd:
            raise BufferError(f"__cuda_array_interface__: strides {strides} for shape {shape}")
        for i in range(nd):
            st[i] = strides[i]
    elif nd:
        st[nd - 1] = dt.itemsize
        for i in range(nd - 2, -1, -1):
            st[i] = st[i + 1] * (dims[i + 1] if dims[i + 1] > 0 else 1)
    if size == 0:
        return np.empty(tuple(shape), dt)
    if dev_ptr is None or dev_ptr == 0:
        raise BufferError("__cuda_array_interface__: a null data pointer")
    cdef char* p = <char*><Py_ssize_t>dev_ptr
    cdef cnp.ndarray v = _view(p, dt, nd, dims, st, 0 if readonly else cnp.NPY_ARRAY_WRITEABLE, obj)
    if not (cnp.PyArray_IS_C_CONTIGUOUS(v) or cnp.PyArray_IS_F_CONTIGUOUS(v)):
        raise BufferError(f"__cuda_array_interface__: buffer is not contiguous "
                          f"(shape:{shape}, strides:{strides}, itemsize:{dt.itemsize})")
    if not _probe(p, writable) or not _probe(p + cnp.PyArray_NBYTES(v) - 1, writable):
        raise BufferError(f"__cuda_array_interface__: the memory at {hex(dev_ptr)} is not "
                          f"{'writable' if writable else 'readable'} from the host (device memory?): "
                          f"commlib moves host memory; copy the array to the host first")
    return v.ravel(order="K").view(np.uint8) if dt.kind == "V" else v


# ---------------------------------------------------------------- derived datatypes: typemap copies

from libc.string cimport memcpy


cdef inline Py_ssize_t _run_copy(char* u, char* packed, Py_ssize_t pos, Py_ssize_t length, Py_ssize_t stride,
                                 Py_ssize_t reps, bint pack) noexcept nogil:
    """One run: reps blocks of length bytes, stride apart in user memory, one after another packed."""
    cdef Py_ssize_t r
    for r in range(reps):
        if pack:
            memcpy(packed + pos, u + r * stride, length)
        else:
            memcpy(u + r * stride, packed + pos, length)
        pos += length
    return pos


cdef inline void _runs_copy(char* user, char* packed, const long long* runs, Py_ssize_t nr, Py_ssize_t count,
                            Py_ssize_t extent, Py_ssize_t origin, bint pack) noexcept nogil:
    """count elements; runs: nr rows of 4 (displacement, length, stride, repetitions)."""
    cdef Py_ssize_t i, k, pos = 0, length
    cdef char* u
    cdef const long long* r
    for i in range(count):
        for k in range(nr):
            r = runs + 4 * k
            u = user + origin + i * extent + r[0]
            length = r[1]
            # a constant length, once inlined, makes each copy one load and one store
            if length == 8:
                pos = _run_copy(u, packed, pos, 8, r[2], r[3], pack)
            elif length == 4:
                pos = _run_copy(u, packed, pos, 4, r[2], r[3], pack)
            elif length == 16:
                pos = _run_copy(u, packed, pos, 16, r[2], r[3], pack)
            else:
                pos = _run_copy(u, packed, pos, length, r[2], r[3], pack)


def typemap_copy(user, packed, const long long[:, ::1] runs, Py_ssize_t count, Py_ssize_t extent,
                 Py_ssize_t origin, bint pack):
    """Copy `count` elements of a derived datatype between user memory and its packed form, in one
    nogil pass. Element i's typemap lies at origin + i * extent in `user`, as runs (rows of
    `runs`: byte displacement, byte length, stride, repetitions -- `repetitions` blocks of `length`
    bytes, `stride` apart), in typemap order; in `packed` the blocks follow one another.
    pack: user -> packed (packed writable); else packed -> user (user writable). The caller has
    checked that every block lies inside `user`; `packed` must hold count * (the blocks' total) bytes."""
    cdef const unsigned char[::1] ro
    cdef unsigned char[::1] rw
    cdef Py_ssize_t k, total = 0
    if runs.shape[1] != 4:
        raise ValueError("typemap_copy: runs must have 4 columns")
    for k in range(runs.shape[0]):
        total += runs[k, 1] * runs[k, 3]
    if pack:
        ro, rw = user, packed
    else:
        ro, rw = packed, user
    if (rw.shape[0] if pack else ro.shape[0]) < total * count:
        raise ValueError(f"typemap_copy: the packed buffer holds fewer than {total * count} bytes")
    if total == 0 or count == 0:
        return 0
    cdef char* up = <char*>&ro[0] if pack else <char*>&rw[0]
    cdef char* pp = <char*>&rw[0] if pack else <char*>&ro[0]
    with nogil:
        _runs_copy(up, pp, &runs[0, 0], runs.shape[0], count, extent, origin, pack)
    return total * count


# The one-call forms of a derived message of `count` elements at the start of a C-contiguous NumPy
# array, for the common point-to-point call ([array, count, datatype]). `plan` is the datatype's
# (runs, extent, true lb, true ub, packed bytes per element), runs a C-contiguous int64 (r, 4) array.
# Each returns None (the caller's general path then copes, or names the problem) unless the array is
# a C-contiguous ndarray (writable for a receive) that every element's blocks lie inside.

cdef inline char* _plan_target(object a, tuple plan, Py_ssize_t count, bint writable,
                               Py_ssize_t* nruns, const long long** runs) except? NULL:
    cdef cnp.ndarray arr, r
    cdef Py_ssize_t extent, tlb, tub, span, lo, hi, nbytes
    if not cnp.PyArray_CheckExact(a) or count < 0:
        return NULL
    arr = <cnp.ndarray>a
    if not cnp.PyArray_IS_C_CONTIGUOUS(arr) or (writable and not cnp.PyArray_ISWRITEABLE(arr)):
        return NULL
    r = <cnp.ndarray>plan[0]
    extent, tlb, tub = plan[1], plan[2], plan[3]
    nbytes = cnp.PyArray_NBYTES(arr)
    if count:
        span = (count - 1) * extent
        lo, hi = tlb + (span if span < 0 else 0), tub + (span if span > 0 else 0)
        if lo < 0 or hi > nbytes:
            return NULL
    nruns[0] = cnp.PyArray_DIM(r, 0)
    runs[0] = <const long long*>cnp.PyArray_DATA(r)
    return <char*>cnp.PyArray_DATA(arr)


def derived_pack(object a, tuple plan, Py_ssize_t count):
    """A new uint8 array: count elements of the plan's datatype packed from a (None: see above)."""
    cdef Py_ssize_t nr = 0
    cdef const long long* runs = NULL
    cdef char* user = _plan_target(a, plan, count, False, &nr, &runs)
    if user == NULL:
        return None
    cdef cnp.npy_intp dims[1]
    dims[0] = count * <Py_ssize_t>plan[4]
    cdef cnp.ndarray out = cnp.PyArray_SimpleNew(1, dims, cnp.NPY_UINT8)
    cdef char* p = <char*>cnp.PyArray_DATA(out)
    cdef Py_ssize_t extent = plan[1]
    with nogil:
        _runs_copy(user, p, runs, nr, count, extent, 0, True)
    return out


def derived_space(object a, tuple plan, Py_ssize_t count):
    """A new, uninitialised uint8 array for receiving count packed elements of the plan's datatype
    into a (None: see above); `derived_unpack` then writes what arrived into a."""
    cdef Py_ssize_t nr = 0
    cdef const long long* runs = NULL
    if _plan_target(a, plan, count, True, &nr, &runs) == NULL:
        return None
    cdef cnp.npy_intp dims[1]
    dims[0] = count * <Py_ssize_t>plan[4]
    return cnp.PyArray_SimpleNew(1, dims, cnp.NPY_UINT8)


def derived_unpack(object a, tuple plan, Py_ssize_t count, cnp.ndarray packed, Py_ssize_t nbytes):
    """Write the first nbytes of packed (from `derived_space`) into a, element by element: whole
    elements first, then the leading bytes of a partial one (an MPI message may end inside an element;
    the rest of that element is left as it was)."""
    cdef Py_ssize_t nr = 0, whole, rest, eb = plan[4], extent = plan[1]
    cdef const long long* runs = NULL
    cdef char* user = _plan_target(a, plan, count, True, &nr, &runs)
    if user == NULL or nbytes < 0 or nbytes > count * eb or nbytes > cnp.PyArray_NBYTES(packed):
        raise ValueError("derived_unpack: the buffer or the byte count does not match the receive")
    cdef char* p = <char*>cnp.PyArray_DATA(packed)
    cdef unsigned char[::1] tmp
    whole = nbytes // eb if eb else 0
    rest = nbytes - whole * eb
    with nogil:
        _runs_copy(user, p, runs, nr, whole, extent, 0, False)
    if rest:
        tmp = np.empty(eb, np.uint8)  # the partial element: its old bytes, overlaid with what arrived
        with nogil:
            _runs_copy(user, <char*>&tmp[0], runs, nr, 1, extent, whole * extent, True)
            memcpy(<char*>&tmp[0], p + whole * eb, rest)
            _runs_copy(user, <char*>&tmp[0], runs, nr, 1, extent, whole * extent, False)
    return nbytes


def host_span(Py_ssize_t address, Py_ssize_t nbytes, bint writable):
    """A uint8 view of nbytes at an absolute address (MPI.BOTTOM messages, whose datatypes hold
    addresses from Get_address), once the kernel has confirmed that its first and last bytes are
    this process's memory (BufferError otherwise, never a crash). Nothing keeps that memory alive:
    as in C, the caller's objects must outlive the message."""
    cdef cnp.npy_intp dims[1]
    if nbytes < 0:
        raise ValueError(f"host_span: negative length {nbytes}")
    dims[0] = nbytes
    if nbytes == 0:
        return np.empty(0, np.uint8)
    if address == 0 or not _probe(<char*>address, writable) or not _probe(<char*>address + nbytes - 1, writable):
        raise BufferError(f"MPI.BOTTOM: the {nbytes} bytes at {hex(address)} are not "
                          f"{'writable' if writable else 'readable'} memory of this process")
    return _view(<char*>address, _U1, 1, dims, NULL, cnp.NPY_ARRAY_CARRAY if writable else cnp.NPY_ARRAY_CARRAY_RO,
                 _BOTTOM_OWNER)


_BOTTOM_OWNER = object()
