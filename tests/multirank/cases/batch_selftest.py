"""Checks that fail on purpose, each in one way, for tests/multirank/test_batch_harness.py: what the
batched runner (_batch.py) and the pytest side report of each. Never run by a batched test itself."""
import time

import numpy as np

import commlib as cl
from _batch import check, script, sections
from _mpicase import MPI, Checker


@check
def passes(c):
    c.equal(cl.all_reduce(np.arange(5)), np.arange(5) * c.size, "sum")


# A case written as sections (the mpi*.py cases): each is a check whose Checker failures count there.
ck = Checker()


def planted_on_rank_1():
    ck.ok(MPI.COMM_WORLD.Get_rank() != 1, "section label", "planted on rank 1")


sections({"part": [planted_on_rank_1]}, ck)
script("batch_selftest_program.py")  # a rank program run whole as a check


@check
def records_a_failure_on_rank_1(c):
    x = cl.all_reduce(np.ones(3))
    c.equal(x, np.full(3, c.size + (c.rank == 1), dtype=x.dtype), "planted mismatch")


@check
def raises_everywhere(c):
    cl.barrier()
    raise ValueError("planned on every rank")


@check
def differs_across_ranks(c):
    c.digests.append(("rank-dependent result", c.rank))


@check
def passes_after_failures(c):
    c.equal(cl.all_gather(np.array([c.rank])), np.arange(c.size), "all_gather")


@check
def records_nothing(c):
    cl.barrier()


@check(timeout=30)
def raises_on_rank_0_only(c):
    if c.rank == 0:
        raise RuntimeError("planned on rank 0 alone")
    cl.barrier()  # waits for rank 0 until COMMLIB_TIMEOUT


@check
def after_a_lost_schedule(c):
    cl.barrier()


@check(timeout=1)
def hangs_on_rank_0(c):
    if c.rank == 0:
        time.sleep(60)  # the hang under test: the watchdog ends it at its 1 s deadline
    cl.barrier()


@check
def after_the_hang(c):
    cl.barrier()

