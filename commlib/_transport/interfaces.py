"""Which local address a rank listens on (and advertises to its peers).

The default is the address this machine uses on its route to the
coordinator: the other hosts reach the coordinator, so the route to it is the
network they share (a UDP connect picks it and sends nothing). On a machine
with a management network, a fast one and a docker bridge that guess can be
wrong, so COMMLIB_IFNAME overrides it, as NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
do: an interface name (`eth1`, exact), a comma list tried in order (`ib0,eth1`:
names a host lacks are passed over), or a network in CIDR form (`10.0.0.0/8`);
items may be mixed. Among the addresses
allowed, the one of the coordinator's family comes first, and the routed one
first of all.

A job whose ranks span hosts never advertises a loopback address: peers on
another host would connect to themselves. That is a CommError here, at init,
instead of a hang or an obscure failure later.

Interfaces are read with the standard library only: `socket.if_nameindex()`,
`ioctl(SIOCGIFADDR)` for each one's IPv4 address and `/proc/net/if_inet6`
for IPv6 (link-local IPv6 addresses are skipped: they need a scope id).
`parse` and `choose` are pure (tested without sockets).
"""
import fcntl
import ipaddress
import os
import socket
import struct

from .._errors import CommError
from .._hosts import is_loopback

SIOCGIFADDR = 0x8915


def routed_address(host):
    """The local address this machine uses to reach `host` (UDP connect sends nothing)."""
    try:
        infos = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)
        family, _, _, _, addr = infos[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            return s.getsockname()[0]
    except OSError as exc:
        raise CommError(f"cannot find a local interface that reaches the coordinator {host}: {exc}") from exc


def parse(value):
    """COMMLIB_IFNAME -> [("name", str) | ("net", ip_network)]; ValueError for an empty or bad item."""
    items = []
    for word in value.split(","):
        word = word.strip()
        if not word:
            continue
        if "/" in word:
            try:
                items.append(("net", ipaddress.ip_network(word, strict=False)))
            except ValueError as exc:
                raise ValueError(f"{word!r} is not a network in CIDR form ({exc})") from None
        elif word[0].isdigit() or ":" in word:
            try:
                items.append(("net", ipaddress.ip_network(word)))  # a bare address: that address only
            except ValueError:
                raise ValueError(f"{word!r} is neither an interface name nor an address") from None
        elif len(word) >= 16 or any(c.isspace() or c == "/" for c in word):
            raise ValueError(f"{word!r} cannot be an interface name")
        else:
            items.append(("name", word))
    if not items:
        raise ValueError("no interface name or network given")
    return items


def interfaces():
    """{interface name: [address strings]} of this machine (its network namespace)."""
    found = {name: [] for _, name in socket.if_nameindex()}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in found:
            try:
                got = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # EADDRNOTAVAIL: no IPv4 address on it
                continue
            found[name].append(socket.inet_ntoa(got[20:24]))
    try:
        with open("/proc/net/if_inet6") as f:
            lines = f.read().splitlines()
    except OSError:  # IPv6 disabled
        lines = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[5] in found:
            found[parts[5]].append(str(ipaddress.IPv6Address(bytes.fromhex(parts[0]))))
    return found


def describe(table):
    """'lo 127.0.0.1, eth0 10.1.2.3 fd00::1, docker0 (no address)' for error messages."""
    return ", ".join(f"{name} {' '.join(addrs) or '(no address)'}" for name, addrs in table.items())


def choose(value, table, routed=None):
    """The address COMMLIB_IFNAME=`value` selects from `table` ({name: [addresses]}).

    Candidates keep the order of the items; the routed address (when it is a
    candidate) wins, then addresses of its family. Names this host lacks are
    passed over (one list serves hosts with different cards). CommError naming
    the value and every interface when nothing matches.
    """
    try:
        items = parse(value)
    except ValueError as exc:
        raise CommError(f"COMMLIB_IFNAME={value!r}: {exc}") from None
    unknown = [v for kind, v in items if kind == "name" and v not in table]
    if len(unknown) == len(items):
        raise CommError(f"COMMLIB_IFNAME={value!r}: no interface named {', '.join(unknown)} on this host; "
                        f"interfaces: {describe(table)}")
    candidates = []
    for kind, v in items:
        for name, addrs in table.items():
            if kind == "name" and name != v:
                continue
            for a in addrs:
                ip = ipaddress.ip_address(a)
                if ip.is_link_local and ip.version == 6:
                    continue
                if (kind == "name" or ip in v) and a not in candidates:
                    candidates.append(a)
    if not candidates:
        raise CommError(f"COMMLIB_IFNAME={value!r}: no usable address on this host matches it; "
                        f"interfaces: {describe(table)}")
    if routed in candidates:
        return routed
    family = ipaddress.ip_address(routed).version if routed else 4
    return sorted(candidates, key=lambda a: ipaddress.ip_address(a).version != family)[0]


def listen_address(coordinator_host, spans_hosts, environ=os.environ):
    """(address, where it came from): the address this rank listens on and advertises.

    `spans_hosts`: the launcher says the ranks are on more than one host. A
    loopback address is then refused, unless the coordinator itself is reached
    over loopback (every rank that reaches it is on this host: launchers that
    do not know where the ranks are, such as torch's store, pass spans_hosts).
    """
    value = environ.get("COMMLIB_IFNAME", "").strip()
    try:
        routed = routed_address(coordinator_host)
    except CommError:
        if not value:
            raise
        routed = None  # the override does not need the route; it only orders the candidates
    if value:
        address, source = choose(value, interfaces(), routed), f"COMMLIB_IFNAME={value}"
    else:
        address, source = routed, f"the route to the coordinator {coordinator_host}"
    if spans_hosts and is_loopback(address) and not (routed and is_loopback(routed)):
        raise CommError(f"this job's ranks span hosts, but {source} gives the loopback address {address}, "
                        f"which the other hosts cannot reach: set COMMLIB_IFNAME (commrun --ifname) to the "
                        f"interface the hosts share; interfaces: {describe(interfaces())}")
    return address, source
