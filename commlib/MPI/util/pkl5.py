"""Objects as pickle protocol 5 with their large buffers out of band: mpi4py.util.pkl5 for commlib.MPI.

A send pickles the object with protocol 5; every buffer the pickler hands over that is at least
`pickle.THRESHOLD` bytes (a NumPy array's data, a bytearray...) is not copied into the stream but
sent as raw messages of its own after it, in chunks of `_bigmpi.blocksize` bytes. On the wire, for
one object to (dest, tag): a header message -- the number of out-of-band buffers, their sizes, then
the pickle -- followed by each buffer's chunks, all on the same tag, so MPI's non-overtaking order
keeps them together. A receive probes the header with a matched probe (so no other receive can
take it), then receives the buffers straight into memory it allocates and unpickles over them.

`Comm`, `Intracomm`, `Intercomm` are MPI communicators whose lower-case object methods work this
way; `Request` and `Message` are what their non-blocking calls and matched probes return. `bcast`
moves the buffers with MPI Bcast; gather, scatter, allgather and alltoall send each object with its
buffers through commlib's object collectives (which have no 2 GiB limit), one copy more than bcast.
"""
import pickle as _pickle
import struct

import numpy as np

from .. import (ANY_SOURCE, ANY_TAG, BYTE, COMM_NULL, MESSAGE_NO_PROC, MESSAGE_NULL, PROC_NULL, ROOT,
                Comm as _MPIComm, Intercomm as _MPIIntercomm, Intracomm as _MPIIntracomm, Message as _MPIMessage,
                Request as _MPIRequest, Status, buffer)

__all__ = ["Pickle", "pickle", "Request", "Message", "Comm", "Intracomm", "Intercomm"]

_HEAD = struct.Struct("<Q")


class Pickle:
    """Pickling with out-of-band buffers: `dumps_oob(obj)` gives (bytes, [MPI.buffer...]) and
    `loads_oob(data, buffers)` the object. PROTOCOL is at least 5 (None or negative: the highest);
    THRESHOLD: buffers of at least this many bytes go out of band (None: 256 KiB)."""

    def __init__(self, dumps=_pickle.dumps, loads=_pickle.loads, protocol=None, threshold=None):
        self._dumps, self._loads = dumps, loads
        self.PROTOCOL = protocol
        self.THRESHOLD = threshold

    @property
    def PROTOCOL(self):
        return self._protocol

    @PROTOCOL.setter
    def PROTOCOL(self, protocol):
        if protocol is None or protocol < 0:
            protocol = _pickle.HIGHEST_PROTOCOL
        self._protocol = max(int(protocol), 5)

    @property
    def THRESHOLD(self):
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold):
        self._threshold = 256 * 1024 if threshold is None else int(threshold)

    def dumps(self, obj):
        """obj as protocol-5 pickle bytes with every buffer in band."""
        return self._dumps(obj, self._protocol)

    def loads(self, data):
        return self._loads(data)

    def dumps_oob(self, obj):
        bufs = []
        threshold = self._threshold

        def out_of_band(pb):
            raw = pb.raw()
            if raw.nbytes >= threshold:
                bufs.append(buffer(raw))
                return False
            return True
        data = self._dumps(obj, self._protocol, buffer_callback=out_of_band)
        return data, bufs

    def loads_oob(self, data, bufs):
        return self._loads(data, buffers=bufs)


pickle = Pickle()


class _BigMPI:
    """How large one message of an out-of-band buffer may be: a buffer above `blocksize` bytes goes
    as several messages (commlib's messages have no 2 GiB limit; the default is 1 GiB)."""

    def __init__(self, blocksize=1 << 30):
        self.blocksize = blocksize

    def chunks(self, nbytes):
        step = max(1, int(self.blocksize))
        return [(lo, min(nbytes, lo + step)) for lo in range(0, nbytes, step)] or [(0, 0)]


_bigmpi = _BigMPI()


def _header(data, bufs):
    sizes = [b.nbytes for b in bufs]
    return b"".join([_HEAD.pack(len(sizes))] + [_HEAD.pack(s) for s in sizes] + [data])


def _parse_header(raw):
    (n,) = _HEAD.unpack_from(raw, 0)
    sizes = [_HEAD.unpack_from(raw, 8 * (1 + i))[0] for i in range(n)]
    return sizes, bytes(raw[8 * (1 + n):])


def _as_u8(b):
    return np.frombuffer(b, np.uint8) if b.nbytes else np.empty(0, np.uint8)


class _Handle:
    """`!=` as the negation of a class's `==` (NotImplemented passed on); handles are not hashable."""

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None


class Request(_Handle):
    """A pkl5 request: the MPI requests of one object's messages; `wait` and `test` give the object
    a receive made (None for a send)."""

    def __init__(self, request=None):
        self._status = None
        if isinstance(request, Request):
            self._reqs, self._finish, self._value = request._reqs, request._finish, request._value
            self._status = request._status
        elif request is None or isinstance(request, _MPIRequest):
            self._reqs = [request] if request else []
            self._finish, self._value = None, None
        else:
            self._reqs, self._finish, self._value = list(request), None, None

    @classmethod
    def _of(cls, reqs, finish=None, status=None):
        """Over MPI requests reqs; finish(status) makes the value; status: the header's, reported by
        wait and test in place of the buffers' own."""
        self = cls()
        self._reqs, self._finish, self._status = [r for r in reqs if r], finish, status
        return self

    def __bool__(self):
        return any(bool(r) for r in self._reqs)

    def __eq__(self, other):
        if isinstance(other, Request):
            return self._reqs == other._reqs if (self or other) else True
        if isinstance(other, _MPIRequest):
            return (not self and not other) or (len(self._reqs) == 1 and self._reqs[0] == other)
        return NotImplemented


    def Free(self):
        for r in self._reqs:
            if r:
                r.Free()
        self._reqs = []

    free = Free

    def cancel(self):
        for r in self._reqs:
            if r:
                r.Cancel()

    Cancel = cancel

    def get_status(self, status=None):
        done = all(r.Get_status() for r in self._reqs if r)
        if done and status is not None and self._reqs:
            self._reqs[0].Get_status(status)
        return done

    def _complete(self, status):
        statuses = [Status() for _ in self._reqs]
        _MPIRequest.Waitall(self._reqs, statuses)
        first = self._status if self._status is not None else (statuses[0] if statuses else None)
        if status is not None and first is not None:
            _copy_status(first, status)
        self._reqs = []
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._value = finish(statuses[0] if statuses else None)
        value, self._value = self._value, None
        return value

    def wait(self, status=None):
        return self._complete(status)

    def test(self, status=None):
        if not self.get_status():
            return False, None
        return True, self._complete(status)

    @classmethod
    def get_status_all(cls, requests, statuses=None):
        done = all(r.get_status() for r in requests)
        if done and statuses is not None:
            _fill_statuses(requests, statuses, lambda r, s: r.get_status(s))
        return done

    @classmethod
    def waitall(cls, requests, statuses=None):
        sts = [Status() for _ in requests]
        values = [r.wait(s) for r, s in zip(requests, sts)]
        if statuses is not None:
            _fill_statuses(requests, statuses, None, sts)
        return values

    @classmethod
    def testall(cls, requests, statuses=None):
        if not cls.get_status_all(requests):
            return False, None
        return True, cls.waitall(requests, statuses)


def _copy_status(src, dst):
    dst.source, dst.tag, dst.error = src.source, src.tag, src.error
    dst.Set_elements(BYTE, src.Get_elements(BYTE))


def _fill_statuses(requests, statuses, get, got=None):
    """Fill statuses (a list grows to one per request, as mpi4py's; a tuple fills what it holds)."""
    if isinstance(statuses, list):
        while len(statuses) < len(requests):
            statuses.append(Status())
    for i, r in enumerate(requests[:len(statuses)]):
        if got is not None:
            _copy_status(got[i], statuses[i])
        else:
            get(r, statuses[i])


class Message(_Handle):
    """A pkl5 matched message: the header a matched probe took; `recv` / `irecv` receive the object."""

    def __init__(self, message=None):
        if isinstance(message, Message):
            self._msg, self._comm, self._head = message._msg, message._comm, message._head
        else:
            self._msg = _MPIMessage(message) if message is not None else _MPIMessage()
            self._comm, self._head = None, None

    def __bool__(self):
        return bool(self._msg)

    def __eq__(self, other):
        if isinstance(other, Message):
            return self._msg == other._msg
        if isinstance(other, _MPIMessage):
            return self._msg == other
        return NotImplemented


    def free(self):
        """Let go of the handle (a received or null message: nothing to do)."""
        self._msg.free()

    Free = free

    def _take_header(self):
        if self._msg == MESSAGE_NO_PROC:
            self._msg = _MPIMessage(MESSAGE_NULL)
            return None
        st = Status()
        raw = bytearray(self._head)
        self._msg.Recv(raw, st)
        return st, raw

    def recv(self, status=None):
        """The object (None for MESSAGE_NO_PROC)."""
        got = self._take_header()
        if got is None:
            if status is not None:
                status.source, status.tag = PROC_NULL, ANY_TAG
            return None
        st, raw = got
        obj = _recv_rest(self._comm, st, raw)
        if status is not None:
            _copy_status(st, status)
        return obj

    def irecv(self):
        """A Request whose wait gives the object: the header is taken now, the buffers posted."""
        got = self._take_header()
        if got is None:  # MESSAGE_NO_PROC: a request that completes at once, with nothing
            st = Status()
            st.source, st.tag = PROC_NULL, ANY_TAG
            return Request._of([_MPIRequest._completed()], status=st)
        st, raw = got
        sizes, data = _parse_header(raw)
        bufs, reqs = _post_buffers(self._comm, st.source, st.tag, sizes)
        return Request._of(reqs or [_MPIRequest._completed()],
                           lambda _s, data=data, bufs=bufs: pickle.loads_oob(data, bufs), status=st)

    @classmethod
    def probe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.mprobe(source, tag, status)

    @classmethod
    def iprobe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.improbe(source, tag, status)


def _post_buffers(comm, source, tag, sizes):
    bufs, reqs = [], []
    for n in sizes:
        b = buffer.allocate(n)
        u8 = _as_u8(b)
        for lo, hi in _bigmpi.chunks(n):
            reqs.append(_MPIComm.Irecv(comm, [u8[lo:hi], BYTE], source, tag))
        bufs.append(b)
    return bufs, reqs


def _recv_rest(comm, st, raw):
    sizes, data = _parse_header(raw)
    bufs, reqs = _post_buffers(comm, st.source, st.tag, sizes)
    _MPIRequest.Waitall(reqs)
    return pickle.loads_oob(data, bufs)


class Comm(_MPIComm):
    """A communicator whose object messages are pickle-5 with out-of-band buffers."""

    __slots__ = ()

    def __new__(cls, comm=None):
        return super().__new__(cls, comm if comm is not None else COMM_NULL)

    # ------------------------------------------------------------ sends
    def _pieces(self, obj):
        data, bufs = pickle.dumps_oob(obj)
        parts = []
        for b in bufs:
            u8 = _as_u8(b)
            parts += [u8[lo:hi] for lo, hi in _bigmpi.chunks(u8.nbytes)]
        return _header(data, bufs), parts

    def _send(self, obj, dest, tag, sync):
        if dest == PROC_NULL:
            return
        head, parts = self._pieces(obj)
        (_MPIComm.Ssend if sync else _MPIComm.Send)(self, [head, BYTE], dest, tag)
        for p in parts:
            _MPIComm.Send(self, [p, BYTE], dest, tag)

    def send(self, obj, dest, tag=0):
        self._send(obj, dest, tag, False)

    bsend = send

    def ssend(self, obj, dest, tag=0):
        self._send(obj, dest, tag, True)

    def _isend(self, obj, dest, tag, sync):
        if dest == PROC_NULL:
            return Request._of([_MPIRequest._completed()])
        head, parts = self._pieces(obj)
        reqs = [(_MPIComm.Issend if sync else _MPIComm.Isend)(self, [head, BYTE], dest, tag)]
        reqs += [_MPIComm.Isend(self, [p, BYTE], dest, tag) for p in parts]
        return Request._of(reqs)

    def isend(self, obj, dest, tag=0):
        return self._isend(obj, dest, tag, False)

    ibsend = isend

    def issend(self, obj, dest, tag=0):
        return self._isend(obj, dest, tag, True)

    # ------------------------------------------------------------ receives
    def recv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        """The next object from source with tag (buf is accepted and unused: buffers are allocated)."""
        return self.mprobe(source, tag).recv(status)

    def irecv(self, buf=None, source=ANY_SOURCE, tag=ANY_TAG):
        raise RuntimeError("pkl5: irecv cannot size an object's buffers before it arrives; use mprobe().irecv()")

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
        req = self.isend(sendobj, dest, sendtag)
        try:
            obj = self.recv(recvbuf, source, recvtag, status)
        finally:
            req.wait()
        return obj

    def mprobe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        st = Status()
        m = _MPIComm.Mprobe(self, source, tag, st)
        return self._message(m, st, status)

    def improbe(self, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        st = Status()
        m = _MPIComm.Improbe(self, source, tag, st)
        return None if m is None else self._message(m, st, status)

    def _message(self, m, st, status):
        msg = Message(m)
        msg._comm, msg._head = self, st.Get_elements(BYTE)
        if status is not None:
            _copy_status(st, status)
        return msg

    # ------------------------------------------------------------ collectives
    def bcast(self, obj, root=0):
        """obj from root to every rank: the pickle and each out-of-band buffer moved by Bcast."""
        rank = self.Get_rank()
        if rank == root:
            data, bufs = pickle.dumps_oob(obj)
            sizes = [len(data)] + [b.nbytes for b in bufs]
        else:
            sizes = None
        sizes = _MPIComm.bcast(self, sizes, root)
        if rank == root:
            blobs = [np.frombuffer(data, np.uint8).copy() if sizes[0] else np.empty(0, np.uint8)] + \
                    [_as_u8(b) for b in bufs]
        else:
            blobs = [np.empty(n, np.uint8) for n in sizes]
        for blob in blobs:
            for lo, hi in _bigmpi.chunks(blob.nbytes):
                _MPIComm.Bcast(self, [blob[lo:hi], BYTE], root)
        if rank == root:
            return obj
        return pickle.loads_oob(blobs[0].tobytes(), [buffer(b) for b in blobs[1:]])

    def _pack_obj(self, obj):
        data, bufs = pickle.dumps_oob(obj)
        return data, [bytes(memoryview(b)) for b in bufs]

    def gather(self, sendobj, root=0):
        got = _MPIComm.gather(self, self._pack_obj(sendobj), root)
        return None if got is None else [pickle.loads_oob(d, b) for d, b in got]

    def scatter(self, sendobj, root=0):
        packed = None
        if self.Get_rank() == root:
            packed = [self._pack_obj(o) for o in ([None] * self.Get_size() if sendobj is None else sendobj)]
        d, b = _MPIComm.scatter(self, packed, root)
        return pickle.loads_oob(d, b)

    def allgather(self, sendobj):
        return [pickle.loads_oob(d, b) for d, b in _MPIComm.allgather(self, self._pack_obj(sendobj))]

    def alltoall(self, sendobj):
        objs = [None] * self.Get_size() if sendobj is None else list(sendobj)
        return [pickle.loads_oob(d, b) for d, b in _MPIComm.alltoall(self, [self._pack_obj(o) for o in objs])]


class Intracomm(Comm, _MPIIntracomm):
    """An intra-communicator with pkl5 object messages."""

    __slots__ = ()


class Intercomm(Comm, _MPIIntercomm):
    """An inter-communicator with pkl5 object messages: the collectives have the intercommunicator's
    semantics (the root's side passes MPI.ROOT or MPI.PROC_NULL; data flows between the groups),
    each object pickled with its out-of-band buffers and moved by the intercommunicator's own
    object collectives."""

    __slots__ = ()

    def bcast(self, obj, root=0):
        got = _MPIIntercomm.bcast(self, self._pack_obj(obj) if root == ROOT else None, root)
        return None if root in (ROOT, PROC_NULL) else pickle.loads_oob(*got)

    def gather(self, sendobj, root=0):
        got = _MPIIntercomm.gather(self, None if root in (ROOT, PROC_NULL) else self._pack_obj(sendobj), root)
        return None if got is None else [pickle.loads_oob(d, b) for d, b in got]

    def scatter(self, sendobj, root=0):
        packed = None
        if root == ROOT:
            objs = [None] * self.Get_remote_size() if sendobj is None else list(sendobj)
            packed = [self._pack_obj(o) for o in objs]
        got = _MPIIntercomm.scatter(self, packed, root)
        return None if root in (ROOT, PROC_NULL) else pickle.loads_oob(*got)

    def allgather(self, sendobj):
        return [pickle.loads_oob(d, b) for d, b in _MPIIntercomm.allgather(self, self._pack_obj(sendobj))]

    def alltoall(self, sendobj):
        objs = [None] * self.Get_remote_size() if sendobj is None else list(sendobj)
        return [pickle.loads_oob(d, b) for d, b in _MPIIntercomm.alltoall(self, [self._pack_obj(o) for o in objs])]
