"""The object variants through the real launcher: `python -m commrun -n N cases/objects_case.py MODE`.

Each rank rebuilds every other rank's objects from (rank, label) and checks
what it received itself; a rank prints `objects MODE rank r/n: OK ...` and
exits 0 only when every check passed.
"""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
CASE = HERE / "cases" / "objects_case.py"
REPO = HERE.parents[1]


def run(n, *args, timeout=100, env=None):
    environ = dict(os.environ)
    environ["COMMLIB_TIMEOUT"] = "60"
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    environ.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "commrun", "-n", str(n), str(CASE), *map(str, args)],
                          cwd=CASE.parent, env=environ, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"commrun -n {n} {CASE.name} {' '.join(map(str, args))} failed:\n{out[-6000:]}"
    mode = args[0]
    for r in range(n):
        assert f"objects {mode} rank {r}/{n}: OK" in out, f"rank {r} did not report OK:\n{out[-6000:]}"
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_objects(n):
    """Every function, nested objects of many kinds, wildcards, ordering, errors, a 100 MB round trip."""
    run(n, "all")


@pytest.mark.timeout(120)
def test_object_collective_never_matches_array_collective():
    run(2, "mismatch")


@pytest.mark.timeout(600)
@pytest.mark.skipif(os.environ.get("COMMLIB_BIG_TESTS") != "1", reason="set COMMLIB_BIG_TESTS=1 (about 2 GB of RAM)")
def test_objects_300mb():
    """300 MB objects at n=2 through every function, out-of-band arrays and an in-band bytes object."""
    run(2, "big", 300, timeout=500, env={"COMMLIB_TIMEOUT": "300"})
