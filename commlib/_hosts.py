"""Hosts: where ranks go and how they are started there, shared by `commrun` and `MPI.Spawn`.

Host lists ('a:2,b:2', a host file), placement of n processes on them, whether a name is this
machine, this machine's address on the route to another host, whether an address is a loopback
one, and the remote-shell command line that starts a process on another host.
"""
import collections
import ipaddress
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
    local_size = collections.Counter(order)  # (order.count per rank was O(n^2): 4 s at 20,000 ranks)
    seen = {}
    placement = []
    for host in order:
        placement.append((host, seen.get(host, 0), local_size[host]))
        seen[host] = seen.get(host, 0) + 1
    return placement


def is_loopback(address):
    """Whether `address` (text) is a loopback address; False for anything that is no address."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


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


def expand_nodelist(s):
    """Slurm host list -> host names: 'node[01-03,07],gpu5' -> node01 node02 node03 node07 gpu5."""
    hosts, depth, start = [], 0, 0
    for i, ch in enumerate(s + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {s!r}")
        elif ch == "," and depth == 0:
            item = s[start:i].strip()
            if item:
                hosts += _expand_one(item, s)
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in node list {s!r}")
    return hosts


def _expand_one(item, whole):
    m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\](.*)", item)
    if not m:
        if "[" in item or "]" in item:
            raise ValueError(f"bad node list {whole!r}")
        return [item]
    prefix, ranges, rest = m.groups()
    suffixes = _expand_one(rest, whole) if rest else [""]
    out = []
    for part in ranges.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {part!r} in node list {whole!r}")
        width = len(lo)
        for n in range(int(lo), int(hi if sep else lo) + 1):
            out += [f"{prefix}{n:0{width}d}{suffix}" for suffix in suffixes]
    return out


def tasks_per_node(value):
    """Slurm's compressed counts: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in value.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(value)
        counts += [int(m[1])] * int(m[2] or 1)
    return counts


# How commrun starts a node's agent (which starts the node's ranks) in the Slurm allocation it runs
# in, and MPI.Spawn a child: one job step of one task there, sharing the allocation's CPUs with the
# other steps (--overlap), ended by Slurm if the task fails (--kill-on-bad-exit) and by commrun's
# signals or orders otherwise (srun forwards signals and stdin).
SRUN_RSH = "srun --overlap --nodes=1 --ntasks=1 --nodelist={host} --kill-on-bad-exit=1 --mpi=none --quiet"


def slurm_allocation(environ=os.environ):
    """[(node, slots)] of the Slurm allocation this process runs in (an salloc shell, an sbatch
    script), slots from SLURM_TASKS_PER_NODE (else SLURM_JOB_CPUS_PER_NODE); None outside one.

    Raises ValueError naming the variable when Slurm's variables are malformed."""
    if "SLURM_JOB_ID" not in environ:
        return None
    nodes_var = next((v for v in ("SLURM_JOB_NODELIST", "SLURM_NODELIST") if v in environ), None)
    slots_var = next((v for v in ("SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE") if v in environ), None)
    if nodes_var is None or slots_var is None:
        return None
    try:
        nodes = expand_nodelist(environ[nodes_var])
    except ValueError as e:
        raise ValueError(f"malformed {nodes_var}={environ[nodes_var]!r}: {e}") from None
    try:
        slots = tasks_per_node(environ[slots_var])
    except ValueError:
        raise ValueError(f"malformed {slots_var}={environ[slots_var]!r} (expected counts like 2(x3),1)") from None
    if not nodes or len(slots) != len(nodes) or min(slots) < 1:
        raise ValueError(f"{nodes_var}={environ[nodes_var]!r} names {len(nodes)} node(s) but "
                         f"{slots_var}={environ[slots_var]!r} gives {len(slots)} count(s)")
    return list(zip(nodes, slots))
