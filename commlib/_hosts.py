"""Hosts: where ranks go and how they are started there, shared by `commrun` and `MPI.Spawn`.

Host lists ('a:2,b:2', a host file), placement of n processes on them, whether a name is this
machine, this machine's address on the route to another host, and the remote-shell command line
that starts a process on another host.
"""
import os
import re
import shlex
import socket

DEFAULT_RSH = "ssh -o BatchMode=yes {host}"
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def parse_hosts(text):
    """'a:2,b:2,c' -> [("a", 2), ("b", 2), ("c", 1)]."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, slots = item.rpartition(":") if ":" in item else (item, "", "1")
        if host.startswith("[") and host.endswith("]"):  # [v6]:n
            host = host[1:-1]
        if not host or not slots.isdigit() or int(slots) < 1:
            raise ValueError(f"bad host entry {item!r} (expected host or host:slots, slots >= 1)")
        hosts.append((host, int(slots)))
    if not hosts:
        raise ValueError("no hosts given")
    return hosts


def parse_hostfile(text):
    """Lines 'host slots=N', 'host:N' or 'host'; '#' starts a comment."""
    hosts = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+)\s+slots\s*=\s*(\d+)", line)
        try:
            if m:
                if int(m[2]) < 1:
                    raise ValueError("slots must be >= 1")
                hosts.append((m[1], int(m[2])))
            elif len(line.split()) == 1:
                hosts += parse_hosts(line)
            else:
                raise ValueError("expected 'host slots=N', 'host:N' or 'host'")
        except ValueError as e:
            raise ValueError(f"line {lineno}: {line!r}: {e}") from None
    if not hosts:
        raise ValueError("no hosts in the host file")
    return hosts


def place(n, hosts):
    """Rank r -> (host, local_rank, local_size), filling each host's slots in order.

    More ranks than slots wraps around the host list again (oversubscription).
    """
    order = []
    while len(order) < n:
        for host, slots in hosts:
            order += [host] * slots
    order = order[:n]
    local_size = {h: order.count(h) for h in order}
    seen = {}
    placement = []
    for host in order:
        placement.append((host, seen.get(host, 0), local_size[host]))
        seen[host] = seen.get(host, 0) + 1
    return placement


def is_local(host):
    name = socket.gethostname()
    return host in _LOCAL_NAMES or host in (name, name.split(".")[0])


def route_address(host):
    """This machine's address on the route to `host` (no packet is sent)."""
    family, _, _, _, addr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return s.getsockname()[0]


def remote_argv(rsh, host, argv, env, cwd):
    """The remote-shell command that runs `argv` with `env` in `cwd` on `host`.

    ssh-like templates get the command as one shell string; anything else
    (`ip netns exec {host}`, `docker exec {host}`) gets `sh -c <string>`.
    `exec` keeps the program in the remote shell's process, so signals reach it.
    """
    words = [w.replace("{host}", host) for w in shlex.split(rsh)]
    if "{host}" not in rsh:
        words.append(host)
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    command = f"cd {shlex.quote(cwd)} && exec env {assignments} {shlex.join(argv)}"
    if os.path.basename(words[0]).endswith(("ssh", "rsh")):
        return words + [command]
    return words + ["sh", "-c", command]


def forwarded_env(environ=os.environ):
    """The local variables remote ranks also get: PYTHONPATH and the user's COMMLIB_* settings."""
    return {k: v for k, v in environ.items() if k == "PYTHONPATH" or (k.startswith("COMMLIB_") and k != "COMMLIB_RSH")}
