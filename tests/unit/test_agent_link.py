"""A host agent's coordinator link (commrun/proxy.py, framing's LINK_* frames) in-process: a real
coordinator and proxies driven by a selector thread, real clients as ranks (threads), on loopback."""
import os
import queue
import selectors
import socket
import threading
import time

import pytest

from commlib import _auth, _control, _rendezvous as rv
from commlib._errors import AuthError, CommError
from commlib._rendezvous import coordinator as rv_coordinator, framing
from commrun import proxy

from test_rendezvous import next_msg, wait_for

SECRET = bytes(range(32))
pytestmark = pytest.mark.timeout(60)


class Agent:
    """A proxy for `ranks` and the event loop an agent would run it in."""

    def __init__(self, address, ranks, host="h1", logs=None):
        self.sel = selectors.DefaultSelector()
        self.logs = logs if logs is not None else []
        link = proxy.connect_link(address, SECRET, host)
        self.proxy = proxy.Proxy(self.sel, link, SECRET, ranks, self.logs.append)
        self.address = self.proxy.address
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            for key, events in self.sel.select(0.05):
                key.data[1](events)
            self.proxy.tick()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.proxy.shut(None)


@pytest.fixture
def job():
    made = []

    def make(size, hosts):
        """A coordinator for `size` ranks and an agent for each list of ranks in `hosts`."""
        logs = []
        c = rv.Coordinator(size, SECRET, log=logs.append)
        c.start()
        agents = [Agent(c.address, ranks, f"h{i}", logs) for i, ranks in enumerate(hosts)]
        made.append((c, agents))
        return c, agents, logs

    yield make
    for c, agents in made:
        for a in agents:
            a.close()
        c.close()


def connect(address, ranks, timeout=10.0):
    """Clients for `ranks` through `address`, registered concurrently: {rank: (client, inbox)}."""
    out, errors = {}, {}

    def one(r):
        try:
            client = rv.Client.connect(address, SECRET, r, timeout)
            client.register({"rank": r, "host": "h", "addresses": [f"a{r}"]}, timeout)
            inbox = queue.Queue()
            client.start_listener(inbox.put)
            out[r] = (client, inbox)
        except Exception as e:  # noqa: BLE001 - reported to the test below
            errors[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    return threads, out, errors


def joined(*batches):
    out, errors = {}, {}
    for threads, o, e in batches:
        for t in threads:
            t.join()
        out.update(o)
        errors.update(e)
    assert not errors, errors
    return out


def test_link_frames_split_anywhere_and_carry_rank_sets():
    frames = [framing.link_frame(framing.LINK_JOIN, 3), framing.link_frame(framing.LINK_DATA, 3, b"x" * 1000),
              framing.link_to([1, 2, 3, 7], b"hello"), framing.link_to([5], b"one")]
    data = b"".join(frames)
    for cut in (1, 8, 9, 500, len(data) - 1):
        reader = framing.LinkFrames()
        got = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert [(k, r) for k, r, _ in got] == [(framing.LINK_JOIN, 3), (framing.LINK_DATA, 3),
                                               (framing.LINK_TO, framing.LINK_MANY), (framing.LINK_TO, 5)]
        assert framing.link_targets(got[2][1], got[2][2]) == ([1, 2, 3, 7], b"hello")
        assert framing.link_targets(got[3][1], got[3][2]) == ([5], b"one")
    with pytest.raises(ValueError, match="shorter than its 9 runs"):
        framing.link_targets(framing.LINK_MANY, b"\0\0\0\x09" + b"\0" * 8)
    with pytest.raises(ValueError, match="exceeds 10: not a host link"):
        framing.LinkFrames(limit=10).feed(framing.link_frame(framing.LINK_DATA, 0, b"y" * 11))


def test_ranks_behind_agents_assemble_relay_and_hear_notices_once_a_host(job, monkeypatch):
    """Two hosts of 3 ranks: 2 coordinator connections; a notice for all crosses each link once."""
    c, (a, b), _ = job(6, [[0, 1, 2], [3, 4, 5]])
    clients = joined(connect(a.address, [0, 1, 2]), connect(b.address, [3, 4, 5]))
    assert c.connections() == {"links": 2, "via": 6, "direct": 0}
    frames = []
    push = rv_coordinator._Link.push
    monkeypatch.setattr(rv_coordinator._Link, "push", lambda self, data: (frames.append(data), push(self, data)))
    c.notify_died(5, 9, "was killed")
    for r in range(5):
        assert next_msg(clients[r][1], "died")["rank"] == 5
    assert len(frames) == 2  # one a host: host 1's frame names ranks 3 and 4
    clients[1][0].send({"kind": "note", "to": [0, 4], "n": 7})
    for r in (0, 4):
        msg = next_msg(clients[r][1], "note")
        assert (msg["from"], msg["n"]) == (1, 7)
    clients[2][0].close()  # a goodbye through the agent: "left" for the others, and the hang-up
    for r in (0, 3):
        assert 2 in _control.unpack_ranks(next_msg(clients[r][1], "left")["ranks"], 6)
    wait_for(lambda: 2 not in c.connected())
    for r in (0, 1, 3, 4):
        clients[r][0].close()


def test_a_rank_dropping_without_goodbye_is_lost_for_the_others(job):
    c, (a,), _ = job(3, [[0, 1, 2]])
    clients = joined(connect(a.address, [0, 1, 2]))
    clients[1][0]._closing = True
    clients[1][0]._sock.shutdown(socket.SHUT_RDWR)  # (its process killed: the agent sees the connection end)
    for r in (0, 2):
        msg = next_msg(clients[r][1], "lost")
        assert msg["rank"] == 1 and "closed its coordinator connection" in msg["message"]
    assert c.connected() == [0, 2]


def test_a_lost_link_loses_its_ranks_everywhere_and_they_lose_the_coordinator(job):
    c, (a, b), _ = job(4, [[0, 1], [2, 3]])
    clients = joined(connect(a.address, [0, 1]), connect(b.address, [2, 3]))
    b.stop = True
    b.thread.join(2)
    b.proxy.link.sock.close()  # the agent killed: its link ends
    for r in (0, 1):
        msgs = [next_msg(clients[r][1], "lost"), next_msg(clients[r][1], "lost")]
        assert sorted(m["rank"] for m in msgs) == [2, 3]
        assert "lost with its host's agent on h1" in msgs[0]["message"], msgs[0]
    b.proxy.shut(None)  # what the agent's end does when its link goes: the ranks lose the coordinator
    for r in (2, 3):
        assert next_msg(clients[r][1], "coordinator_lost")
    assert c.connected() == [0, 1]


def test_the_agent_refuses_strangers_and_the_coordinator_refuses_a_rank_twice(job):
    c, (a, b), logs = job(4, [[0, 1], [1, 2, 3]])
    with pytest.raises(CommError):  # not this host's rank
        rv.Client.connect(a.address, SECRET, 3, 5.0)
    with pytest.raises(AuthError):
        rv.Client.connect(a.address, bytes(32), 0, 5.0)
    first = rv.Client.connect(a.address, SECRET, 1, 5.0)
    with pytest.raises(CommError, match="rank 1 is already connected"):
        rv.Client.connect(b.address, SECRET, 1, 5.0)  # another host claims it: the coordinator says no
    assert any("claims rank 3, which this host does not run" in line for line in logs), logs
    assert any("failed authentication" in line for line in logs), logs
    first._sock.close()


def test_a_silent_local_connection_is_let_go_and_garbage_drops_only_its_link(job, monkeypatch):
    monkeypatch.setattr(proxy, "HANDSHAKE_S", 0.3)
    c, (a, b), logs = job(3, [[0, 1], [2]])
    silent = socket.create_connection(a.address)
    silent.settimeout(5)
    assert silent.recv(64).startswith(framing.MAGIC)
    assert silent.recv(64) == b""  # let go after HANDSHAKE_S
    clients = joined(connect(a.address, [0, 1]), connect(b.address, [2]))
    b.stop = True
    b.thread.join(2)
    b.proxy.link.sock.send(framing.link_frame(99, 2))  # not a frame kind: that link is dropped
    for r in (0, 1):
        msg = next_msg(clients[r][1], "lost")
        assert msg["rank"] == 2 and "unknown link frame kind 99" in msg["message"], msg
    assert any("no handshake within" in line for line in logs), logs
    clients[0][0].send({"kind": "note", "to": "all"})  # the job lives on
    assert next_msg(clients[1][1], "note")["from"] == 0


def test_an_agent_without_the_secret_gets_no_link():
    c = rv.Coordinator(1, SECRET, log=lambda line: None)
    c.start()
    try:
        with pytest.raises(OSError, match="no link to the coordinator"):
            proxy.connect_link(c.address, os.urandom(32), "h", timeout=3.0)
        assert c.connections()["links"] == 0
    finally:
        c.close()


def test_a_stopped_reader_is_cut_off_not_waited_on(job, monkeypatch):
    monkeypatch.setattr(proxy, "OUTBOX_LIMIT", 1 << 16)
    c, (a,), logs = job(2, [[0, 1]])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(a.address)
    s.settimeout(5)
    hello = _auth.recv_exact(s, len(framing.MAGIC) + _auth.NONCE_BYTES)
    nonce, rank_bytes = os.urandom(32), (1).to_bytes(4, "big")
    s.sendall(rank_bytes + nonce + _auth.mac(SECRET, framing.CLIENT_LABEL, hello[len(framing.MAGIC):], nonce,
                                            rank_bytes))
    wait_for(lambda: 1 in c.connected())
    s.sendall(framing.encode({"kind": "register", "info": {"rank": 1, "host": "h", "addresses": ["a1"]}}))
    clients = joined(connect(a.address, [0]))
    for i in range(12):  # rank 1 never reads: its outbox grows past the limit (and the socket buffers)
        clients[0][0].send({"kind": "note", "to": [1], "pad": "z" * 900_000, "i": i})
    msg = next_msg(clients[0][1], "lost", timeout=10)
    assert msg["rank"] == 1 and "stopped reading" in msg["message"]
    assert any("rank 1 stopped reading" in line for line in logs), logs
    s.close()


def test_a_rank_connects_through_its_agent_only_for_the_coordinator_the_agent_serves():
    env = {"COMMLIB_RANK": "1", "COMMLIB_SIZE": "4", "COMMLIB_LOCAL_RANK": "1", "COMMLIB_LOCAL_SIZE": "2",
           "COMMLIB_COORDINATOR": "10.0.0.1:4567", "COMMLIB_SECRET": SECRET.hex()}
    assert rv.discover(env).via is None
    via = dict(env, COMMLIB_COORDINATOR_VIA="127.0.0.1:999 for 10.0.0.1:4567")
    assert rv.discover(via).via == ("127.0.0.1", 999) and rv.discover(via).coordinator == ("10.0.0.1", 4567)
    # inherited by a process of another job (a spawned child, a nested commrun): not this job's agent
    assert rv.discover(dict(via, COMMLIB_COORDINATOR="10.0.0.9:4567")).via is None
    with pytest.raises(CommError, match="malformed COMMLIB_COORDINATOR_VIA"):
        rv.discover(dict(env, COMMLIB_COORDINATOR_VIA="nowhere for 10.0.0.1:4567"))


def test_the_agent_tells_its_ranks_when_its_link_stops_acknowledging(job, monkeypatch):
    silent = {"s": None}
    monkeypatch.setattr(proxy, "silent_for", lambda sock, queued=False: silent["s"])
    monkeypatch.setattr(proxy, "SILENT_S", 0.2)
    c, (a,), _ = job(2, [[0, 1]])
    clients = joined(connect(a.address, [0, 1]))
    silent["s"] = 7.0  # (what TCP_INFO says of a link that went down)
    for r in (0, 1):
        msg = next_msg(clients[r][1], "link_silent")
        assert msg["coordinator"] == "127.0.0.1" and abs(time.monotonic() - 7.0 - msg["since"]) < 2, msg
    silent["s"] = None
    for r in (0, 1):
        assert next_msg(clients[r][1], "link_silent")["since"] is None
    for r in (0, 1):
        clients[r][0].close()
