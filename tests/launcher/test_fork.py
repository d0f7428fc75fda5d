"""commrun --fork: ranks forked from a commrun that imported NumPy and commlib once.

A forked rank must be indistinguishable from `python script.py` to the program:
its own process group, no inherited descriptors, default signal handlers,
sys.argv/sys.path[0]/__main__ as Python sets them, atexit and non-daemon
threads at exit, Python's exit codes. The shared behaviour (environment,
output, stdin, failures, signals, --timeout) is covered by the launcher tests
that run under both launches.
"""
import json
import os
import re
import resource
import subprocess
import textwrap
import time

import numpy as np
import pytest

from _tagged import by_rank

pytestmark = pytest.mark.timeout(60)


def forked(commrun):
    commrun.options = ("--fork",)
    return commrun


def test_forked_rank_is_a_fresh_program(commrun):
    script = forked(commrun).script("fresh.py", """
        import gc, json, os, signal, sys, threading, weakref
        class Cycle:
            pass
        c = Cycle(); c.me = c; alive = weakref.ref(c); del c
        gc.collect()  # the program's garbage is collected; commrun's objects (frozen) never are,
        collected = alive() is None  # so no finalizer of theirs closes a descriptor the rank now uses
        fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
        fds = [fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")]   # the listing's own fd is gone
        print(json.dumps({
            "fds": fds,
            "own_group": os.getpgid(0) == os.getpid(),
            "argv": sys.argv, "name": __name__, "file": __file__, "path0": sys.path[0],
            "package": __package__, "spec": __spec__, "loader": type(__loader__).__name__,
            "builtins": type(__builtins__).__name__, "main": sys.modules["__main__"].__dict__ is globals(),
            "int": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            "term": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "chld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
            "threads": threading.active_count(), "gc": gc.isenabled() and collected,
            "rank": os.environ["RANK"], "stdout_fd": sys.stdout.fileno(), "stdin_fd": sys.stdin.fileno(),
        }))
    """)
    r = commrun.run("-n", 3, script, "x", "--y")
    assert r.returncode == 0, r.stderr
    got = {rank: json.loads(lines[0]) for rank, lines in by_rank(r.stdout).items()}
    assert sorted(got) == [0, 1, 2]
    for rank, g in got.items():
        assert g["fds"] == [0, 1, 2], g["fds"]  # commrun's sockets and the other ranks' pipes are closed
        assert g["own_group"] and g["int"] and g["term"] and g["chld"]
        assert g["argv"] == ["fresh.py", "x", "--y"] and g["name"] == "__main__"
        assert g["file"] == str(commrun.cwd / "fresh.py")  # absolute, as `python fresh.py` gives it
        assert (g["package"], g["spec"], g["loader"], g["builtins"], g["main"]) == (
            None, None, "SourceFileLoader", "module", True)
        assert g["path0"] == str(commrun.cwd.resolve())
        assert g["threads"] == 1 and g["gc"]
        assert g["rank"] == str(rank) and (g["stdout_fd"], g["stdin_fd"]) == (1, 0)


def test_exit_runs_atexit_and_joins_threads(commrun):
    script = forked(commrun).script("bye.py", """
        import atexit, os, sys, threading
        rank = int(os.environ["RANK"])
        atexit.register(lambda: print("atexit", rank, flush=True))
        def late():
            threading.main_thread().join()  # still running when the program has ended
            print("thread done", rank, flush=True)
        threading.Thread(target=late).start()
        if rank == 1:
            sys.exit("rank 1 says goodbye")  # a string: printed to stderr, exit code 1
    """)
    r = commrun.run("-n", 2, script)
    assert r.returncode == 1
    out = by_rank(r.stdout)
    assert out[0] == ["thread done 0", "atexit 0"]  # threads joined before atexit, as at interpreter exit
    assert "[1] rank 1 says goodbye" in r.stderr
    assert re.search(r"commrun: rank 1 \(pid \d+\) exited with code 1", r.stderr)


def test_traceback_starts_in_the_program(commrun):
    script = forked(commrun).script("boom.py", """
        def f():
            return 1 / 0
        f()
    """)
    r = commrun.run("-n", 2, script)
    assert r.returncode == 1
    tb = [line[4:] for line in r.stderr.splitlines() if line.startswith("[0] ")]
    assert tb[0] == "Traceback (most recent call last):"
    assert re.fullmatch(r'  File ".*/boom.py", line 4, in <module>', tb[1]), tb  # no launcher or runpy frames
    assert tb[-1] == "ZeroDivisionError: division by zero"


def test_main_module_objects_pickle_across_ranks(commrun):
    """Classes defined in the script live in __main__ (runpy), so pickled objects resolve on the peer."""
    script = forked(commrun).script("objs.py", """
        from dataclasses import dataclass
        from commlib import MPI

        @dataclass
        class Point:
            x: int
            y: int

        comm = MPI.COMM_WORLD
        p = comm.bcast(Point(comm.rank + 3, 4) if comm.rank == 0 else None, root=0)
        print(type(p).__module__, p)
    """)
    r = commrun.run("-n", 3, script)
    assert r.returncode == 0, r.stderr
    assert by_rank(r.stdout) == {i: ["__main__ Point(x=3, y=4)"] for i in range(3)}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives_against_numpy(commrun, n):
    script = forked(commrun).script("coll.py", """
        import numpy as np
        import commlib as cl
        g = cl.init()
        r, n = g.rank(), g.size()
        x = np.arange(1000, dtype=np.float64) * (r + 1)
        s = cl.all_reduce(x)
        parts = cl.all_gather(np.full(3, r, dtype=np.int32))
        right = cl.sendrecv(np.array([r]), (r + 1) % n, (r - 1) % n)
        cl.barrier()
        print(float(s.sum()), parts.ravel().tolist(), int(right[0]))
    """)
    r = commrun.run("-n", n, script)
    assert r.returncode == 0, r.stderr
    want_sum = float((np.arange(1000, dtype=np.float64) * sum(range(1, n + 1))).sum())
    for rank, lines in by_rank(r.stdout).items():
        total, rest = lines[0].split(" ", 1)
        parts, right = rest.rsplit(" ", 1)
        assert float(total) == want_sum
        assert json.loads(parts) == [i for i in range(n) for _ in range(3)]
        assert int(right) == (rank - 1) % n


def test_fork_refuses_executables(commrun):
    r = commrun.run("--fork", "-n", 2, "--", "true")
    assert r.returncode == 2
    assert "--fork starts Python programs" in r.stderr


def test_fork_takes_this_python_running_a_script_or_a_module(commrun):
    """`commrun --fork -n N PYTHON script.py` (the form most programs are run in) and `PYTHON -m module`,
    where PYTHON is the interpreter commrun runs in: the ranks are forks of it, as with `script.py`;
    interpreter options it cannot fork (`-c`) are refused, naming them."""
    import sys
    script = commrun.script("which.py", """
        import os, sys
        print(os.environ["RANK"], "numpy" in sys.modules, sys.argv[1:])
    """)
    (commrun.cwd / "whichmod.py").write_text("import os, sys\nprint(os.environ['RANK'], sys.argv[1:])\n")
    r = commrun.run("--fork", "-n", 2, sys.executable, script, "a")
    assert r.returncode == 0, r.stderr
    assert sorted(by_rank(r.stdout).items()) == [(0, ["0 True ['a']"]), (1, ["1 True ['a']"])]  # forks: NumPy in
    r = commrun.run("--fork", "-n", 2, sys.executable, "-m", "whichmod", "b")
    assert r.returncode == 0, r.stderr
    assert sorted(by_rank(r.stdout).items()) == [(0, ["0 ['b']"]), (1, ["1 ['b']"])]
    r = commrun.run("--fork", "-n", 2, sys.executable, "-c", "print(1)")
    assert r.returncode == 2 and "interpreter options (-c print(1)) need exec'd ranks" in r.stderr, r.stderr


def _nofile_1024():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))  # soft and hard, as `ulimit -n 1024` sets them


@pytest.mark.timeout(240)
def test_400_ranks_under_a_limit_of_1024_open_files(commrun):
    """commrun holds, for each rank, its stdout and stderr pipes and its coordinator connection: 1,264
    descriptors for 400 ranks. Under `ulimit -n 1024` each rank's stderr shares its stdout pipe
    (said once) and the job runs; before, the coordinator silently stopped accepting and it hung.
    Rank 0 then sends a task to each of the 399 others and takes their answers, keeping at most 32
    outgoing point-to-point connections (the idle-connection limit, lowered) once all are read, and
    32 incoming ones once it has asked the workers to close theirs. About 10 s on 2 idle cores, over 20 s
    (up to 35) beside the suite's other jobs: 400 ranks forked, connected and reaped."""
    script = forked(commrun).script("many.py", """
        import sys
        import time
        import numpy as np
        import commlib as cl
        g = cl.init()
        r, n = g.rank(), g.size()
        total = cl.all_reduce(np.array([r], np.int64))[0]
        assert total == n * (n - 1) // 2, total
        print(f"to stderr {r}", file=sys.stderr)
        if r == 0:
            print(f"sum {total} of {n}")
            # a manager and its workers, at most 32 outgoing point-to-point connections kept
            for w in range(1, n):
                cl.send(np.array([w], np.int64), w, tag=1)
            answers = [int(cl.recv(1, np.int64, w, tag=2)[0]) for w in range(1, n)]
            assert answers == [2 * w for w in range(1, n)], answers
            cl.send(np.zeros(1, np.int64), 1, tag=3)  # every other connection's bytes are taken: down to 32
            p2p, ep = g.engine.p2p, g.channel.ep
            deadline = time.monotonic() + 60
            while len(ep.incoming_socks(1)) > 32 and time.monotonic() < deadline:  # (1: point-to-point)
                cl.iprobe(1, tag=4)  # reading on: the workers asked close their connections to it
                time.sleep(0.01)
            print(f"manager: {len(p2p._out)} outgoing, {p2p.retired} closed, {len(ep.incoming_socks(1))} incoming, "
                  f"{p2p.asks} asked")
        else:
            cl.send(cl.recv(1, np.int64, 0, tag=1) * 2, 0, tag=2)
            if r == 1:
                cl.recv(1, np.int64, 0, tag=3)
        cl.finalize()
    """)
    env = dict(commrun.env, COMMLIB_P2P_CONNECTIONS="32", COMMLIB_P2P_IDLE_S="0")
    r = subprocess.run(commrun.argv(["-n", 400, script]), env=env, cwd=commrun.cwd, capture_output=True,
                       text=True, timeout=220, preexec_fn=_nofile_1024)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[0] sum 79800 of 400" in r.stdout.splitlines()
    closed = re.search(r"^\[0\] manager: 32 outgoing, (\d+) closed, (\d+) incoming, (\d+) asked$", r.stdout, re.M)
    assert closed, r.stdout[-2000:]
    retired, incoming, asked = (int(v) for v in closed.groups())
    assert retired >= 399 - 32 and 0 < incoming <= 32 and asked >= 399 - 32, closed.group(0)
    assert "the limit is 1,024" in r.stderr and "each rank's stderr goes to its stdout" in r.stderr
    assert sorted(int(m) for m in re.findall(r"^\[(\d+)\] to stderr \1$", r.stdout, re.M)) == list(range(400))


def test_too_many_ranks_for_the_open_file_limit_is_refused_up_front(commrun):
    """Ranks that could not fit even a pipe each: an error naming the limit, no rank started."""
    script = forked(commrun).script("never.py", "open('started', 'w').close()\n")
    t0 = time.monotonic()
    r = subprocess.run(commrun.argv(["-n", 600, script]), env=commrun.env, cwd=commrun.cwd, capture_output=True,
                       text=True, timeout=60, preexec_fn=_nofile_1024)
    assert r.returncode == 1 and time.monotonic() - t0 < 30, (r.returncode, r.stderr[-2000:])
    assert "600 ranks need at least 1,264 file descriptors" in r.stderr and "the limit is 1,024" in r.stderr
    assert not (commrun.cwd / "started").exists()


def test_exec_ranks_share_a_pipe_under_a_low_open_file_limit(commrun):
    """The same fallback for exec'd ranks (Popen's stderr=STDOUT): 6 ranks under a limit of 80, which
    fits 2 descriptors a rank and commrun's own but not 3 a rank."""
    script = commrun.script("few.py", """
        import sys
        import time
        import numpy as np
        import commlib as cl
        g = cl.init()
        print(f"err {g.rank()}", file=sys.stderr)
        print(f"sum {int(cl.all_reduce(np.array([1]))[0])}")
    """)

    def limit_80():
        resource.setrlimit(resource.RLIMIT_NOFILE, (80, 80))

    r = subprocess.run(commrun.argv(["-n", 6, script]), env=commrun.env, cwd=commrun.cwd, capture_output=True,
                       text=True, timeout=120, preexec_fn=limit_80)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "each rank's stderr goes to its stdout" in r.stderr
    lines = by_rank(r.stdout)
    assert sorted(lines) == list(range(6)) and all(sorted(v) == [f"err {k}", "sum 6"] for k, v in lines.items()), lines


def test_a_forked_rank_records_its_calls_when_asked(commrun):
    """commrun imported commlib before the rank had COMMLIB_STATS: the rank turns recording on itself,
    and every layer that registered with tracing (the API at import, commlib.MPI imported later by
    the program) has its calls recorded."""
    script = forked(commrun).script("recorded.py", """
        import json
        import numpy as np
        import commlib as cl
        from commlib import MPI
        comm = MPI.COMM_WORLD
        y = np.empty(3)
        comm.Allreduce(np.ones(3), y)
        cl.all_reduce(np.ones(2))
        cl.isend(np.ones(1), (comm.rank + 1) % comm.size, 5).wait()
        cl.recv((1,), np.float64, (comm.rank - 1) % comm.size, 5)
        print(json.dumps(sorted({row["op"] for row in cl.stats()})))
    """)
    r = commrun.run("--stats", "-n", 2, script)
    assert r.returncode == 0, r.stderr
    got = {rank: json.loads(lines[0]) for rank, lines in by_rank(r.stdout).items()}
    for rank in (0, 1):
        assert {"MPI.Allreduce", "all_reduce", "isend", "recv", "wait"} <= set(got[rank]), (rank, got[rank])
    assert "communication by call and size" in r.stderr  # commrun's table of every rank's records


def _module(commrun, name, body):
    """A module commrun itself can import (the test's directory on its PYTHONPATH)."""
    (commrun.cwd / f"{name}.py").write_text(textwrap.dedent(body))
    return {"PYTHONPATH": os.pathsep.join([str(commrun.cwd), commrun.env["PYTHONPATH"]])}


def test_preload_imports_once_before_the_ranks(commrun):
    """--preload MODULE: imported in commrun before the forks (once: its import-time side effect
    happens in commrun's process, never in a rank's), and in sys.modules when the program starts."""
    env = _module(commrun, "heavy", """
        import os
        LOADED_IN = os.getpid()
        TABLE = [i * i for i in range(1000)]
    """)
    script = forked(commrun).script("uses.py", """
        import os, sys
        was_loaded = "heavy" in sys.modules
        import heavy
        import numpy as np
        import commlib as cl
        g = cl.init()
        print(was_loaded, heavy.LOADED_IN != os.getpid(), heavy.TABLE[31], int(cl.all_reduce(np.array([g.rank()]))[0]))
    """)
    r = commrun.run("--preload", "heavy", "-n", 3, script, env=env)
    assert r.returncode == 0, r.stderr
    assert {rank: lines for rank, lines in by_rank(r.stdout).items()} == {
        rank: ["True True 961 3"] for rank in range(3)}


def test_preload_needs_fork_and_an_importable_module(commrun):
    script = commrun.script("p.py", "print('never')\n")
    r = commrun.run("--preload", "json", "-n", 2, script)
    assert r.returncode == 2 and "--preload imports modules for ranks forked from commrun: it needs --fork" in r.stderr
    forked(commrun)
    r = commrun.run("--preload", "no_such_module_here", "-n", 2, script)
    assert r.returncode == 1 and "never" not in r.stdout
    assert "--fork: cannot import what ranks share (No module named 'no_such_module_here')" in r.stderr


def test_preload_reports_a_module_that_fails_at_import(commrun):
    env = _module(commrun, "broken", "raise ValueError('no config file here')\n")
    script = forked(commrun).script("p.py", "print('never')\n")
    r = commrun.run("--preload", "broken", "-n", 2, script, env=env)
    assert r.returncode == 1 and "never" not in r.stdout and "Traceback" not in r.stderr, r.stderr
    assert "--fork: cannot import what ranks share (importing broken raised ValueError: no config file here)" in r.stderr


def test_preload_refuses_a_module_that_starts_a_thread(commrun):
    """A forked copy of a threaded process may deadlock on a lock the thread held: refused, by name."""
    env = _module(commrun, "threaded", """
        import threading, time
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    """)
    script = forked(commrun).script("p.py", "print('never')\n")
    r = commrun.run("--preload", "threaded", "-n", 2, script, env=env)
    assert r.returncode == 1 and "never" not in r.stdout
    assert "importing threaded started 1 thread(s); run without --preload threaded" in r.stderr


def test_preload_refuses_a_module_that_starts_commlib(commrun):
    """mpi4py initializes MPI when imported: preloaded, commlib.MPI's would start in commrun as a job of
    one rank, and every forked rank would inherit that world (each its own COMM_WORLD of size 1)."""
    script = forked(commrun).script("p.py", "print('never')\n")
    r = commrun.run("--mpi4py", "--preload", "mpi4py", "-n", 2, script)
    assert r.returncode == 1 and "never" not in r.stdout, (r.stdout, r.stderr)
    assert "importing mpi4py started commlib (as mpi4py's MPI_Init at import does) in commrun" in r.stderr
