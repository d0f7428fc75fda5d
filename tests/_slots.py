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


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def slot_count():
    """Computing tests at once: a core each, up to 4 (as many as xdist's workers were before)."""
    return max(1, min(cores(), 4))


def configure(config):
    config.addinivalue_line("markers", "cores(k): a test whose processes keep k cores busy takes k slots")
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


def cores_of(item, total):
    """The slots an item takes: `cores(k)` for a test whose processes keep k cores busy (Ray's daemons
    beside its workers; mpi4py's suite with a rank a core), at most them all; else 1."""
    mark = item.get_closest_marker("cores")
    return max(1, min(int(mark.args[0]), total)) if mark is not None else 1


def _try_lock(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _try_shared(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def acquire(item):
    """The open, locked slot files this item runs under: [] without slots or for a test that waits.

    A test of one slot takes any free one and never holds one while waiting for another. A test of
    more gathers them one by one, holding what it has, under the lock `many` (exclusive) so that only
    one test gathers at a time and no single-slot test (which takes `many` shared while it looks)
    takes a slot meanwhile: no two tests wait for each other's slots, and one that needs both cores is
    not starved by single-slot tests taking turns."""
    slots = os.environ.get(SLOTS_VAR)
    if not slots or not os.path.isdir(slots) or waits(item):
        return []
    names = sorted(n for n in os.listdir(slots) if n.startswith("slot"))
    want = cores_of(item, len(names))
    deadline = time.monotonic() + WAIT_LIMIT_S
    held = []
    gathering = os.open(os.path.join(slots, "many"), os.O_RDONLY | os.O_CREAT)
    try:
        if want > 1:
            fcntl.flock(gathering, fcntl.LOCK_EX)  # (the one gathering before us gets its slots, then lets go)
        while True:
            if want > 1 or _try_shared(gathering):  # a single-slot test takes none while one is gathering
                for name in names:
                    fd = _try_lock(os.path.join(slots, name))
                    if fd is not None:
                        held.append(fd)
                        if len(held) == want:
                            return held
                if want == 1:
                    fcntl.flock(gathering, fcntl.LOCK_UN)
            if time.monotonic() > deadline:  # (cannot happen while every item is bounded): run without them
                release(held)
                return []
            time.sleep(0.02)  # (a poll: a slot freeing is what is waited for)
    finally:
        os.close(gathering)


def release(held):
    for fd in held:
        os.close(fd)  # closing drops the lock
