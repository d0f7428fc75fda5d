"""COMMLIB_DEBUG=INFO through commrun: what a user reads when asking commlib what it did."""
import re

import pytest

pytestmark = pytest.mark.timeout(60)

PROGRAM = """
    import numpy as np
    import commlib as cl
    g = cl.init()
    cl.all_sum(np.ones(4))
    cl.all_sum(np.ones(1 << 18))  # 2 MiB: not the one-call path's size
    cl.all_sum(np.ones(1 << 18))
    if g.rank() == 0:
        cl.all_sum(np.ones(3, np.float32))  # a mismatch: the failure and its cause are logged
    else:
        cl.all_sum(np.ones(3, np.float64))
"""


def test_info_lines_through_commrun(commrun, tmp_path):
    script = commrun.script("prog.py", PROGRAM)
    r = commrun.run("-n", 2, script, env={"COMMLIB_DEBUG": "INFO",
                                          "COMMLIB_DEBUG_FILE": str(tmp_path / "rank%r.log")})
    assert r.returncode != 0 and "MismatchError" in r.stderr
    for rank in (0, 1):
        text = (tmp_path / f"rank{rank}.log").read_text()
        assert f"[commlib rank {rank} +" in text
        assert f"joined as rank {rank} of 2 (2 on this host), started by commrun" in text
        assert f"connected to rank {1 - rank} (collectives of every group) over unix" in text and "shared memory" in text
        assert "the one-call path takes all_reduce up to" in text
        assert text.count("all_reduce of 2097152 B on 2 ranks: ring (ALL_REDUCE_SMALL_BYTES_PAIR=") == 1  # once
        assert "failure" in text and "MismatchError" in text


def test_off_by_default(commrun):
    script = commrun.script("prog.py", PROGRAM)
    r = commrun.run("-n", 2, script)
    assert "[commlib rank" not in r.stderr


@pytest.mark.parametrize("spin_us", [0, 200_000])
def test_finalize_says_how_waits_ended(commrun, spin_us):
    # rank 1 sleeps before each all_sum, so rank 0 waits every time: without a spin each wait sleeps in
    # poll; with a spin far longer than rank 1's lateness (200 ms against 20 ms) none does
    script = commrun.script("waits.py", """
        import time
        import numpy as np
        import commlib as cl
        g = cl.init()
        for i in range(5):
            if g.rank() == 1:
                time.sleep(0.02)  # late on purpose: rank 0's waits are what is counted
            cl.all_sum(np.ones(4))
    """)
    r = commrun.run("-n", 2, script, env={"COMMLIB_DEBUG": "INFO", "COMMLIB_SPIN_US": str(spin_us)})
    assert r.returncode == 0, r.stderr
    line, = [x for x in r.stderr.splitlines() if "[commlib rank 0 " in x and "finalize:" in x]
    m = re.search(r"group 0 collectives: (\d+) waits, (\d+) ended spinning \((\d+) %\), (\d+) slept \((\d+) sleeps", line)
    assert m, line
    waits, spun, pct, slept, sleeps = map(int, m.groups())
    assert waits >= 5 and spun + slept == waits and sleeps >= slept, line
    if spin_us:
        assert "spin fixed 200000 us" in line and slept == 0 and pct == 100, line
    else:
        assert "no spin" in line and spun == 0 and slept == waits, line
