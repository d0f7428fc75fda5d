"""The coordinator and client in-process (threads as ranks), and launcher environment discovery."""
import contextlib
import json
import os
import queue
import random
import secrets
import socket
import struct
import threading
import time

import pytest

from _waiting import SCALE, wait_for
from commlib import _auth, _control, _rendezvous as rv
from commlib._rendezvous import coordinator as rv_coordinator, discovery, framing
from commlib._transport import notices as notices_module
from commlib._errors import AuthError, CommError, CommTimeout, PeerLost

SECRET = bytes(range(32))
pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def logs():
    return []


@pytest.fixture
def coordinator(logs):
    made = []

    def make(size, secret=SECRET):
        c = rv.Coordinator(size, secret, log=logs.append)
        c.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def run_ranks(address, ranks, timeout=10.0, secret=SECRET, listen=True):
    """Connect and register `ranks` concurrently; return {rank: (client, table, inbox)}."""
    out, errors = {}, {}

    def one(r):
        try:
            client = rv.Client.connect(address, secret, r, timeout)
            table = client.register({"rank": r, "host": "h", "addresses": [f"a{r}"]}, timeout)
            inbox = queue.Queue()
            if listen:
                client.start_listener(inbox.put)
            out[r] = (client, table, inbox)
        except Exception as e:  # noqa: BLE001 - reported to the test below
            errors[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


def next_msg(inbox, kind, timeout=5.0):
    deadline = time.monotonic() + timeout * SCALE
    while True:
        msg = inbox.get(timeout=max(0.01, deadline - time.monotonic()))
        if msg["kind"] == kind:
            return msg


def before_fences(inbox, *senders, timeout=5.0):
    """What `inbox` (a rank's) gets before a "fence" from each of `senders` (client, to) sent now.

    The coordinator handles each connection's messages in the order sent, and delivers everything
    it queues from one thread in order: whatever it queued for this rank before it read the fences
    (a message that must not come, say) is in the list. An absence is checked without a fixed wait."""
    for client, to in senders:
        client.send({"kind": "fence", "to": to})
    got, fences, deadline = [], 0, time.monotonic() + timeout * SCALE
    while fences < len(senders):
        msg = inbox.get(timeout=max(0.01, deadline - time.monotonic()))
        if msg["kind"] == "fence":
            fences += 1
        else:
            got.append(msg)
    return got


def kinds(msgs):
    return [m["kind"] for m in msgs]


def raw_handshake(address, rank, secret=SECRET, rcvbuf=None):
    """An authenticated socket speaking the wire format by hand (`rcvbuf`: its receive buffer, set
    before it connects)."""
    s = socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect(address)
    hello = _auth.recv_exact(s, len(framing.MAGIC) + _auth.NONCE_BYTES)
    client_nonce, rank_bytes = os.urandom(32), rank.to_bytes(4, "big")
    proof = _auth.mac(secret, framing.CLIENT_LABEL, hello[len(framing.MAGIC):], client_nonce, rank_bytes)
    s.sendall(rank_bytes + client_nonce + proof)
    _auth.recv_exact(s, _auth.DIGEST_BYTES)
    assert framing.recv_message(s)["kind"] == "welcome"
    return s


# ---------------------------------------------------------------- assembling the job


def test_register_returns_the_table_indexed_by_rank(coordinator):
    c = coordinator(4)
    out, errors = run_ranks(c.address, range(4))
    assert not errors
    for r in range(4):
        assert list(out[r][1]) == [{"rank": i, "host": "h", "addresses": [f"a{i}"]} for i in range(4)]
    assert c.missing() == []
    assert c.address[0] == "127.0.0.1" and c.address[1] > 0


def test_size_one(coordinator):
    c = coordinator(1)
    client = rv.Client.connect(c.address, SECRET, 0, 5)
    assert list(client.register({"x": 1}, 5)) == [{"x": 1}]
    client.close()


def test_missing_ranks_are_named(coordinator):
    c = coordinator(4)
    t0 = time.monotonic()
    out, errors = run_ranks(c.address, [0, 2], timeout=0.5)
    assert set(errors) == {0, 2} and time.monotonic() - t0 < 8
    assert isinstance(errors[0], CommTimeout)
    assert "never checked in: 1, 3" in str(errors[0])
    assert c.missing() == [1, 3]


def test_connect_names_the_address_and_os_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CommTimeout) as e:
        rv.Client.connect(("127.0.0.1", port), SECRET, 3, timeout=0.3)
    assert f"127.0.0.1:{port}" in str(e.value) and "Connection refused" in str(e.value)
    assert "rank 3" in str(e.value)


def test_connect_waits_for_a_coordinator_that_starts_later(logs, monkeypatch):
    from commlib import _backoff
    refused, delay = threading.Event(), _backoff.delay

    def backing_off(*args, **kwargs):  # the client was refused and waits to try again
        refused.set()
        return delay(*args, **kwargs)

    monkeypatch.setattr(_backoff, "delay", backing_off)
    _coordinator_after_the_client(logs, lambda: refused.wait(5 * SCALE))


def _coordinator_after_the_client(logs, knocked):
    """A client connects to a free port; once knocked() says it tried, a coordinator starts there and
    the client joins it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("c", rv.Client.connect(("127.0.0.1", port), SECRET, 0, 10)))
    t.start()
    assert knocked(), "the client never tried to connect"
    c = rv.Coordinator(1, SECRET, port=port, log=logs.append)  # it binds: the port is free
    c.start()
    t.join()
    assert list(result["c"].register({}, 5)) == [{}]
    result["c"].close()
    c.close()


def test_a_connect_that_opens_with_itself_is_refused_and_leaves_the_port_to_the_coordinator(logs, monkeypatch):
    """A rank knocking on a coordinator port nobody listens on yet can draw that port as its own
    ephemeral one (a TCP simultaneous open with itself): it then held the port, rank 0 failed with
    "Address already in use" and the rank waited for a greeting nobody sent. Here the first connect
    is given that port on purpose."""
    real, drawn = socket.create_connection, []

    def first_onto_itself(address, timeout=None, source_address=None):
        if drawn:
            return real(address, timeout=timeout, source_address=source_address)
        sock = real(address, timeout=timeout, source_address=address)
        drawn.append(sock.getsockname() == sock.getpeername())
        return sock

    monkeypatch.setattr(_auth.socket, "create_connection", first_onto_itself)

    def knocked():
        wait_for(lambda: drawn, 5, "the client never tried to connect")
        assert drawn == [True], "the first connect did not open with itself"
        return True
    _coordinator_after_the_client(logs, knocked)  # the coordinator binds: the refused socket let go


def test_rank_that_dies_before_assembly_fails_the_others_fast(coordinator):
    c = coordinator(3)
    c.notify_died(2, 139, "killed by SIGSEGV")
    t0 = time.monotonic()
    out, errors = run_ranks(c.address, [0, 1], timeout=20)
    assert time.monotonic() - t0 < 5
    assert isinstance(errors[0], PeerLost) and errors[0].rank == 2
    assert "rank 2 killed by SIGSEGV" in str(errors[1])


def test_a_rank_that_connects_after_another_was_lost_hears_of_it(coordinator):
    c = coordinator(3)
    gone = raw_handshake(c.address, 2)
    gone.close()  # before it registered: the job can never assemble
    wait_for(lambda: 2 not in c.connected(), what="rank 2's connection to be gone")
    t0 = time.monotonic()
    out, errors = run_ranks(c.address, [0, 1], timeout=20)
    assert time.monotonic() - t0 < 5 and set(errors) == {0, 1}
    assert isinstance(errors[0], PeerLost) and errors[0].rank == 2
    assert "rank 2 lost its coordinator connection before the job assembled" in str(errors[1])


# ---------------------------------------------------------------- notices and relaying


def test_notify_died_reaches_every_other_rank(coordinator):
    c = coordinator(3)
    out, errors = run_ranks(c.address, range(3))
    assert not errors
    c.notify_died(1, 3, "exited with code 3")
    for r in (0, 2):
        assert next_msg(out[r][2], "died") == {"kind": "died", "rank": 1, "code": 3, "message": "exited with code 3"}


def test_relay_to_all_and_to_a_list(coordinator):
    c = coordinator(3)
    out, _ = run_ranks(c.address, range(3))
    out[0][0].send({"kind": "note", "to": "all", "n": 1})
    for r in (1, 2):
        assert next_msg(out[r][2], "note") == {"kind": "note", "to": "all", "n": 1, "from": 0}
    out[2][0].send({"kind": "note", "to": [0], "n": 2})
    assert next_msg(out[0][2], "note")["from"] == 2
    assert "note" not in kinds(before_fences(out[1][2], (out[2][0], [1])))  # rank 1 was not sent it


def test_bye_becomes_left_and_eof_becomes_lost(coordinator):
    c = coordinator(3)
    out, _ = run_ranks(c.address, range(3))
    out[1][0].close()
    assert next_msg(out[0][2], "left") == {"kind": "left", "rank": 1, "ranks": [1]}
    out[2][0]._closing = True
    out[2][0]._sock.shutdown(socket.SHUT_RDWR)  # dies without a goodbye
    lost = next_msg(out[0][2], "lost")
    assert lost["rank"] == 2 and "without saying goodbye" in lost["message"]


def test_goodbyes_at_once_share_one_left_message(coordinator):
    """Ranks finishing together: each remaining rank gets one "left" naming them all, not one each
    (n ranks leaving at once cost n²/2 messages: 2.5 million at 8,000 ranks)."""
    c = coordinator(6)
    out, _ = run_ranks(c.address, range(6))
    closers = [threading.Thread(target=out[r][0].close) for r in range(1, 6)]
    for t in closers:
        t.start()
    for t in closers:
        t.join(5)
    named = []
    while len(named) < 5:
        named += _control.unpack_ranks(next_msg(out[0][2], "left")["ranks"], 6)
    assert sorted(named) == [1, 2, 3, 4, 5]
    assert "left" not in kinds(before_fences(out[0][2], (out[0][0], [0])))  # no other "left" after those


def _digest(n, value, **groups):
    """A finalize() digest: group "0" ran n collectives hashing to value; more groups as gid=(n, value)."""
    out = {"0": {"n": n, "digest": value, "recent": []}}
    out.update({gid: {"n": gn, "digest": gv, "recent": []} for gid, (gn, gv) in groups.items()})
    return {"kind": "digest", "groups": out, "at_exit": False, "exit_code": None}


def test_first_differences_is_what_each_rank_would_find_comparing_with_all():
    same = {r: _digest(5, 11) for r in range(4)}
    assert rv_coordinator.first_differences(same) == {0: None, 1: None, 2: None, 3: None}
    odd = {**same, 2: _digest(6, 12)}  # rank 2 ran one more collective
    assert rv_coordinator.first_differences(odd) == {0: 2, 1: 2, 2: 0, 3: 2}
    # a subgroup only ranks 1 and 3 belong to, where they differ: rank 0 and 2 compare nothing there
    sub = {0: _digest(5, 11), 1: _digest(5, 11, g9=(1, 7)), 2: _digest(5, 11), 3: _digest(5, 11, g9=(2, 8))}
    assert rv_coordinator.first_differences(sub) == {0: None, 1: 3, 2: None, 3: 1}
    # junk from a rank (lists, strings, no groups) never stops the coordinator; it differs or is ignored
    junk = {**same, 1: {"groups": {"0": {"n": [1], "digest": {"x": 1}}}}, 3: {"groups": "nope"}}
    assert rv_coordinator.first_differences(junk) == {0: 1, 1: 0, 2: 1, 3: None}


def brute_force_first_differences(digests):
    """The comparison every rank made itself before the coordinator did it (lifecycle._compare)."""
    first = {}
    for me, mine in digests.items():
        first[me] = next((peer for peer in sorted(digests) if peer != me and any(
            gid in digests[peer]["groups"] and (digests[peer]["groups"][gid]["n"], digests[peer]["groups"][gid]["digest"])
            != (g["n"], g["digest"]) for gid, g in mine["groups"].items())), None)
    return first


def test_first_differences_matches_every_rank_comparing_with_every_other():
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(1, 9)
        digests = {r: _digest(rng.choice([3, 3, 3, 4]), rng.choice([1, 1, 2]),
                              **{f"g{k}": (rng.randint(1, 2), 9) for k in range(3) if rng.random() < 0.5})
                   for r in range(n)}
        assert rv_coordinator.first_differences(digests) == brute_force_first_differences(digests), digests


def test_digests_go_to_the_coordinator_which_answers_each_rank_once(coordinator):
    """finalize(): each rank sends its digest to the coordinator only; the others hear that it is
    finishing (coalesced), and once every rank is accounted for each gets one verdict: empty where
    all agree, else the digest of the first rank that differs from it."""
    c = coordinator(4)
    out, _ = run_ranks(c.address, range(4))
    for r in (0, 1, 3):
        out[r][0].send(dict(_digest(5, 11 if r != 3 else 99), rank=r, at_exit=r == 1, exit_code=7 if r == 1 else None))
    finishing = {}
    while len(finishing) < 3:
        msg = next_msg(out[2][2], "finishing")
        ends = {r: [at_exit, code] for at_exit, code, rs in msg.get("ends", []) for r in _control.unpack_ranks(rs, 4)}
        finishing.update({r: ends.get(r) for r in _control.unpack_ranks(msg["ranks"], 4)})
    assert finishing == {0: None, 1: [True, 7], 3: None}
    # every digest was handled (its "finishing" came): rank 2 has not finished, so no verdict yet
    assert "verdict" not in kinds(before_fences(out[0][2], (out[2][0], [0])))
    out[2][0].send({"kind": "release", "rank": 2})  # rank 2 failed waiting on a rank that finished
    assert next_msg(out[0][2], "verdict")["peers"] == {"3": dict(_digest(5, 99), rank=3, at_exit=False, exit_code=None)}
    assert next_msg(out[1][2], "verdict")["peers"].keys() == {"3"}
    assert next_msg(out[3][2], "verdict")["peers"].keys() == {"0"}
    # every verdict was sent: no digest was relayed to any rank, and rank 2 gets no verdict
    for r, sender in ((0, 2), (1, 2), (2, 0), (3, 2)):
        got = kinds(before_fences(out[r][2], (out[sender][0], [r])))
        assert "digest" not in got and (r != 2 or "verdict" not in got), (r, got)


def test_a_rank_gone_without_a_digest_does_not_hold_up_the_verdict(coordinator):
    c = coordinator(3)
    out, _ = run_ranks(c.address, range(3))
    for r in (0, 1):
        out[r][0].send(dict(_digest(2, 4), rank=r))
    # (each fence follows its sender's digest: both digests are handled before the fences come)
    assert "verdict" not in kinds(before_fences(out[0][2], (out[0][0], [0]), (out[1][0], [0])))
    out[2][0]._closing = True
    out[2][0]._sock.shutdown(socket.SHUT_RDWR)  # rank 2 vanishes
    assert next_msg(out[0][2], "verdict")["peers"] == {}
    assert next_msg(out[1][2], "verdict")["peers"] == {}


class _Ep:
    """What a stall report asks of its endpoint, with no data path."""

    def __init__(self, rank):
        self.rank, self.closed = rank, False

    def link_note(self, peer):
        return None

    def coordinator_note(self):
        return None

    def fail(self, exc, remote=False):
        return exc


def ranks_with_notices(address, n, silent=(), counted=None):
    """n registered ranks, each with a real Notices on its coordinator connection (the ones in
    `silent` never answer: no listener); `counted`: {rank: [kinds received]}."""
    out, _ = run_ranks(address, range(n), listen=False)
    notices = {}
    for r in range(n):
        nt = notices_module.Notices(_Ep(r))
        nt.send = out[r][0].send
        if r not in silent:
            def on(msg, nt=nt, r=r):
                if counted is not None:
                    counted.setdefault(r, []).append(msg["kind"])
                nt.on_notice(msg)
            out[r][0].start_listener(on)
        notices[r] = nt
    return out, notices


def test_stall_report_is_one_census_of_every_rank(coordinator):
    c = coordinator(4)
    counted = {}
    out, nt = ranks_with_notices(c.address, 4, silent={3}, counted=counted)
    nt[1].current = ("all_reduce #3 (float32, 4, op=sum)", 2, None)
    nt[2].current = ("recv", 0, None)
    t0 = time.monotonic()
    report = nt[0].stall_report(4)
    assert time.monotonic() - t0 < 2.5  # the census waits 1 s for the silent rank, no more
    assert report.splitlines()[2:] == ["    rank 1: in all_reduce #3 (float32, 4, op=sum), waiting on rank 2",
                                       "    rank 2: in recv, waiting on rank 0",
                                       "    rank 3: no answer (stopped, or holding the GIL?)"], report
    # ranks that time out together share the census: rank 1 asks now and gets it, and no rank was
    # asked twice (a relay per asker was n² queries at a stall of n ranks)
    report1 = nt[1].stall_report(4)
    assert "rank 0: not in a commlib call (last: none)" in report1 and "rank 3: no answer" in report1, report1
    assert counted[2].count("status_query") == 1, counted


def test_a_census_answer_naming_no_rank_of_the_job_is_read_as_no_peer(coordinator):
    """A peer out of range (or not an integer) in a rank's answer never spoils the census for the others."""
    c = coordinator(3)
    out, nt = ranks_with_notices(c.address, 3)
    nt[1].current = ("recv", 99, None)
    nt[2].current = ("barrier #2", True, None)
    assert nt[0].stall_report(3).splitlines()[2:] == ["    rank 1: in recv", "    rank 2: in barrier #2"]


def test_a_large_stall_report_groups_ranks_in_the_same_state(coordinator, monkeypatch):
    monkeypatch.setattr(notices_module, "STALL_EACH", 3)
    c = coordinator(7)
    out, nt = ranks_with_notices(c.address, 7, silent={5, 6})
    for r in (1, 2, 3):
        nt[r].current = ("all_reduce #3 (float32, 4, op=sum)", (r + 1) % 7, None)
    nt[4].current = ("barrier #4", 0, None)
    lines = nt[0].stall_report(7).splitlines()[2:]
    assert lines == ["    ranks 1-3 (3): in all_reduce #3 (float32, 4, op=sum), waiting on 3 different ranks "
                     "(rank 2: 1 of them)",
                     "    rank 4: in barrier #4, waiting on rank 0",
                     "    ranks 5-6 (2): no answer (stopped, or holding the GIL?)"], lines


def test_census_reply_lists_the_largest_groups_and_names_the_rest(monkeypatch):
    monkeypatch.setattr(rv_coordinator, "CENSUS_GROUPS", 2)
    states = {r: ("in all_reduce #1", (r + 1) % 9) for r in range(5)}
    states.update({5: ("in barrier #2", 0), 6: ("in barrier #2", 0), 7: ("in recv", 1), 8: ("not in a commlib call", None)})
    msg = json.loads(rv_coordinator.census_reply(3, states)[4:])
    assert msg["groups"] == [["in all_reduce #1", [[0, 4]], [["+", 1, 5]]], ["in barrier #2", [5, 6], 0]]
    assert msg["omitted"] == [7, 8] and msg["epoch"] == 3


def test_rank_sets_and_peers_travel_compactly_and_read_back_exactly():
    rng = random.Random(7)
    for _ in range(400):
        n = rng.choice([1, 2, 9, 100, 1000, 8000])
        pick = rng.random()
        if pick < 0.3:
            ranks = sorted(rng.sample(range(n), rng.randint(0, n)))
        elif pick < 0.6:
            first = rng.randrange(n)
            ranks = list(range(first, rng.randint(first, n - 1) + 1))
        else:
            ranks = [r for r in range(n) if rng.random() < 0.9]
        packed = json.loads(json.dumps(_control.pack_ranks(ranks)))
        assert _control.unpack_ranks(packed, n) == ranks
        assert len(json.dumps(packed)) <= len(json.dumps(ranks)) + 2  # never longer than the list
        peers = rng.choice([[(r - 1) % n for r in ranks], [rng.choice([None, 0]) for _ in ranks],
                            [None if p < 0 else p for p in (rng.randrange(-1, n) for _ in ranks)]])
        runs = json.loads(json.dumps(_control.pack_peers(ranks, peers)))
        assert _control.unpack_peers(ranks, runs, n) == peers
    every = list(range(8000))  # a stall of 8,000 ranks each waiting on its left neighbour: a few bytes
    assert _control.pack_ranks(every) == [[0, 7999]]
    assert _control.pack_peers(every, [(r - 1) % 8000 for r in every]) == [["=", 7999, 1], ["+", -1, 7999]]
    half = sorted(random.Random(1).sample(every, 4000))  # half the ranks at random: a bitmap
    assert isinstance(_control.pack_ranks(half), str) and len(_control.pack_ranks(half)) < 1400


@pytest.mark.parametrize("junk", [[[3, 1]], [[0, 9]], [-1], ["x"], [[0, 1, 2]], "!!", {"a": 1}, 5, "////////"])
def test_malformed_rank_sets_are_refused(junk):
    with pytest.raises(ValueError):
        _control.unpack_ranks(junk, 9)


@pytest.mark.parametrize("junk", [[["=", 9, 1]], [["+", 5, 1]], [["=", 0, 3]], [["?", 0, 1]], [["=", 0, 0]], "x"])
def test_malformed_peer_runs_are_refused(junk):
    with pytest.raises(ValueError):
        _control.unpack_peers([4], junk, 9)


def test_rank_ranges():
    assert notices_module.rank_ranges([0, 1, 2, 3, 5, 7, 8, 9]) == "0-3, 5, 7-9"
    assert notices_module.rank_ranges([4]) == "4"
    assert notices_module.rank_ranges([]) == ""


def test_listener_reports_coordinator_lost_once(coordinator):
    c = coordinator(1)
    out, _ = run_ranks(c.address, [0])
    c.close()
    msg = next_msg(out[0][2], "coordinator_lost")
    assert "127.0.0.1" in msg["message"]
    listener = out[0][0]._listener
    listener.join(5 * SCALE)  # it ends once it reported the loss: all it ever delivers is in the inbox
    assert not listener.is_alive() and out[0][2].empty()


def test_messages_before_the_listener_are_kept(coordinator):
    c = coordinator(2)
    out, _ = run_ranks(c.address, range(2), listen=False)
    out[0][0].send({"kind": "early", "to": [1]})
    unread = out[1][0].sock
    wait_for(lambda: b'"early"' in _peek(unread), what="the message to reach rank 1 before its listener")
    inbox = queue.Queue()
    out[1][0].start_listener(inbox.put)
    assert next_msg(inbox, "early")["from"] == 0


def _peek(sock):
    """The bytes waiting in `sock`, left there."""
    try:
        return sock.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


def test_census_on_request(coordinator):
    c = coordinator(2)
    client = rv.Client.connect(c.address, SECRET, 1, 5)
    client.send({"kind": "census"})
    assert client._read(5) == {"kind": "census", "missing": [0, 1], "dead": []}
    client.close()


# ---------------------------------------------------------------- refusals and hostile input


def test_wrong_secret_is_refused_and_the_job_goes_on(coordinator, logs):
    c = coordinator(2)
    with pytest.raises(AuthError) as e:
        rv.Client.connect(c.address, b"x" * 32, 0, 5)
    assert "refused" in str(e.value)
    wait_for(lambda: any("wrong secret" in line for line in logs), what="the coordinator's log of the refusal")
    out, errors = run_ranks(c.address, range(2))
    assert not errors and len(out[1][1]) == 2


def _close_once_read(conn):
    """Close `conn` once the client hung up (it read what it was sent: no reset takes it away)."""
    conn.settimeout(10 * SCALE)
    with contextlib.suppress(OSError):
        while conn.recv(4096):
            pass
    conn.close()


def test_client_refuses_a_coordinator_without_the_secret():
    server = socket.create_server(("127.0.0.1", 0))

    def impostor():
        conn, _ = server.accept()
        conn.sendall(framing.MAGIC + os.urandom(32))
        _auth.recv_exact(conn, 68)
        conn.sendall(os.urandom(32))
        _close_once_read(conn)

    threading.Thread(target=impostor, daemon=True).start()
    with pytest.raises(AuthError, match="does not know the job secret"):
        rv.Client.connect(server.getsockname(), SECRET, 0, 5)
    server.close()


def test_not_a_coordinator():
    server = socket.create_server(("127.0.0.1", 0))

    def http():
        conn, _ = server.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b"x" * 64)
        _close_once_read(conn)

    threading.Thread(target=http, daemon=True).start()
    with pytest.raises(CommError, match="not a commlib coordinator"):
        rv.Client.connect(server.getsockname(), SECRET, 0, 5)
    server.close()


def test_garbage_silent_and_scanning_clients_do_not_harm_the_job(coordinator, logs, monkeypatch):
    monkeypatch.setattr(rv.coordinator, "HANDSHAKE_TIMEOUT", 0.5)
    c = coordinator(2)
    silent = socket.create_connection(c.address)
    garbage = socket.create_connection(c.address)
    garbage.sendall(secrets.token_bytes(500))
    socket.create_connection(c.address).close()  # a port scan
    out, errors = run_ranks(c.address, range(2))
    assert not errors and list(out[0][1]) == list(out[1][1])
    wait_for(lambda: any("no handshake within" in line for line in logs), what="the silent client's timeout")
    assert sum("dropped connection" in line for line in logs) >= 3
    silent.close()
    garbage.close()
    out[0][0].send({"kind": "still-alive", "to": [1]})
    assert next_msg(out[1][2], "still-alive")["from"] == 0


def test_pending_handshakes_are_bounded(logs, monkeypatch):
    """At most MAX_PENDING_HANDSHAKES at once; later connections wait in the backlog (never dropped:
    a burst of ranks must all get in) and are served as slots free up."""
    monkeypatch.setattr(rv.coordinator, "MAX_PENDING_HANDSHAKES", 2)
    monkeypatch.setattr(rv.coordinator, "HANDSHAKE_TIMEOUT", 1.0)
    c = rv.Coordinator(1, SECRET, log=logs.append)
    c.start()
    silent = [socket.create_connection(c.address, timeout=5) for _ in range(3)]
    wait_for(lambda: any("too many pending handshakes" in line for line in logs), what="the third to wait")
    for s in silent[:2]:  # the first two are served at once
        assert _auth.recv_exact(s, len(framing.MAGIC)) == framing.MAGIC
    silent[2].settimeout(0.3)
    with pytest.raises(socket.timeout):  # the third waits for a slot...
        silent[2].recv(1)
    silent[2].settimeout(5)  # ...which the silent two free when their handshake times out
    assert _auth.recv_exact(silent[2], len(framing.MAGIC)) == framing.MAGIC
    for s in silent:
        s.close()
    wait_for(lambda: sum("dropped connection" in line for line in logs) >= 3, what="3 dropped connections")
    out, errors = run_ranks(c.address, [0])
    assert not errors
    c.close()


@pytest.mark.parametrize(
    "payload, why",
    [
        (struct.pack(">I", 2 << 20), "exceeds"),
        (struct.pack(">I", 5) + b"{nope", "bad JSON"),
        (struct.pack(">I", 2) + b"[]", "not an object"),
    ],
)
def test_malformed_messages_drop_the_connection(coordinator, logs, payload, why):
    c = coordinator(2)
    watcher = rv.Client.connect(c.address, SECRET, 0, 5)
    inbox = queue.Queue()
    watcher.start_listener(inbox.put)
    s = raw_handshake(c.address, 1)
    s.sendall(payload)
    assert next_msg(inbox, "lost")["rank"] == 1
    assert any(why in line for line in logs)
    assert s.recv(10) == b""  # dropped
    s.close()
    watcher.close()


def test_messages_split_anywhere_and_many_in_one_read_are_each_handled(coordinator):
    """One event loop reads every connection: a message arriving a byte at a time, and several
    arriving in one read, are each handled whole and in order."""
    c = coordinator(2)
    before = {t.ident for t in threading.enumerate()}
    watcher = rv.Client.connect(c.address, SECRET, 0, 5)
    inbox = queue.Queue()
    watcher.start_listener(inbox.put)
    s = raw_handshake(c.address, 1)
    slow = framing.encode({"kind": "note", "to": [0], "n": 1})
    for i in range(len(slow)):
        s.sendall(slow[i:i + 1])
        time.sleep(0.002)  # a byte a read: the trickle under test, not a wait for anything
    s.sendall(b"".join(framing.encode({"kind": "note", "to": "all", "n": k}) for k in range(2, 40)))
    got = [next_msg(inbox, "note")["n"] for _ in range(39)]
    assert got == list(range(1, 40))
    wait_for(lambda: [t for t in threading.enumerate() if t.ident not in before
                      and t.name != "commlib-coordinator-client"] == [],
             what="the handshake threads to end")  # the clients' own listeners aside,
    # the two connections hold no thread of the coordinator's once their handshakes are done: its loop reads them
    s.close()
    watcher.close()


def test_a_rank_that_stops_reading_delays_deliveries_by_send_timeout_at_most(coordinator, logs, monkeypatch):
    """Rank 2 sends but never reads. Relays to it fill its buffers; the coordinator's deliveries
    (one thread, in order) then wait SEND_TIMEOUT for it, give up on it (its connection is shut, the
    others hear it is lost) and go on: the others' messages keep coming."""
    monkeypatch.setattr(rv_coordinator, "SEND_TIMEOUT", 1.0)
    c = coordinator(3)
    watcher = rv.Client.connect(c.address, SECRET, 0, 5)
    inbox = queue.Queue()
    watcher.start_listener(inbox.put)
    deaf = raw_handshake(c.address, 2, rcvbuf=4096)
    talker = raw_handshake(c.address, 1)
    blob = "x" * 900_000
    start = time.monotonic()
    for _ in range(12):  # ~11 MB to the deaf rank: more than any socket buffers hold
        talker.sendall(framing.encode({"kind": "fill", "to": [2], "blob": blob}))
    talker.sendall(framing.encode({"kind": "ping", "to": [0]}))
    assert next_msg(inbox, "ping", timeout=10.0)["from"] == 1
    assert next_msg(inbox, "lost", timeout=5.0)["rank"] == 2
    assert time.monotonic() - start < 8.0
    assert any("could not reach rank 2" in line for line in logs), logs
    for s in (talker, deaf):
        s.close()
    watcher.close()


def test_a_message_that_cannot_be_handled_drops_its_sender_not_the_coordinator(coordinator, logs):
    """A registration whose info is no object is refused (its sender dropped, the others hear it is
    lost); any message whose handling fails drops its sender too, and the event loop reads on."""
    c = coordinator(3)
    result = {}
    t = threading.Thread(target=lambda: result.update(run_ranks(c.address, [0], timeout=5)[1]))
    t.start()
    watcher = raw_handshake(c.address, 2)
    bad = raw_handshake(c.address, 1)
    wait_for(lambda: 0 in c.connected())  # (a "lost" notice reaches the ranks connected when it is sent)
    bad.sendall(framing.encode({"kind": "register", "info": "not an object"}))
    t.join(10)
    assert isinstance(result.get(0), PeerLost) and "rank 1" in str(result[0]), result
    assert any("info is not an object" in line for line in logs), logs

    def boom(rank):
        raise RuntimeError("boom")

    c._stall = boom
    watcher.sendall(framing.encode({"kind": "stall"}))
    watcher.settimeout(5)
    assert watcher.recv(1 << 16) == b"" or watcher.recv(1 << 16) == b""  # dropped (after any queued notices)
    assert any("could not be handled (RuntimeError: boom)" in line for line in logs), logs
    late = raw_handshake(c.address, 2)  # the loop still reads: rank 2 may connect again and be answered
    late.sendall(framing.encode({"kind": "census"}))
    late.settimeout(5)
    while (msg := framing.recv_message(late))["kind"] != "census":
        pass
    assert msg["missing"] == [1, 2]  # rank 1 was refused before its info went in the table
    for s in (watcher, bad, late):
        s.close()


def test_client_does_not_send_oversize_messages(coordinator):
    c = coordinator(1)
    client = rv.Client.connect(c.address, SECRET, 0, 5)
    with pytest.raises(ValueError, match="exceeds"):
        client.send({"kind": "x", "to": "all", "blob": "a" * (1 << 20)})
    client.close()


def test_rank_out_of_range_and_duplicates_are_refused(coordinator, logs):
    c = coordinator(2)
    with pytest.raises(CommError, match="rank 5 is out of range for a job of size 2"):
        rv.Client.connect(c.address, SECRET, 5, 5)
    first = rv.Client.connect(c.address, SECRET, 1, 5)
    with pytest.raises(CommError, match="rank 1 is already connected"):
        rv.Client.connect(c.address, SECRET, 1, 5)
    assert sum("refused" in line for line in logs) == 2
    first.close()


def test_wire_is_length_prefixed_json():
    frame = framing.encode({"kind": "x", "n": 1})
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert json.loads(frame[4:]) == {"kind": "x", "n": 1}


# ---------------------------------------------------------------- discover()


def commrun_env(**over):
    env = {
        "COMMLIB_RANK": "1", "COMMLIB_SIZE": "4", "COMMLIB_LOCAL_RANK": "1", "COMMLIB_LOCAL_SIZE": "2",
        "COMMLIB_COORDINATOR": "127.0.0.1:4567", "COMMLIB_SECRET": SECRET.hex(),
    }
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_discover_commrun():
    env = rv.discover(commrun_env(RANK="9", WORLD_SIZE="99", MASTER_ADDR="x", MASTER_PORT="1"))
    assert env == rv.JobEnv(1, 4, 1, 2, ("127.0.0.1", 4567), SECRET, False, "commrun")


def test_discover_outside_any_launcher():
    assert rv.discover({}) is None
    assert rv.discover({"PATH": "/bin", "SLURM_JOB_ID": "5", "SLURM_NODELIST": "n1"}) is None


@pytest.mark.parametrize(
    "over, name",
    [
        ({"COMMLIB_SIZE": None}, "COMMLIB_SIZE"),
        ({"COMMLIB_RANK": "one"}, "COMMLIB_RANK"),
        ({"COMMLIB_RANK": "4"}, "COMMLIB_RANK"),
        ({"COMMLIB_SIZE": "0", "COMMLIB_RANK": "0"}, "COMMLIB_SIZE"),
        ({"COMMLIB_LOCAL_RANK": "2"}, "COMMLIB_LOCAL_RANK"),
        ({"COMMLIB_COORDINATOR": "nohostport"}, "COMMLIB_COORDINATOR"),
        ({"COMMLIB_COORDINATOR": "h:99999"}, "COMMLIB_COORDINATOR"),
        ({"COMMLIB_SECRET": "zz"}, "COMMLIB_SECRET"),
        ({"COMMLIB_SECRET": None}, "COMMLIB_SECRET"),
    ],
)
def test_discover_malformed_commrun_vars(over, name):
    with pytest.raises(CommError, match=name):
        rv.discover(commrun_env(**over))


def test_discover_ipv6_coordinator():
    assert rv.discover(commrun_env(COMMLIB_COORDINATOR="[::1]:80")).coordinator == ("::1", 80)


def slurm_env(**over):
    env = {
        "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NODELIST": "node[07-08]",
        "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_NAME": "train",
    }
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_discover_slurm(caplog):
    monkey_warned = discovery._warned_weak_secret
    discovery._warned_weak_secret = False
    try:
        env = rv.discover(slurm_env())
        again = rv.discover(slurm_env(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0"))
        assert not any("COMMLIB_SECRET is not set" in r.message for r in caplog.records)  # only once used
        rv.warn_if_derived(env.secret)
        rv.warn_if_derived(again.secret)
        rv.warn_if_derived(b"given")
    finally:
        discovery._warned_weak_secret = monkey_warned
    assert (env.rank, env.size, env.local_rank, env.local_size) == (3, 4, 1, 2)
    assert env.coordinator == ("node07", 20000 + 123456 % 12000)  # below the ephemeral ports (32768 on)
    assert env.source == "slurm" and not env.host_coordinator and again.host_coordinator
    assert env.secret == again.secret and len(env.secret) == 32
    assert sum("COMMLIB_SECRET is not set" in r.message for r in caplog.records) == 1


def test_discover_slurm_overrides():
    env = rv.discover(slurm_env(COMMLIB_COORDINATOR="login1:999", COMMLIB_SECRET="ab" * 32))
    assert env.coordinator == ("login1", 999) and env.secret == b"\xab" * 32


def test_discover_slurm_uneven_tasks_per_node():
    env = rv.discover(slurm_env(SLURM_NTASKS="5", SLURM_PROCID="4", SLURM_NODEID="2", SLURM_LOCALID="0",
                                SLURM_NODELIST="a[1-3]", SLURM_TASKS_PER_NODE="2(x2),1", COMMLIB_SECRET="00"))
    assert env.local_size == 1


@pytest.mark.parametrize("step", [None, "4294967294", "4294967295", "4294967291"])
def test_slurm_shell_without_srun_is_not_a_job(step):
    # salloc / sbatch shells carry SLURM_* too, but no real step id
    assert rv.discover(slurm_env(SLURM_STEP_ID=step, SLURM_PROCID="0")) is None


@pytest.mark.parametrize(
    "over, name",
    [
        ({"SLURM_NTASKS": "x"}, "SLURM_NTASKS"),
        ({"SLURM_PROCID": "4"}, "SLURM_PROCID"),
        ({"SLURM_NODELIST": "node[1-"}, "SLURM_NODELIST"),
        ({"SLURM_JOB_ID": None}, "SLURM_JOB_ID"),
        ({"SLURM_TASKS_PER_NODE": "2(y2)"}, "SLURM_TASKS_PER_NODE"),
        ({"SLURM_STEP_ID": "abc"}, "SLURM_STEP_ID"),
    ],
)
def test_discover_malformed_slurm_vars(over, name):
    with pytest.raises(CommError, match=name):
        rv.discover(slurm_env(COMMLIB_SECRET="00", **over))


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
        ("a[001-003,010],b7", ["a001", "a002", "a003", "a010", "b7"]),
        ("x-[1,3]-y", ["x-1-y", "x-3-y"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
        ("a,b[2],c", ["a", "b2", "c"]),
    ],
)
def test_expand_nodelist(text, hosts):
    assert rv.expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["n[1-", "n]1[", "n[a-b]", "n[1-x]"])
def test_expand_nodelist_rejects_malformed(text):
    with pytest.raises(ValueError):
        rv.expand_nodelist(text)


def torch_env(**over):
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "COMMLIB_SECRET": "cd" * 32}
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_discover_torchrun():
    env = rv.discover(torch_env())
    assert env == rv.JobEnv(2, 4, 0, 2, ("10.0.0.1", 29500), b"\xcd" * 32, False, "torchrun")
    assert rv.discover(torch_env(RANK="0", LOCAL_RANK="0")).host_coordinator
    # under torchrun itself the agent's store holds MASTER_PORT
    assert rv.discover(torch_env(TORCHELASTIC_USE_AGENT_STORE="True")).coordinator == ("10.0.0.1", 29501)
    assert rv.discover(torch_env(COMMLIB_COORDINATOR="h:5")).coordinator == ("h", 5)


@pytest.mark.parametrize(
    "over, name",
    [
        ({"MASTER_ADDR": None}, "MASTER_ADDR"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK"),
    ],
)
def test_discover_malformed_torchrun_vars(over, name):
    with pytest.raises(CommError, match=name):
        rv.discover(torch_env(**over))


def _infos(n, hosts=157):
    return [{"host": f"nid{r // 64:06d}", "host_id": f"nid{r // 64:06d}/0f1e2d3c-boot/4026531840",
             "tcp": [f"10.1.{r // 64 % 256}.{r % 64 + 2}", 40000 + r % 20000],
             "unix": f"commlib-{100000 + r}-{r:016x}", "pid": 100000 + r} for r in range(n)]


@pytest.mark.parametrize("host_of", [[0] * 5, [0, 0, 1, 1, 2], [0, 1, 0, 1], [-1, -1, 0, 0, -1, 1, 1],
                                     [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3], []])
def test_hosts_pack_as_runs_and_come_back(host_of):
    from commlib._rendezvous.table import pack_hosts, unpack_hosts
    assert unpack_hosts(pack_hosts(host_of), len(host_of)) == host_of


def test_block_placement_packs_to_one_or_two_runs_and_bad_runs_are_refused():
    from commlib._rendezvous.table import pack_hosts, unpack_hosts
    assert pack_hosts([r // 64 for r in range(10_000)]) == [[0, 64, 156], [156, 16, 1]]
    assert pack_hosts([r // 16 for r in range(4096)]) == [[0, 16, 256]]
    for bad, size in (([[0, 2, 2]], 3), ([[0, 0, 1]], 0), ([[-1, 2, 2]], 4), ("x", 1), ([[0, 1, 1]], 2)):
        with pytest.raises(ValueError, match="host run|malformed|for"):
            unpack_hosts(bad, size)


def test_each_rank_is_told_its_likely_peers_and_fetches_the_rest():
    from commlib._rendezvous.table import ROWS_BLOCK, Book, neighbours
    infos = _infos(10_000)
    book = Book(infos)
    sizes = [len(book.assembled(r)) for r in range(0, 10_000, 97)]
    assert max(sizes) < 12_000  # O(log n) rows (the whole table, packed, was ~600 kB a rank)
    msg = json.loads(book.assembled(4321)[4:])
    told = {row[0] for row in msg["rows"]}
    # its ring and binomial neighbours, its host's first rank and ring neighbours on the host
    assert {4320, 4322, 4321 ^ 1, 4321 + 64, 4321 - 1024, 4288, 4321 - 4288 + 4288 + 1} <= told
    assert len(told) < 80
    leader = json.loads(book.assembled(64 * 20)[4:])  # host 20's first rank: the leaders of hosts 19, 21, 21^...
    assert {64 * 19, 64 * 21, 64 * (20 ^ 4), 64 * 28} <= {row[0] for row in leader["rows"]}
    assert 4321 not in neighbours(4321, 10_000, book.host_of, book.local, book.position, book.leaders)
    # 12 ranks a host: the rail's neighbours (its index on hosts h ± 1, h ± 2, ... h xor 2^k) are
    # told too, where they are not the world's ring and binomial neighbours already
    rails = Book([dict(info, host_id=f"h{r // 12}") for r, info in enumerate(_infos(1200))])
    told = {row[0] for row in json.loads(rails.assembled(12 * 50 + 5)[4:])["rows"]}
    assert {12 * h + 5 for h in (49, 51, 48, 52, 46, 54, 50 ^ 8, 50 ^ 16, 50 ^ 32)} <= told, sorted(told)
    assert len(told) < 80
    table = book.table(4321)
    assert len(table) == 10_000 and table.known(4320) and not table.known(7000)
    assert table.host_key(7000) == 7000 // 64 and table.host_key(4321) == table.host_key(4288)
    asked = []
    request = table._request
    table._request = lambda first, last: (asked.append((first, last)), request(first, last))
    assert table[7000] == infos[7000] and asked == [(7000 - 7000 % ROWS_BLOCK, 7000 - 7000 % ROWS_BLOCK + 63)]
    assert table[7001] == infos[7001] and len(asked) == 1  # the block came whole
    assert table[-1] == infos[-1] and table[2:4] == infos[2:4]
    assert list(table) == infos  # the rest, several messages' worth
    with pytest.raises(IndexError, match="rank 10000 is out of range for 10000 ranks"):
        table[10_000]


def test_a_fetch_fails_with_the_coordinator_and_times_out_when_it_is_silent():
    from commlib._rendezvous.table import Book, Table
    book = Book(_infos(300))
    msg = json.loads(book.assembled(0)[4:])
    silent = Table(msg, lambda first, last: None, None, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(CommTimeout, match=r"addresses of ranks 128..191 within 0.3 s"):
        silent[150]
    assert time.monotonic() - t0 < 2
    gone = Table(msg, lambda first, last: None, None, timeout=30)
    waiting = threading.Event()

    class _Told(threading.Condition):  # the table's condition, saying when the fetch waits on it
        def wait(self, timeout=None):
            waiting.set()
            return super().wait(timeout)

    gone._cond = _Told()
    failer = threading.Thread(target=lambda: waiting.wait(5 * SCALE) and gone.fail(
        CommError("rank 0: lost the coordinator")))  # the coordinator lost while the fetch waits
    failer.start()
    with pytest.raises(CommError, match="lost the coordinator"):
        gone[150]
    failer.join()
    with pytest.raises(ValueError, match="malformed row"):
        gone.add({"kind": "rows", "keys": msg["keys"], "rows": [[299, 0] + [None] * len(msg["keys"])],
                  "names": {}})  # rank 299 is on host 4, not 0
    far = Table(json.loads(Book(_infos(2000)).assembled(0)[4:]), lambda first, last: None, None, timeout=1)
    assert not far.known(1300) and far.host_key(1300) == 20  # (host 20: none of rank 0's peers is there)
    with pytest.raises(ValueError, match="whose name did not come"):
        far.add({"kind": "rows", "keys": msg["keys"], "rows": [[1300, 20] + [None] * len(msg["keys"])], "names": {}})


def test_a_loopback_address_across_hosts_is_found_once_for_every_rank():
    from commlib._rendezvous.table import Book
    here = {"host_id": "a/boot/1", "tcp": ["127.0.0.1", 5]}
    there = {"host_id": "b/boot2/1", "tcp": ["10.0.0.2", 6]}
    book = Book([dict(there), dict(here), dict(there), dict(here)])
    assert [book.table(r).loopback for r in range(4)] == [[1, 1, "127.0.0.1"], [1, 0, "127.0.0.1"],
                                                          [1, 1, "127.0.0.1"], [3, 0, "127.0.0.1"]]
    both = Book([dict(here), dict(here, host_id="b/boot2/1")])
    assert both.table(0).loopback == [1, 1, "127.0.0.1"]
    same_stack = Book([{"host_id": "a/boot/1", "tcp": ["127.0.0.1", 5]}, {"host_id": "c/boot/1", "tcp": ["127.0.0.1", 6]}])
    assert same_stack.table(0).loopback is None  # (two names, one network stack: a container)
    assert Book([dict(there), {"host_id": "c/boot3/1", "tcp": ["10.0.0.3", 1]}]).table(1).loopback is None


def test_a_registration_too_large_is_refused_and_rows_before_assembly_drop_the_asker(coordinator, logs):
    c = coordinator(2)
    s = raw_handshake(c.address, 0)
    s.sendall(framing.encode({"kind": "register", "info": {"x": "y" * 5000}}))
    wait_for(lambda: any("larger than 4096 bytes" in line for line in logs), what="the refusal's log line")
    s2 = raw_handshake(c.address, 1)
    s2.sendall(framing.encode({"kind": "rows", "first": 0, "last": 1}))
    wait_for(lambda: any("before the job assembled" in line for line in logs), what="the drop's log line")
    s.close()
    s2.close()


def test_retries_back_off_exponentially_with_jitter():
    from commlib import _backoff
    waits = [[_backoff.delay(a) for _ in range(200)] for a in range(6)]
    for a, ws in enumerate(waits):
        step = min(0.1, 0.02 * 2 ** a)
        assert all(0.5 * step <= w < 1.5 * step for w in ws), a
        assert len({round(w, 6) for w in ws}) > 150  # spread: thousands of ranks do not retry in step
    assert max(_backoff.delay(40, cap=1.0) for _ in range(100)) < 1.5


def test_the_coordinator_warns_when_the_job_outgrows_the_kernels_backlog(monkeypatch):
    from commlib import _backoff
    lines = []
    monkeypatch.setattr(_backoff, "somaxconn", lambda: 8)
    rv.Coordinator(20, b"s" * 32, log=lines.append).close()
    assert any("20 ranks but the kernel caps a listen backlog at 8 (net.core.somaxconn)" in ln
               and "sysctl -w net.core.somaxconn=32" in ln for ln in lines), lines
    lines.clear()
    rv.Coordinator(8, b"s" * 32, log=lines.append).close()
    assert not lines


def test_close_stops_the_notice_loop_even_right_after_a_goodbye():
    c = rv.Coordinator(3, b"s" * 32)
    c.start()
    c._notices.put({"kind": "left", "rank": 1})  # a goodbye the loop holds while it waits for more...
    c.close()  # ...then the sentinel: the loop must see it, not wait for another message
    # Only this coordinator's threads: other tests in the process may have coordinators of their own.
    for t in c._threads:
        t.join(2)
    assert c._threads and not any(t.is_alive() for t in c._threads)


def test_the_coordinator_process_serves_until_its_host_is_done_and_the_ranks_have_left(capfd):
    svc = rv.Service(2, SECRET, linger=0.5)
    assert svc.address[0] == "127.0.0.1" and svc.address[1] > 0
    out, errors = run_ranks(svc.address, range(2))
    assert not errors and list(out[1][1]) == [{"rank": i, "host": "h", "addresses": [f"a{i}"]} for i in range(2)]
    out[0][0].close()
    t0 = time.monotonic()
    assert svc.wait_until_alone(0, 10)  # rank 1 never leaves: the process gives up on it after 0.5 s
    assert 0.4 < time.monotonic() - t0 < 5
    assert "closing after 0.5 s with ranks [1] still connected" in capfd.readouterr().err
    assert svc._proc.returncode == 1
    svc.close()
    out[1][0].close()


def test_a_coordinator_process_that_cannot_bind_says_why():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        with pytest.raises(CommError, match=r"cannot start the coordinator on 127.0.0.1:\d+: .*Address already in use"):
            rv.Service(2, SECRET, port=taken.getsockname()[1])
