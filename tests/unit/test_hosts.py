"""--hosts / --hostfile parsing and rank placement."""
import socket

import pytest

from commrun import hosts

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("a:2,b:2", [("a", 2), ("b", 2)]),
        ("a", [("a", 1)]),
        ("a:3, b ,c:1", [("a", 3), ("b", 1), ("c", 1)]),
        ("[::1]:2", [("::1", 2)]),
        ("10.0.0.1:4", [("10.0.0.1", 4)]),
    ],
)
def test_parse_hosts(text, parsed):
    assert hosts.parse_hosts(text) == parsed


@pytest.mark.parametrize("text", ["", "a:0", "a:x", ":2", "a:-1", ","])
def test_parse_hosts_rejects(text):
    with pytest.raises(ValueError):
        hosts.parse_hosts(text)


def test_parse_hostfile():
    text = """
    # the cluster
    a slots=2
    b:3   # trailing comment
    c
    d slots = 1
    """
    assert hosts.parse_hostfile(text) == [("a", 2), ("b", 3), ("c", 1), ("d", 1)]


@pytest.mark.parametrize("text, where", [("a slots=x", "line 1"), ("# only\n\na b c", "line 3"), ("# none", "no hosts"),
                                         ("a slots=0", "line 1")])
def test_parse_hostfile_rejects(text, where):
    with pytest.raises(ValueError, match=where):
        hosts.parse_hostfile(text)


def test_place_fills_hosts_in_order():
    assert hosts.place(4, [("a", 2), ("b", 2)]) == [("a", 0, 2), ("a", 1, 2), ("b", 0, 2), ("b", 1, 2)]
    assert hosts.place(3, [("a", 2), ("b", 2)]) == [("a", 0, 2), ("a", 1, 2), ("b", 0, 1)]


def test_place_oversubscribes_by_wrapping_around():
    assert hosts.place(5, [("a", 1), ("b", 1)]) == [
        ("a", 0, 3), ("b", 0, 2), ("a", 1, 3), ("b", 1, 2), ("a", 2, 3)]
    assert hosts.place(8, [("localhost", 1)])[-1] == ("localhost", 7, 8)


def test_is_local():
    for name in ("localhost", "127.0.0.1", "::1", socket.gethostname()):
        assert hosts.is_local(name)
    assert not hosts.is_local("surely-not-this-machine.example")
