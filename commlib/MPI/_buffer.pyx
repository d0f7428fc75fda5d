# cython: language_level=3
"""MPI.buffer: a byte view of memory that exports the buffer protocol, as mpi4py's `buffer`.

It views an object's memory (the buffer protocol, then DLPack, then the CUDA array interface over
host memory, as messages do), memory it allocates itself (`allocate`, and `MPI.Alloc_mem`), or an
address (`fromaddress`). Python 3.11 cannot export the buffer protocol from a Python class, hence
Cython. Indexing reads and writes bytes; a slice is a buffer of the same memory.
"""
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo, PyBUF_SIMPLE,
                             PyBUF_WRITABLE, PyBUF_ANY_CONTIGUOUS)
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memset, memmove

from commlib._kernels import cai_view, dlpack_view


cdef class buffer:
    """Memory as bytes: `address`, `nbytes`, `readonly`, `obj` (what owns it), indexing and slicing,
    `cast`, `tobytes`, `toreadonly`, `release`; usable wherever a buffer is."""

    cdef Py_buffer view
    cdef bint held  # view came from PyObject_GetBuffer and must be released
    cdef object owner  # what view.obj stands for where the memory came from elsewhere (None: an address)
    cdef int kind  # the DLPack device type of the memory: 0 a plain buffer, 2 a CUDA array...

    def __cinit__(self, *args):
        self.held = False
        self.kind = 0
        PyBuffer_FillInfo(&self.view, None, NULL, 0, 0, PyBUF_SIMPLE)
        if len(args) > 1:
            raise TypeError(f"buffer() takes at most 1 argument ({len(args)} given)")
        if args:
            self._acquire(args[0], True)

    def __dealloc__(self):
        self._drop()

    cdef _acquire(self, obj, bint readonly):
        """View obj's memory (writable unless readonly is allowed): the buffer protocol, then a DLPack
        or CUDA-array-interface array, as mpi4py tries them."""
        cdef int flags = PyBUF_ANY_CONTIGUOUS | (0 if readonly else PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(obj, &self.view, flags)
        except BaseException as e:
            if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
                arr = dlpack_view(obj, not readonly)
                self.kind = obj.__dlpack_device__()[0]
            elif hasattr(obj, "__cuda_array_interface__"):
                arr = cai_view(obj, not readonly)
                self.kind = 2
            else:
                raise e
            PyObject_GetBuffer(arr, &self.view, flags)
        self.held = True
        self.owner = obj

    cdef _drop(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False
        PyBuffer_FillInfo(&self.view, None, NULL, 0, 0, PyBUF_SIMPLE)
        self.owner = None

    @staticmethod
    def allocate(Py_ssize_t nbytes, bint clear=False):
        """A new buffer of nbytes (zeroed; `clear` is accepted as mpi4py has it)."""
        if nbytes < 0:
            raise ValueError("expecting non-negative size")
        return buffer.frombuffer(bytearray(nbytes))

    @staticmethod
    def frombuffer(obj, bint readonly=False):
        """A buffer over obj's memory (writable unless readonly)."""
        cdef buffer b = buffer.__new__(buffer)
        b._acquire(obj, readonly)
        if readonly:
            b.view.readonly = 1
        return b

    @staticmethod
    def fromaddress(address, Py_ssize_t nbytes, bint readonly=False):
        """A buffer over nbytes at an address the caller vouches for (nothing keeps it alive)."""
        cdef Py_ssize_t addr = address
        if nbytes < 0:
            raise ValueError("expecting non-negative buffer length")
        if addr == 0 and nbytes > 0:
            raise ValueError("expecting non-NULL address")
        cdef buffer b = buffer.__new__(buffer)
        PyBuffer_FillInfo(&b.view, None, <void*>addr, nbytes, readonly, PyBUF_SIMPLE)
        return b

    cdef buffer _sub(self, Py_ssize_t start, Py_ssize_t length, bint readonly):
        """A buffer over part of this one's memory, keeping this one (and so its owner) alive."""
        cdef buffer b = buffer.__new__(buffer)
        PyBuffer_FillInfo(&b.view, None, <char*>self.view.buf + start, length, readonly, PyBUF_SIMPLE)
        b.owner, b.kind = self, self.kind
        return b

    cdef _host(self):
        """As mpi4py: memory a device array lent is moved by messages, never read here."""
        if self.kind not in (0, 1, 3):
            raise BufferError(f"buffer: memory of DLPack device type {self.kind} is not accessed from the host")

    @property
    def address(self):
        return <Py_ssize_t>self.view.buf

    @property
    def obj(self):
        o = self.owner
        return o.obj if isinstance(o, buffer) else o

    @property
    def nbytes(self):
        return self.view.len

    @property
    def readonly(self):
        return bool(self.view.readonly)

    @property
    def format(self):
        return "B"

    @property
    def itemsize(self):
        return 1

    def toreadonly(self):
        """A read-only buffer of the same memory."""
        b = self._sub(0, self.view.len, True)
        return b

    def release(self):
        """Let go of the memory: address and nbytes become 0."""
        self._drop()

    def cast(self, format, shape=None):
        """A memoryview of this memory as `format` (and `shape`)."""
        self._host()
        m = memoryview(self)
        return m.cast(format) if shape is None else m.cast(format, shape)

    def tobytes(self, order=None):
        self._host()
        return PyBytes_FromStringAndSize(<char*>self.view.buf, self.view.len) if self.view.len else b""

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.view.buf, self.view.len, self.view.readonly, flags)

    def __len__(self):
        return self.view.len

    cdef Py_ssize_t _index(self, item) except -1:
        cdef Py_ssize_t i = item
        if i < 0:
            i += self.view.len
        if i < 0 or i >= self.view.len:
            raise IndexError("index out of range")
        return i

    cdef tuple _slice(self, slice item):
        start, stop, step = item.indices(self.view.len)
        if step != 1:
            raise IndexError("slice with step not supported")
        return start, max(stop - start, 0)

    def __getitem__(self, item):
        self._host()
        if isinstance(item, slice):
            start, length = self._slice(item)
            return self._sub(start, length, self.view.readonly)
        if hasattr(item, "__index__"):
            return (<unsigned char*>self.view.buf)[self._index(item)]
        raise TypeError("index must be integer or slice")

    def __setitem__(self, item, value):
        cdef Py_buffer src
        cdef Py_ssize_t start, length
        self._host()
        if self.view.readonly:
            raise TypeError("buffer is read-only")
        if isinstance(item, slice):
            start, length = self._slice(item)
            if hasattr(value, "__index__"):
                memset(<char*>self.view.buf + start, <unsigned char>value, length)
                return
            PyObject_GetBuffer(value, &src, PyBUF_ANY_CONTIGUOUS)
            try:
                if src.len != length:
                    raise ValueError("slice length does not match buffer")
                memmove(<char*>self.view.buf + start, src.buf, length)
            finally:
                PyBuffer_Release(&src)
            return
        if hasattr(item, "__index__"):
            (<unsigned char*>self.view.buf)[self._index(item)] = <unsigned char>value
            return
        raise TypeError("index must be integer or slice")

    def __repr__(self):
        return f"<MPI.buffer of {self.view.len} bytes at {hex(<Py_ssize_t>self.view.buf)}>"


# ------------------------------------------------------------------ the one-call Send/Recv's message forms
# Send and Recv try commlib's compiled point-to-point call first; these read the two message forms it
# takes from a list or tuple argument in C, where the Python reading cost as much as the call itself.
cimport numpy as cnp

cnp.import_array()

cdef object _Datatype = None  # MPI.Datatype, given by _bufspec (this module is imported before it exists)
cdef tuple _RAW = ()  # the buffer types raw_message takes whole: bytearray, mmap


def set_message_types(datatype, raw):
    """The Datatype class and the raw buffer types (called once by _bufspec)."""
    global _Datatype, _RAW
    _Datatype, _RAW = datatype, tuple(raw)


cdef tuple _parts(spec):
    """(buf, count or None, datatype) of a message [buf, datatype] or [buf, count, datatype]; None for
    another length."""
    cdef Py_ssize_t n = len(spec)
    if n == 2:
        return spec[0], None, spec[1]
    if n == 3:
        return spec[0], spec[1], spec[2]
    return None


cdef tuple _plain(spec, bint writable):
    """(a, elements of the message, count, datatype) of [a, datatype] or [a, count, datatype] where a is
    a C-contiguous NumPy array (writable, for a receive) of the datatype's own base type and the datatype
    a plain view (a predefined one, a contiguous derived one); None for anything else."""
    cdef Py_ssize_t mult, size, k
    cdef cnp.ndarray arr
    parts = _parts(spec)
    if parts is None:
        return None
    a, count, dt = parts
    if type(a) is not cnp.ndarray or type(dt) is not _Datatype:
        return None
    arr = <cnp.ndarray>a
    if not cnp.PyArray_IS_C_CONTIGUOUS(arr) or writable and not cnp.PyArray_ISWRITEABLE(arr):
        return None
    if not dt._simple or dt._base != arr.dtype:
        return None
    mult, size = dt._mult, cnp.PyArray_SIZE(arr)
    if count is None:
        if mult <= 0 or size % mult:
            return None
        return a, size, size // mult, dt
    if type(count) is not int or count < 0:
        return None
    k = <Py_ssize_t>count * mult
    if k > size:
        return None
    return a, k, count, dt


cdef inline object _flat(cnp.ndarray a):
    return a if cnp.PyArray_NDIM(a) == 1 else a.reshape(-1)


def plain_message(spec, bint writable):
    """(array of the message's elements, its wire code) of a message in the plain forms of `_plain` (the
    one-call Send/Recv: the array itself where the message is all of it, any shape); None otherwise."""
    p = _plain(spec, writable)
    if p is None:
        return None
    a, k, _, dt = p
    return (a if k == cnp.PyArray_SIZE(<cnp.ndarray>a) else _flat(a)[:k]), dt._wire


def plain_parts(spec, bint writable):
    """(the whole buffer flat, the message's elements, count, datatype) of a message in the plain forms of
    `_plain` (the parser's quick reading of them); None otherwise."""
    p = _plain(spec, writable)
    if p is None:
        return None
    a, k, count, dt = p
    whole = _flat(a)
    return whole, (whole if k == cnp.PyArray_SIZE(<cnp.ndarray>a) else whole[:k]), count, dt


def raw_message(spec):
    """(buffer, nbytes, element count, wire code) of [buf, datatype] or [buf, count, datatype] where buf
    is a bytearray or mmap (mpi4py's OSU benchmarks allocate with mmap) holding whole elements of a
    plain-view datatype: the one-call Send/Recv take the buffer itself; else None."""
    cdef Py_ssize_t itemsize, mult, size, item, k
    parts = _parts(spec)
    if parts is None:
        return None
    a, count, dt = parts
    if type(a) not in _RAW or type(dt) is not _Datatype or not dt._simple:
        return None
    itemsize, mult = dt._base.itemsize, dt._mult
    size = len(a)
    item = itemsize * mult
    if item <= 0 or size % itemsize:
        return None
    if count is None:
        if size % item:
            return None
        k = size // item
    elif type(count) is not int or count < 0 or <Py_ssize_t>count * item > size:
        return None
    else:
        k = count
    return a, k * item, k * mult, dt._wire
