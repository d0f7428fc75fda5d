"""Shared test set-up: tests import the source tree (commlib from the repo, commrun from launcher/)."""
import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# launcher/ is installed as the package `commrun`; give the source tree that name too.
if "commrun" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "commrun", REPO / "launcher" / "__init__.py", submodule_search_locations=[str(REPO / "launcher")]
    )
    sys.modules["commrun"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["commrun"])


import collections  # noqa: E402
import compileall  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

import _slots  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: the edit loop's slice of the suite (`pytest -m quick`, ~2 minutes)")
    _slots.configure(config)
    _compile(config)


def _compile(config):
    """Byte-compile the source tree once (in xdist's controller): every job starts one interpreter
    a rank, and where PYTHONDONTWRITEBYTECODE is set (or the tree is not writable) each of them
    compiled commlib from source again, about 120 ms of CPU a rank (0.9 s against 0.65 s for a
    4-rank job on 2 cores). Python reads the caches whatever that variable says."""
    if hasattr(config, "workerinput"):
        return
    for part in ("commlib", "launcher", "tests"):
        compileall.compile_dir(str(REPO / part), quiet=1)


# The quick tier (`pytest -m quick`, about 2 minutes on 2 cores): every unit test, the batched multi-rank
# checks of these case files at 2 ranks over shared memory, and these whole files of the other suites.
QUICK_CASES = {"all_reduce.py", "collectives.py", "mpi_coll.py", "mpi_comm.py", "mpi_p2p.py", "nonblocking.py",
               "p2p_programs.py", "mpi_layer.py"}
QUICK_FILES = {"tests/multirank/test_batch_harness.py", "tests/launcher/test_commrun.py", "tests/faults/test_abort.py"}


def _quick(item):
    path = pathlib.Path(str(item.fspath)).relative_to(REPO).as_posix()
    if path.startswith("tests/unit/") or path in QUICK_FILES:
        return True
    batch = item.get_closest_marker("batch")
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (batch is not None and batch.kwargs["case"] in QUICK_CASES and not (batch.kwargs.get("env") or {}).get(
        "COMMLIB_TRANSPORT") and params.get("n") == 2 and params.get("transport") == "shm")


# The one setting every limit of the suite scales with: pytest-timeout's here, and the jobs', commlib's
# waits in them, a batched check's deadline and the fault suite's waits (multirank/_harness.py,
# faults/faultlib.py, multirank/cases/_batch.py: read here in _waiting.py, and in the ranks by _batch.py).
# Raise it on a machine slower or busier than 2 cores.
from _waiting import SCALE  # noqa: E402


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    _slots.order(items, REPO)
    for item in items:
        if _quick(item):
            item.add_marker(pytest.mark.quick)
        if SCALE != 1:
            mark = item.get_closest_marker("timeout")
            limit = float(mark.args[0] if mark and mark.args else mark.kwargs.get("timeout", 0) if mark
                          else config.getini("timeout") or 0)
            if limit:
                item.add_marker(pytest.mark.timeout(limit * SCALE), append=False)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker a core up to 4, and one more for the tests that wait (_slots.py) where they run:
    not in the quick tier, where a third worker's collecting alone costs more than it gains (65 s -> 80-95 s on
    2 cores). Each test's job runs 2-8 ranks of its own: more computing tests than cores only share the cores
    and stretch the tests that bound a failure's time."""
    quick = (config.getoption("markexpr", "") or "").strip() == "quick"
    return _slots.slot_count() + (0 if quick else 1)


_SHM = pathlib.Path("/dev/shm")


def _commlib_segments():
    try:
        return {p.name for p in _SHM.iterdir() if "commlib" in p.name}
    except OSError:  # no /dev/shm here
        return set()


@pytest.fixture(autouse=True)
def no_segment_left_behind():
    """Shared memory lives in memfds passed between ranks, never named in /dev/shm: a test that
    leaves a commlib segment there (a rank killed mid-transfer included) fails."""
    before = _commlib_segments()
    yield
    left = _commlib_segments() - before
    deadline = time.monotonic() + 2.0
    while left and time.monotonic() < deadline:  # a name another worker's job has for a moment (Win.Allocate_shared's
        time.sleep(0.05)                          # fallback, tested in cases/mpi_rma.py) goes; one left behind stays
        left &= _commlib_segments()
    assert not left, f"left in /dev/shm by this test: {sorted(left)} (pid {os.getpid()})"


_FIGURES = {}  # name -> values: figures the fault suite's tests measured (tests/faults/conftest.py)
_BATCH_JOBS = []  # (seconds, description, checks) of each batched multi-rank job (tests/multirank/_harness.py)


_CPU_START = pytest.StashKey[float]()
_CPU_BY_FILE = collections.Counter()  # test file -> CPU seconds its items cost (the budget is CPU: 2 cores)
# A test above SLOW_S says why in its docstring (a figure of its time: "Over 20 s (about 40 s on 2
# cores): ..."); those that do not are listed at the end of the run.
SLOW_S = 20
_SAYS_WHY = re.compile(r"\d+(\.\d+)?\s*(s|seconds?|minutes?)\b|minute")
_SLOW_UNEXPLAINED = []


def _cpu_seconds():
    """CPU seconds of this process and of the children it has reaped (a job's commrun and, through
    it, the ranks): what one test costs the machine, whatever the other worker was doing meanwhile."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's: waiting for a slot is not the test's time
def pytest_runtest_protocol(item, nextitem):
    slot = _slots.acquire(item)
    try:
        item.stash[_CPU_START] = _cpu_seconds()
        yield
    finally:
        _slots.release(slot)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and _CPU_START in item.stash:  # before the report copies the properties
        item.user_properties.append(("cpu-s", round(_cpu_seconds() - item.stash[_CPU_START], 2)))
    if call.when == "call" and call.duration > SLOW_S * SCALE and not _SAYS_WHY.search(
            getattr(getattr(item, "function", None), "__doc__", None) or ""):
        item.user_properties.append(("slow-unexplained", round(call.duration, 1)))
    yield


def pytest_runtest_logreport(report):
    if report.when != "teardown":  # the last report of an item holds every property it was given, once
        return
    for key, value in report.user_properties:
        if key == "cpu-s":
            _CPU_BY_FILE[report.nodeid.split("::")[0]] += value
        elif key == "slow-unexplained":
            _SLOW_UNEXPLAINED.append((value, report.nodeid))
        elif key == "fault-figure":
            name, figure = value
            _FIGURES.setdefault(name, []).append(figure)
        elif key == "batch-job":
            _BATCH_JOBS.append(value)


def pytest_terminal_summary(terminalreporter):
    if _SLOW_UNEXPLAINED:
        terminalreporter.section(f"over {SLOW_S * SCALE:g} s without a docstring that says why")
        for seconds, nodeid in sorted(_SLOW_UNEXPLAINED, reverse=True):
            terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")
    if _CPU_BY_FILE:
        terminalreporter.section("CPU seconds by file")
        terminalreporter.write_line(f"{sum(_CPU_BY_FILE.values()):.0f} CPU-s in all (tests and their jobs); "
                                    f"the costliest files:")
        for path, seconds in _CPU_BY_FILE.most_common(25):
            terminalreporter.write_line(f"{seconds:8.1f}  {path}")
    if _BATCH_JOBS:
        jobs = sorted(_BATCH_JOBS, reverse=True)
        terminalreporter.section("batched multi-rank jobs")
        terminalreporter.write_line(f"{len(jobs)} jobs ran {sum(j[2] for j in jobs)} checks in "
                                    f"{sum(j[0] for j in jobs):.0f} s; the slowest:")
        for seconds, what, checks in jobs[:10]:
            terminalreporter.write_line(f"{seconds:7.1f} s  {what} ({checks} checks)")
    if not _FIGURES:
        return
    terminalreporter.section("fault-suite figures")
    for name, values in _FIGURES.items():
        for v in values:
            terminalreporter.write_line(f"{name}: {v}")
