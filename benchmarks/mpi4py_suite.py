"""mpi4py's own test suite against commlib.MPI, module by module, through the stand-in mpi4py.

    python benchmarks/mpi4py_suite.py TESTDIR [--n 1 2] [--timeout 120] [--only test_p2p_obj ...]
    python benchmarks/mpi4py_suite.py TESTDIR --mpiexec benchmarks/.env-mpich/bin/mpiexec \
        --python benchmarks/.env-mpich/bin/python        (the reference: real mpi4py on the MPICH wheel)

TESTDIR is the `test/` directory of mpi4py's source (the 4.1.2 sdist: `pip download --no-binary :all:
--no-deps mpi4py==4.1.2`, or the 4.1.2 tag of github.com/mpi4py/mpi4py); it is run where it lies,
never copied into this repository. Each module runs as `commrun -n N --mpi4py --timeout T
TESTDIR/runtests.py -v MODULE` (a hang ends at the timeout and counts as the module's failure); the
table gives, per module and n, the test methods unittest reports as passed, failed (failures and
errors) and skipped, from rank 0's verbose output, then the totals. --json PATH appends one line
per (module, n).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

_VERDICT = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b")


def _rank0(out):
    """Rank 0's own output: every chunk a launcher tagged `[k] ` put back in its rank's stream (Hydra's
    -prepend-rank tags each write, so one rank's line can be split by another's chunks)."""
    parts = re.split(r"\[(\d+)\] ", out)
    if len(parts) == 1:
        return out  # untagged: a one-rank run
    return "".join(chunk for rank, chunk in zip(parts[1::2], parts[2::2]) if rank == "0")


def run_module(testdir, module, n, timeout, mpiexec=None, python=None):
    if mpiexec:  # the reference run: that Python's own mpi4py under that MPI's launcher
        argv = [mpiexec, "-prepend-rank", "-n", str(n), python or sys.executable, os.path.join(testdir, "runtests.py"),
                "-v", module]  # Hydra tags each line with its rank, as commrun does
    else:
        argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py", "--timeout", str(timeout),
                os.path.join(testdir, "runtests.py"), "-v", module]
    t = time.monotonic()
    try:
        env = dict(os.environ, MPIEXEC_TIMEOUT=str(int(timeout)))  # Hydra's own limit on the job
        p = subprocess.run(argv, cwd=testdir, capture_output=True, text=True, timeout=timeout + 60, env=env)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace"), 124
    return {"module": module, "n": n, **count_verdicts(_rank0(out)), "rc": rc,
            "seconds": round(time.monotonic() - t, 1), "timed_out": rc == 124}


_LATE_VERDICT = re.compile(r"^(ok|FAIL|ERROR|skipped|expected failure|unexpected success)\b")


def count_verdicts(text):
    """{"passed", "failed", "skipped"} of unittest's verbose lines in `text` (rank 0's stream), each test
    once. A test's verdict may come on a later line than its name: whatever else writes to rank 0's
    stdout meanwhile (a spawned child shares it) ends the line `test_x (...) ... ` before its `ok`."""
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for counts in count_verdicts_by_module(text).values():
        for k in total:
            total[k] += counts[k]
    return total


def count_verdicts_by_module(text):
    """count_verdicts() for each test module whose tests `text` reports: {module: counts}."""
    by_module = {}
    seen, pending = set(), None
    for line in text.splitlines():
        m = re.match(r"^(test\w+) \(([\w.]+)\)", line)
        if m:
            v, key = _VERDICT.search(line), (m.group(1), m.group(2))
            pending = key if v is None and key not in seen else None
        elif pending is not None and (v := _LATE_VERDICT.match(line.strip())):
            key, pending = pending, None
        else:
            continue
        if v is None or key in seen:
            continue
        seen.add(key)
        word = v.group(1)
        counts = by_module.setdefault(key[1].split(".")[0], {"passed": 0, "failed": 0, "skipped": 0})
        counts["passed" if word in ("ok", "expected failure") else "skipped" if word == "skipped" else "failed"] += 1
    return by_module


def run_modules(testdir, modules, n, timeout, env=None):
    """Every module in one `commrun -n N --mpi4py runtests.py -v MODULE...` job (unittest's own way of
    running a suite): {"by_module": {module: counts}, "rc", "seconds", "timed_out", "last"}, where
    "last" is the last test rank 0 started (where a job that timed out was). `env`: the job's
    environment (default: this process's)."""
    argv = [sys.executable, "-m", "commrun", "-n", str(n), "--mpi4py", "--timeout", str(timeout),
            os.path.join(testdir, "runtests.py"), "-v", *modules]
    t = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=testdir, capture_output=True, text=True, timeout=timeout + 60, env=env)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace"), 124
    text = _rank0(out)
    started = re.findall(r"^(test\w+ \([\w.]+\))", text, re.M)
    return {"by_module": count_verdicts_by_module(text), "rc": rc, "seconds": round(time.monotonic() - t, 1),
            "timed_out": rc == 124, "last": started[-1] if started else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("testdir")
    p.add_argument("--n", type=int, nargs="+", default=[2])
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--json")
    p.add_argument("--mpiexec", help="run under this mpiexec with --python's own mpi4py instead of commlib")
    p.add_argument("--python", help="the Python of the --mpiexec run")
    a = p.parse_args()
    modules = sorted(os.path.basename(f)[:-3] for f in glob.glob(os.path.join(a.testdir, "test_*.py")))
    if a.only:
        modules = [m for m in modules if any(m.startswith(o) for o in a.only)]
    rows = []
    for module in modules:
        for n in a.n:
            r = run_module(a.testdir, module, n, a.timeout, a.mpiexec, a.python)
            rows.append(r)
            print(f"{module:24s} n={n}  passed {r['passed']:4d}  failed {r['failed']:4d}  skipped {r['skipped']:4d}"
                  f"  {r['seconds']:6.1f} s{'  (timed out)' if r['timed_out'] else ''}", flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    for n in a.n:
        sel = [r for r in rows if r["n"] == n]
        print(f"total n={n}: passed {sum(r['passed'] for r in sel)}, failed {sum(r['failed'] for r in sel)}, "
              f"skipped {sum(r['skipped'] for r in sel)}, modules timed out "
              f"{sum(r['timed_out'] for r in sel)} of {len(sel)}")


if __name__ == "__main__":
    main()
