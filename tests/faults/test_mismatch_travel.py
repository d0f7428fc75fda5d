"""Mismatches: no false alarms under skew, the true cause reaches every rank, and silent ones are caught.

D. A healthy job whose ranks arrive late at collectives (random sleeps, point-to-point
   traffic in between) must never raise a false MismatchError, even with the peer
   check (`COMMLIB_PEER_CHECK_S`: how long a stuck collective step waits before
   asking its peer, over the coordinator, which collective it is in) set to 5 ms.
E. When ranks call different collectives (or one with a different dtype), EVERY rank
   raises MismatchError -- not PeerLost because a neighbour gave up -- and every
   message names both sides.
F. A mismatch that moves no bytes (every rank broadcasts as "the root") is caught at
   finalize()/exit, where the ranks compare a digest of the collectives they ran
   through the coordinator: the job fails with a MismatchError that names both roots.

Every job runs with a finite COMMLIB_TIMEOUT and a bounded Job.wait(): a missed
detection is a CommTimeout or a timed-out wait with commrun's output attached.
"""
import re

import pytest

from faultlib import record_figure, stressed


def _describe(job, rc):
    return f"commrun exited {rc} after {job.elapsed:.1f} s\n{job.output()}"


# --------------------------------------------------------------------------- D
SKEW_STRESS = """
iters = int(sys.argv[1]); seed = int(sys.argv[2])
g = cl.init(); r = g.rank(); n = g.size()
rng = np.random.default_rng(seed * 100 + r)
t0 = time.monotonic()
i, step = -1, "start"
slept = 0.0
try:
    for i in range(iters):
        step = "point-to-point"
        if r == 0:
            cl.send(np.full(16, i, np.int64), 1, tag=1)
            back = cl.recv((16,), np.int64, 1, tag=2)
            assert np.all(back == i + 1), f"ping-pong {i}: {back[:4]}"
        elif r == 1:
            got = cl.recv((16,), np.int64, 0, tag=1)
            assert np.all(got == i), f"ping-pong {i}: {got[:4]}"
            cl.send(got + 1, 0, tag=2)
        if i % n == r:                                   # one rank by turn arrives late
            d = 0.0 if rng.random() < 0.25 else float(rng.uniform(0.0, 0.02))
            slept += d
            time.sleep(d)
        step = "all_reduce sum float32[2]"
        s = cl.all_reduce(np.array([r + i, 1.0], np.float32))
        assert s[0] == n * (n - 1) // 2 + n * i and s[1] == n, f"iteration {i}: sum {s}"
        step = "all_reduce max float64[3]"
        m = cl.all_reduce(np.array([r + 0.5 * i, -r, (r * 7 + i) % n], np.float64), op="max")
        assert m[0] == n - 1 + 0.5 * i and m[1] == 0 and m[2] == n - 1, f"iteration {i}: max {m}"
        if i % 50 == 49:
            step = "barrier"
            cl.barrier()
    emit(done=True, s=time.monotonic() - t0, slept=slept)
except Exception as e:
    emit(done=False, i=i, step=step, etype=type(e).__name__, msg=str(e))
    sys.exit(3)
"""
SKEW_ITERS = stressed(600, 2000)  # each iteration one rank is late by 0-20 ms (3 times in 4): ~5 s of skew at 600


@pytest.mark.timeout(240)
def test_no_false_mismatch_under_skew(jobs):
    """Bug D: n=4, COMMLIB_PEER_CHECK_S=0.005, SKEW_ITERS iterations of skewed small all_reduces: no error at all."""
    n = 4
    job = jobs(SKEW_STRESS, n, env={"COMMLIB_TIMEOUT": "30", "COMMLIB_PEER_CHECK_S": "0.005"},
               args=[SKEW_ITERS, 7], commrun_args=["--grace", "5"]).start()
    rc = job.wait(200)
    done = job.by_rank("done")
    failed = {r: rec for r, rec in done.items() if not rec["done"]}
    assert not failed, "a healthy job failed:\n" + "\n".join(
        f"  rank {r} at iteration {rec['i']} ({rec['step']}): {rec['etype']}: {rec['msg']}"
        for r, rec in sorted(failed.items())) + "\n" + _describe(job, rc)
    missing = sorted(set(range(n)) - set(done))
    assert not missing, f"ranks {missing} did not finish\n" + _describe(job, rc)
    assert rc == 0, _describe(job, rc)
    job.assert_no_leftovers()
    record_figure(f"skew stress n={n}, {SKEW_ITERS} iterations, PEER_CHECK_S=0.005 (s)",
                  {r: round(rec["s"], 1) for r, rec in sorted(done.items())})


# --------------------------------------------------------------------------- E
TRAVEL = """
case, linger = sys.argv[1], sys.argv[2]
if linger == "ignore-sigterm":
    ignore_sigterm()   # the first rank to exit makes commrun SIGTERM the rest: everyone must get to report
g = cl.init(); r = g.rank(); n = g.size()
cl.barrier()
t0 = time.monotonic()
try:
    if case == "dtype":
        cl.all_reduce(np.ones(8, np.float64 if r == 0 else np.float32))
    elif case == "dtype-same-bytes":
        cl.all_reduce(np.ones(8, np.float64) if r == 0 else np.ones(16, np.float32))
    else:  # "all_reduce-vs-broadcast": nobody is a broadcast root, so no call can complete
        if r == 0:
            cl.all_reduce(np.ones(8, np.float32))
        else:
            cl.broadcast(np.ones(8, np.float32), root=0)
    emit(etype="returned", msg="the mismatched call returned", s=time.monotonic() - t0)
    sys.exit(0)
except Exception as e:
    emit(etype=type(e).__name__, msg=str(e), s=time.monotonic() - t0)
    if linger == "sleep-1s":
        time.sleep(1.0)  # a plain program: report, give the others a second, then fail
    sys.exit(1)
"""
# What every rank's message must contain: both sides.
TRAVEL_NAMES = {
    "dtype": ("float64", "float32"),
    "dtype-same-bytes": ("float64", "float32"),
    "all_reduce-vs-broadcast": ("all_reduce", "broadcast"),
}
TRAVEL_BOUND_S = 5.0  # the default peer check (1 s) plus slack for 4 ranks on 2 cores


@pytest.mark.timeout(90)
@pytest.mark.parametrize("linger", ["ignore-sigterm", "sleep-1s"])
@pytest.mark.parametrize("case", list(TRAVEL_NAMES))
@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.waits
def test_mismatch_reaches_every_rank(jobs, n, case, linger):
    """Bug E: rank 0 disagrees with the others; every rank raises MismatchError naming both sides.

    "ignore-sigterm": each rank exits 1 as soon as it has reported, the others survive commrun's
    SIGTERM (--grace 15). "sleep-1s": an ordinary program that reports, sleeps 1 s and exits 1;
    commrun's SIGTERM then stops whoever has not reported yet, so the cause must travel quickly.
    """
    job = jobs(TRAVEL, n, env={"COMMLIB_TIMEOUT": "10"}, args=[case, linger],
               commrun_args=["--grace", "15"]).start()
    rc = job.wait(60)
    reports = job.by_rank("etype")
    missing = sorted(set(range(n)) - set(reports))
    assert not missing, f"ranks {missing} did not report\n" + _describe(job, rc)
    summary = "\n".join(f"  rank {r} after {rec['s']:.2f} s: {rec['etype']}: {rec['msg']}"
                        for r, rec in sorted(reports.items()))
    wrong = [r for r, rec in reports.items() if rec["etype"] != "MismatchError"]
    assert not wrong, f"ranks {sorted(wrong)} did not raise MismatchError:\n{summary}"
    want = TRAVEL_NAMES[case]
    unnamed = [r for r, rec in reports.items() if not all(w in rec["msg"] for w in want)]
    assert not unnamed, f"ranks {sorted(unnamed)}: the message does not name both {want}:\n{summary}"
    slow = [r for r, rec in reports.items() if rec["s"] > TRAVEL_BOUND_S]
    assert not slow, f"ranks {sorted(slow)} took more than {TRAVEL_BOUND_S} s:\n{summary}"
    assert rc == 1, _describe(job, rc)
    job.assert_no_leftovers()


# --------------------------------------------------------------------------- F
ALL_ROOTS = """
how = sys.argv[1]
if how == "finalize":
    ignore_sigterm()   # let every rank report what its finalize() said
g = cl.init(); r = g.rank(); n = g.size()
y = cl.all_reduce(np.ones(4, np.float32))
assert np.all(y == n), y
x = np.full(8, r, np.float32)
cl.broadcast(x, root=r)          # every rank believes it is the root: no byte has to move
emit(broadcast_returned=True)
if how == "finalize":
    try:
        cl.finalize()
        emit(etype="returned", msg="finalize() returned")
    except Exception as e:
        emit(etype=type(e).__name__, msg=str(e))
"""


def _roots_named(text, n):
    return sorted({int(k) for k in re.findall(r"root=(\d+)", text) if int(k) < n})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_silent_root_mismatch_fails_the_job_at_exit(jobs, n):
    """Bug F: the last collective is a broadcast in which every rank is root; the job must fail at exit."""
    job = jobs(ALL_ROOTS, n, env={"COMMLIB_TIMEOUT": "10"}, args=["exit"]).start()
    rc = job.wait(40)
    assert rc != 0, "every rank broadcast as its own root, and the job succeeded\n" + _describe(job, rc)
    err = job.stderr()
    assert "MismatchError" in err, "the job failed, but not with a MismatchError\n" + _describe(job, rc)
    roots = _roots_named(err, n)
    assert len(roots) >= 2, f"the error names roots {roots}, not two different ones\n" + _describe(job, rc)
    job.assert_no_leftovers()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_silent_root_mismatch_raised_by_finalize(jobs, n):
    """Bug F: the same, but each rank calls cl.finalize() itself: it raises MismatchError."""
    job = jobs(ALL_ROOTS, n, env={"COMMLIB_TIMEOUT": "10"}, args=["finalize"], commrun_args=["--grace", "10"]).start()
    rc = job.wait(40)
    reports = job.by_rank("etype")
    missing = sorted(set(range(n)) - set(reports))
    assert not missing, f"ranks {missing} did not report what finalize() did\n" + _describe(job, rc)
    summary = "\n".join(f"  rank {r}: {rec['etype']}: {rec['msg']}" for r, rec in sorted(reports.items()))
    raised = {r: rec for r, rec in reports.items() if rec["etype"] != "returned"}
    assert raised, f"finalize() returned on every rank: the mismatch went unnoticed\n{summary}"
    wrong = [r for r, rec in raised.items() if rec["etype"] != "MismatchError"]
    assert not wrong, f"finalize() raised something other than MismatchError on ranks {wrong}:\n{summary}"
    for r, rec in raised.items():
        roots = _roots_named(rec["msg"], n)
        assert len(roots) >= 2, f"rank {r}: the message names roots {roots}, not two different ones:\n{summary}"
    job.assert_no_leftovers()
