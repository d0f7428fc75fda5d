"""COMMLIB_IFNAME parsing and address choice, the doctor's pair schedule and CLI (no sockets but a loopback UDP one)."""
import ipaddress

import pytest

from commlib._errors import CommError
from commlib._transport.interfaces import choose, is_loopback, listen_address, parse

TABLE = {
    "lo": ["127.0.0.1", "::1"],
    "eth0": ["192.168.1.5", "fe80::1", "fd00::5"],
    "ib0": ["10.4.0.7"],
    "docker0": [],
    "eth1": ["fd01::9", "172.16.0.3"],
}


@pytest.mark.parametrize("value, expected", [
    ("eth0", [("name", "eth0")]),
    (" eth0 , ib0 ", [("name", "eth0"), ("name", "ib0")]),
    ("10.0.0.0/8", [("net", ipaddress.ip_network("10.0.0.0/8"))]),
    ("10.4.0.7/16", [("net", ipaddress.ip_network("10.4.0.0/16"))]),  # host bits are ignored
    ("fd00::/16,eth1", [("net", ipaddress.ip_network("fd00::/16")), ("name", "eth1")]),
    ("10.4.0.7", [("net", ipaddress.ip_network("10.4.0.7/32"))]),
])
def test_parse(value, expected):
    assert parse(value) == expected


@pytest.mark.parametrize("value, words", [
    ("", "no interface"), (" , ", "no interface"), ("10.0.0.0/33", "CIDR"), ("300.1.2.3", "neither"),
    ("averyveryverylongname", "cannot be"),
])
def test_parse_rejects(value, words):
    with pytest.raises(ValueError, match=words):
        parse(value)


@pytest.mark.parametrize("value, routed, expected", [
    ("eth0", None, "192.168.1.5"),  # IPv4 first when nothing says otherwise; link-local v6 never
    ("eth0", "fd00::5", "fd00::5"),  # the routed address wins when it is allowed
    ("eth0", "10.4.0.7", "192.168.1.5"),  # ... and only then
    ("eth1", "192.168.1.5", "172.16.0.3"),  # the coordinator's family before the list order
    ("eth1", "fd00::5", "fd01::9"),
    ("ib0,eth0", None, "10.4.0.7"),  # list order
    ("docker0,eth0", None, "192.168.1.5"),  # an interface without an address is passed over
    ("10.0.0.0/8", None, "10.4.0.7"),
    ("fd00::/15", None, "fd00::5"),
    ("172.16.0.0/12,ib0", "10.4.0.7", "10.4.0.7"),
    ("lo", None, "127.0.0.1"),
    ("wlan0,eth0", None, "192.168.1.5"),  # a name this host lacks is passed over in a list
])
def test_choose(value, routed, expected):
    assert choose(value, TABLE, routed) == expected


@pytest.mark.parametrize("value, words", [
    ("eth7", "no interface named eth7"),
    ("wlan0,eth7", "no interface named wlan0, eth7"),
    ("wlan0,docker0", "no usable address"),
    ("docker0", "no usable address"),
    ("10.9.0.0/16", "no usable address"),
    ("fe80::/10", "no usable address"),
])
def test_choose_errors_name_the_value_and_every_interface(value, words):
    with pytest.raises(CommError, match=words) as info:
        choose(value, TABLE)
    text = str(info.value)
    assert f"COMMLIB_IFNAME={value!r}" in text
    assert "eth0 192.168.1.5 fe80::1 fd00::5" in text and "docker0 (no address)" in text and "ib0 10.4.0.7" in text


def test_loopback_is_refused_when_the_job_spans_hosts(monkeypatch):
    from commlib._transport import interfaces

    env = {"COMMLIB_IFNAME": "lo"}
    # a coordinator reached over loopback: every rank is on this host, whatever the launcher says
    assert listen_address("127.0.0.1", True, env) == ("127.0.0.1", "COMMLIB_IFNAME=lo")
    assert listen_address("127.0.0.1", True, {}) == ("127.0.0.1", "the route to the coordinator 127.0.0.1")
    monkeypatch.setattr(interfaces, "routed_address", lambda host: "10.1.2.3")
    assert listen_address("node1", False, env) == ("127.0.0.1", "COMMLIB_IFNAME=lo")
    with pytest.raises(CommError, match="span hosts, but COMMLIB_IFNAME=lo gives the loopback address 127.0.0.1.*"
                                        "interfaces: lo"):
        listen_address("node1", True, env)
    assert listen_address("node1", True, {}) == ("10.1.2.3", "the route to the coordinator node1")
    assert is_loopback("::1") and is_loopback("127.3.0.1") and not is_loopback("10.0.0.1")
    assert not is_loopback("not-an-address")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 9, 64])
def test_doctor_schedule_pairs_everyone_once_in_disjoint_rounds(n):
    from commlib.doctor import schedule

    rounds = schedule(n)
    pairs = [p for rnd in rounds for p in rnd]
    assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for rnd in rounds:
        ranks = [r for p in rnd for r in p]
        assert len(ranks) == len(set(ranks))
    assert len(rounds) <= max(1, n if n % 2 else n - 1)


def test_commrun_doctor_takes_no_program(tmp_path):
    from click.testing import CliRunner
    from commrun.cli import main

    script = tmp_path / "x.py"
    script.write_text("")
    result = CliRunner().invoke(main, ["--doctor", "-n", "2", str(script)])
    assert result.exit_code == 2 and "--doctor runs its own check" in result.output


def test_table_with_a_loopback_rank_on_another_host_is_refused():
    from commlib._rendezvous.table import Book
    from commlib._transport import Endpoint

    ep = Endpoint(0, b"s" * 32, "127.0.0.1", 5.0)
    try:
        me = ep.info()
        boot_netns = me["host_id"].split("/", 1)[1]
        # another hostname on the same network stack (a container sharing the host's network): fine
        ep.set_table(Book([me, dict(me, host_id=f"container/{boot_netns}", tcp=["127.0.0.1", 1])]).table(0))
        assert ep.describe_route(1) == "tcp 127.0.0.1:1"
        with pytest.raises(CommError, match=r"rank 0: rank 1 listens on the loopback address 127.0.0.1 but ranks 0 "
                                            r"and 1 are on different hosts: set COMMLIB_IFNAME.*interfaces here: lo"):
            ep.set_table(Book([me, dict(me, host_id="node2/other-boot/1", tcp=["127.0.0.1", 1])]).table(0))
    finally:
        ep.close()


def test_verbose_routes_name_every_peer_only_up_to_a_limit():
    """COMMLIB_VERBOSE's line: every peer's route in a small job; beyond ROUTES_LISTED peers only
    the peers whose addresses the rank holds, so the line fetches nothing from the coordinator."""
    from commlib._rendezvous.table import Book
    from commlib._transport import Endpoint, sockets

    ep = Endpoint(0, b"s" * 32, "127.0.0.1", 5.0)
    try:
        me = ep.info()
        small = [me] + [dict(me, tcp=["127.0.0.1", 100 + r]) for r in range(1, 5)]
        ep.set_table(Book(small).table(0))
        text = ep.routes_text()
        assert [int(p.split()[0]) for p in text.split("peers: ")[1].split("; ")] == [1, 2, 3, 4], text
        big = [me] + [dict(me, tcp=["127.0.0.1", 100 + r]) for r in range(1, 3000)]
        table = Book(big).table(0, timeout=1)
        fetched = []
        table._request, ask = (lambda first, last: fetched.append((first, last)) or ask(first, last)), table._request
        ep.set_table(table)
        text = ep.routes_text()
        listed = [p for p in text.split("peers: ")[1].split("; ") if p[0].isdigit()]
        assert not fetched and 0 < len(listed) <= 3 * sockets.ROUTES_LISTED, (fetched, len(listed))
        assert text.endswith(f"; and {2999 - len(listed)} more (their addresses fetched on first use)"), text[-200:]
    finally:
        ep.close()
