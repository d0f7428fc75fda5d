"""Many ranks on few cores, and the size-1 group."""
import re
import pytest


@pytest.mark.timeout(180)
def test_eight_ranks_on_two_cores(assert_ranks_ok, run):
    """A mixed job (all_reduce small/large, all_gather, reduce_scatter, broadcast, barrier, sendrecv) at n=8."""
    assert_ranks_ok(run(8, "mixed.py", timeout=170), 8, "mixed job at n=8")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [2, 3])
def test_mixed_small_groups(n, assert_ranks_ok, run):
    assert_ranks_ok(run(n, "mixed.py"), n, "mixed job")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["shm"], indirect=True)  # a size-1 group makes no connection
def test_size_one_under_commrun(assert_ranks_ok, run):
    assert_ranks_ok(run(1, "single.py"), 1, "size-1 group under commrun")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["shm"], indirect=True)  # a size-1 group makes no connection
def test_size_one_without_launcher(assert_ranks_ok, run_plain):
    """commlib.init() with no launcher: a singleton group; init(strict=True) raises CommError."""
    result = run_plain("single.py")
    assert_ranks_ok(result, 1, "size-1 group without a launcher")
    assert "init(strict=True) outside a launcher: CommError" in result[1]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["tcp"], indirect=True)
@pytest.mark.parametrize("n", [2, 3])
def test_mixed_over_tcp(n, assert_ranks_ok, run):
    """The same job with COMMLIB_TRANSPORT=tcp: the TCP path (used between hosts) on one host."""
    assert_ranks_ok(run(n, "mixed.py"), n, "mixed job over TCP")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["shm"], indirect=True)  # the job's own setting below replaces it
def test_bad_transport_setting_is_a_clear_error(run):
    code, out, err = run(2, "mixed.py", env={"COMMLIB_TRANSPORT": "carrier-pigeon"})
    assert code != 0
    assert "COMMLIB_TRANSPORT='carrier-pigeon'" in out + err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["auto", "shm", "socket", "tcp"])
def test_transport_choice_is_real(transport, run):
    """Same host: shared memory (auto, shm), Unix sockets (socket), or TCP (tcp) for the data."""
    code, out, err = run(3, "transport_kind.py", env={"COMMLIB_TRANSPORT": transport})
    assert code == 0, err
    counts = [int(m) for m in re.findall(r"tcp=(\d+)", out)]
    linked = [int(m) for m in re.findall(r"shm=(\d+)", out)]
    assert len(counts) == 3 and len(linked) == 3, out
    if transport == "tcp":
        assert all(c >= 2 for c in counts), out  # to the right neighbour and from the left one
    else:
        assert all(c == 0 for c in counts), out
    if transport in ("auto", "shm"):
        assert all(k >= 2 for k in linked), out  # every same-host connection carries a link
    else:
        assert all(k == 0 for k in linked), out


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["shm"], indirect=True)  # a shared-memory setting
@pytest.mark.parametrize("n", [2, 3, 4])
def test_single_copy_from_the_peers_memory(n, assert_ranks_ok, run):
    """COMMLIB_SHM_SINGLE_COPY=1 (by default only pieces above 8 MiB where ranks outnumber cores): every
    collective and point-to-point call of the mixed job, pieces above 64 KiB copied once straight from
    the sender's memory, and the simplest ring."""
    env = {"COMMLIB_SHM_SINGLE_COPY": "1"}
    assert_ranks_ok(run(n, "mixed.py", env=env, timeout=120), n, "mixed job with single copy")
    assert_ranks_ok(run(n, "simplest.py", env=env, timeout=120), n, "irecv-first ring with single copy")
    assert_ranks_ok(run(n, "send_first.py", env=env, timeout=120), n, "16 MiB sends before receives, single copy")
