"""commlib's stand-in mpi4py package, imported from the directory `python -m commlib.MPI --path` prints."""
import os
import subprocess
import sys

import pytest

from commlib.MPI.__main__ import STANDIN


def _python(code, *extra_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([STANDIN, *extra_path, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_path_is_printed_and_holds_the_package():
    out = subprocess.run([sys.executable, "-m", "commlib.MPI", "--path"], capture_output=True, text=True,
                         timeout=60).stdout.strip()
    assert out == STANDIN and os.path.isfile(os.path.join(out, "mpi4py", "__init__.py"))


def test_the_stand_in_top_level():
    p = _python(
        "import mpi4py, commlib.MPI\n"
        "from mpi4py import MPI\n"
        "assert MPI is commlib.MPI and mpi4py.MPI is MPI and mpi4py.STANDIN\n"
        "assert mpi4py.__version__ == '4.1.2' and 'commlib' in mpi4py.get_config()\n"
        "mpi4py.rc(initialize=False, thread_level='serialized')\n"
        "assert mpi4py.rc.thread_level == 'serialized'\n"
        "for bad in (lambda: mpi4py.rc(bogus=1), mpi4py.get_include, lambda: mpi4py.profile('mpe')):\n"
        "    try:\n        bad()\n    except (TypeError, RuntimeError) as e:\n        print('refused:', e)\n"
        "import mpi4py.util.sync, mpi4py.util.pool, commlib.MPI.util.sync, commlib.MPI.util.pool\n"
        "assert mpi4py.util.sync is commlib.MPI.util.sync and mpi4py.util.pool is commlib.MPI.util.pool\n"
        "from mpi4py.util import pkl5\n"
        "import commlib.MPI.util.pkl5 as ours\n"
        "assert pkl5 is ours and isinstance(pkl5.Intracomm(MPI.COMM_SELF), MPI.Intracomm)\n"
        "import mpi4py.futures, commlib.MPI.futures\n"
        "assert mpi4py.futures is commlib.MPI.futures and mpi4py.futures.MPIPoolExecutor\n"
        "print('pkl5 ok')\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("refused:") == 3 and "unexpected argument 'bogus'" in p.stdout
    assert "pkl5 ok" in p.stdout


@pytest.mark.parametrize("argv, want", [
    (["prog.py", "a"], ("path", "prog.py", ["prog.py", "a"])),
    (["-m", "pkg.mod", "x"], ("module", "pkg.mod", ["pkg.mod", "x"])),
    (["-c", "print(1)", "y"], ("command", "print(1)", ["-c", "y"])),
    (["--rc", "threads=false", "--rc", "irecv_bufsz=64", "prog.py"], ("path", "prog.py", ["prog.py"])),
])
def test_python_m_mpi4py_reads_its_command_line_as_mpi4py_does(argv, want):
    p = _python(f"from mpi4py import run, rc\nprint(run._parse({argv!r}) == {want!r}, rc.threads, rc.irecv_bufsz)")
    assert p.returncode == 0, p.stderr
    ok, threads, bufsz = p.stdout.split()
    assert ok == "True"
    if "--rc" in argv:
        assert (threads, bufsz) == ("False", "64")


@pytest.mark.parametrize("argv, error", [([], "usage:"), (["--bogus", "x"], "unknown option"),
                                         (["--rc", "nokeyvalue", "p.py"], "key=value"), (["-m"], "usage:")])
def test_python_m_mpi4py_refuses_a_bad_command_line(argv, error):
    p = _python(f"from mpi4py import run\nrun._parse({argv!r})")
    assert p.returncode != 0 and error in p.stderr
