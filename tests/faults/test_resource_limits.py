"""Resource limits: the rank that hits one raises an error naming it, the others raise that cause
(not a timeout, not "connection closed"), commrun names the rank, and nothing is left behind or
half-written.

- Out of file descriptors (RLIMIT_NOFILE lowered, soft and hard, inside one rank after init()):
  while connecting (all_to_all) and while accepting (every peer sends to it). Before, the connect
  side raised a bare OSError or retried until the timeout, and the accept side backed off forever
  while its peers waited in its listen backlog: the job hung for the whole timeout.
- Out of memory (RLIMIT_AS): the allocation's MemoryError is the cause every peer names.
- No thread (what "can't start new thread" under a memory or process limit does) for a handshake
  or for point-to-point progress: before, the accept thread died and its peers waited out the
  timeout; a failed progress thread made finalize() raise joining a thread never started.
- A full disk for --trace (a small tmpfs, so root only): the ranks' records directory full
  (before: SIGBUS in the rank at its next record) and the trace file's own disk full (before: a
  half-written FILE.json.tmp was left). The job's result is unaffected either way.
- The soft RLIMIT_NOFILE is raised to the hard limit in ranks and commrun.
"""
import os
import subprocess
import sys
import time

import pytest

from faultlib import REPO

pytestmark = pytest.mark.timeout(120)
QUICK_S = 15.0  # with COMMLIB_TIMEOUT=60: an error this fast was not a timeout

NOFILE = """
import resource, threading
where = sys.argv[1]
g = cl.init()
r, n = g.rank(), g.size()
cl.all_reduce(np.ones(4))
if r == 2:
    cap = len(os.listdir("/proc/self/fd")) + 16
    resource.setrlimit(resource.RLIMIT_NOFILE, (cap, cap))
    held = []
    while True:                        # take every descriptor left: not one more for commlib
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            break
t0 = t_wall()
try:
    cl.barrier()                        # no peer reaches rank 2 before it has no descriptor left
    if where == "connect":
        cl.all_to_all(np.arange(4.0 * n))
    elif r == 2:                        # accept: every peer connects to rank 2 for point-to-point
        for src in range(n):
            if src != 2:
                cl.recv((4,), np.float64, src)
        cl.barrier()
    else:
        cl.send(np.ones(4), 2)
        cl.barrier()
    emit(etype="none")
except cl.CommError as e:
    emit(etype=type(e).__name__, msg=str(e), took=t_wall() - t0)
    raise
"""


def _check_cause(job, rc, n, culprit, culprit_words, peer_words):
    told = job.by_rank("etype")
    out = job.output()[-4000:]
    assert rc == 1, out
    assert f"commrun: rank {culprit} " in job.stderr(), out
    rec = told.get(culprit)
    assert rec is not None and rec["etype"] == "CommError", out
    assert all(w in rec["msg"] for w in culprit_words), rec
    named = 0
    for r in range(n):
        rec = told.get(r)
        # stopped by commrun before it noticed, or done before the failure (its exchange with the
        # culprit had happened): allowed, the culprit is named above
        if r == culprit or rec is None or rec["etype"] == "none":
            continue
        named += 1
        assert rec["etype"] == "PeerLost" and f"rank {culprit}" in rec["msg"], (r, rec)
        assert all(w in rec["msg"] for w in peer_words), (r, rec)
        assert rec["took"] < QUICK_S, (r, rec)
    assert named, f"no other rank reported the cause\n{out}"


@pytest.mark.parametrize("where", ["connect", "accept"])
def test_out_of_file_descriptors_is_named_by_every_rank(jobs, where):
    job = jobs(NOFILE, 4, args=(where,), env={"COMMLIB_TIMEOUT": "60"}).start()
    rc = job.wait(90)
    words = ["out of file descriptors", "RLIMIT_NOFILE", "ulimit -n"]
    _check_cause(job, rc, 4, 2, words, ["out of file descriptors"])
    job.assert_no_leftovers()


MEMORY = """
import resource, psutil
g = cl.init()
r = g.rank()
x = np.ones(4 << 20)                    # 32 MiB a rank: the gathered result is 96 MiB
cl.all_reduce(np.ones(4))
if r == 1:
    vm = psutil.Process().memory_info().vms
    resource.setrlimit(resource.RLIMIT_AS, (vm + (48 << 20), resource.RLIM_INFINITY))
t0 = t_wall()
try:
    cl.all_gather(x)
    emit(etype="none")
except cl.CommError as e:
    emit(etype=type(e).__name__, msg=str(e), took=t_wall() - t0)
    raise
"""


def test_out_of_memory_is_the_cause_every_peer_names(jobs):
    job = jobs(MEMORY, 3, env={"COMMLIB_TIMEOUT": "60"}).start()
    rc = job.wait(90)
    out = job.output()[-4000:]
    assert rc == 1 and "commrun: rank 1 " in job.stderr(), out
    assert "MemoryError" in job.output(), out
    for r, rec in job.by_rank("etype").items():
        assert r != 1, rec
        assert rec["etype"] == "PeerLost" and "rank 1 failed: MemoryError" in rec["msg"], (r, rec)
        assert rec["took"] < QUICK_S, (r, rec)
    job.assert_no_leftovers()


NO_THREAD = """
import threading
which = sys.argv[1]
g = cl.init()
r, n = g.rank(), g.size()
cl.all_reduce(np.ones(4))
if r == 1:                              # what a memory or process limit does to Thread.start
    start = threading.Thread.start
    def refuse(self):
        if (self.name == "commlib-progress") == (which == "progress"):
            raise RuntimeError("can't start new thread")
        return start(self)
    threading.Thread.start = refuse
t0 = t_wall()
try:
    cl.barrier()                        # rank 1 refuses threads from here on
    if r == 1:                          # a posted receive nobody waits on is the progress thread's work:
        req = cl.irecv((4,), np.float64, 0)  # (a blocking recv may finish on the one-call path, no thread)
        req.wait()
        cl.barrier()
    elif r == 0:
        cl.send(np.ones(4), 1)
        cl.barrier()
    else:
        cl.barrier()
    emit(etype="none")
except cl.CommError as e:
    emit(etype=type(e).__name__, msg=str(e), took=t_wall() - t0)
    raise
"""


@pytest.mark.parametrize("which", ["handshake", "progress"])
def test_no_thread_is_an_error_not_a_wait(jobs, which):
    job = jobs(NO_THREAD, 3, args=(which,), env={"COMMLIB_TIMEOUT": "60"}).start()
    rc = job.wait(90)
    words = "no thread for its handshake" if which == "handshake" else "no thread for point-to-point progress"
    _check_cause(job, rc, 3, 1, [words, "RLIMIT_AS", "RLIMIT_NPROC"], [words])
    job.assert_no_leftovers()


def test_the_soft_fd_limit_is_raised_to_the_hard_one(tmp_path):
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit ({hard}) leaves nothing to raise")
    script = tmp_path / "nofile.py"
    script.write_text("import resource, commlib as cl\ncl.init()\n"
                      "print('NOFILE', resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)\n")
    run = subprocess.run([sys.executable, "-m", "commrun", "-n", "2", str(script)], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": REPO},
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    assert run.returncode == 0, run.stderr[-3000:]
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert sorted(ln.split()[-1] for ln in run.stdout.splitlines() if "NOFILE" in ln) == [str(want)] * 2


# ------------------------------------------------------------------------------ a full disk for --trace
CALLS = """
import commlib as cl, numpy as np
g = cl.init()
x = np.ones(4)
for _ in range(45000):                  # two chunks of records a rank (32,768 calls each)
    cl.all_reduce(x)
print("RESULT", g.rank(), cl.all_reduce(np.array([g.rank()]))[0], flush=True)
"""


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a directory on a tmpfs of that size, unmounted at the end (root only)."""
    if os.geteuid() != 0:
        pytest.skip("a small file system for a full disk needs root (mount -t tmpfs)")
    made = []

    def mount(size):
        d = tmp_path / f"fs{len(made)}"
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True)
        made.append(d)
        return d
    yield mount
    for d in made:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _commrun(tmp_path, env, *args):
    script = tmp_path / "calls.py"
    script.write_text(CALLS)
    env = {**os.environ, "PYTHONPATH": REPO, "COMMLIB_TIMEOUT": "60", **env}
    return subprocess.run([sys.executable, "-m", "commrun", "-n", "2", *args, str(script)], env=env,
                          capture_output=True, text=True, timeout=100, cwd=tmp_path)


def test_records_directory_full_stops_tracing_not_the_job(tmp_path, tmpfs):
    records = tmpfs("4m")                # room for two chunks of the four the ranks want
    out = tmp_path / "t.json"
    t0 = time.monotonic()
    run = _commrun(tmp_path, {"TMPDIR": str(records)}, "--trace", str(out))
    assert run.returncode == 0, run.stderr[-3000:]
    assert time.monotonic() - t0 < 60
    assert sorted(ln for ln in run.stdout.splitlines() if "RESULT" in ln) == ["[0] RESULT 0 1", "[1] RESULT 1 1"]
    stopped = [ln for ln in run.stderr.splitlines() if "tracing stopped: No space left on device" in ln]
    assert stopped and all("the trace keeps the" in ln for ln in stopped), run.stderr[-3000:]
    assert "SIGBUS" not in run.stderr and "killed" not in run.stderr
    import json
    events = json.loads(out.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "all_reduce") >= 32768  # the chunk that fitted
    assert os.listdir(records) == []     # commrun removed the records


def test_trace_file_disk_full_leaves_nothing_half_written(tmp_path, tmpfs):
    small = tmpfs("16k")
    run = _commrun(tmp_path, {}, "--trace", str(small / "t.json"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"--trace: could not write {small / 't.json'}" in run.stderr, run.stderr[-3000:]
    assert "No space left on device" in run.stderr
    assert os.listdir(small) == []       # neither t.json nor t.json.tmp
