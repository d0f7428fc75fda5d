"""Deadlines: a SIGSTOPped rank makes its peers raise CommTimeout with a stall report.

The stopped rank cannot answer the stall query, so every report names it as
`no answer (stopped, ...)`. The survivors then exit non-zero (each once every
survivor has reported: a marker file each), commrun SIGTERMs and (after --grace)
SIGKILLs the stopped rank: nothing may be left behind.
"""
import re
import time

import pytest

from faultlib import survivor_reports

pytestmark = pytest.mark.waits  # each test waits out a deadline: ~0.2 cores

TIMEOUT_S = 2.0
BOUND_S = TIMEOUT_S + 2.0  # the deadline, plus the stall query (1 s) and slack for a busy machine

LOOP = """
ignore_sigterm()  # the first survivor to exit makes commrun SIGTERM the rest: report first
how = sys.argv[1]
victim = int(sys.argv[2])
g = cl.init(timeout=2.0) if how == "init" else cl.init()
r = g.rank(); n = g.size()
x = np.full(1 << 16, r + 1, np.float32)
emit(ready=True)
try:
    for i in range(1000000):
        if r == victim and i == 30:
            if how == "external":
                emit(stop_me=True)
                time.sleep(30)          # the test SIGSTOPs us here
            else:
                emit(t_stop=t_wall())
                os.kill(os.getpid(), signal.SIGSTOP)
        y = cl.all_reduce(x)
        assert y[0] == n * (n + 1) / 2
except cl.CommError as e:
    emit(t=t_wall(), etype=type(e).__name__, msg=str(e), i=i)
    open(f"reported.{r}", "w").close()  # leave once every survivor has reported: the grace can be short
    survivors = [k for k in range(n) if k != victim]
    deadline = time.monotonic() + 20
    while not all(os.path.exists(f"reported.{k}") for k in survivors) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(4)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["self", "init", "external"])
@pytest.mark.parametrize("n", [2, 4])
def test_sigstop_gives_comm_timeout_with_stall_report(jobs, n, how):
    victim = n - 1 if n == 2 else 1
    env = {} if how == "init" else {"COMMLIB_TIMEOUT": str(TIMEOUT_S)}
    job = jobs(LOOP, n, env=env, args=[how, victim], commrun_args=["--grace", "1"]).start()
    ranks = job.wait_ranks()
    if how == "external":
        job.wait_for(lambda j: j.by_rank("stop_me"), 60, "the victim to reach its stop point")
        ranks[victim].suspend()
        t_stop = time.time()
    else:
        t_stop = job.wait_for(lambda j: j.by_rank("t_stop").get(victim), 60, "the victim to stop itself")["t_stop"]
    # Survivors exit 4 after reporting; commrun then SIGKILLs the stopped rank after its grace period.
    rc = job.wait(40)
    assert rc == 4, job.output()
    assert re.search(r"commrun: rank \d+ \(pid \d+\) exited with code 4", job.stderr())
    survivor_reports(job, victim, t_stop, bound=BOUND_S, etype="CommTimeout", names="waited")
    pattern = re.compile(r"rank (\d+): all_reduce #(\d+) waited 2 s for rank (\d+) \((\d+) of (\d+) bytes\)")
    for r, rec in job.by_rank("etype").items():
        msg = rec["msg"]
        m = pattern.search(msg)
        assert m, f"rank {r}: CommTimeout without op, #seq, peer and bytes: {msg!r}"
        got, expected = int(m.group(4)), int(m.group(5))
        assert 0 <= got < expected, msg
        assert "stall report:" in msg, msg
        assert re.search(rf"^\s+rank {victim}: no answer \(stopped", msg, re.M), f"stall report lacks rank {victim}: {msg!r}"
        if n == 2:
            assert int(m.group(3)) == victim and int(m.group(1)) == r, msg
    job.assert_no_leftovers()


@pytest.mark.timeout(60)
def test_stall_report_names_the_diverged_rank(jobs):
    """Rank 2 waits in a recv while the others all_reduce: every report says where rank 2 is."""
    body = """
ignore_sigterm()  # whoever times out first exits 4; the others must still get to report
g = cl.init(); r = g.rank(); n = g.size()
cl.all_reduce(np.ones(4))
try:
    if r == 2:
        cl.recv((1,), np.float32, 0)        # diverged: nobody sends
    else:
        cl.all_reduce(np.ones(1 << 14, np.float32))
    emit(t=t_wall(), etype="none", msg="returned")
except cl.CommError as e:
    emit(t=t_wall(), etype=type(e).__name__, msg=str(e))
    sys.exit(4)
"""
    job = jobs(body, 4, env={"COMMLIB_TIMEOUT": "2"}, commrun_args=["--grace", "8"]).start()
    assert job.wait(40) == 4, job.output()
    job.assert_no_leftovers()
    reports = job.by_rank("etype")
    assert set(reports) == {0, 1, 2, 3}, job.output()
    for r, rec in reports.items():
        assert rec["etype"] == "CommTimeout", rec
        assert "stall report:" in rec["msg"], rec
    first = min(reports.values(), key=lambda rec: rec["t"])
    if "rank 2:" in first["msg"].split("stall report:")[0]:
        return  # rank 2 itself timed out first: its own report describes the others
    assert re.search(r"^\s+rank 2: in recv", first["msg"], re.M), first["msg"]
    job.assert_no_leftovers()
