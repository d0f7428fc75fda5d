"""Declares the Cython extensions; all metadata lives in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

# -O3 lets GCC vectorise the reduction loops for the baseline ISA (SSE2 on
# x86-64); faster ISAs are chosen at run time inside the kernels, never by
# -march=native, so a wheel built here runs on any CPU of the architecture.
CFLAGS = ["-O3", "-fno-strict-aliasing"]

extensions = [
    Extension(name, [name.replace(".", "/") + ".pyx"], extra_compile_args=CFLAGS)
    for name in ("commlib._kernels", "commlib._transport._io")
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "embedsignature": True},
    ),
)
