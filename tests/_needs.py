"""Skipping a test file whose optional engine (torch, Ray, Dask, MLX) is not installed, decided without
importing it: `pytest.importorskip` at a module's top imports the engine in every xdist worker that
collects the file (torch alone is about 1.5 s of CPU a worker on 2 cores), though the file's tests run it
only in their ranks' processes. A unit test file whose tests use torch in-process takes it from the
`torch` fixture (tests/unit/conftest.py).
"""
import importlib.util

import pytest


def installed(name):
    """Whether module `name` (dotted names import only their parent packages) can be imported."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing, or one without a spec
        return False


def skip_unless_installed(name, reason):
    """At a test module's top: skip the whole module, saying `reason`, where `name` is not installed."""
    if not installed(name):
        pytest.skip(reason, allow_module_level=True)
