"""commrun --trace / --stats with ranks on other hosts, each with its own /tmp.

Two namespace hosts whose remote shell also gives each host a private temporary directory (a
mount namespace with a per-host directory bound over commrun's TMPDIR): the ranks' records stay
on their host, as on real machines, and commrun must fetch them over the remote shell after the job. Skipped with the
reason without root, iproute2 or unshare.
"""
import json
import os
import re
import shutil
import sys
import tempfile

import pytest

from _netns import Fabric, base_env, run_job

pytestmark = pytest.mark.timeout(240)
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")


def test_records_of_every_host_are_fetched_into_one_trace(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux `unshare` is not installed")
    with Fabric(2, "10.236.10") as fab:
        # commrun makes its trace directory under TMPDIR=roots/local; the remote shell binds each
        # host's own roots/<host> over that path, so a rank's records (under the same name as
        # commrun's directory) land in its host's directory and nowhere commrun can see. /tmp, where
        # Python, the tree or a virtual environment may live, stays as it is.
        roots = tempfile.mkdtemp(prefix="commlib-hosts-", dir="/var/tmp")
        try:
            local = os.path.join(roots, "local")
            for d in ["local", *fab.hosts]:
                os.mkdir(os.path.join(roots, d))
            rsh = tmp_path / "hostshell"  # (a name ending in "rsh" would be taken for ssh)
            rsh.write_text(f"#!/bin/sh\nhost=$1\nshift\nexec ip netns exec $host unshare -m sh -c "
                           f"'mount --bind \"$0\" \"$1\" && shift && exec \"$@\"' {roots}/$host {local} \"$@\"\n")
            rsh.chmod(0o755)
            argv = ["ip", "netns", "exec", fab.hosts[0], sys.executable, "-m", "commrun", "--rsh", f"{rsh} {{host}}",
                    "--hosts", f"{fab.hosts[0]}:2,{fab.hosts[1]}:2", "--ifname", "fab0",
                    "--trace", str(tmp_path / "t.json"), "--stats", os.path.join(CASES, "trace_job.py")]
            rc, out, err, _ = run_job(argv, base_env(COMMLIB_TIMEOUT=60, TMPDIR=local), timeout=200)
            assert rc == 0 and out.count(": done") == 4, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
            assert "trace of 4 rank(s)" in err and "missing" not in err, err
            ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
            slices = [e for e in ev if e["ph"] == "X"]
            assert {e["pid"] for e in slices} == {0, 1, 2, 3}
            for rank in (0, 1, 2):
                sums = [e for e in slices if e["pid"] == rank and e["name"] == "all_sum"]
                assert all(e["args"]["last_rank"] == 3 and e["args"]["wait_us"] > 50_000 for e in sums[:3]), sums
                assert {e["args"]["transport"] for e in sums} == {"shared memory + tcp", "shared memory"}, sums
            send, = [e for e in slices if e["pid"] == 0 and e["name"] == "send"]
            assert send["args"]["transport"] == "tcp" and send["args"]["peer"] == 3
            table = err[err.index("(--stats):"):].splitlines()[1:]
            row, = [line for line in table if line.startswith("all_sum") and "shared memory + tcp" in line]
            assert re.search(r"rank 3 \([34]×\)", row), table  # the 3 slow calls (and perhaps its pair's)
            for d in ["local", *fab.hosts]:  # records removed on each host once fetched, and commrun's own
                assert os.listdir(os.path.join(roots, d)) == [], (d, os.listdir(os.path.join(roots, d)))
        finally:
            shutil.rmtree(roots, ignore_errors=True)
