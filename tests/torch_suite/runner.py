"""torch's own backend test suite against a backend: `DistributedTest._DistTestBase` from the
installed torch wheel (torch/testing/_internal/distributed/distributed_test.py), run the way torch's
test/distributed/test_distributed_spawn.py runs it for gloo: one test at a time, each in
`world_size` processes that torch's MultiProcessTestCase spawns, every rank calling
init_process_group(BACKEND) itself.

usage: python tests/torch_suite/runner.py [--backend commlib|gloo] [--world-size N] [--only NAME ...]
                                          [--timeout S] [--json FILE] [--list] [--fork]

For backend commlib the runner registers commlib as a torch plugin backend (importing
commlib.torch, in this process and in every rank torch spawns, since each re-imports this file)
with the CPU features gloo declares (`ddp`, `subgroup`), and runs the bodies of the tests torch
gates on the literal name "gloo" (timeouts, batch_isend_irecv, sparse all_reduce, the profiler's
list of backends; every skip whose reason names gloo, and the branches of test bodies on
`BACKEND == "gloo"`): nothing gloo is tested on goes untested on commlib. Prints one line per test
(`PASS`, `FAIL`, `SKIP`, with the reason) and a summary; --json writes {test: [status, seconds,
reason]}.
"""
import argparse
import inspect
import json
import os
import re
import sys
import tempfile
import time
import unittest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="commlib")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--only", nargs="*", help="test names (test_...) or prefixes ending in *")
    p.add_argument("--timeout", type=int, default=120, help="seconds a test may take (torch's own limit)")
    p.add_argument("--json")
    p.add_argument("--list", action="store_true", help="list the tests and torch's own skips, run nothing")
    p.add_argument("--fork", action="store_true",
                   help="fork each test's ranks from this process instead of spawning fresh interpreters "
                        "(faster; torch's own runner spawns)")
    a = p.parse_args()
    temp = os.environ.get("TEMP_DIR") or tempfile.mkdtemp(prefix="commlib-torch-suite-")
    # file:// as torch's second configuration for gloo: the tests that re-initialise need it
    os.environ.update({"BACKEND": a.backend, "WORLD_SIZE": str(a.world_size), "TEMP_DIR": temp,
                       "INIT_METHOD": f"file://{temp}/shared_init_file",
                       "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(a.timeout),
                       "COMMLIB_TORCH_SUITE_FORK": "1" if a.fork else "0"})
    return a


if __name__ == "__main__":
    ARGS = _parse()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal import common_distributed  # noqa: E402

BACKEND = os.environ["BACKEND"]
if BACKEND == "commlib":
    sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))  # this checkout's commlib, in every rank too
    import commlib.torch  # noqa: E402,F401 -- registers the backend (in each spawned rank as well)
    from torch.testing._internal import common_utils  # noqa: E402

    for feature in ("ddp", "subgroup", "plugin"):  # what gloo declares on CPU
        common_distributed.DistTestCases.backend_feature[feature].add(BACKEND)

    def _gloo_gate(reason):
        """A skip torch applies for the backend's name, not for a capability: its reason names gloo."""
        return "gloo" in str(reason).lower()

    _skip_if, _skip = common_utils.skip_but_pass_in_sandcastle_if, common_utils.skip_but_pass_in_sandcastle

    def skip_but_pass_in_sandcastle_if(condition, reason):
        return _skip_if(condition and not _gloo_gate(reason), reason)

    def skip_but_pass_in_sandcastle(reason):
        return (lambda func: func) if _gloo_gate(reason) else _skip(reason)

    # distributed_test takes these by name when it is imported (next): its decorators see ours
    common_utils.skip_but_pass_in_sandcastle_if = skip_but_pass_in_sandcastle_if
    common_utils.skip_but_pass_in_sandcastle = skip_but_pass_in_sandcastle

from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402



class _TakesGlooBranches(str):
    """The backend's name as torch's test bodies see it: equal to "gloo" as well, so that a body
    branching on the literal (`if BACKEND == "mpi" or BACKEND == "gloo":` builds its CPU model)
    takes gloo's branch. torch's own calls get the plain name (`.lower()`, `.upper()`)."""

    def __eq__(self, other):
        return str.__eq__(self, other) or other == "gloo"

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if BACKEND == "commlib":  # the profiler tests' lists of backends whose collectives it records
    for allow in ("PROFILING_SUPPORTED_BACKENDS", "CUDA_PROFILING_SUPPORTED_BACKENDS",
                  "SEND_RECV_PROFILING_SUPPORTED_BACKENDS"):
        getattr(distributed_test, allow).append(BACKEND)
    distributed_test.BACKEND = _TakesGlooBranches(BACKEND)


def _forkable(name):
    """Whether a test's ranks may be forked: not one that destroys the default group and makes it again
    (test_barrier_timeout_global: forked, its ranks hang to the runner's timeout on gloo and commlib
    alike, 40 s each; spawned, it passes on both in 5 s)."""
    try:
        return "destroy_process_group()" not in inspect.getsource(getattr(DistributedTest._DistTestBase, name))
    except (AttributeError, OSError, TypeError):
        return True


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if os.environ.get("COMMLIB_TORCH_SUITE_FORK") == "1" and _forkable(self._testMethodName):
            self._start_processes(torch.multiprocessing.get_context("fork").Process)  # from this process
        else:
            self._spawn_processes()


def _names():
    return sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))


def _wanted(name, only):
    return not only or any(name == o or (o.endswith("*") and name.startswith(o[:-1])) for o in only)


class _Record(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.rows, self._t = {}, 0.0

    def startTest(self, test):
        super().startTest(test)
        self._t = time.monotonic()

    def _put(self, test, status, why=""):
        name = test.id().rsplit(".", 1)[-1]
        took = time.monotonic() - self._t
        self.rows[name] = [status, round(took, 1), why]
        print(f"{status} {name} {took:.1f}s {why}".rstrip(), flush=True)

    def addSuccess(self, test):
        self._put(test, "PASS")

    def addFailure(self, test, err):
        text = self._exc_info_to_string(err, test)
        errors = [ln.strip() for ln in text.splitlines() if re.match(r"\s*[\w.]*(Error|Exception|Timeout)\b", ln)]
        self._put(test, "FAIL", (errors[-1] if errors else text.strip().splitlines()[-1])[:300])
        print(text[-3000:], file=sys.stderr, flush=True)

    addError = addFailure

    def addSkip(self, test, reason):
        self._put(test, "SKIP", reason[:200])

    def addExpectedFailure(self, test, err):
        self._put(test, "XFAIL")

    def addUnexpectedSuccess(self, test):
        self._put(test, "XPASS")


def main(a):
    names = [n for n in _names() if _wanted(n, a.only)]
    if a.list:
        for n in names:
            fn = getattr(TestDistBackendWithSpawn, n)
            why = getattr(fn, "__unittest_skip_why__", "") if getattr(fn, "__unittest_skip__", False) else ""
            print(n, f"(skipped: {why})" if why else "")
        return 0
    result = _Record()
    start = time.monotonic()
    for n in names:
        TestDistBackendWithSpawn(n).run(result)
    counts = {}
    for status, _t, _w in result.rows.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"backend {BACKEND}, world size {os.environ['WORLD_SIZE']}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" in {time.monotonic() - start:.0f} s",
          flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result.rows, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
