"""Batched case files: one `commrun` job runs many checks and reports each one on its own.

A batched case file defines check functions with the `check` decorator and does nothing else at
import (no collective, no `cl.init()`):

    from _batch import check

    @check
    def all_gather_every_dtype(c):          # c: a Check (see below), fresh for each check
        ...c.equal(cl.all_gather(x, group=c.g), want, "label")...

    @check(params=["ring", "doubling"], min_n=2, env=lambda algo: {"COMMLIB_ALGO_ALL_REDUCE": algo})
    def forced(c, algo): ...                # checks "forced[ring]" and "forced[doubling]"

The job is `commrun -n N _batch.py CASE.py SEED REPORT_DIR [NAME ...]` (every check that applies
at N when no name is given). Every rank runs the named checks in the case file's order. Around each
one it writes JSON lines to REPORT_DIR/rank<R>.jsonl: `start`, then `end` with the check's
failures, its traceback if it raised, and its time; the pytest side (tests/multirank/_batch_jobs.py)
turns them into one test item per check.

Between two checks the ranks exchange their outcomes on a control group (a sub-group of the world
that no check touches): the results every rank recorded with `c.equal` must be bit-identical
across ranks. A check whose exception left some ranks behind (it raised on some ranks and not on
others) has lost the collective schedule: it is reported, and the job stops with every later
check reported "not run". A check that outlives its deadline (`timeout`, scaled by
COMMLIB_TEST_TIMEOUT_SCALE) writes `hung` with every thread's stack and ends the rank, so the
launcher stops the job: it names itself instead of holding the job until the test's own timeout.

A check with `env` runs with those variables set and a fresh group `c.g` made after them (so a
group-level choice such as a forced algorithm or COMMLIB_CHUNK_BYTES takes effect), then the
variables are restored.
"""
import contextlib
import importlib.util
import json
import os
import runpy
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

SCALE = float(os.environ.get("COMMLIB_TEST_TIMEOUT_SCALE") or 1)
DEFAULT_TIMEOUT = 120.0  # seconds a check may take before it counts as hung (times SCALE)
EXIT_HUNG = 70  # a rank's exit code when one of its checks outlived its deadline


class Spec:
    """One check of a case file: its function, parameter and where it applies."""

    def __init__(self, fn, param, has_param, min_n, max_n, ns, env, timeout, order):
        self.fn, self.param, self.has_param = fn, param, has_param
        self.min_n, self.max_n, self.ns = min_n, max_n, ns
        self.env = env(param) if callable(env) else dict(env or {})
        self.timeout = timeout
        self.order = order
        self.name = f"{fn.__name__}[{param}]" if has_param else fn.__name__

    def applies(self, n):
        if self.ns is not None:
            return n in self.ns
        return self.min_n <= n and (self.max_n is None or n <= self.max_n)

    def run(self, c):
        return self.fn(c, self.param) if self.has_param else self.fn(c)


_REGISTRY = []
_running = []  # the Check being run (a rank program's checker made during it records there: running())


def running():
    """The batched check this process is running, or None (a standalone rank program)."""
    return _running[-1] if _running else None


def check(fn=None, *, params=None, min_n=1, max_n=None, ns=None, env=None, timeout=DEFAULT_TIMEOUT, name=None):
    """Register fn(c) (or fn(c, param) for each of `params`) as checks of this case file.

    min_n/max_n: the group sizes it runs at (or ns, a list of them); env: variables (a dict, or a function of the
    parameter returning one) set while it runs, on a fresh group; timeout: seconds before it
    counts as hung (times COMMLIB_TEST_TIMEOUT_SCALE); name: the check's name (default: fn's).
    """
    def register(f):
        for p in (params if params is not None else [None]):
            spec = Spec(f, p, params is not None, min_n, max_n, ns, env, timeout, len(_REGISTRY))
            if name is not None:
                spec.name = f"{name}[{p}]" if params is not None else name
            _REGISTRY.append(spec)
        return f
    return register(fn) if fn is not None else register


def script(filename, *args, **options):
    """Register the rank program cases/FILENAME, run whole (as `python FILENAME SEED ARGS...` would) as
    one check named after it: what its checker records counts there, its finish() returns instead of
    exiting, and a non-zero exit fails the check. `options` are check()'s."""
    path = os.path.join(HERE, filename)

    def run(c):
        saved = sys.argv
        sys.argv = [path, str(c.seed), *map(str, args)]
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as err:
            if err.code not in (0, None):
                c.fail("exit", f"{filename} exited with {err.code!r}")
        finally:
            sys.argv = saved
    run.__name__ = os.path.splitext(filename)[0]
    check(**options)(run)


def sections(parts, checker):
    """Register the sections of a case written as `PARTS = {part: [fn, ...]}` (fn() checks through
    `checker`, an _mpicase.Checker or a _common.Checker): each section is a check named "PART.FN",
    what it checks recorded in the running check's results."""
    for part, fns in parts.items():
        for fn in fns:
            check(name=f"{part}.{fn.__name__}")(lambda c, fn=fn: checker.into(c, fn))


def parts(named, make_checker, ns=None, **options):
    """Register each part of a case written as `PARTS = {name: part}` (part(checker) checks through a
    checker with into(), as _common.Checks has) as a check named NAME. The checker, and whatever
    make_checker() sets up with it (a process group), is made once, by the first check that runs.
    ns: {name: group sizes} where a part runs at some only; `options` are check()'s."""
    made = []

    def as_check(part):
        def run(c):
            if not made:
                made.append(make_checker())
            made[0].into(c, lambda: part(made[0]))
        return run
    for name, part in named.items():
        check(name=name, **({"ns": ns[name]} if ns and name in ns else {}), **options)(as_check(part))


def load(path, seed=0):
    """The checks of the case file at `path`, in file order (importing it registers them). A case
    that reads its seed as sys.argv[1], as a standalone rank program does, finds `seed` there."""
    del _REGISTRY[:]
    sys.argv = [path, str(seed)]
    name = "_batchcase_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    found = list(_REGISTRY)
    names = [s.name for s in found]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise ValueError(f"{path}: checks registered twice: {dup}")
    return found


class Report:
    """This rank's JSON-lines report, flushed line by line (a killed job keeps what was written)."""

    def __init__(self, directory, rank):
        self.f = open(os.path.join(directory, f"rank{rank}.jsonl"), "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **record):
        with self.lock:
            self.f.write(json.dumps(record) + "\n")
            self.f.flush()
            os.fsync(self.f.fileno())


def _stacks():
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"--- thread {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
                     for ident, frame in frames.items() if ident != threading.get_ident())


class Watchdog:
    """Ends the rank when the running check outlives its deadline, after reporting it as hung."""

    def __init__(self, report):
        self.report = report
        self.cond = threading.Condition()
        self.current = None  # (name, deadline, seconds)
        threading.Thread(target=self._watch, name="batch-watchdog", daemon=True).start()

    def arm(self, name, seconds):
        with self.cond:
            self.current = (name, time.monotonic() + seconds, seconds)
            self.cond.notify()

    def disarm(self):
        with self.cond:
            self.current = None
            self.cond.notify()

    def _watch(self):
        with self.cond:
            while True:
                if self.current is None:
                    self.cond.wait()
                    continue
                name, deadline, seconds = self.current
                left = deadline - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                self.report.write(event="hung", check=name,
                                  error=f"still running after its deadline of {seconds:.0f} s", stacks=_stacks())
                print(f"check {name} hung: still running after {seconds:.0f} s; ending this rank", flush=True)
                os._exit(EXIT_HUNG)


def listing(path):
    """What the pytest side needs of each check, as JSON (printed by `_batch.py --list CASE`)."""
    return [{"name": s.name, "function": s.fn.__name__, "min_n": s.min_n, "max_n": s.max_n, "ns": s.ns}
            for s in load(path)]


def main(argv):
    if argv[0] == "--list":  # in a plain process: no launcher, so importing a case touches no peer
        print(json.dumps(listing(argv[1])))
        return
    import commlib as cl
    from _common import Check

    case, seed, report_dir, wanted = argv[0], int(argv[1]), argv[2], argv[3:]
    specs = load(case if os.path.isabs(case) else os.path.join(HERE, case), seed)
    world = cl.init()
    n, rank = world.size(), world.rank()
    known = {s.name: s for s in specs}
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"{case}: no check named {unknown}")
    todo = [known[w] for w in wanted] if wanted else [s for s in specs if s.applies(n)]
    todo.sort(key=lambda s: s.order)
    report = Report(report_dir, rank)
    report.write(event="plan", checks=[s.name for s in todo], size=n)
    dog = Watchdog(report)
    control = world.subgroup(list(range(n)), ("batch-control",))
    failed = 0
    for i, spec in enumerate(todo):
        report.write(event="start", check=spec.name)
        dog.arm(spec.name, spec.timeout * SCALE)
        with _variables(spec.env):
            c = Check(spec.name, world.subgroup(list(range(n)), ("batch", i)) if spec.env else world, seed)
            t0 = time.monotonic()
            raised, kind = _run(spec, c, cl.CommError)
            took = time.monotonic() - t0
        # Every rank's outcome, count and digests, on the control group (the check's own traffic cannot
        # be in its way): results must be bit-identical across ranks.
        try:
            everyone = cl.all_gather_obj((kind, [d for _, d in c.digests], c.checks), group=control)
            lost = _judge(c, everyone, raised)
        except Exception as err:
            lost = f"exchanging outcomes after the check failed: {type(err).__name__}: {err}"
        dog.disarm()
        report.write(event="end", check=spec.name, checks=c.checks, failures=c.failures, raised=raised,
                     seconds=round(took, 3), lost=lost)
        failed += bool(c.failures or raised or lost)
        if lost:
            report.write(event="stopped", after=spec.name)
            print(f"rank {rank}: stopping after {spec.name}: later checks not run", flush=True)
            cl.finalize()
            os._exit(1)
    report.write(event="done", failed=failed)
    cl.finalize()
    sys.exit(1 if failed else 0)


def _run(spec, c, comm_error):
    """Run one check: (its traceback or None, "comm" for a commlib error, "other", or None)."""
    _running.append(c)
    try:
        spec.run(c)
        return None, None
    except Exception as err:
        return "".join(traceback.format_exception(err)), "comm" if isinstance(err, comm_error) else "other"
    finally:
        _running.pop()


def _judge(c, everyone, raised):
    """Add to c what the ranks' outcomes (kind, digests, count) say; returns why the job cannot go on, or None.

    Nothing recorded on any rank is a failure (plumbing that lost the results would otherwise pass);
    so are results whose bytes differ across ranks. A check that raised on some ranks only, or raised a
    commlib error (a timeout, a lost peer, a mismatch: messages may be left behind), ends the job."""
    if raised is None and not any(k for _, _, k in everyone):
        c.fail("no result", "the check ran without recording a single result on any rank")
    if raised is None and len({len(d) for _, d, _ in everyone}) > 1:
        c.fail("digest count", f"ranks recorded {[len(d) for _, d, _ in everyone]} results")
    elif raised is None:
        for j, (label, mine) in enumerate(c.digests):
            c.checks += 1
            others = [r for r, (_, d, _) in enumerate(everyone) if d[j] != mine]
            if others:
                c.fail(label, f"result bytes differ across ranks (this rank differs from ranks {others})")
    raisers = [r for r, (kind, _, _) in enumerate(everyone) if kind]
    comm_error = any(kind == "comm" for kind, _, _ in everyone)
    if 0 < len(raisers) < len(everyone) or comm_error:
        return (f"the collective schedule may be lost: ranks {raisers} of {len(everyone)} raised"
                + (", a commlib error among them" if comm_error else ""))
    return None


@contextlib.contextmanager
def _variables(env):
    """os.environ with `env` set (and the COMMLIB_ALGO_* values commlib read forgotten), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _reset_choices()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reset_choices()


def _reset_choices():
    """Forget the COMMLIB_ALGO_* values commlib read (once a process) so the next group reads them again."""
    from commlib import _algorithms
    _algorithms._forced.clear()


if __name__ == "__main__":
    import _batch  # the module case files register with (this file runs as __main__, a module of its own)

    _batch.main(sys.argv[1:])
