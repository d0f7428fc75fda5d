"""`import mpi4py` without mpi4py: commrun --mpi4py and `python -m mpi4py` (the stand-in's run).

The examples of examples/mpi4py/, with their import turned into mpi4py's own (`from mpi4py import
MPI`), run unchanged through `commrun --mpi4py` and print exactly what the commlib-import originals
print; an uncaught exception under `-m mpi4py` aborts the job at once instead of leaving the other
ranks waiting.
"""
import os
import sys
import time

import pytest

TRANSPORTS = ("shm",)  # what is tested is the stand-in's import and launch, not the transport (conftest.py)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

EXAMPLES = os.path.join(_harness.REPO, "examples", "mpi4py")


def _commrun(n, *args, timeout=100):
    argv = [sys.executable, "-m", "commrun", "-n", str(n), *map(str, args)]
    return _harness._communicate(argv, _harness.base_env(), timeout)


def _results(out):
    return sorted(line.split("RESULT", 1)[1].strip() for line in out.splitlines() if "RESULT " in line)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name, args", [("pi", [20000]), ("heat2d", []), ("parallel_sum", []),
                                        ("master_worker", [])])
def test_examples_run_unchanged_as_mpi4py_programs(name, args, tmp_path):
    src = open(os.path.join(EXAMPLES, name + ".py")).read()
    assert "from commlib import MPI" in src
    prog = tmp_path / f"{name}.py"
    prog.write_text(src.replace("from commlib import MPI", "from mpi4py import MPI"))
    want = _commrun(3, os.path.join(EXAMPLES, name + ".py"), *args)
    got = _commrun(3, "--mpi4py", prog, *args)
    assert want[0] == 0 and got[0] == 0, f"{name}: exit codes {want[0]}, {got[0]}\n{got[1][-3000:]}{got[2][-3000:]}"
    assert _results(got[1]) == _results(want[1]) and _results(want[1]), f"{name}:\n{got[1]}\n---\n{want[1]}"


PROG = '''\
import mpi4py
from mpi4py import MPI

comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
assert getattr(mpi4py, "STANDIN", False) and MPI.__name__ == "commlib.MPI", (mpi4py, MPI)
ring = comm.sendrecv(r, dest=(r + 1) % n, source=(r - 1) % n)
total = comm.allreduce(r, op=MPI.SUM)
print(f"ok rank {r}: {ring} {total}")
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("fork", [False, True], ids=["spawn", "fork"])
def test_an_mpi4py_program_through_commrun(n, fork, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    rc, out, err = _commrun(n, "--mpi4py", *(["--fork"] if fork else []), prog)
    assert rc == 0, out + err
    for r in range(n):
        assert f"ok rank {r}: {(r - 1) % n} {n * (n - 1) // 2}" in out, out


BOOM = '''\
from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    raise ValueError("rank 1 gives up")
comm.Barrier()
print("never here")
'''


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_an_uncaught_exception_under_python_m_mpi4py_aborts_the_job(n, tmp_path):
    prog = tmp_path / "boom.py"
    prog.write_text(BOOM)
    t = time.monotonic()
    rc, out, err = _commrun(n, "--mpi4py", "-m", "mpi4py", prog, timeout=60)
    took = time.monotonic() - t
    assert rc != 0 and "never here" not in out
    assert "ValueError: rank 1 gives up" in out + err and "MPI_Abort was called on rank 1" in out + err, out + err
    assert took < 30, f"the job took {took:.1f} s to end"


def test_without_the_flag_the_stand_in_is_never_imported(tmp_path):
    """The stand-in shadows nothing unless asked for: without --mpi4py, `import mpi4py` is whatever
    this Python has (a real mpi4py, or none)."""
    prog = tmp_path / "which.py"
    prog.write_text("try:\n    import mpi4py\n    print('which', getattr(mpi4py, 'STANDIN', 'real'))\n"
                    "except ImportError:\n    print('which none')\n")
    rc, out, err = _commrun(2, prog, timeout=60)
    assert rc == 0 and out.count("which ") == 2 and "which True" not in out, out + err
