"""Point-to-point through the real launcher: one job per (n, transport) runs each rank program of
cases/p2p_programs.py (send/recv and probes; blocking sends before receives; the one-call path;
connections shared by groups), each an item; the idle-connection limit (a setting of the whole job)
has jobs of its own."""
import pytest

from _harness import batched

test_point_to_point = batched("p2p_programs.py", [1, 2, 3, 4])


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["shm", "socket", "tcp"], indirect=True)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_idle_connections_close_and_reopen(n, transport, assert_ranks_ok, run):
    """With a limit of one outgoing point-to-point connection: a manager's connections to its
    workers close and open again every round; a connection closed while its receiver was not
    reading is read to its end before the one that replaced it; two threads send while
    connections close under them; every result checked against NumPy."""
    env = {"COMMLIB_P2P_CONNECTIONS": "1", "COMMLIB_P2P_IDLE_S": "0"}
    assert_ranks_ok(run(n, "idle_p2p.py", env=env, timeout=120), n, "idle point-to-point connections")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("transport", ["tcp"], indirect=True)
def test_idle_encrypted_connections_close_and_reopen(transport, assert_ranks_ok, run):
    """The same over encrypted TCP: a closed connection's pump seals its last frame and ends."""
    env = {"COMMLIB_P2P_CONNECTIONS": "1", "COMMLIB_P2P_IDLE_S": "0", "COMMLIB_ENCRYPT": "1"}
    assert_ranks_ok(run(3, "idle_p2p.py", env=env, timeout=120), 3, "idle encrypted point-to-point connections")
