"""Partitioned point-to-point (MPI 4): Psend_init / Precv_init and their persistent requests.

A partitioned send sends each of its parts as a message of its own the moment the program marks
the part ready (Pready, from any thread), on the communicator's private context
(`_neighbor.private`), where no message of the program's can meet it. The tag pairs the two
requests: MPI matches the k-th Psend_init towards a peer with a tag to the k-th Precv_init from that
peer with that tag, so the tag holds the program's tag and k (bit 62 set keeps it apart from the
neighbourhood collectives' small tags on the same context). Every message starts with its part's
index and the sender's number of parts, so the receive may cut the same bytes into another number
of partitions, as MPI allows: receive partition j has arrived once every send part overlapping it
has, overlap measured in fractions of the message, so parts of no bytes are ordered as well.

The receive side keeps one receive posted at a time, taking whichever part comes next; the engine's
completion callback copies it into place (one copy per part: the part's place is known only once
its header is read) and posts the next. The request thus completes with no one polling it: Test,
Waitall and Parrived only read its state. A send whose parts are not all marked ready by the
communicator's timeout fails its Wait with the partitions named, rather than waiting forever.
"""
import collections
import threading
import time

import numpy as np

from .._dtypes import DT_BYTES
from .._engine.requests import Request as _EngineRequest
from ._bufspec import DMsg, blocks, parse_recv, parse_send
from ._constants import ANY_SOURCE, ANY_TAG, ERR_ARG, ERR_REQUEST, ERR_TRUNCATE, ERR_TYPE, PROC_NULL, MPIException
from ._neighbor import private
from ._requests import Prequest

_HEADER = 16  # int64 part index, int64 number of parts
_UNBOUNDED = 1 << 62
_SERIAL_MASK = (1 << 31) - 1
_serials = {}  # (group id, "send"/"recv", peer, tag) -> partitioned requests made so far
_serials_lock = threading.Lock()


def wire_tag(gid, side, peer, tag):
    """The private tag of the next partitioned request of this rank towards / from `peer` with `tag`."""
    with _serials_lock:
        k = _serials.get((gid, side, peer, tag), 0)
        _serials[gid, side, peer, tag] = k + 1
    return (1 << 62) | (tag << 31) | (k & _SERIAL_MASK)


def overlapping(j, nrecv, nsend):
    """The send parts that overlap receive partition j when one message is cut into nsend and nrecv parts."""
    return range(j * nsend // nrecv, -(-(j + 1) * nsend // nrecv))


def _partitions(partitions, me, what):
    if isinstance(partitions, bool) or not isinstance(partitions, (int, np.integer)) or partitions < 1:
        raise MPIException(ERR_ARG, f"rank {me}: {what}: partitions must be a positive int, got {partitions!r}")
    return int(partitions)


def _parts(m, n, me, what):
    """(the whole message, its n equal parts) as byte views of the program's memory (an explicit count
    is per partition, as MPI's)."""
    if isinstance(m, DMsg):
        raise MPIException(ERR_TYPE, f"rank {me}: {what}: a derived datatype with gaps or reordering is not "
                                     f"provided for partitioned communication (use a contiguous datatype)")
    flat, per = blocks(m, n, what)
    return flat.view(np.uint8), [flat[i * per:(i + 1) * per].view(np.uint8) for i in range(n)]


class _PsendState:
    """One partitioned send: which parts are ready this round, and the round's completion."""

    def __init__(self, g, parts, dest, tag, wire, what):
        self.g, self.pg, self.parts, self.dest, self.tag, self.wire, self.what = g, private(g), parts, dest, tag, \
            wire, what
        self.lock = threading.Condition()
        self.req = None
        self.ready = None
        self.left = 0

    def start(self):
        with self.lock:
            self.req = _EngineRequest(self.what, timeout=self.g.timeout)
            self.ready = [False] * len(self.parts)
            self.left = len(self.parts)
            if self.dest == PROC_NULL:
                self.req._finish(None)
            return self.req

    def pready(self, indices):
        """Mark parts ready and send them (all checked first: a bad one marks none)."""
        me = self.g.rank()
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(self.parts):
                raise MPIException(ERR_ARG, f"rank {me}: Pready: partition {i!r} is not in 0..{len(self.parts) - 1}")
        indices = [int(i) for i in indices]
        with self.lock:
            if self.req is None or self.ready is None:
                raise MPIException(ERR_REQUEST, f"rank {me}: Pready on a partitioned send that is not started")
            again = sorted({i for i, k in collections.Counter(indices).items() if k > 1 or self.ready[i]})
            if again:
                raise MPIException(ERR_REQUEST, f"rank {me}: Pready: partitions {again} marked ready twice")
            for i in indices:
                self.ready[i] = True
            req = self.req
            self.lock.notify_all()
        if self.dest == PROC_NULL:
            return
        n = len(self.parts)
        for i in indices:
            header = np.array([i, n], dtype=np.int64).view(np.uint8)
            part = self.parts[i]
            r = self.pg.engine.send(self.pg.p2p, self.dest, [header, part], tag=self.wire, dtype=DT_BYTES,
                                    count=_HEADER + part.nbytes, what=self.what)
            r.add_done_callback(lambda r, req=req: self._sent(r, req))

    def _sent(self, r, req):
        try:
            r.wait()  # complete: its error, if any
        except BaseException as exc:
            req._finish(error=exc)
            return
        with self.lock:
            if req is not self.req:
                return
            self.left -= 1
            done = self.left == 0
        if done:
            req._finish(None)

    def unready(self, timeout):
        """Wait (at most timeout seconds) for every part to be marked ready; the indices still not ready."""
        with self.lock:
            self.lock.wait_for(lambda: all(self.ready), timeout=timeout)
            return [i for i, r in enumerate(self.ready) if not r]


class _PrecvState:
    """One partitioned receive: the parts arrived this round, and the round's completion."""

    def __init__(self, g, parts, flat, source, tag, wire, what):
        self.g, self.pg, self.parts, self.flat, self.source, self.tag, self.wire, self.what = \
            g, private(g), parts, flat, source, tag, wire, what
        self.lock = threading.Lock()
        self.req = None
        self.arrived = set()
        self.nsend = None

    def start(self):
        with self.lock:
            self.req = _EngineRequest(self.what, timeout=self.g.timeout)
            self.arrived, self.nsend = set(), None
            req = self.req
        if self.source == PROC_NULL:
            req._finish((PROC_NULL, ANY_TAG, 0))
        else:
            self._post(req)
        return req

    def _post(self, req):
        """Post receives for the round of req until one is left pending (then its callback goes on)."""
        while True:
            r = self.pg.engine.recv(self.pg.p2p, self.source, self.wire, None, _raw, what=self.what, block=False,
                                    check=(DT_BYTES, _UNBOUNDED), raw=True)
            if not r.test():
                r.add_done_callback(lambda r: self._taken(r, req))
                return
            if not self._take(r, req):
                return

    def _taken(self, r, req):
        if self._take(r, req):
            self._post(req)

    def _take(self, r, req):
        """Put an arrived part in place; True while more parts are due this round."""
        try:
            msg, payload = r.wait()
            u8 = np.frombuffer(payload, dtype=np.uint8) if len(payload) else np.empty(0, np.uint8)
            if u8.nbytes < _HEADER:
                raise MPIException(ERR_TRUNCATE, f"rank {self.g.rank()}: {self.what}: a message of {u8.nbytes} "
                                                 f"bytes is not a partitioned part")
            i, nsend = (int(x) for x in u8[:_HEADER].view(np.int64))
            data = u8[_HEADER:]
            if data.nbytes * nsend != self.flat.nbytes or not 0 <= i < nsend:
                raise MPIException(ERR_TRUNCATE, f"rank {self.g.rank()}: {self.what}: rank {self.source} sends "
                                                 f"{nsend} parts of {data.nbytes} bytes, this receive holds "
                                                 f"{self.flat.nbytes} bytes")
            self.flat[i * data.nbytes:(i + 1) * data.nbytes] = data
        except BaseException as exc:
            req._finish(error=exc)
            return False
        with self.lock:
            self.nsend = nsend
            self.arrived.add(i)
            done = len(self.arrived) == nsend
        if done:
            req._finish((self.source, self.tag, self.flat.nbytes))
        return not done

    def parrived(self, j):
        me = self.g.rank()
        if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j < len(self.parts):
            raise MPIException(ERR_ARG, f"rank {me}: Parrived: partition {j!r} is not in 0..{len(self.parts) - 1}")
        if self.source == PROC_NULL:
            return True
        arrived = self._arrived(int(j))
        if not arrived:
            if self.pg.engine.progress_once():
                arrived = self._arrived(int(j))  # (this thread's look may have taken it in)
            else:
                time.sleep(0)  # another thread drives progress: a loop polling Parrived lets it take the GIL
        return arrived

    def _arrived(self, j):
        """Whether every part that overlaps partition j has arrived."""
        with self.lock:
            return self.nsend is not None and all(i in self.arrived for i in overlapping(j, len(self.parts), self.nsend))


def _raw(msg, payload):
    return msg, payload


def _done_send(result, status):
    if status is not None:
        status._fill(ANY_SOURCE, ANY_TAG, 0)


def _done_recv(result, status):
    if status is not None:
        source, tag, nbytes = result
        status._fill(source, tag, nbytes)


class Partitioned(Prequest):
    """A partitioned send or receive request (Psend_init / Precv_init)."""

    __slots__ = ("_p",)

    @classmethod
    def _of(cls, state, done):
        self = cls._make(state)
        self._p, self._done = state, done
        return self

    def Start(self):
        if self._persist is None:
            raise MPIException(ERR_REQUEST, "Start() on a freed partitioned request")
        if self._r is not None:
            raise MPIException(ERR_REQUEST, "Start() on a partitioned request that is still active")
        self._r = self._p.start()

    start = Start

    def _complete(self, status):
        p = self._p
        if self._r is not None and isinstance(p, _PsendState) and not self._r.test():
            missing = p.unready(p.g.timeout)
            if missing:
                raise MPIException(ERR_REQUEST, f"rank {p.g.rank()}: {p.what}: partitions {missing} were never "
                                                f"marked ready (Pready) within {p.g.timeout:g} s")
        return super()._complete(status)

    def _send_side(self, what):
        if not isinstance(self._p, _PsendState):
            raise MPIException(ERR_REQUEST, f"{what} on a partitioned receive (it marks parts of a send)")
        if self._r is None:
            raise MPIException(ERR_REQUEST, f"{what} on a partitioned send that is not active (call Start first)")
        return self._p

    def Pready(self, partition):
        self._send_side("Pready").pready([partition])

    def Pready_range(self, partition_low, partition_high):
        self._send_side("Pready_range").pready(range(int(partition_low), int(partition_high) + 1))

    def Pready_list(self, partitions):
        self._send_side("Pready_list").pready(list(partitions))

    def Parrived(self, partition):
        if not isinstance(self._p, _PrecvState):
            raise MPIException(ERR_REQUEST, "Parrived on a partitioned send (it asks about a receive)")
        if self._r is None:  # inactive: nothing is outstanding
            return True
        return self._p.parrived(partition)


def psend_init(g, buf, partitions, dest, tag):
    """Comm.Psend_init, dest and tag checked already (dest may be PROC_NULL)."""
    me = g.rank()
    n = _partitions(partitions, me, "Psend_init")
    _, parts = _parts(parse_send(buf), n, me, "Psend_init")
    wire = 0 if dest == PROC_NULL else wire_tag(g.gid, "send", dest, tag)
    what = f"Psend_init(dest {dest}, tag {tag})"
    return Partitioned._of(_PsendState(g, parts, dest, tag, wire, what), _done_send)


def precv_init(g, buf, partitions, source, tag):
    """Comm.Precv_init, source and tag checked already (source may be PROC_NULL, not ANY_SOURCE)."""
    me = g.rank()
    n = _partitions(partitions, me, "Precv_init")
    flat, parts = _parts(parse_recv(buf), n, me, "Precv_init")
    wire = 0 if source == PROC_NULL else wire_tag(g.gid, "recv", source, tag)
    what = f"Precv_init(source {source}, tag {tag})"
    return Partitioned._of(_PrecvState(g, parts, flat, source, tag, wire, what), _done_recv)
