"""Helpers of the multi-rank suite (exposed as fixtures by conftest.py): run a case script through the real `commrun`.

A case (cases/*.py) is a rank program whose exit code is the verdict; each
rank prints `rank R: K checks ok [...]` when every check passed. `run()`
starts `python -m commrun -n N case.py SEED ...` in its own process group,
kills the whole group if it outlives its timeout, and returns
(returncode, stdout, stderr). COMMLIB_TIMEOUT is 60 s (times COMMLIB_TEST_TIMEOUT_SCALE) unless a test says
otherwise, so a hang inside commlib surfaces as CommTimeout long before the
test's own timeout.
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

# The one setting every limit of the suite scales with (pytest-timeout's, the jobs', commlib's waits in them,
# a batched check's deadline, the fault suite's waits): raise it on a machine slower or busier than 2 cores.
from _waiting import SCALE

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
    env["COMMLIB_TIMEOUT"] = str(60 * SCALE)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _spawn(argv, env, timeout, cwd=CASES):
    """Run argv in its own process group, killed whole past `timeout` (times SCALE) seconds:
    (returncode, stdout, stderr, None or why it was killed)."""
    timeout *= SCALE
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, None
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        try:  # a process that left the tree (a new session, its parent dead) may still hold the pipes
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired as e:  # what it had read so far, then give up on the pipes
            out, err = (x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.output, e.stderr))
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            proc.wait()
        return proc.returncode, out, err, f"did not finish within {timeout:.0f} s (process tree killed)"


def _kill_tree(pid):
    """SIGKILL `pid`'s process group and every descendant's, found before any dies (torchrun's
    workers, for one, run in sessions of their own; a group takes every process in it)."""
    import psutil
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    groups = {pid}
    for q in descendants:
        try:
            groups.add(os.getpgid(q.pid))
        except ProcessLookupError:
            continue
    for g in groups - {os.getpgid(0)}:  # (never the test's own group)
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def _communicate(argv, env, timeout, cwd=CASES):
    rc, out, err, killed = _spawn(argv, env, timeout, cwd)
    if killed:
        pytest.fail(f"{' '.join(argv[1:])} {killed}\n"
                    f"--- stdout (tail)\n{_tail(out)}\n--- stderr (tail)\n{_tail(err)}")
    return rc, out, err


# commrun's options for the jobs whose every rank imports torch (about 1.5 s of CPU each on 2 cores): the
# ranks are forked from a commrun that imported torch once. Torch under exec'd ranks, as most users start
# it, stays covered by the docs' torch blocks, the fault tests' torch cases, torchrun and Ray.
TORCH_FORKED = ("--fork", "--preload", "torch")
# commrun's options for batched case files (a job of checks, not a user's program): the ranks are forked from a
# commrun that imported NumPy and commlib once (about 0.17 CPU-s a rank less on 2 cores). Exec'd ranks, as users
# start them, are what every other multi-rank test runs.
FORKED = ("--fork",)


def run(n, script, *args, env=None, timeout=120, seed=SEED, options=()):
    """commrun [OPTIONS] -n N cases/SCRIPT SEED ARGS...; returns (returncode, stdout, stderr)."""
    argv = [sys.executable, "-m", "commrun", *options, "-n", str(n), os.path.join(CASES, script), str(seed),
            *map(str, args)]
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


# ---- batched case files (cases/_batch.py): one job per (case file, n, transport), an item per check

_JOBS = {}  # key -> BatchJob, in this pytest process (xdist --dist loadfile keeps a file's items together)
SELECTED = {}  # key -> names of the checks this session runs (conftest's pytest_collection_finish)


class BatchJob:
    """One `commrun -n N _batch.py CASE ...` job and what each rank reported of each check."""

    def __init__(self, case, n, names, env, timeout, tmp, options=()):
        report_dir = tmp / f"{os.path.splitext(case)[0]}-n{n}-{os.environ.get('COMMLIB_TRANSPORT', '')}"
        report_dir.mkdir(parents=True, exist_ok=True)
        self.case, self.n, self.names = case, n, list(names)
        self.command = " ".join(["commrun", *options, "-n", str(n), "_batch.py", case])  # as the report names it
        argv = [sys.executable, "-m", "commrun", *options, "-n", str(n), os.path.join(CASES, "_batch.py"), case,
                str(SEED), str(report_dir), *self.names]
        t0 = time.monotonic()
        self.rc, self.out, self.err, killed = _spawn(argv, base_env(env), timeout)
        self.killed = killed and f"the job {killed}"
        self.seconds = time.monotonic() - t0
        self.records = {}  # rank -> list of records
        for r in range(n):
            path = report_dir / f"rank{r}.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            self.records[r] = [json.loads(line) for line in lines if line.strip()]

    def _context(self):
        return (f"--- job: {self.command} (seed {SEED}), exit code {self.rc}, "
                f"{self.seconds:.1f} s{'; ' + self.killed if self.killed else ''}\n"
                f"--- stdout (tail)\n{_tail(self.out)}\n--- stderr (tail)\n{_tail(self.err)}")

    def verdict(self, name):
        """Fail (pytest.fail) unless every rank reported `name` passed; the message names the ranks."""
        problems, ended = [], []
        for r in range(self.n):
            recs = self.records[r]
            end = next((x for x in recs if x.get("check") == name and x["event"] in ("end", "hung")), None)
            started = any(x.get("check") == name and x["event"] == "start" for x in recs)
            if end is None:
                last = next((x["check"] for x in reversed(recs) if x["event"] == "start"), None)
                if started:
                    problems.append(f"rank {r}: started, never ended (the job ended: {self.killed or 'rank died'})")
                else:
                    ended.append(f"rank {r}: not run (the job ended in check {last!r})" if last else
                                 f"rank {r}: not run (the rank reported nothing: it failed before its first check)")
                continue
            if end["event"] == "hung":
                problems.append(f"rank {r}: hung: {end['error']}\n{end['stacks']}")
                continue
            for f in end["failures"][:_batch_max_reported()]:
                problems.append(f"rank {r}: {f}")
            if len(end["failures"]) > _batch_max_reported():
                problems.append(f"rank {r}: ... {len(end['failures'])} failures in all")
            if end.get("raised"):
                problems.append(f"rank {r}: raised\n{end['raised']}")
            if end.get("lost"):
                problems.append(f"rank {r}: {end['lost']} (later checks were not run)")
        if problems or ended:
            pytest.fail(f"{self.case} check {name} at n={self.n}:\n" + "\n".join(problems + ended) + "\n"
                        + self._context(), pytrace=False)


def _batch_max_reported():
    return int(os.environ.get("MULTIRANK_MAX_REPORTED", "30"))


def checks_of(case):
    """The checks of cases/CASE (_batch.py --list, run in a plain process: importing a case may start
    commlib, which the pytest process must not); kept in a temporary file while the case, the runner
    and the checkers are unchanged."""
    path = os.path.join(CASES, case)
    stamp = zlib.crc32(repr([(os.stat(p).st_mtime_ns, os.stat(p).st_size) for p in
                             [path] + [os.path.join(CASES, f) for f in ("_batch.py", "_common.py", "_mpicase.py")]]
                            ).encode())
    cache = pathlib.Path(tempfile.gettempdir()) / f"commlib-batch-lists-{os.getuid()}" / f"{case}-{stamp:08x}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    p = subprocess.run([sys.executable, os.path.join(CASES, "_batch.py"), "--list", path], env=base_env(),
                       cwd=CASES, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"cannot list the checks of {case}: exit code {p.returncode}\n{_tail(p.stderr)}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(p.stdout)
    os.replace(tmp, cache)
    return json.loads(p.stdout)


def _applies(spec, n):
    if spec["ns"] is not None:
        return n in spec["ns"]
    return spec["min_n"] <= n and (spec["max_n"] is None or n <= spec["max_n"])


def batch_key(item):
    """(case, n, transport, env) of a batched item: the items of one key share a job."""
    mark, p = item.get_closest_marker("batch"), item.callspec.params
    return mark.kwargs["case"], p["n"], p.get("transport", ""), tuple(sorted((mark.kwargs["env"] or {}).items()))


def batched(case, ns, *, env=None, only=None, timeout=600, doc=None, options=FORKED):
    """A test function with an item per (n, check) of cases/CASE; the checks of one (n, transport) run in
    one job, started by the first of its items this process runs. `only`: the checks (names, or their
    functions' names) to take, where not all that apply at those sizes. `timeout` bounds the job (and the
    item that starts it); each check's own deadline is its `timeout` in the case file. `options`:
    commrun's (TORCH_FORKED)."""
    specs = checks_of(case)
    if only is not None:
        specs = [s for s in specs if s["name"] in only or s["function"] in only]
    params = [pytest.param(n, s["name"], id=f"{n}-{s['name']}") for n in ns for s in specs if _applies(s, n)]
    if not params:
        raise ValueError(f"{case}: no check applies at n in {ns}" + (f" among {only}" if only else ""))

    @pytest.mark.batch(case=case, env=env)
    @pytest.mark.timeout(timeout + 30)
    @pytest.mark.parametrize("n,check", params)
    def test(n, check, request, tmp_path_factory):
        key = batch_key(request.node)
        job = _JOBS.get(key)
        if job is None:
            names = SELECTED.get(key) or [check]
            job = _JOBS[key] = BatchJob(case, n, names, env, timeout, tmp_path_factory.mktemp("batch"), options)
            request.node.user_properties.append(("batch-job", (round(job.seconds, 1), f"{case} n={n} {key[2]}"
                                                 + "".join(f" {k}={v}" for k, v in key[3]), len(names))))
        job.verdict(check)

    test.__doc__ = ((doc or f"Each check of cases/{case}, at each group size.")
                    + "\n\nThe first item of a job runs the whole job: its time (over 20 s for some) is the job's.")
    return test


_EXAMPLE_MARK = re.compile(r"^\[(\d+)\] EXAMPLE (\S+)$")
_RANK_LINE = re.compile(r"^\[(\d+)\] (.*)$")


def examples_job(n, paths, env, timeout, options=(), cwd=CASES):
    """Run the example programs `paths` one after another in one `commrun [OPTIONS] -n N` job
    (cases/run_examples.py: each as __main__, as `python EXAMPLE` would). (exit code, {example file
    name: [(rank, line)] of what its ranks printed}, {example file name: [why it failed, per rank that
    failed]}, stdout, stderr); where the job ran past `timeout` the stderr part ends saying so (the
    examples it never reached are missing from what was printed)."""
    argv = [sys.executable, "-m", "commrun", *options, "-n", str(n), os.path.join(CASES, "run_examples.py"), *paths]
    rc, out, err, killed = _spawn(argv, base_env(env), timeout, cwd)
    if killed:
        err = f"{err}\nthe job {killed}"
    printed, failed, current = {}, {}, {}
    for line in out.splitlines():
        m = _EXAMPLE_MARK.match(line)
        if m:
            current[int(m.group(1))] = m.group(2)
            printed.setdefault(m.group(2), [])
            continue
        m = _RANK_LINE.match(line)
        if not m or int(m.group(1)) not in current:
            continue
        rank, text, name = int(m.group(1)), m.group(2), current[int(m.group(1))]
        if text.startswith(f"EXAMPLE-FAILED {name}:"):
            failed.setdefault(name, []).append(f"rank {rank}: {text}")
        printed[name].append((rank, text))
    return rc, printed, failed, out, err

