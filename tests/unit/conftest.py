import pytest


@pytest.fixture(scope="module")
def torch():
    """torch, imported by the first test of a module that asks for it, not when the module is collected
    (in every xdist worker: about 1.5 s of CPU each on 2 cores); the module skips where it is missing
    (tests/_needs.py)."""
    import torch
    return torch
