"""COMMLIB_DEBUG=INFO through commrun: what a user reads when asking commlib what it did."""
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
        assert f"connected to rank {1 - rank} (group 0, collectives) over unix" in text and "shared memory" in text
        assert "the one-call path takes all_reduce up to" in text
        assert text.count("all_reduce of 2097152 B on 2 ranks: ring (ALL_REDUCE_SMALL_BYTES_PAIR=") == 1  # once
        assert "failure" in text and "MismatchError" in text


def test_off_by_default(commrun):
    script = commrun.script("prog.py", PROGRAM)
    r = commrun.run("-n", 2, script)
    assert "[commlib rank" not in r.stderr
