"""Matched probes: `Comm.Mprobe` / `Improbe` / `mprobe` / `improbe` and `MPI.Message`.

A matched probe takes the message it finds out of matching (the engine's `mprobe`), so no other
receive, on this thread or another, can take it; the `Message` it returns receives exactly that
message once (`Recv`, `Irecv` for buffers, `recv`, `irecv` for objects) and then becomes
`MESSAGE_NULL`, as in MPI. A probe of `PROC_NULL` gives `MESSAGE_NO_PROC`, whose receive completes
at once with a `PROC_NULL` status. Receiving from `MESSAGE_NULL` is an `MPI.Exception` of class
`ERR_REQUEST`.
"""
from ._bufspec import parse_recv
from ._constants import ANY_SOURCE, ANY_TAG, ERR_REQUEST, MPIException
from ._p2p import done_buf, done_obj, done_proc_null, fill, proc_null, recv_into, recv_obj
from ._requests import Request

_NO_PROC = object()  # the message of a probe of PROC_NULL


class Message:
    """A message taken by a matched probe: a handle, copied by `Message(other)`."""

    __slots__ = ("_g", "_msg", "__weakref__")

    def __init__(self, message=None):
        if message is not None and not isinstance(message, Message):
            raise TypeError(f"Message() takes a Message, got {type(message).__name__}")
        self._g, self._msg = (message._g, message._msg) if message is not None else (None, None)

    @classmethod
    def _of(cls, g, msg):
        self = cls()
        self._g, self._msg = g, msg
        return self

    def __bool__(self):
        return self._msg is not None

    def __eq__(self, other):
        if not isinstance(other, Message):
            return NotImplemented
        return self._msg is other._msg

    def __ne__(self, other):
        if not isinstance(other, Message):
            return NotImplemented
        return self._msg is not other._msg

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __repr__(self):
        if self._msg is None:
            return "<Message: MESSAGE_NULL>"
        if self._msg is _NO_PROC:
            return "<Message: MESSAGE_NO_PROC>"
        return f"<Message from rank {self._msg.source}, tag {self._msg.tag}, {self._msg.nbytes} bytes>"

    def free(self):
        self._take_handle()

    def __reduce__(self):
        from ._handles import null_reduce
        return null_reduce(self, "MESSAGE_NULL" if self._msg is None else "MESSAGE_NO_PROC",
                           self._msg is None or self._msg is _NO_PROC)

    # ------------------------------------------------------------ probes (mpi4py's class methods)
    @classmethod
    def Probe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.Mprobe(source, tag, status)

    @classmethod
    def Iprobe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.Improbe(source, tag, status)

    @classmethod
    def probe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.mprobe(source, tag, status)

    @classmethod
    def iprobe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None):
        return comm.improbe(source, tag, status)

    # ------------------------------------------------------------ receives
    def _take(self, what):
        """(group, engine message) of this handle, which becomes MESSAGE_NULL."""
        g, msg = self._g, self._msg
        if msg is None:
            raise MPIException(ERR_REQUEST, f"Message.{what}() of MPI.MESSAGE_NULL (a message is received once)")
        self._take_handle()
        return g, msg

    def _take_handle(self):
        if self is not MESSAGE_NO_PROC and self is not MESSAGE_NULL:  # the predefined handles stay
            self._g, self._msg = None, None

    def _post(self, buf, block, what):
        g, msg = self._take(what)
        if msg is _NO_PROC:
            return None
        m = parse_recv(buf)
        return recv_into(g, m.u8, m.datatype._wire, msg.source, msg.tag, block, f"Message.{what}", msg=msg)

    def Recv(self, buf, status=None):
        got = self._post(buf, True, "Recv")
        if got is None:
            proc_null(status)
        else:
            fill(status, got)

    def Irecv(self, buf):
        r = self._post(buf, False, "Irecv")
        return Request._completed(fill=done_proc_null) if r is None else Request._wrap(r, done_buf)

    def _post_obj(self, block, what):
        g, msg = self._take(what)
        if msg is _NO_PROC:
            return None
        return recv_obj(g, msg.source, msg.tag, block, f"Message.{what}", msg=msg)

    def recv(self, status=None):
        got = self._post_obj(True, "recv")
        if got is None:
            proc_null(status)
            return None
        return done_obj(got, status)

    def irecv(self):
        r = self._post_obj(False, "irecv")
        return Request._completed(fill=done_proc_null) if r is None else Request._wrap(r, done_obj)


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message._of(None, _NO_PROC)


def mprobe(g, source, tag, block, status):
    """Comm.Mprobe / Improbe's body once PROC_NULL is handled: a Message, or None (non-blocking)."""
    msg = g.engine.mprobe(g.p2p, source, tag, block)
    if msg is None:
        return None
    fill(status, msg)
    return Message._of(g, msg)


def no_proc(status):
    """A matched probe of PROC_NULL: a fresh MESSAGE_NO_PROC handle."""
    proc_null(status)
    return Message(MESSAGE_NO_PROC)
