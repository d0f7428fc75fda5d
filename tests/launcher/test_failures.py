"""commrun when things go wrong: failing ranks, signals, Ctrl-C, commrun killed, --timeout."""
import re
import signal
import time

import psutil
import pytest
from _waiting import SCALE

pytestmark = pytest.mark.timeout(60)
# ranks exec'd as new interpreters (the default) and forked from commrun (--fork)
both_launches = pytest.mark.parametrize("commrun", ["exec", "fork"], indirect=True)

SLEEPER = """
    import os, subprocess, sys, time
    rank = int(os.environ["RANK"])
    if "--grandchild" in sys.argv:
        subprocess.Popen(["sleep", "60"])
    if "--ignore-int" in sys.argv:
        import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("ready", flush=True)
    time.sleep(60)  # a running rank, until the signal under test stops it
"""


def gone(procs, timeout):
    """True when none of `procs` is running (zombies count as gone) within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def start_and_wait_ready(commrun, n, *args):
    script = commrun.script("sleeper.py", SLEEPER)
    p = commrun.popen("-n", n, "--grace", "1", script, *args)
    for _ in range(n):
        assert "ready" in p.stdout.readline()
    procs = psutil.Process(p.pid).children(recursive=True)
    return p, procs


def kill_all(procs):
    for q in procs:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass


@both_launches
@pytest.mark.parametrize(
    "body, code, words",
    [
        ("sys.exit(3)", 3, "exited with code 3"),
        ("raise ZeroDivisionError('boom')", 1, "exited with code 1"),
        ("os.kill(os.getpid(), signal.SIGKILL)", 137, "killed by SIGKILL"),
        ("os.kill(os.getpid(), signal.SIGSEGV)", 139, "killed by SIGSEGV"),
    ],
)
@pytest.mark.waits
@pytest.mark.timeout(120)
def test_first_failure_stops_the_job_with_its_code(commrun, body, code, words):
    """What is timed is from the failure to commrun's exit, not the ranks' start-up, which on a loaded
    machine (the suite's other workers) can take many seconds; commrun's own --timeout (below this
    test's) dumps every rank's stack should the job still hang."""
    script = commrun.script("fail.py", f"""
        import ctypes, os, pathlib, resource, signal, sys, time
        # no core dump: writing one (or piping it to a crash collector) can take the failing rank
        # many seconds to die on a loaded machine, which is not commrun's time to measure
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: not even to a core_pattern pipe
        up = pathlib.Path(__file__).parent
        (up / f"up.{{os.environ['RANK']}}").touch()
        if os.environ["RANK"] == "2":  # fails once every rank runs
            deadline = time.monotonic() + 60
            while len(list(up.glob("up.*"))) < 4:
                assert time.monotonic() < deadline, "the other ranks never started"
                time.sleep(0.005)
            (up / "failing").write_text(repr(time.time()))
            {body}
        time.sleep(100)  # the others run until commrun stops them
    """)
    p = commrun.popen("--timeout", 90, "-n", 4, script)
    lines = [(time.time(), line) for line in p.stderr]  # when commrun said each thing
    ended = time.time()
    p.wait(timeout=30)
    p.stdout.close()
    failing = commrun.cwd / "failing"
    stderr = "".join(line for _, line in lines)
    assert failing.exists(), f"rank 2 never failed; exit {p.returncode}:\n{stderr[-6000:]}"
    failed_at = float(failing.read_text())
    took = ended - failed_at
    # commrun's part is about 2 s (its next reap, NOTICE_S for the others to notice, SIGTERM); 30 s
    # (the suite's one setting scales it) still tells that from waiting out the others' 100 s sleep
    assert took < 30 * SCALE, (f"{took:.1f} s from the failure to commrun's exit, exit {p.returncode}; "
                               f"what commrun said when (s after the failure):\n"
                               + "".join(f"{t - failed_at:+7.2f} {line}" for t, line in lines)[-4000:])
    assert p.returncode == code, stderr[-3000:]
    failures = [line for line in stderr.splitlines() if line.startswith("commrun: rank")]
    assert len(failures) == 1 and re.fullmatch(rf"commrun: rank 2 \(pid \d+\) {words}", failures[0]), stderr
    if code == 1:  # the traceback comes before commrun's verdict, tagged
        assert stderr.index("[2] ZeroDivisionError: boom") < stderr.index("commrun: rank 2")


def test_every_rank_failing_at_once_reports_only_the_failure(commrun):
    """Ranks of a job that all raise right after init leave the coordinator while it sends them
    notices: what it cannot deliver to a rank that just left is no error of its own (it said
    "could not reach rank 2: [Errno 9] Bad file descriptor" when the rank's socket was closed
    before the rank left its table)."""
    script = commrun.script("all_fail.py", """
        import commlib as cl
        cl.init()
        raise ValueError("bad input")
    """)
    for _ in range(3):
        r = commrun.run("-n", 4, script)
        assert r.returncode == 1 and "ValueError: bad input" in r.stderr
        assert "could not reach" not in r.stderr and "Bad file descriptor" not in r.stderr, r.stderr


def _threads_notice(n):
    """commrun's one line on compute threads a rank (where n ranks share this host's cores)."""
    from commrun import spawn
    return "commrun: " + spawn.thread_vars(n, spawn.cpu_count(), {}, "auto")[1] + "\n"


def test_all_ranks_succeed(commrun):
    r = commrun.run("-n", 2, "--", "true")
    assert r.returncode == 0 and r.stderr in ("", _threads_notice(2)), r.stderr


@both_launches
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_leaves_no_process_behind(commrun, sig, code):
    p, procs = start_and_wait_ready(commrun, 3, "--grandchild")
    assert len(procs) >= 6  # 3 ranks + their `sleep` children
    try:
        t0 = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=5)
        assert not gone(procs, 5.0 - (time.monotonic() - t0))
        assert p.returncode == code
        assert f"commrun: got {sig.name}, stopping 3 rank(s)" in err
        assert "KeyboardInterrupt" in err  # SIGINT was forwarded, so Python ranks print where they were
    finally:
        kill_all(procs + [psutil.Process(p.pid)] if p.poll() is None else procs)

@both_launches
def test_interrupt_escalates_to_sigkill(commrun):
    p, procs = start_and_wait_ready(commrun, 2, "--ignore-int")
    try:
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=5)
        assert not gone(procs, 2)
        assert 0.9 < time.monotonic() - t0 < 5  # --grace 1
        assert p.returncode == 130
    finally:
        kill_all(procs)

@both_launches
def test_ranks_die_when_commrun_is_killed(commrun):
    p, procs = start_and_wait_ready(commrun, 3)
    try:
        p.kill()
        p.wait(5)
        assert not gone(procs, 5)
    finally:
        kill_all(procs)

@both_launches
def test_timeout_dumps_stacks_and_exits_124(commrun):
    script = commrun.script("stuck.py", """
        import time
        def wait_forever():
            time.sleep(60)  # stuck: --timeout is what ends it
        wait_forever()
    """)
    t0 = time.monotonic()
    r = commrun.run("-n", 2, "--timeout", "1", script)
    assert time.monotonic() - t0 < 10
    assert r.returncode == 124
    assert "commrun: job timed out after 1 s" in r.stderr
    for rank in (0, 1):
        assert re.search(rf"\[{rank}\]   File \".*stuck.py\", line \d+ in wait_forever", r.stderr), r.stderr
    assert "commrun: rank" not in r.stderr  # the timeout is the verdict, not the ranks' SIGABRT


@both_launches
def test_timeout_stacks_of_ranks_in_a_job_are_not_a_fatal_error(commrun):
    """A rank that joined the job prints its stacks on commlib's own signal (faulthandler.register),
    not as a 'Fatal Python error: Aborted' crash, then is stopped."""
    script = commrun.script("stuck_in_job.py", """
        import time
        import commlib as cl
        def stuck_in_barrier():
            cl.barrier()
        cl.init()
        if cl.init().rank() == 1:
            time.sleep(60)  # stuck outside commlib: --timeout is what ends it
        stuck_in_barrier()
    """)
    r = commrun.run("-n", 2, "--timeout", "2", script)
    assert r.returncode == 124
    assert "commrun: job timed out after 2 s" in r.stderr
    assert re.search(r"\[0\]   File \".*stuck_in_job.py\", line \d+ in stuck_in_barrier", r.stderr), r.stderr
    assert re.search(r"\[1\]   File \".*stuck_in_job.py\", line \d+ in <module>", r.stderr), r.stderr
    assert "Fatal Python error" not in r.stderr, r.stderr
    assert "commrun: rank" not in r.stderr
