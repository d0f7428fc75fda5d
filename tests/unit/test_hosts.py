"""--hosts / --hostfile parsing and rank placement."""
import socket
import time

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


def test_place_is_linear_in_ranks():
    start = time.process_time()
    placed = hosts.place(100_000, [(f"h{i}", 16) for i in range(6250)])
    assert time.process_time() - start < 2.0  # (quadratic, it took 4 s at 20,000 ranks)
    assert placed[0] == ("h0", 0, 16) and placed[-1] == ("h6249", 15, 16)


def test_place_oversubscribes_by_wrapping_around():
    assert hosts.place(5, [("a", 1), ("b", 1)]) == [
        ("a", 0, 3), ("b", 0, 2), ("a", 1, 3), ("b", 1, 2), ("a", 2, 3)]
    assert hosts.place(8, [("localhost", 1)])[-1] == ("localhost", 7, 8)


def test_is_local():
    for name in ("localhost", "127.0.0.1", "::1", socket.gethostname()):
        assert hosts.is_local(name)
    assert not hosts.is_local("surely-not-this-machine.example")


@pytest.mark.parametrize(
    "env, allocation",
    [
        ({"SLURM_JOB_NODELIST": "sn[1-3,5]", "SLURM_TASKS_PER_NODE": "2(x3),1"},
         [("sn1", 2), ("sn2", 2), ("sn3", 2), ("sn5", 1)]),
        ({"SLURM_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "1(x2)"}, [("a", 1), ("b", 1)]),
        ({"SLURM_JOB_NODELIST": "gpu[08-10]", "SLURM_JOB_CPUS_PER_NODE": "4,8(x2)"},  # no task counts
         [("gpu08", 4), ("gpu09", 8), ("gpu10", 8)]),
    ],
)
def test_slurm_allocation(env, allocation):
    assert hosts.slurm_allocation({"SLURM_JOB_ID": "17", **env}) == allocation


def test_no_slurm_allocation_outside_one():
    assert hosts.slurm_allocation({}) is None
    assert hosts.slurm_allocation({"SLURM_JOB_NODELIST": "a", "SLURM_TASKS_PER_NODE": "1"}) is None  # no job
    assert hosts.slurm_allocation({"SLURM_JOB_ID": "3"}) is None  # e.g. a job's variables half copied


@pytest.mark.parametrize(
    "env, message",
    [
        ({"SLURM_JOB_NODELIST": "sn[1-", "SLURM_TASKS_PER_NODE": "1"}, "malformed SLURM_JOB_NODELIST='sn\\[1-'"),
        ({"SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2(y2)"}, "malformed SLURM_TASKS_PER_NODE"),
        ({"SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "2(x3)"}, "names 2 node\\(s\\) but .* gives 3"),
        ({"SLURM_JOB_NODELIST": "a", "SLURM_TASKS_PER_NODE": "0"}, "names 1 node"),
    ],
)
def test_malformed_slurm_allocation_names_the_variable(env, message):
    with pytest.raises(ValueError, match=message):
        hosts.slurm_allocation({"SLURM_JOB_ID": "17", **env})
