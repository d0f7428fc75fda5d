"""Two real hosts on one machine: network namespaces joined by a veth pair.

commrun runs inside host A, starts two ranks on each host through
`--rsh "ip netns exec {host}"`, and the coordinator binds A's veth address.
Ranks on the same host talk over abstract Unix sockets (per namespace);
ranks on different hosts must use TCP over the veth link. The job checks its
results against numpy and reports the socket families it used.

Needs root and iproute2; skipped with the reason otherwise. All traffic stays
inside the namespaces this test creates (10.231.77.0/24 exists only there).
"""
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.timeout(180)

SUBNET = "10.231.77"


def _sh(*args):
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 (`ip`) is not installed")
    tag = uuid.uuid4().hex[:6]
    a, b = f"cla{tag}", f"clb{tag}"
    va, vb = f"va{tag}", f"vb{tag}"
    made = []
    try:
        for ns in (a, b):
            p = _sh("ip", "netns", "add", ns)
            if p.returncode != 0:
                pytest.skip(f"cannot create a network namespace here: {p.stderr.strip()}")
            made.append(ns)
        steps = [
            ("ip", "link", "add", va, "type", "veth", "peer", "name", vb),
            ("ip", "link", "set", va, "netns", a),
            ("ip", "link", "set", vb, "netns", b),
            ("ip", "-n", a, "addr", "add", f"{SUBNET}.1/24", "dev", va),
            ("ip", "-n", b, "addr", "add", f"{SUBNET}.2/24", "dev", vb),
            ("ip", "-n", a, "link", "set", va, "up"),
            ("ip", "-n", b, "link", "set", vb, "up"),
            ("ip", "-n", a, "link", "set", "lo", "up"),
            ("ip", "-n", b, "link", "set", "lo", "up"),
        ]
        for step in steps:
            p = _sh(*step)
            if p.returncode != 0:
                pytest.skip(f"cannot set up the veth link ({' '.join(step)}): {p.stderr.strip()}")
        yield a, b
    finally:
        for ns in made:
            _sh("ip", "netns", "del", ns)  # removes the veth pair with it


CASE = textwrap.dedent("""
    import os, numpy as np, psutil, commlib as cl
    g = cl.init(); r, n = g.rank(), g.size()
    ok = 0
    for count in (1, 1000, 300_000):
        x = (np.arange(count) % 97 + r).astype(np.float64)
        y = cl.all_reduce(x)
        assert np.array_equal(y, sum((np.arange(count) % 97 + k).astype(np.float64) for k in range(n)))
        z = cl.all_gather(x)
        assert np.array_equal(z.reshape(n, count)[r], x)
        b = cl.broadcast(x.copy(), root=n - 1)
        assert np.array_equal(b, (np.arange(count) % 97 + n - 1).astype(np.float64))
        ok += 3
    got = cl.sendrecv(np.full(5, r), dst=(r + 2) % n, src=(r - 2) % n)   # always crosses hosts
    assert (got == (r - 2) % n).all(); ok += 1
    cl.barrier()
    coord = int(os.environ["COMMLIB_COORDINATOR_VIA"].split(" for ")[0].rsplit(":", 1)[1])  # this host's agent
    tcp = [c for c in psutil.Process().net_connections(kind="tcp")
           if c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port != coord]
    peers = sorted({c.raddr.ip for c in tcp})
    print(f"rank {r}: {ok} checks ok; tcp peers {peers}")
""")


def test_four_ranks_on_two_namespace_hosts(two_hosts, tmp_path):
    a, b = two_hosts
    case = tmp_path / "case.py"
    case.write_text(CASE)
    cmd = ["ip", "netns", "exec", a, sys.executable, "-m", "commrun", "--hosts", f"{a}:2,{b}:2",
           "--rsh", "ip netns exec {host}", "--coordinator-host", f"{SUBNET}.1", str(case)]
    env = dict(os.environ, COMMLIB_TIMEOUT="60")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    lines = {int(m.group(1)): m.group(2) for m in re.finditer(r"rank (\d): 10 checks ok; tcp peers (\[[^\]]*\])", p.stdout)}
    assert sorted(lines) == [0, 1, 2, 3], p.stdout + p.stderr
    # Host A holds ranks 0-1 (10.231.77.1), host B ranks 2-3 (.2): every rank has TCP
    # connections to the other host only; same-host pairs went over Unix sockets.
    for r, peers in lines.items():
        other = f"{SUBNET}.2" if r < 2 else f"{SUBNET}.1"
        assert peers == f"['{other}']", (r, peers, p.stdout)
