"""Namespace hosts joined through a router whose forwarding goes through `_delayer.py`.

`ShapedFabric(n, net, **shape)`: host i is a namespace with `{net}.{i}.2/24` on `fab0`, whose
default route is the router's `{net}.{i}.1`. In the router, every packet that arrives from a host
is policy-routed into the TUN device `dly_in`; the delayer (delay, jitter, loss, duplication, a
link down while a file exists) writes it to `dly_out`, from where the kernel forwards it to its
destination host. Every packet between hosts crosses the delayer once. `rate` adds a tbf
bandwidth cap on each host's own link. `tamper_after`/`tamper_min` make the delayer flip one bit
in the payload of one TCP packet (checksum fixed, so TCP accepts it); `capture` names a file that
gets the TCP payload of every forwarded packet (see `_delayer.py`). Names carry a random suffix;
everything is deleted on close (the delayer is stopped first, and its counters kept in
`.counters`).
"""
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from _netns import sh

DELAYER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_delayer.py")


class ShapedFabric:
    def __init__(self, n, net, *, delay=0.0, jitter=0.0, loss=0.0, dup=0.0, rate=None, seed=0,
                 tamper_after=None, tamper_min=1000, capture=None):
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root")
        if shutil.which("ip") is None or not os.path.exists("/dev/net/tun"):
            pytest.skip("iproute2 and /dev/net/tun are needed for the shaped link")
        tag = uuid.uuid4().hex[:6]
        self.tag, self.net = tag, net
        self.router = f"clr{tag}"
        self.hosts = [f"cl{i}{tag}" for i in range(n)]
        self.down_file = f"/tmp/commlib-link-down-{tag}"
        self.counters = None
        self._made, self._delayer = [], None
        try:
            extra = []
            if tamper_after is not None:
                extra += ["--tamper-after", str(tamper_after), "--tamper-min", str(tamper_min)]
            if capture is not None:
                extra += ["--capture", str(capture)]
            self._build(delay, jitter, loss, dup, rate, seed, extra)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            self.close()
            pytest.skip(f"cannot build the shaped fabric here: {exc}")

    def addr(self, i):
        return f"{self.net}.{i}.2"

    def _build(self, delay, jitter, loss, dup, rate, seed, extra=()):
        r = self.router
        for ns in [r] + self.hosts:
            sh("ip", "netns", "add", ns)
            self._made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            sh("ip", "netns", "exec", r, "sysctl", "-qw", key)
        self._delayer = subprocess.Popen(
            ["ip", "netns", "exec", r, sys.executable, DELAYER, "dly_in", "dly_out", "--delay", str(delay),
             "--jitter", str(jitter), "--loss", str(loss), "--dup", str(dup), "--down", self.down_file,
             "--seed", str(seed), *extra], stdout=subprocess.PIPE, text=True)
        if self._delayer.stdout.readline().strip() != "ready":
            raise RuntimeError("the delayer did not start")
        for dev in ("dly_in", "dly_out"):
            sh("ip", "-n", r, "link", "set", dev, "up")
        sh("ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.conf.dly_out.rp_filter=0")
        sh("ip", "-n", r, "route", "add", "default", "dev", "dly_in", "table", "100")
        for i, ns in enumerate(self.hosts):
            h, rr = f"h{i}{self.tag}", f"r{i}{self.tag}"
            sh("ip", "link", "add", h, "type", "veth", "peer", "name", rr)
            sh("ip", "link", "set", h, "netns", ns)
            sh("ip", "link", "set", rr, "netns", r)
            sh("ip", "-n", ns, "link", "set", h, "name", "fab0")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "fab0")
            sh("ip", "-n", ns, "link", "set", "fab0", "up")
            sh("ip", "-n", ns, "route", "add", "default", "via", f"{self.net}.{i}.1")
            sh("ip", "-n", r, "addr", "add", f"{self.net}.{i}.1/24", "dev", rr)
            sh("ip", "-n", r, "link", "set", rr, "up")
            sh("ip", "-n", r, "rule", "add", "iif", rr, "lookup", "100", "pref", str(100 + i))
            if rate:
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "fab0", "root", "tbf", "rate", rate,
                   "burst", "32kbit", "latency", "400ms")

    def link_down(self, down=True):
        """Drop every packet between hosts (True) or let them through again (False)."""
        if down:
            open(self.down_file, "w").close()
        elif os.path.exists(self.down_file):
            os.unlink(self.down_file)

    def commrun(self, *args, at=0):
        return ["ip", "netns", "exec", self.hosts[at], sys.executable, "-m", "commrun",
                "--rsh", "ip netns exec {host}", *args]

    def close(self):
        if self._delayer is not None and self._delayer.poll() is None:
            self._delayer.terminate()
            try:
                out, _ = self._delayer.communicate(timeout=5)
                self.counters = dict(zip(out.split()[::2], map(int, out.split()[1::2])))
            except (subprocess.TimeoutExpired, ValueError):
                self._delayer.kill()
                self._delayer.wait(5)
        self._delayer = None
        for ns in reversed(self._made):
            sh("ip", "netns", "del", ns, check=False)
        self._made = []
        self.link_down(False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rtt(fabric, a, b, count=20):
    """Median round trip (s) of a small TCP message between hosts a and b, through the delayer."""
    server = ("import socket,sys\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
              f"s.bind(('{fabric.addr(b)}', 5999)); s.listen(1); print('up', flush=True)\n"
              "c,_=s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
              f"for _ in range({count}):\n    c.sendall(c.recv(1))\n")
    client = ("import socket,time,statistics\n"
              f"c=socket.create_connection(('{fabric.addr(b)}', 5999), timeout=30)\n"
              "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); t=[]\n"
              f"for _ in range({count}):\n"
              "    t0=time.monotonic(); c.sendall(b'x'); c.recv(1); t.append(time.monotonic()-t0)\n"
              "print(statistics.median(t))\n")
    srv = subprocess.Popen(["ip", "netns", "exec", fabric.hosts[b], sys.executable, "-c", server],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "up"
        out = subprocess.run(["ip", "netns", "exec", fabric.hosts[a], sys.executable, "-c", client],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr
        return float(out.stdout.strip())
    finally:
        srv.kill()
        srv.wait(5)
