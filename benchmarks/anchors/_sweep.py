"""The sweep every anchor runs: the same sizes, ops, iteration policy and JSON output.

Each anchor script (mpi_sweep.py, gloo_sweep.py, mlx_sweep.py) wraps its library
in a small ``Backend`` and hands it to ``run_sweep``. Both, and every rule of the
sweep (sizes, options, the statistic, busbw factors), live in ``commlib.bench``,
which runs commlib through the same code: the numbers compare by construction.
commlib is installed in the bench venv (setup_env.sh), as every comparison needs it.
"""
from commlib.bench import (  # noqa: F401  (re-exported for the anchor scripts)
    OPS, Backend, MiB, add_sweep_arguments as add_arguments, busbw_factor, default_sizes, element_count,
    emit, parse_size, run_point, run_sweep, sizes_from,
)


def expected_sum(n: int) -> float:
    """Inputs are filled with (rank + 1); the sum over ranks is n(n+1)/2."""
    return n * (n + 1) / 2.0
