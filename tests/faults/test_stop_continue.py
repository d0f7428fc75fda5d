"""A rank stopped (SIGSTOP) mid-transfer and continued loses nothing; one killed mid-message is PeerLost.

Both run over every same-host transport (the suite's `transport` fixture): with shared memory a
stopped writer leaves a half-written ring and a stopped reader a full one, and the peers must
sleep on the doorbell, not spin, and go on exactly where they were once it continues.
"""
import time

import pytest

from faultlib import survivor_reports

JOB_ENV = {"COMMLIB_TIMEOUT": "60"}

# Every rank: verified large all_reduce and a large point-to-point ring, for a while.
MIXED_LOOP = """
g = cl.init(); r = g.rank(); n = g.size()
nelem = int(sys.argv[1]); rounds = int(sys.argv[2])
x = np.arange(nelem, dtype=np.float64) + r
expect = n * np.arange(nelem, dtype=np.float64) + n * (n - 1) / 2
right, left = (r + 1) % n, (r - 1) % n
emit(ready=True)
for i in range(rounds):  # until the test says "finish" (rank 0 sees the file, every rank hears it)
    if cl.broadcast(np.array([os.path.exists("finish")]), 0)[0]:
        break
    y = cl.all_reduce(x)
    assert np.array_equal(y, expect), (i, y[:4])
    req = cl.isend(x + i, right, tag=5)
    got = cl.recv((nelem,), np.float64, left, tag=5)
    req.wait()
    assert np.array_equal(got, np.arange(nelem, dtype=np.float64) + left + i), (i, got[:4])
emit(done=True, rounds=i)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n,victim", [(2, 1), (3, 0)])
@pytest.mark.waits
def test_a_rank_stopped_mid_transfer_and_continued_loses_nothing(jobs, n, victim):
    job = jobs(MIXED_LOOP, n, env=JOB_ENV, args=[1 << 19, 100000]).start()  # 4 MiB messages
    ranks = job.wait_ranks()
    job.wait_for(lambda j: len(j.records("ready")) == n, 60, "every rank to be ready")
    time.sleep(0.3)
    for _ in range(3):  # stopped three times, mid-whatever-it-was-doing
        ranks[victim].suspend()
        peers = [p for r, p in ranks.items() if r != victim]
        time.sleep(0.5)
        # the others wait for it asleep, not spinning (each used little CPU while it was stopped)
        before = [p.cpu_times() for p in peers]
        time.sleep(0.5)
        used = [sum(p.cpu_times()[:2]) - sum(b[:2]) for p, b in zip(peers, before)]
        ranks[victim].resume()
        assert all(u < 0.2 for u in used), f"peers of a stopped rank used {used} s of CPU in 0.5 s"
        time.sleep(0.2)
    (job.dir / "finish").write_text("")
    assert job.wait(90) == 0, job.output()
    done = job.records("done")
    assert len(done) == n and all(d["rounds"] > 0 for _, d in done), job.output()
    job.assert_no_leftovers()


KILL_MID_P2P = """
ignore_sigterm()
g = cl.init(); r = g.rank()
big = np.ones(1 << 22, np.float64)   # 32 MiB: many rings' worth in flight
emit(ready=True)
try:
    for i in range(100000):
        if r == 0:
            cl.send(big, 1, tag=1)
        else:
            cl.recv(big.shape, np.float64, 0, tag=1)
except cl.CommError as e:
    emit(t=t_wall(), etype=type(e).__name__, msg=str(e), i=i)
    sys.exit(0)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [0, 1])
def test_sigkill_mid_large_message_is_peer_lost(jobs, victim):
    job = jobs(KILL_MID_P2P, 2, env={"COMMLIB_TIMEOUT": "30"}, commrun_args=["--grace", "10"]).start()
    ranks = job.wait_ranks()
    job.wait_for(lambda j: len(j.records("ready")) == 2, 60, "both ranks to be ready")
    time.sleep(0.5)
    t_kill = time.time()
    ranks[victim].kill()
    assert job.wait(40) == 137, job.output()
    survivor_reports(job, victim, t_kill, bound=2.0, names=f"rank {victim}")
    job.assert_no_leftovers()
