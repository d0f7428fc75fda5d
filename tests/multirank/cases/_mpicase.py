"""Shared helper of the mpi*.py case scripts: which MPI module, and a Checker.

COMMLIB_TEST_MPI=mpi4py selects the real mpi4py (to validate a case against
a reference MPI under mpirun); anything else selects commlib.MPI (under commrun).
"""
import os
import sys
import traceback

import numpy as np

import _batch

USING_MPI4PY = os.environ.get("COMMLIB_TEST_MPI", "") == "mpi4py"
if USING_MPI4PY:
    from mpi4py import MPI  # noqa: F401
else:
    from commlib import MPI  # noqa: F401


class Checker:
    """Collects checks; prints `FAIL rank R label: msg` per failure and `rank R: K checks ok` at the end."""

    def __init__(self, comm=None):
        self.rank = (comm if comm is not None else MPI.COMM_WORLD).Get_rank()
        self.count = 0
        self.failed = 0
        self.sink = _batch.running()  # the check of a batched job (_batch.py) this one records into, if any

    def into(self, check, fn):
        """Run section fn() as the batched check `check` (a _common.Check): its checks count there."""
        self.sink = check
        try:
            fn()
        finally:
            self.sink = None

    def ok(self, cond, label, msg=""):
        self.count += 1
        if self.sink is not None:
            return self.sink.ok(cond, label, msg or "check failed")
        if not cond:
            self.failed += 1
            print(f"FAIL rank {self.rank} {label}: {msg or 'check failed'}", flush=True)
        return bool(cond)

    def equal(self, got, want, label):
        if isinstance(got, np.ndarray) or isinstance(want, np.ndarray):
            same = np.shape(got) == np.shape(want) and bool(np.array_equal(got, want))
        else:
            same = got == want
        return self.ok(same, label, f"got {got!r}, want {want!r}")

    def close(self, got, want, label, rtol=1e-12, atol=1e-12):
        """Floating-point comparison with tolerances (shape must match)."""
        got, want = np.asarray(got), np.asarray(want)
        same = got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol))
        return self.ok(same, label, f"got {got!r}, want {want!r}")

    def raises(self, exc, fn, label, check=None):
        """fn() must raise `exc` (a class or tuple); `check(e)` may add its own checks. Returns the exception."""
        try:
            fn()
        except exc as e:  # noqa: B902 - the expected class
            self.ok(True, label)
            if check is not None:
                check(e)
            return e
        except Exception as e:
            self.ok(False, label, f"raised {type(e).__name__}: {e}, want {exc}")
        else:
            self.ok(False, label, f"no exception, want {exc}")
        return None

    def run(self, sections):
        """Call each section; an exception fails that section (with the line in the case) and the next runs."""
        for fn in sections:
            try:
                fn()
            except Exception as e:
                frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == sys.argv[0]
                          or os.path.basename(f.filename).startswith("mpi_")]
                where = f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
                self.ok(False, fn.__name__, f"raised {type(e).__name__}: {e}{where}")

    def finish(self):
        if self.sink is not None:  # a rank program run whole as a batched check: its runner reports
            return
        if self.failed:
            print(f"rank {self.rank}: {self.failed} of {self.count} checks FAILED", flush=True)
            sys.stdout.flush()
            sys.exit(1)
        print(f"rank {self.rank}: {self.count} checks ok", flush=True)
