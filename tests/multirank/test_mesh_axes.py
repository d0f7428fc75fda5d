"""commlib.mesh.Mesh through the real launcher: geometry, jax.lax-style named-axis collectives, errors."""
import pytest

TRANSPORTS = ("shm",)  # a front-end on the API: the default transport only (conftest.py)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8])
def test_mesh_axes(n, assert_ranks_ok, run):
    """Every mesh shape for n ranks (cases/mesh_axes.py), every collective along every axis and pair of axes,
    the i-variants waited in reverse, ValueErrors on every rank followed by a psum that still works."""
    assert_ranks_ok(run(n, "mesh_axes.py", timeout=180), n, "Mesh geometry and named-axis collectives")
