"""Helpers of the multi-rank suite (exposed as fixtures by conftest.py): run a case script through the real `commrun`.

A case (cases/*.py) is a rank program whose exit code is the verdict; each
rank prints `rank R: K checks ok [...]` when every check passed. `run()`
starts `python -m commrun -n N case.py SEED ...` in its own process group,
kills the whole group if it outlives its timeout, and returns
(returncode, stdout, stderr). COMMLIB_TIMEOUT is 60 s unless a test says
otherwise, so a hang inside commlib surfaces as CommTimeout long before the
test's own timeout.
"""
import os
import re
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
REPO = os.path.dirname(os.path.dirname(HERE))
SEED = int(os.environ.get("MULTIRANK_SEED", "20240"))
# Settings a developer may have exported that would change what a case exercises.
_SCRUB = ("COMMLIB_ALGO_", "COMMLIB_CHUNK_BYTES", "COMMLIB_SPIN_US", "COMMLIB_RANK", "COMMLIB_SIZE",
          "COMMLIB_COORDINATOR", "COMMLIB_SECRET", "COMMLIB_LOCAL_", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK",
          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_", "PMIX_", "PMI_", "MPI_LOCAL", "PET_",
          "JOB_COMPLETION_INDEX")


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env["COMMLIB_TIMEOUT"] = "60"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _communicate(argv, env, timeout, cwd=CASES):
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv[1:])} did not finish within {timeout} s (process group killed)\n"
                    f"--- stdout (tail)\n{_tail(out)}\n--- stderr (tail)\n{_tail(err)}")
    return proc.returncode, out, err


def run(n, script, *args, env=None, timeout=120, seed=SEED):
    """commrun -n N cases/SCRIPT SEED ARGS...; returns (returncode, stdout, stderr)."""
    argv = [sys.executable, "-m", "commrun", "-n", str(n), os.path.join(CASES, script), str(seed), *map(str, args)]
    return _communicate(argv, base_env(env), timeout)


def run_plain(script, *args, env=None, timeout=60, seed=SEED):
    """The case as a plain `python` process: no launcher environment at all."""
    argv = [sys.executable, os.path.join(CASES, script), str(seed), *map(str, args)]
    return _communicate(argv, base_env(env), timeout)


def _tail(text, lines=60):
    return "\n".join((text or "").splitlines()[-lines:])


def assert_ranks_ok(result, n, what=""):
    """The job exited 0 and every rank printed its `checks ok` summary."""
    rc, out, err = result
    ok = set(int(r) for r in re.findall(r"rank (\d+): \d+ checks ok", out))
    failures = [line for line in out.splitlines() if "FAIL" in line][:40]
    if rc != 0 or ok != set(range(n)):
        pytest.fail(f"{what} (n={n}, seed={SEED}): exit code {rc}, ranks reporting ok: {sorted(ok)}\n"
                    + ("--- failed checks\n" + "\n".join(failures) + "\n" if failures else "")
                    + f"--- stdout (tail)\n{_tail(out)}\n--- stderr (tail)\n{_tail(err)}")


def rank_lines(out, marker):
    """{rank: text after `marker`} for lines like `[R] MARKER rank R ...`."""
    found = {}
    for line in out.splitlines():
        m = re.search(re.escape(marker) + r" rank (\d+)(.*)", line)
        if m:
            found[int(m.group(1))] = m.group(2)
    return found
