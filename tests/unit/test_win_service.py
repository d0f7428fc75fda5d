"""The target side of one-sided communication (commlib.MPI._winserve.Target), in-process: requests fed
to it as the engine would deliver them, replies caught by a stand-in engine; no sockets."""
import threading

import numpy as np

from commlib.MPI import _winserve as ws

INT64 = ("<i8", 1, 8, None, 8, 0, 8, "INT64_T")  # describe() of MPI.INT64_T


class _Engine:
    """Records the replies a Target sends; on_send, when set, runs once at the next one (what the
    origin does on receiving it)."""

    def __init__(self):
        self.sent, self.on_send = [], None

    def connected(self, p2p, dst):
        return True

    def send(self, p2p, dst, parts, *, tag, dtype, count, what, block):
        self.sent.append((dst, tag))
        then, self.on_send = self.on_send, None
        if then is not None:
            then()


class _Group:
    p2p, gid = None, 1

    def __init__(self, engine):
        self.engine = engine

    def rank(self):
        return 0


def _request(kind, tag=0, disp=0, data=None):
    """A request message as an origin sends it: the encoded header, then its data."""
    desc, count, op = (INT64, 1, "SUM") if data is not None else (None, 0, None)
    parts = [ws.encode((kind, tag, disp, desc, count, op))]
    if data is not None:
        parts.append(np.asarray(data, "<i8").view(np.uint8))
    return np.concatenate(parts)


def _epoch(first_tag):
    """A passive-target epoch not waited for at its start: Lock, Accumulate of 1, Unlock (acknowledged)."""
    return [_request(ws.LOCK, 0, ws.LOCK_EXCLUSIVE), _request(ws.ACC, data=[1]), _request(ws.UNLOCK, first_tag)]


def test_an_epoch_that_arrives_while_the_last_one_is_served_is_served_in_order():
    """Rank 1 asks for the lock without waiting, while this rank holds it: its Accumulate and Unlock
    are held. This rank's release grants it and serves them; on the Unlock's acknowledgement rank 1
    starts its next epoch at once, whose requests arrive while the first epoch's are still being
    served (on another thread, in a job). Both epochs apply, in order, and the lock ends free.
    (It raised KeyError where the next Lock replaced the queue of held requests being served.)"""
    engine = _Engine()
    mem = np.zeros(8, np.uint8)
    t = ws.Target(_Group(engine), mem, 1, False)
    mine = threading.Event()
    t.lock(0, ws.LOCK_EXCLUSIVE, mine.set)
    assert mine.is_set()
    for r in _epoch(21):
        t.handle(1, r)
    assert mem.view("<i8")[0] == 0 and engine.sent == []  # held until the lock is granted
    engine.on_send = lambda: [t.handle(1, r) for r in _epoch(22)]
    t.unlock(0)
    assert mem.view("<i8")[0] == 2
    assert engine.sent == [(1, 21), (1, 22)]
    assert t.excl is None and not t.queue and not t.held


def test_a_lock_that_cannot_be_granted_yet_holds_what_comes_after_it():
    """While rank 1's held requests are served, its next Lock finds the window locked by rank 2
    (queued before it): that Lock's Accumulate waits for rank 2's release, then applies."""
    engine = _Engine()
    mem = np.zeros(8, np.uint8)
    t = ws.Target(_Group(engine), mem, 1, False)
    mine = threading.Event()
    t.lock(0, ws.LOCK_EXCLUSIVE, mine.set)
    for r in _epoch(21):
        t.handle(1, r)
    t.handle(2, _request(ws.LOCK, 0, ws.LOCK_EXCLUSIVE))  # rank 2 queues behind rank 1
    engine.on_send = lambda: [t.handle(1, r) for r in _epoch(22)]
    t.unlock(0)  # rank 1's first epoch; then rank 2 holds the lock, rank 1's second epoch waits
    assert mem.view("<i8")[0] == 1 and engine.sent == [(1, 21)]
    assert t.excl == 2
    t.handle(2, _request(ws.UNLOCK, 0))  # rank 2's release (not acknowledged: nothing of its needed it)
    assert mem.view("<i8")[0] == 2 and engine.sent == [(1, 21), (1, 22)]
    assert t.excl is None and not t.queue and not t.held
