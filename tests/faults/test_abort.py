"""Aborts: an uncaught exception in one rank, and mismatched collectives.

An exception that escapes a rank's script is reported to the job before the
rank exits, so peers blocked on it raise PeerLost("... rank 2 failed:
ZeroDivisionError ...") at once -- long before the (here 60 s) deadline.
"""
import re

import pytest

from faultlib import survivor_reports

FAST_S = 2.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n,culprit", [(2, 1), (4, 2)])
def test_unhandled_exception_aborts_peers(jobs, n, culprit):
    body = """
ignore_sigterm()
culprit = int(sys.argv[1])
g = cl.init(); r = g.rank(); n = g.size()
x = np.full(1 << 16, r + 1, np.float32)
try:
    for i in range(1000000):
        if r == culprit and i == 20:
            emit(t_raise=t_wall())
            1 / 0
        y = cl.all_reduce(x)
        assert y[0] == n * (n + 1) / 2
except cl.CommError as e:
    emit(t=t_wall(), etype=type(e).__name__, msg=str(e))
"""
    job = jobs(body, n, env={"COMMLIB_TIMEOUT": "60"}, args=[culprit], commrun_args=["--grace", "10"]).start()
    assert job.wait(40) == 1, job.output()
    assert re.search(rf"commrun: rank {culprit} \(pid \d+\) exited with code 1", job.stderr()), job.stderr()
    assert "ZeroDivisionError: division by zero" in job.stderr()  # the culprit's traceback is passed on
    t_raise = job.by_rank("t_raise")[culprit]["t_raise"]
    survivor_reports(job, culprit, t_raise, bound=FAST_S, names=f"rank {culprit} failed: ZeroDivisionError")
    job.assert_no_leftovers()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_mismatched_collectives_raise_everywhere(jobs, n):
    """Rank 0 all_reduces float32[1024] while the others broadcast int64[8]: MismatchError, both sides named."""
    body = """
g = cl.init(); r = g.rank(); n = g.size()
cl.barrier()
errors = []
t0 = time.monotonic()
for step in ("mismatched call", "next call"):
    try:
        if step == "next call":
            cl.barrier()
        elif r == 0:
            cl.all_reduce(np.ones(1024, np.float32))
        else:
            cl.broadcast(np.zeros(8, np.int64), root=0)
        errors.append([step, "returned", ""])
    except cl.CommError as e:
        errors.append([step, type(e).__name__, str(e)])
emit(errors=errors, s=time.monotonic() - t0)
"""
    # A 10 s deadline: a mismatch that is only noticed by the deadline fails the test in bounded time.
    job = jobs(body, n, env={"COMMLIB_TIMEOUT": "10"}, commrun_args=["--grace", "1"]).start()
    job.wait(40)
    reports = job.by_rank("errors")
    assert set(reports) == set(range(n)), job.output()
    both_sides = re.compile(r"rank \d+ called (all_reduce|broadcast) #2 \((float32, 1024, op=sum|int64, 8, root=0)\) "
                            r"but rank \d+ called (all_reduce|broadcast) #2")
    for r, rec in reports.items():
        (_, first, msg1), (_, second, msg2) = rec["errors"]
        # A broadcast root-side send may complete before anyone notices; the next call must fail then.
        assert first in ("MismatchError", "returned"), f"rank {r} after {rec['s']:.1f} s: {first}: {msg1}"
        assert rec["s"] < 5, f"rank {r} took {rec['s']:.1f} s to see the mismatch"
        assert second == "MismatchError", f"rank {r}: the failure is not sticky: {rec}"
        assert both_sides.search(msg2), msg2
    assert any(rec["errors"][0][1] == "MismatchError" for rec in reports.values())
    assert reports[0]["errors"][0][1] == "MismatchError", reports[0]  # all_reduce cannot complete
    job.assert_no_leftovers()
