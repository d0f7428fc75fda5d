"""Early exits: ranks that finish (or give up) before their peers must not hurt them.

A. The smallest program -- `g = cl.init(); print(g.rank())` -- must pass every
   time, at every size, even when one rank is done and gone before a slower
   one has finished its init() (on a 2-core machine that is the usual case).
B. A rank that makes a bad call raises a local ValueError/TypeError before
   anything is sent; catching it and exiting normally is a clean job (exit 0,
   nothing left behind).
C. A rank that finishes early must not disturb ranks still working with other
   peers: point-to-point and sub-group collectives among the others go on, and a
   rank that leaves long before the last one calls finalize() is no failure.

Every job runs with a finite COMMLIB_TIMEOUT and a bounded Job.wait(), so a
regression shows up as a readable failure (commrun's output attached), never a hang.
"""
import os
import re

import pytest

from faultlib import Job

JOB_ENV = {"COMMLIB_TIMEOUT": "20"}  # a peer that waits for a rank that left fails in bounded time


def _describe(job, rc):
    return f"commrun exited {rc} after {job.elapsed:.1f} s\n{job.output()}"


# --------------------------------------------------------------------------- A
HELLO = """
g = cl.init()
print(g.rank())
"""
# Runs a size: the race (a rank gone before a slower one's init() ends) shows in any run on a loaded
# machine; COMMLIB_STRESS_RUNS (e.g. 50) makes this the stress form it was (20 runs: 200 jobs a suite).
HELLO_RUNS = int(os.environ.get("COMMLIB_STRESS_RUNS") or 4)
HELLO_MAX_FAILURES = 3  # stop early once the bug is plainly there: keeps a failing test short


def _hello_failure(job, n, rc):
    """None if the run was clean, else a one-paragraph description of what went wrong."""
    printed = sorted(int(m.group(1)) for m in re.finditer(r"^\[(\d+)\] (\d+)$", job.stdout(), re.M)
                     if m.group(1) == m.group(2))
    problems = []
    if rc != 0:
        problems.append(f"exit code {rc}")
    if printed != list(range(n)):
        problems.append(f"ranks printed {printed}, expected {list(range(n))}")
    if job.leftovers():
        problems.append(f"processes left behind: {job.leftovers()}")
    if not problems:
        return None
    # The most telling lines: the last line of each traceback and commrun's own verdict.
    tell = [line for line in job.stderr().splitlines()
            if re.search(r"(Error|Lost|Exception|commrun:)", line) and "OMP_NUM_THREADS" not in line
            and not line.lstrip("[0123456789] ").startswith(("File", "raise "))]
    return "; ".join(problems) + "\n    " + "\n    ".join(tell[-6:])


@pytest.mark.timeout(400)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_hello_world_never_fails(jobs, n):
    """Bug A: `init(); print(rank)` HELLO_RUNS times at size n; every run exits 0 and every rank prints."""
    failures = []
    runs = 0
    for run in range(HELLO_RUNS):
        job = jobs(HELLO, n, env=JOB_ENV).start()
        rc = job.wait(60)
        job.assert_no_leftovers()
        runs += 1
        why = _hello_failure(job, n, rc)
        if why:
            failures.append((run, why, job))
            if len(failures) >= HELLO_MAX_FAILURES:
                break
    if failures:
        run, _, job = failures[0]
        summary = "\n".join(f"  run {k}: {why}" for k, why, _ in failures)
        pytest.fail(f"n={n}: {len(failures)} of {runs} runs failed (stopped after {HELLO_MAX_FAILURES} failures)\n"
                    f"{summary}\nfull output of run {run}:\n{job.output()}")


# --------------------------------------------------------------------------- B
# Each bad call is made on every rank; it must raise locally, before anything is sent.
BAD_CALLS = {
    "reduce_scatter_indivisible": ("cl.reduce_scatter(np.ones(2 * n + 1, np.float32))", "ValueError", None),
    "send_to_rank_99": ("cl.send(np.ones(3, np.float32), 99)", "ValueError", "99"),
    "broadcast_root_7": ("cl.broadcast(np.ones(3, np.float32), root=7)", "ValueError", "7"),
    "all_reduce_object_array": ("cl.all_reduce(np.array([object()] * 3, dtype=object))", "TypeError", None),
    "recv_negative_shape": ("cl.recv((-3,), np.float32, (r + 1) % n)", "ValueError", None),
}

BAD_CALL_PROG = """
g = cl.init(); r = g.rank(); n = g.size()
if sys.argv[1] == "after-barrier":
    cl.barrier()          # every rank is past init(): only the bad calls and the exit are tested
for name, code in CALLS:  # each raises before anything is sent: one after the other, then the exit
    try:
        exec(code)
        emit(call=name, etype="returned", msg="the bad call returned")
    except Exception as e:
        emit(call=name, etype=type(e).__name__, msg=str(e))
print(f"rank {r} exits", flush=True)
"""
_BAD_CALL_JOBS = {}  # (n, when, transport) -> (job, rc, problem): one job makes every bad call


def _bad_call_job(n, when, transport, tmp_path_factory):
    key = (n, when, transport)
    if key not in _BAD_CALL_JOBS:
        calls = repr([(name, code) for name, (code, _, _) in BAD_CALLS.items()])
        job = Job(tmp_path_factory.mktemp("bad-calls"), BAD_CALL_PROG.replace("CALLS", calls, 1), n, env=JOB_ENV,
                  args=[when]).start()
        problem = None
        try:
            rc = job.wait(40)
            job.assert_no_leftovers()
        except pytest.fail.Exception as err:  # every item of the job reports it
            rc, problem = job.returncode, str(err)
        finally:
            if job.proc.poll() is None or job.leftovers():
                job.kill_all()
        _BAD_CALL_JOBS[key] = (job, rc, problem)
    return _BAD_CALL_JOBS[key]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("when", ["right-after-init", "after-barrier"])
@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("call", list(BAD_CALLS))
def test_bad_call_caught_then_clean_exit(call, n, when, transport, tmp_path_factory):
    """Bug B: every rank catches its bad-input errors (each of BAD_CALLS, one job making them all, each
    call an item) and exits; the job is a success and leaves nothing behind."""
    code, etype, needle = BAD_CALLS[call]
    job, rc, problem = _bad_call_job(n, when, transport, tmp_path_factory)
    assert problem is None, problem
    reports = {r: rec for r, rec in job.records("call") if rec["call"] == call}
    assert set(reports) == set(range(n)), f"ranks {sorted(set(range(n)) - set(reports))} did not report\n" \
                                          + _describe(job, rc)
    for r, rec in sorted(reports.items()):
        assert rec["etype"] == etype, f"rank {r}: `{code}` gave {rec['etype']}: {rec['msg']}\n" + _describe(job, rc)
        if needle:
            assert needle in rec["msg"], f"rank {r}: the error does not name {needle!r}: {rec['msg']}"
    assert rc == 0, "every rank caught its errors and exited normally, yet the job failed\n" + _describe(job, rc)
    for r in range(n):
        assert re.search(rf"^\[{r}\] rank {r} exits$", job.stdout(), re.M), _describe(job, rc)


# --------------------------------------------------------------------------- C
EARLY_LEAVER = """
how = sys.argv[1]
wait_gone = sys.argv[2] == "1"
g = cl.init(); r = g.rank(); n = g.size()
assert n == 3
sub = g.split(0 if r < 2 else 1)          # collective over the world: before rank 2 leaves
if r == 2:
    emit(leaving=True, t=t_wall())
    if how == "finalize":
        cl.finalize()
    sys.exit(0)                           # "end": atexit's finalize; "finalize": an explicit one first
if wait_gone:
    time.sleep(1.0)                       # rank 2 is gone for certain before any traffic
peer = 1 - r
step = "ping-pong"
try:
    for nbytes in (8, 4096, 65536, 65536 + 8, 1 << 20):
        count = nbytes // 8
        if r == 0:
            x = np.arange(count, dtype=np.float64)
            cl.send(x, peer, tag=5)
            y = cl.recv((count,), np.float64, peer, tag=6)
            assert np.array_equal(y, x + 1), f"{nbytes} B: wrong data back"
        else:
            y = cl.recv((count,), np.float64, peer, tag=5)
            cl.send(y + 1, peer, tag=6)
    step = "sub-group all_reduce"
    assert sub.size() == 2 and sub.rank() == r, (sub.rank(), sub.size())
    for nelem in (2, 1 << 16):
        s = cl.all_reduce(np.full(nelem, r + 1, np.float32), group=sub)
        assert np.all(s == 3), f"sub-group all_reduce of {nelem}: {s[:4]}"
    m = cl.all_reduce(np.array([r * 2.5], np.float64), op="max", group=sub)
    assert m[0] == 2.5, m
    step = "sub-group barrier"
    cl.barrier(group=sub)
    emit(done=True)
except Exception as e:
    emit(done=False, step=step, etype=type(e).__name__, msg=str(e))
    sys.exit(3)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("wait_gone", [True, False], ids=["after-rank-2-left", "while-rank-2-leaves"])
@pytest.mark.parametrize("how", ["end", "finalize"])
def test_early_leaver_does_not_hurt_the_others(jobs, how, wait_gone):
    """Bug C: n=3, rank 2 leaves right after init+split; 0 and 1 ping-pong and all_reduce on their sub-group."""
    job = jobs(EARLY_LEAVER, 3, env=JOB_ENV, args=[how, int(wait_gone)]).start()
    rc = job.wait(60)
    done = job.by_rank("done")
    for r in (0, 1):
        rec = done.get(r)
        assert rec is not None, f"rank {r} did not report\n" + _describe(job, rc)
        assert rec["done"], f"rank {r} failed in {rec['step']}: {rec['etype']}: {rec['msg']}\n" + _describe(job, rc)
    assert rc == 0, _describe(job, rc)
    job.assert_no_leftovers()


LATE_FINALIZE = """
how = sys.argv[1]
g = cl.init(); r = g.rank()
if r == 1:
    open("rank1-leaving", "w").close()
    emit(leaving=True)
    sys.exit(0)                 # rank 1 is done at once: its exit waits in finalize for rank 0's
deadline = time.monotonic() + 20
while not os.path.exists("rank1-leaving") and time.monotonic() < deadline:
    time.sleep(0.01)
emit(rank1_leaving=os.path.exists("rank1-leaving"))
time.sleep(0.5)                 # not synchronisation: rank 0 is still busy well after rank 1 began to leave
try:
    if how == "finalize":
        cl.finalize()
    emit(finalized=True)
except Exception as e:
    emit(finalized=False, etype=type(e).__name__, msg=str(e))
    sys.exit(3)
"""


LATE_FINALIZE_RUNS = int(os.environ.get("COMMLIB_STRESS_RUNS") or 3)  # the race with rank 1's exit is in init()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["finalize", "atexit"])
def test_late_finalize_after_peer_left(jobs, how):
    """Bug C: n=2, rank 1 exits right after init; rank 0 waits until rank 1 has begun to leave and 0.5 s
    more, then finalizes: a clean job (3 runs)."""
    for run in range(LATE_FINALIZE_RUNS):
        job = jobs(LATE_FINALIZE, 2, env=JOB_ENV, args=[how]).start()
        rc = job.wait(40)
        where = f"run {run + 1} of {LATE_FINALIZE_RUNS}: "
        rec = job.by_rank("finalized").get(0)
        assert rec is not None, where + "rank 0 did not report\n" + _describe(job, rc)
        assert rec["finalized"], where + f"rank 0's finalize() raised {rec['etype']}: {rec['msg']}\n" \
            + _describe(job, rc)
        assert rc == 0, where + _describe(job, rc)
        assert job.by_rank("rank1_leaving").get(0) == {"rank1_leaving": True}, where + "rank 1 never left\n" \
            + _describe(job, rc)
        job.assert_no_leftovers()
