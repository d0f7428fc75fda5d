"""The suite's share of the cores: a test that computes holds one of a core's slots while it runs; a
test marked `waits` (most of its time spent waiting on a shaped link, a timeout, a stopped rank:
under half a core) runs beside them without one.

Why: the suite runs a test's job of 2-8 ranks at a time on each xdist worker, a worker a core. A
test that waits 20 s on a 200 ms link or a 2 s timeout holds its worker, and a core idles: on the
2-core machine ~420 of the suite's ~2,500 worker-seconds are such waits (their items' CPU with
their children, junit's `cpu-s`, against their time). So the suite runs one worker more than it has
slots, and the computing tests still never outnumber the cores, so the timing of the tests that
bound a failure's detection is not stretched further than two workers stretch it.

Slots are files locked with flock in a directory the controller makes (COMMLIB_TEST_SLOTS); a
worker killed mid-test drops its lock with its descriptor. Without xdist there are no slots.

The order of files: longest first (xdist's loadfile hands each worker a whole file; a long file
that starts last is the run's tail). LONG_FILES holds the files above ~45 worker-seconds in order,
from a full run's junit times (benchmarks/RESULTS.md, "The test suite"); the others follow in the
order pytest collects them, the unit tests (many short items that fill the gaps) last.
"""
import fcntl
import os
import pathlib
import shutil
import tempfile
import time

from commrun.spawn import cpu_count

SLOTS_VAR = "COMMLIB_TEST_SLOTS"
WAIT_LIMIT_S = 3600  # a slot is always freed by the item holding it (each bounded by pytest-timeout)

LONG_FILES = (
    "tests/launcher/test_mpi4py_suite.py", "tests/multihost/test_bad_networks.py", "tests/multirank/test_ray.py",
    "tests/multihost/test_namespace_hosts.py", "tests/multirank/test_torch_programs.py",
    "tests/launcher/test_torch_suite.py", "tests/multihost/test_slurm.py", "tests/faults/test_deadlines.py",
    "tests/faults/test_early_exit.py", "tests/faults/test_torch_faults.py", "tests/launcher/test_docs_blocks.py",
    "tests/multirank/test_all_reduce.py", "tests/faults/test_mismatch_travel.py", "tests/multirank/test_log_step.py",
    "tests/multirank/test_collectives.py", "tests/faults/test_first_failure.py",
    "tests/faults/test_signals_resources.py",
)


def slot_count():
    """Computing tests at once: a core each (those this process may run on, as commrun counts them), up to 4
    (as many as xdist's workers were before)."""
    return max(1, min(cpu_count(), 4))


def configure(config):
    config.addinivalue_line("markers", "waits: a test that mostly waits (a link, a timeout, a stopped rank): it runs "
                                       "beside the computing tests instead of taking one of the cores' slots; "
                                       "waits(False) on a test of a module so marked takes a slot")
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return  # a worker inherits the controller's directory; no xdist, no slots
    slots = tempfile.mkdtemp(prefix="commlib-test-slots-")
    for i in range(slot_count()):
        pathlib.Path(slots, f"slot{i}").touch()
    os.environ[SLOTS_VAR] = slots
    config.add_cleanup(lambda: shutil.rmtree(slots, ignore_errors=True))


def waits(item):
    mark = item.get_closest_marker("waits")
    return mark is not None and (not mark.args or bool(mark.args[0]))


def order(items, repo):
    """items, the LONG_FILES' first (longest first), the unit tests' last; stable within each file."""
    rank = {path: i for i, path in enumerate(LONG_FILES)}

    def key(item):
        path = pathlib.Path(str(item.fspath)).relative_to(repo).as_posix()
        if path in rank:
            return (0, rank[path])
        return (2, 0) if path.startswith("tests/unit/") else (1, 0)

    items[:] = sorted(items, key=key)


def acquire(item):
    """The open, locked slot file this item runs under, or None (no slots, or a test that waits)."""
    slots = os.environ.get(SLOTS_VAR)
    if not slots or not os.path.isdir(slots) or waits(item):
        return None
    names = sorted(os.listdir(slots))
    deadline = time.monotonic() + WAIT_LIMIT_S
    while True:
        for name in names:
            fd = os.open(os.path.join(slots, name), os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        if time.monotonic() > deadline:  # (cannot happen while every item is bounded): run without one
            return None
        time.sleep(0.02)  # (a poll: the slot freeing is what is waited for)


def release(fd):
    if fd is not None:
        os.close(fd)  # closing drops the lock
