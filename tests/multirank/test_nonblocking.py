"""Non-blocking requests and i-collectives through the real launcher (cases/nonblocking.py).

One job per world size and transport runs each section of each part below as an
item `PART.SECTION` (the case's docstring lists them).
COMMLIB_TIMEOUT is 10 s here (the longest legitimate wait in the case is
under 1 s): a request stuck behind another surfaces as CommTimeout, not as a
hang, and the harness kills the job if it outlives its own limit.

Receives still pending when a program ends must not delay its exit: the
`exit` part of the case, and a plain user program generated into tmp_path.
"""
import re
import time

import pytest

from _harness import batched

ENV = {"COMMLIB_TIMEOUT": "10"}
PARTS = {
    "p2p": "ring/halo/fan-in with wait_any/100 outstanding requests",
    "sync": "issend/cancel/blocking calls beside pending requests/who makes progress (handoff)/test_any and "
            "test_all",
    "coll": "i-collectives and sub-group requests",
}
EXIT_S = 20.0  # "promptly": an exit that waits out the group timeout (25 s or 60 s below) fails


test_nonblocking = batched("nonblocking.py", [1, 2, 3, 4], env=ENV,
                           doc="\n".join(f"{part}: {what}" for part, what in PARTS.items()))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [1, 2, 3, 4], ids=lambda n: f"n{n}")
def test_pending_irecv_at_exit_case(n, assert_ranks_ok, run):
    # A group timeout above EXIT_S: an exit that waits it out fails on time, not by luck.
    t = time.monotonic()
    result = run(n, "nonblocking.py", "exit", env={"COMMLIB_TIMEOUT": "25"}, timeout=45)
    took = time.monotonic() - t
    assert_ranks_ok(result, n, "pending irecvs left at exit")
    assert took < EXIT_S, (f"the job took {took:.1f} s to exit with pending receives (limit {EXIT_S} s)\n"
                           f"{result[1][-3000:]}")


PROGRAM = '''\
"""A user program: post a receive nobody will ever answer, then leave."""
import sys

import numpy as np

import commlib as cl

g = cl.init()
me, n = g.rank(), g.size()
cl.barrier()  # every rank is up before any can leave
req = cl.irecv((1000,), np.float64, (me + 1) % n, tag=77)
print(f"rank {me}: irecv posted, done={req.test()}", flush=True)
if sys.argv[-1] == "finalize":
    cl.finalize()
print(f"rank {me}: leaving", flush=True)
'''


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["exit", "finalize"])
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"n{n}")
def test_pending_irecv_program_exits(n, ending, tmp_path, run):
    script = tmp_path / "pending_irecv.py"
    script.write_text(PROGRAM)
    t = time.monotonic()
    rc, out, err = run(n, str(script), ending, timeout=45)  # argv: SEED ending
    took = time.monotonic() - t
    report = f"exit code {rc} after {took:.1f} s\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert rc == 0, report
    for r in range(n):
        assert f"rank {r}: irecv posted, done=False" in out, f"rank {r} did not post its receive\n{report}"
        assert f"rank {r}: leaving" in out, f"rank {r} did not reach the end\n{report}"
    assert took < EXIT_S, f"exit took too long\n{report}"


ISSEND_LEFT = """
import sys, time
import numpy as np
import commlib as cl
g = cl.init(); r = g.rank()
received = sys.argv[2] == "received"
if r == 0:
    t = time.monotonic()
    req = cl.issend(np.arange(4.0), 1, tag=5)
    try:
        req.wait()
        print(f"rank 0: issend completed after {time.monotonic() - t:.2f} s", flush=True)
    except cl.PeerLost as e:
        print(f"rank 0: PeerLost after {time.monotonic() - t:.2f} s: {e}", flush=True)
elif r == 1 and received:
    time.sleep(0.3)  # a late receiver: rank 0 waits in the issend meanwhile (what is tested, not synchronisation)
    got = cl.recv((4,), np.float64, 0, tag=5)
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0]
print(f"rank {r}: leaving", flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["received", "never-received"])
def test_issend_to_a_rank_that_leaves(case, tmp_path, run):
    """An issend completes if the receiver matched it before leaving, and is PeerLost (promptly,
    naming the rank) if the receiver finished without ever receiving it: never a hang."""
    script = tmp_path / "issend_left.py"
    script.write_text(ISSEND_LEFT)
    rc, out, err = run(2, str(script), case, env={"COMMLIB_TIMEOUT": "30"}, timeout=45)
    report = f"exit code {rc}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert rc == 0, report
    if case == "received":
        assert "rank 0: issend completed" in out, report
    else:
        # rank 1's program ended (its finalize() ran at exit): the message says so
        m = re.search(r"rank 0: PeerLost after ([\d.]+) s: .*rank 1 \(its program ended without calling "
                      r"finalize\(\)\)", out)
        assert m and float(m.group(1)) < 10, report
