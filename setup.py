"""Declares the Cython extensions; all metadata lives in pyproject.toml."""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

# -O3 lets GCC vectorise the reduction loops for the baseline ISA (SSE2 on
# x86-64); faster ISAs are chosen at run time inside the kernels, never by
# -march=native, so a wheel built here runs on any CPU of the architecture.
CFLAGS = ["-O3", "-fno-strict-aliasing"]

extensions = [
    # (also a NumPy view of memory a front-end already holds: array_at, through NumPy's C API)
    Extension("commlib._kernels", ["commlib/_kernels.pyx"], extra_compile_args=CFLAGS,
              include_dirs=[numpy.get_include()],
              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]),
    # MPI.buffer: memory that exports the buffer protocol (a Python class cannot on Python 3.11)
    # (and the one-call Send/Recv's message forms, read through NumPy's C API)
    Extension("commlib.MPI._buffer", ["commlib/MPI/_buffer.pyx"], extra_compile_args=CFLAGS,
              include_dirs=[numpy.get_include()], define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]),
    # the recording wrapper of COMMLIB_TRACE (commlib/_trace.py), in C for its cost per call
    Extension("commlib._tracecall", ["commlib/_tracecall.pyx"], extra_compile_args=CFLAGS),
    # the engine's reentrant lock, taken from C by _io's one-call path through _lock.pxd
    Extension("commlib._lock", ["commlib/_lock.pyx"], extra_compile_args=CFLAGS),
    # the header encoder, also called from C by _io through _wire.pxd
    Extension("commlib._wire", ["commlib/_wire.pyx"], extra_compile_args=CFLAGS),
    # _io's one-call path (_fast.pxi) reads arrays through NumPy's C API and
    # chains header checksums with zlib's crc32, as the Python path does.
    Extension("commlib._transport._io", ["commlib/_transport/_io.pyx"], extra_compile_args=CFLAGS,
              include_dirs=[numpy.get_include()], libraries=["z"],
              define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]),
]

# Every core: the extensions are translated and compiled side by side (on 2 cores the build takes the
# time of _kernels alone, ~25 s, instead of ~55 s one after another).
JOBS = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "embedsignature": True},
        nthreads=JOBS if JOBS > 1 else 0,
    ),
    options={"build_ext": {"parallel": JOBS}},
)
