"""Signals and resources: Ctrl-C, leaks over 10,000 operations, an early finalize().

- SIGINT to commrun while every rank is inside a collective: every rank is
  gone within 5 s (also when a rank ignores SIGINT: commrun's grace period
  ends in SIGKILL), commrun exits 130 and nothing is left.
- 10,000 small mixed operations: the process's fd count, thread count and
  socket count after warm-up equal those at the end.
- A rank that calls finalize() early (and stays alive) makes its peers' next
  operation with it fail with PeerLost mentioning finalize, fast.
"""
import signal
import time

import psutil
import pytest

from faultlib import survivor_reports

GONE_BOUND_S = 5.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stubborn", [False, True], ids=["plain", "rank-ignores-SIGINT"])
@pytest.mark.parametrize("n", [2, 4])
def test_sigint_to_commrun_stops_every_rank(jobs, n, stubborn):
    body = """
stubborn = sys.argv[1] == "1"
g = cl.init(); r = g.rank(); n = g.size()
if stubborn and r == n - 1:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
x = np.ones(1 << 20, np.float32)
emit(ready=True)
for i in range(1000000):
    cl.all_reduce(x)
"""
    job = jobs(body, n, args=[int(stubborn)]).start()
    ranks = job.wait_ranks()
    job.wait_for(lambda j: len(j.records("ready")) == n, 60, "every rank to be in its loop")
    time.sleep(0.5)
    t0 = time.monotonic()
    job.proc.send_signal(signal.SIGINT)
    gone = psutil.wait_procs(list(ranks.values()), timeout=GONE_BOUND_S)[0]
    elapsed = time.monotonic() - t0
    assert len(gone) == n, f"{n - len(gone)} rank(s) still alive {GONE_BOUND_S} s after SIGINT\n{job.output()}"
    assert job.wait(10) == 130, job.output()
    assert "commrun: got SIGINT, stopping" in job.stderr()
    job.assert_no_leftovers()
    assert elapsed < GONE_BOUND_S


RESOURCES = """
g = cl.init(); r = g.rank(); n = g.size()
me = __import__("psutil").Process()
import threading

def snapshot():
    return {"fds": me.num_fds(), "threads": threading.active_count(), "os_threads": me.num_threads(),
            "sockets": len(me.net_connections(kind="all"))}

def mixed(i):
    k = i % 6
    if k == 0:
        y = cl.all_reduce(np.full(16, r + i, np.int64))
        assert y[0] == n * i + n * (n - 1) // 2
    elif k == 1:
        root = i % n
        y = cl.broadcast(np.full(8, i if r == root else -1, np.int32), root=root)
        assert y[0] == i
    elif k == 2:
        cl.barrier()
    elif k == 3:
        y = cl.sendrecv(np.full(4, r * 100000 + i, np.int64), (r + 1) % n, (r - 1) % n)
        assert y[0] == ((r - 1) % n) * 100000 + i
    elif k == 4:
        if r % 2 == 0 and r + 1 < n:
            cl.send(np.full(3, i, np.float64), r + 1, tag=i % 7)
        elif r % 2 == 1:
            y = cl.recv((3,), np.float64, r - 1, tag=i % 7)
            assert y[0] == i
    else:
        req = cl.iall_reduce(np.full(32, 1.0, np.float32))
        assert req.wait()[0] == n

for i in range(WARMUP):
    mixed(i)
cl.barrier()
before = snapshot()
t0 = time.monotonic()
for i in range(WARMUP, TOTAL):
    mixed(i)
cl.barrier()
after = snapshot()
emit(before=before, after=after, ops=TOTAL, seconds=time.monotonic() - t0)
""".replace("WARMUP", "600").replace("TOTAL", "10000")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 4])
def test_no_fd_thread_or_socket_growth_over_10000_ops(jobs, n):
    job = jobs(RESOURCES, n, env={"COMMLIB_TIMEOUT": "60"}).start()
    assert job.wait(140) == 0, job.output()
    reports = job.by_rank("before")
    assert set(reports) == set(range(n)), job.output()
    for r, rec in reports.items():
        assert rec["after"] == rec["before"], f"rank {r}: resources grew over 9,400 ops: {rec}"
    job.assert_no_leftovers()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.waits
def test_early_finalize_makes_peers_fail_clearly(jobs, n):
    body = """
g = cl.init(); r = g.rank(); n = g.size()
quitter = 1
cl.all_reduce(np.ones(1000))
cl.barrier()
if r == quitter:
    emit(t_finalize=t_wall())
    cl.finalize()
    t0 = time.monotonic()
    try:
        cl.barrier()
        emit(after="returned")
    except cl.CommError as e:
        emit(after=type(e).__name__, after_msg=str(e), after_s=time.monotonic() - t0)
    time.sleep(4)                      # stay alive: peers must learn from finalize, not from an exit
    sys.exit(0)
time.sleep(0.3)
try:
    for i in range(3):
        cl.all_reduce(np.ones(1000))
    emit(t=t_wall(), etype="none", msg="all_reduce with a finalized rank returned")
except cl.CommError as e:
    emit(t=t_wall(), etype=type(e).__name__, msg=str(e))
"""
    job = jobs(body, n, env={"COMMLIB_TIMEOUT": "30"}).start()
    job.wait(45)
    t_fin = job.by_rank("t_finalize")[1]["t_finalize"]
    # The bound tells "learnt from the finalize" from "waited out COMMLIB_TIMEOUT" (30 s): the survivors
    # start 0.3 s after it, and on 2 cores with four test workers beside them the news took 2.18 s once
    # (a 2 s bound then failed), so the bound leaves room for a loaded machine.
    survivor_reports(job, 1, t_fin, bound=5.0, names="rank 1")
    for r, rec in job.by_rank("etype").items():
        assert "finalize" in rec["msg"], f"rank {r}: PeerLost does not say rank 1 called finalize(): {rec['msg']}"
    after = job.by_rank("after")[1]
    assert after["after"] != "returned" and after.get("after_s", 0) < 5, after
    job.assert_no_leftovers()
