"""Classic mpi4py programs (examples/mpi4py/) through the real launcher, checked against NumPy.

Each example is written as an mpi4py user writes it; only the import line
(`from commlib import MPI`) differs. `python -m commrun -n N examples/mpi4py/X.py`
must exit 0 at n = 1..4 and rank 0 (only) must print `RESULT <name> <value>`
lines whose values the tests recompute independently, serially, with NumPy.
"""
import ast
import math
import os
import re
import sys

import numpy as np
import pytest

TRANSPORTS = ("shm",)  # example programs of the API: the transports' own paths are the batched suites' (conftest.py)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

EXAMPLES = os.path.join(_harness.REPO, "examples", "mpi4py")
SIZES = [1, 2, 3, 4]
_RESULT = re.compile(r"^(?:\[(\d+)\]\s?)?RESULT (\S+) (.*)$")


def _run(argv, what, timeout=100):
    rc, out, err = _harness._communicate(argv, _harness.base_env(), timeout)
    if rc != 0:
        pytest.fail(f"{what}: exit code {rc}\n--- stdout (tail)\n{_harness._tail(out)}\n"
                    f"--- stderr (tail)\n{_harness._tail(err)}")
    results = {}
    for line in out.splitlines():
        m = _RESULT.match(line.strip())
        if not m:
            continue
        rank = int(m.group(1)) if m.group(1) is not None else 0
        assert rank == 0, f"{what}: rank {rank} printed a RESULT line: {line!r}"
        assert m.group(2) not in results, f"{what}: {m.group(2)} printed twice:\n{out}"
        results[m.group(2)] = m.group(3).strip()
    if not results:
        pytest.fail(f"{what}: no RESULT line\n--- stdout (tail)\n{_harness._tail(out)}\n"
                    f"--- stderr (tail)\n{_harness._tail(err)}")
    return results


def run_example(n, name, *args):
    """`python -m commrun -n N examples/mpi4py/NAME.py ARGS...`; {result name: value text} of rank 0."""
    argv = [sys.executable, "-m", "commrun", "-n", str(n), os.path.join(EXAMPLES, name + ".py"), *map(str, args)]
    return _run(argv, f"commrun -n {n} examples/mpi4py/{name}.py")


def _close(got, want, rel):
    return abs(got - want) <= rel * max(abs(want), 1e-300)


# ---------------------------------------------------------------- pi

def serial_pi(n):
    h = 1.0 / n
    x = h * (np.arange(n, dtype=np.float64) + 0.5)
    return float(h * np.sum(4.0 / (1.0 + x * x)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", SIZES)
def test_pi(n):
    res = run_example(n, "pi")
    got = float(res["pi"])
    assert abs(got - math.pi) < 1e-8, f"pi = {got!r}, error {abs(got - math.pi):.3e}"
    # the midpoint sum itself (1e6 intervals), up to the order of the floating-point additions
    assert _close(got, serial_pi(1_000_000), 1e-12), (got, serial_pi(1_000_000))


# ---------------------------------------------------------------- heat2d

HEAT_NX, HEAT_NY, HEAT_ALPHA, HEAT_TOP, HEAT_STEPS = 60, 44, 0.2, 1.0, 200


def serial_heat2d():
    """The same explicit 5-point heat update on the whole grid: (residual of the last step, sum of the field)."""
    i, j = np.meshgrid(np.arange(HEAT_NX), np.arange(HEAT_NY), indexing="ij")
    u = np.zeros((HEAT_NX + 2, HEAT_NY + 2))
    u[1:-1, 1:-1] = ((7 * i + 13 * j) % 17) / 17.0
    u[0, :] = HEAT_TOP  # fixed boundary: top row hot, the other edges cold
    residual = None
    for _ in range(HEAT_STEPS):
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        new = c + HEAT_ALPHA * lap
        residual = math.sqrt(float(np.sum((new - c) ** 2)))
        u[1:-1, 1:-1] = new
    return residual, float(u[1:-1, 1:-1].sum())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", SIZES)
def test_heat2d(n):
    res = run_example(n, "heat2d")
    want_residual, want_checksum = serial_heat2d()
    checksum, residual = float(res["heat2d_checksum"]), float(res["heat2d_residual"])
    assert _close(checksum, want_checksum, 1e-9), f"checksum {checksum!r}, serial NumPy {want_checksum!r}"
    assert _close(residual, want_residual, 1e-9), f"residual {residual!r}, serial NumPy {want_residual!r}"


# ---------------------------------------------------------------- parallel_sum

@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", SIZES)
def test_parallel_sum(n):
    res = run_example(n, "parallel_sum")
    N = 1_000_003
    want = int(((np.arange(N, dtype=np.int64) * 2654435761) % 1000003).sum())
    assert int(res["parallel_sum"]) == want


# ---------------------------------------------------------------- master_worker

@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", SIZES)
def test_master_worker(n):
    res = run_example(n, "master_worker")
    got = ast.literal_eval(res["master_worker"])
    want = [int((np.arange(100 * x, dtype=np.int64) ** 2).sum()) for x in range(40)]
    assert got == want


@pytest.mark.timeout(120)
def test_master_worker_more_tasks_than_fit_evenly():
    """7 tasks over 3 workers: some workers get the stop sentinel after different numbers of tasks."""
    got = ast.literal_eval(run_example(4, "master_worker", 7)["master_worker"])
    assert got == [int((np.arange(100 * x, dtype=np.int64) ** 2).sum()) for x in range(7)]


@pytest.mark.timeout(120)
def test_master_worker_fewer_tasks_than_workers():
    """1 task, 3 workers: two workers get the stop sentinel straight away."""
    got = ast.literal_eval(run_example(4, "master_worker", 1)["master_worker"])
    assert got == [0]


# ---------------------------------------------------------------- without a launcher

@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["pi", "heat2d", "parallel_sum", "master_worker"])
def test_plain_python_is_a_singleton(name):
    """`python examples/mpi4py/X.py` with no launcher: COMM_WORLD is a size-1 singleton, as with mpi4py."""
    res = _run([sys.executable, os.path.join(EXAMPLES, name + ".py")], f"python examples/mpi4py/{name}.py")
    assert res
