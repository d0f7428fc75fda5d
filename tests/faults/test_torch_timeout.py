"""The group's timeout comes from init_process_group(timeout=): a collective a peer never joins fails
with a RuntimeError (commlib's CommTimeout) close to that timeout, not at torch's default 30 minutes."""
import os
import re
import subprocess
import sys

import pytest

from _needs import skip_unless_installed

TRANSPORTS = ("shm",)  # a front-end on the API: the transports' own faults are the rest of this suite's

skip_unless_installed("torch", "torch is not installed: pip install torch==2.13.0 (CPU build)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRUB = ("COMMLIB_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "SLURM_", "OMPI_", "PMI")


@pytest.mark.timeout(90)
def test_init_process_group_timeout_bounds_a_collective(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    timeout_s, late_s = 3.0, 12.0
    argv = [sys.executable, "-m", "commrun", "-n", "2", os.path.join(HERE, "torch_timeout_case.py"), str(timeout_s),
            str(late_s)]
    proc = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=80)
    m = re.search(r"rank 0: RuntimeError after ([\d.]+) s: (\w+): (.*)", proc.stdout)
    assert m, f"rank 0 did not raise a RuntimeError:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    waited, kind = float(m.group(1)), m.group(2)
    assert kind == "CommTimeout", m.group(0)
    assert timeout_s * 0.8 <= waited <= timeout_s + 4.0, f"raised after {waited} s for a {timeout_s} s timeout"
