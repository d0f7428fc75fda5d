"""Sealed records and the pump (COMMLIB_ENCRYPT), in process: socketpairs stand for TCP.

A record opens only under its key and its number: a changed byte anywhere, a replay, a swap, a
record of another connection or direction, a cut record, all fail. The pump moves bytes both
ways unchanged, and a man in the middle who changes, replays or reorders records is caught,
naming the record.
"""
import array
import contextlib
import fcntl
import os
import secrets
import socket
import struct
import termios
import threading

import numpy as np
import pytest

from _waiting import wait_for
from commlib._transport import _io, seal

pytestmark = pytest.mark.timeout(60)

seal.bind()
HDR, TAG = 4, 16


def _key():
    return secrets.token_bytes(32)


@pytest.mark.parametrize("n", [0, 1, 15, 16, 1000, _io.SEAL_RECORD_MAX])
def test_a_record_opens_under_its_key_and_number(n):
    key, data = _key(), secrets.token_bytes(n)
    rec = _io.seal_record(key, 7, data)
    assert len(rec) == n + _io.SEAL_OVERHEAD and struct.unpack("<I", rec[:4])[0] == n
    assert _io.open_record(key, 7, rec) == data
    if n >= 16:
        assert data not in rec and data[:16] not in rec  # confidential: no plaintext run on the wire


def test_any_changed_byte_fails_the_check():
    key, data = _key(), secrets.token_bytes(300)
    rec = _io.seal_record(key, 0, data)
    for at in [0, 1, 3, 4, 100, HDR + 299, len(rec) - TAG, len(rec) - 1]:  # length, body, tag
        bad = bytearray(rec)
        bad[at] ^= 0x01
        assert _io.open_record(key, 0, bytes(bad)) is None, at


def test_replayed_reordered_foreign_and_cut_records_fail():
    key, other = _key(), _key()
    recs = [_io.seal_record(key, k, f"record {k}".encode()) for k in range(3)]
    assert _io.open_record(key, 1, recs[0]) is None       # replayed in place of the next
    assert _io.open_record(key, 0, recs[1]) is None       # reordered
    assert _io.open_record(other, 0, recs[0]) is None     # another connection's (or direction's) key
    assert _io.open_record(key, 0, recs[0][:-1]) is None  # cut
    assert _io.open_record(key, 0, recs[0] + b"x") is None
    assert [_io.open_record(key, k, r) for k, r in enumerate(recs)] == [f"record {k}".encode() for k in range(3)]


def test_the_same_plaintext_seals_differently_per_record_and_key():
    key, data = _key(), b"\0" * 64
    assert len({_io.seal_record(k, i, data) for k in (key, _key()) for i in (0, 1)}) == 4


def test_keys_differ_per_direction_connection_and_secret():
    secret, sn, cn, ident = _key(), os.urandom(32), os.urandom(32), b"\x01\x00\x00\x00"
    c2s, s2c = seal.keys(secret, sn, cn, ident)
    assert c2s != s2c and len(c2s) == 32
    assert seal.keys(secret, sn, cn, ident) == (c2s, s2c)
    assert set(seal.keys(secret, os.urandom(32), cn, ident)).isdisjoint({c2s, s2c})
    assert set(seal.keys(_key(), sn, cn, ident)).isdisjoint({c2s, s2c})


@pytest.mark.parametrize("value,want", [("1", True), ("on", True), ("", False), ("0", False), ("off", False)])
def test_the_switch(value, want):
    assert seal.enabled({"COMMLIB_ENCRYPT": value}) is want
    assert seal.enabled({}) is False


def test_a_junk_switch_names_the_variable():
    with pytest.raises(ValueError, match="COMMLIB_ENCRYPT='maybe'"):
        seal.enabled({"COMMLIB_ENCRYPT": "maybe"})


class _Pair:
    """Two pumps joined by a 'wire' (a socketpair standing for TCP), with an optional man in the
    middle: a function from the list of records client->server to the records delivered."""

    def __init__(self, middle=None):
        self.c2s, self.s2c = _key(), _key()
        self.stop_r, self.stop_w = os.pipe()
        self.c_app, c_pump = socket.socketpair()
        self.c_pump = c_pump  # (the client pump's end: what it has not read yet waits there)
        self.s_app, s_pump = socket.socketpair()
        c_wire, s_wire = socket.socketpair()
        self.results = {}
        self.records = []  # what the man in the middle saw
        self.middle = None
        self._socks = [self.c_app, c_pump, self.s_app, s_pump, c_wire, s_wire]
        if middle is not None:  # client's wire -> records -> middle -> server's wire
            c_side, s_side = socket.socketpair()
            self._socks += [c_side, s_side]
            self.middle = threading.Thread(target=self._middle, args=(s_wire, c_side, middle, self.records), daemon=True)
            self.middle.start()
            s_wire = s_side
        for s in (c_pump, s_pump, c_wire, s_wire):  # the pumps' ends: non-blocking, as in the endpoint
            s.setblocking(False)
        self.threads = [threading.Thread(target=self._pump, args=(name, *a), daemon=True) for name, a in
                        (("client", (c_wire, c_pump, self.c2s, self.s2c)),
                         ("server", (s_wire, s_pump, self.s2c, self.c2s)))]
        for t in self.threads:
            t.start()

    def _pump(self, name, wire, local, send, recv):
        self.results[name] = _io.seal_pump(wire.fileno(), local.fileno(), self.stop_r, send, recv)
        for s in (wire, local):
            s.close()

    @staticmethod
    def _middle(src, dst, middle, seen):
        data = bytearray()
        while chunk := src.recv(1 << 20):
            data += chunk
        recs, at = [], 0
        while at + HDR <= len(data):
            n = struct.unpack_from("<I", data, at)[0]
            recs.append(bytes(data[at:at + HDR + n + TAG]))
            at += HDR + n + TAG
        seen.extend(recs)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the reader stops at a forged record
            dst.sendall(b"".join(middle(list(recs))))
            dst.shutdown(socket.SHUT_WR)

    def send_and_close(self, payload):
        self.c_app.sendall(payload)
        self.c_app.close()

    def receive(self):
        self.s_app.settimeout(20)
        got = bytearray()
        while chunk := self.s_app.recv(1 << 20):
            got += chunk
        return bytes(got)

    def unread(self):
        """Bytes the client's application wrote that its pump has not read yet (SIOCINQ)."""
        n = array.array("i", [0])
        fcntl.ioctl(self.c_pump.fileno(), termios.FIONREAD, n)
        return n[0]

    def close(self):
        os.write(self.stop_w, b"!")
        for t in self.threads + ([self.middle] if self.middle else []):
            t.join(10)
        for s in self._socks:
            s.close()
        os.close(self.stop_r)
        os.close(self.stop_w)


def test_the_pump_carries_bytes_unchanged_both_ways():
    pair = _Pair()
    payload = np.random.default_rng(1).integers(0, 256, 5_000_000, dtype=np.uint8).tobytes()
    sender = threading.Thread(target=pair.send_and_close, args=(payload,))
    sender.start()
    got = pair.receive()
    sender.join(20)
    assert got == payload
    pair.threads[1].join(10)
    assert pair.results["server"] == (_io.PUMP_PEER_EOF, 0)  # the client's close reached the reader as EOF
    pair.close()


def test_the_pump_answers_the_other_way():
    pair = _Pair()
    pair.s_app.sendall(b"back " * 1000)
    pair.c_app.settimeout(10)
    got = b""
    while len(got) < 5000:
        got += pair.c_app.recv(65536)
    assert got == b"back " * 1000
    pair.close()


def _flip(recs):
    recs[1] = recs[1][:10] + bytes([recs[1][10] ^ 1]) + recs[1][11:]
    return recs


@pytest.mark.parametrize("attack,middle,record", [
    ("a changed byte", _flip, 1),
    ("a replayed record", lambda recs: recs[:2] + [recs[1]] + recs[2:], 2),
    ("two records swapped", lambda recs: [recs[0], recs[2], recs[1]] + recs[3:], 1),
    ("a dropped record", lambda recs: [recs[0]] + recs[2:], 1),
    ("a record of another connection", lambda recs: [recs[0], _io.seal_record(_key(), 1, b"x" * 100)] + recs[2:], 1),
    ("an impossible length", lambda recs: [recs[0], b"\xff\xff\xff\x7f" + recs[1][4:]], 1),
])
def test_a_man_in_the_middle_is_caught(attack, middle, record):
    pair = _Pair(middle)
    for k in range(6):  # one record per write: the pump reads (and seals) each before the next is sent
        pair.c_app.sendall(bytes([k]) * 1000)
        wait_for(lambda: pair.unread() == 0, 10, f"the client's pump to read write {k}")
    pair.c_app.close()
    got = pair.receive()
    pair.threads[1].join(10)
    code, detail = pair.results["server"]
    want = _io.PUMP_BAD_LENGTH if "length" in attack else _io.PUMP_FORGED
    assert (code, detail) == (want, record), attack
    assert len(pair.records) == 6  # a record a write
    assert got == b"".join(_io.open_record(pair.c2s, k, pair.records[k]) for k in range(record))  # only checked bytes
    pair.close()


def test_a_forged_record_reaches_the_endpoint_naming_the_peer():
    told = []
    pumps = seal.Pumps("rank 3", lambda peer, text: told.append((peer, text)))
    tcp, attacker = socket.socketpair()
    mine = pumps.seal(tcp, _key(), _key(), 5, "rank 5")
    attacker.sendall(_io.seal_record(_key(), 0, b"not from rank 5"))
    mine.setblocking(True)
    mine.settimeout(10)
    assert mine.recv(100) == b""  # the data path sees the connection end...
    pumps.close(1.0)
    assert told and told[0][0] == 5  # ...after the job was told why
    assert "rank 3: encrypted record 0 from rank 5 failed its integrity check" in told[0][1]
    attacker.close()
    mine.close()


def test_a_pump_given_a_key_of_the_wrong_length_says_so():
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        for send, recv in ((_key(), b"short"), (b"short", _key())):
            with pytest.raises(ValueError, match="a key is 32 bytes, not 5"):
                _io.seal_pump(a.fileno(), b.fileno(), r, send, recv)
    finally:
        a.close(), b.close(), os.close(r), os.close(w)
