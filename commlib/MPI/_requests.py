"""Status and the Request family of mpi4py, over commlib's engine requests.

An MPI Request wraps one engine request (`commlib._engine.Request`) and a
`done(result)` that turns the engine's result into what MPI reports: it
fills the Status and gives the received object (lower case) or None.
Completion mutates the request in place: it becomes inactive, falsy and
equal to REQUEST_NULL, as mpi4py's do.
"""
import array
import threading

from .._engine import Request as _EngineRequest, wait_any as _wait_any
from ._constants import ANY_SOURCE, ANY_TAG, ERR_REQUEST, SUCCESS, UNDEFINED, MPIException
from ._datatypes import NAMED


class Status:
    """What a receive or probe matched: source, tag, error and the byte count."""

    __slots__ = ("_m", "_nbytes", "_cancelled", "__weakref__")

    def __init__(self, status=None):
        if status is not None and not isinstance(status, Status):
            raise TypeError(f"expected an MPI.Status, got {type(status).__name__}")
        if status is None:
            self._m, self._nbytes, self._cancelled = array.array("i", (ANY_SOURCE, ANY_TAG, SUCCESS)), 0, False
        else:
            self._m, self._nbytes, self._cancelled = array.array("i", status._m), status._nbytes, status._cancelled

    def _fill(self, source, tag, nbytes, cancelled=False):
        m = self._m
        m[0], m[1], m[2], self._nbytes, self._cancelled = source, tag, SUCCESS, nbytes, cancelled

    # source, tag and error live in one int array, which tomemory() exposes as MPI_Status's fields
    source = property(lambda self: self._m[0], lambda self, v: self._m.__setitem__(0, v))
    tag = property(lambda self: self._m[1], lambda self, v: self._m.__setitem__(1, v))
    error = property(lambda self: self._m[2], lambda self, v: self._m.__setitem__(2, v))

    def tomemory(self):
        """The status's source, tag and error as a writable memory of C ints (writing it sets them)."""
        return memoryview(self._m)

    def Get_source(self):
        return self.source

    def Set_source(self, source):
        self.source = source

    def Get_tag(self):
        return self.tag

    def Set_tag(self, tag):
        self.tag = tag

    def Get_error(self):
        return self.error

    def Set_error(self, error):
        self.error = error

    def Get_count(self, datatype=None):
        """Elements of datatype received (bytes by default); UNDEFINED if not a whole number."""
        size = 1 if datatype is None else datatype.Get_size()
        if size == 0:
            return 0 if self._nbytes == 0 else UNDEFINED
        return self._nbytes // size if self._nbytes % size == 0 else UNDEFINED

    def Get_elements(self, datatype):
        if datatype._base is None:
            raise MPIException(3, "Get_elements: MPI.DATATYPE_NULL")
        return self._nbytes // datatype._base.itemsize

    def Set_elements(self, datatype, count):
        self._nbytes = int(count) * datatype.Get_size()

    def Is_cancelled(self):
        return self._cancelled

    def Set_cancelled(self, flag):
        self._cancelled = bool(flag)

    count = property(lambda self: self.Get_count(), lambda self, n: setattr(self, "_nbytes", int(n)))
    cancelled = property(Is_cancelled, Set_cancelled)

    def __eq__(self, other):
        if not isinstance(other, Status):
            return NotImplemented
        return (self.source, self.tag, self.error, self._nbytes, self._cancelled) == \
            (other.source, other.tag, other.error, other._nbytes, other._cancelled)

    __hash__ = None

    def __repr__(self):
        return f"<MPI.Status source={self.source} tag={self.tag} error={self.error} count={self._nbytes}>"

    def __reduce__(self):
        return (_status, (type(self), self.source, self.tag, self.error, self._nbytes, self._cancelled))

    def py2f(self):
        """The status as Fortran's integer array (MPI.F_SOURCE, F_TAG, F_ERROR index it)."""
        return [self._nbytes & 0x7FFFFFFF, self._nbytes >> 31, self.source, self.tag, self.error, int(self._cancelled)]

    @classmethod
    def f2py(cls, arg):
        st = cls()
        n_lo, n_hi, st.source, st.tag, st.error, cancelled = (int(x) for x in arg)
        st._nbytes, st._cancelled = n_lo | (n_hi << 31), bool(cancelled)
        return st


def _status(cls, source, tag, error, nbytes, cancelled):
    st = cls()
    st.source, st.tag, st.error, st._nbytes, st._cancelled = source, tag, error, nbytes, cancelled
    return st


_BYTE = NAMED["BYTE"]


def _done_none(result, status):
    if status is not None:
        status._fill(ANY_SOURCE, ANY_TAG, 0)
    return None


class Request:
    """A non-blocking operation; `Request()` is the null request."""

    __slots__ = ("_r", "_done", "_value", "_persist", "__weakref__")

    def __new__(cls, request=None):
        if request is not None and not isinstance(request, Request):
            raise TypeError(f"expected an MPI.Request, got {type(request).__name__}")
        self = object.__new__(cls)
        if request is None:
            self._r, self._done, self._value, self._persist = None, None, None, None
        else:
            self._r, self._done, self._value, self._persist = request._r, request._done, request._value, \
                request._persist
        return self

    @classmethod
    def _wrap(cls, r, done):
        self = object.__new__(cls)
        self._r, self._done, self._value, self._persist = r, done, None, None
        return self

    def _after(self, todo):
        """Run each of todo (unpacking a derived-datatype receive) once this request completes."""
        done = self._done

        def then(result, status):
            value = done(result, status)
            for fn in todo:
                fn()
            return value
        self._done = then

    @classmethod
    def _both(cls, first, second, what):
        """One request for two (Isendrecv): complete once both are; waiting completes both and gives
        the first's status and value."""
        r = _EngineRequest(what, timeout=max((x._r.timeout or 0 for x in (first, second) if x._r is not None),
                                             default=None) or None)
        inner = [x._r for x in (first, second) if x._r is not None]
        left, lock = [len(inner)], threading.Lock()

        def one(_req):
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                r._finish(None)
        if not inner:
            r._finish(None)
        for x in inner:
            x.add_done_callback(one)

        def done(_result, status):
            try:
                second._complete(None)
            finally:
                value = first._complete(status)
            return value
        return cls._wrap(r, done)

    @classmethod
    def _completed(cls, value=None, fill=None):
        """A request that is already complete (PROC_NULL, a send that finished at once)."""
        r = _EngineRequest("completed")
        r._finish(value)
        return cls._wrap(r, fill or _done_none)

    # ------------------------------------------------------------ completion
    def _complete(self, status):
        """The engine request finished: run done(), deactivate, return the value."""
        r = self._r
        if r is None:
            if status is not None:
                status._fill(ANY_SOURCE, ANY_TAG, 0)
            return None
        if r.cancelled:
            value = None
            if status is not None:
                status._fill(ANY_SOURCE, ANY_TAG, 0, cancelled=True)
        else:
            try:
                result = r.wait()
            finally:
                self._r = None  # inactive (a persistent request can be started again)
            value = self._done(result, status)
        self._r = None
        return value

    # ------------------------------------------------------------ upper case
    def Wait(self, status=None):
        self._complete(status)
        return True

    def Test(self, status=None):
        if self._r is not None and not self._r.test():
            return False
        self._complete(status)
        return True

    def Get_status(self, status=None):
        """True when complete (filling status), without deactivating the request."""
        r = self._r
        if r is None:
            if status is not None:
                status._fill(ANY_SOURCE, ANY_TAG, 0)
            return True
        if not r.test():
            return False
        if status is not None:
            if r.cancelled:
                status._fill(ANY_SOURCE, ANY_TAG, 0, cancelled=True)
            elif r._error is None:
                self._done(r._result, status)
        return True

    def Cancel(self):
        if self._r is None:
            raise MPIException(ERR_REQUEST, "Cancel() of MPI.REQUEST_NULL")
        self._r.cancel()

    def Free(self):
        if self._r is None and self._persist is None:
            raise MPIException(ERR_REQUEST, "Free() of MPI.REQUEST_NULL")
        self._r = None
        self._persist = None

    def __reduce__(self):
        from ._handles import null_reduce
        return null_reduce(self, "REQUEST_NULL", self._r is None and self._persist is None)

    def free(self):
        """Free() made safe: nothing for REQUEST_NULL."""
        if self._r is not None or self._persist is not None:
            self.Free()

    # ------------------------------------------------------------ lower case
    def wait(self, status=None):
        return self._complete(status)

    def test(self, status=None):
        if self._r is not None and not self._r.test():
            return False, None
        return True, self._complete(status)

    def get_status(self, status=None):
        return self.Get_status(status)

    def cancel(self):
        self.Cancel()

    # ------------------------------------------------------------ many at once
    @staticmethod
    def Waitall(requests, statuses=None):
        _waitall(requests, statuses)
        return True

    @staticmethod
    def waitall(requests, statuses=None):
        return _waitall(requests, statuses)

    @staticmethod
    def Testall(requests, statuses=None):
        return _testall(requests, statuses)[0]

    @staticmethod
    def testall(requests, statuses=None):
        return _testall(requests, statuses)

    @staticmethod
    def Waitany(requests, status=None):
        return _waitany(requests, status)[0]

    @staticmethod
    def waitany(requests, status=None):
        return _waitany(requests, status)

    @staticmethod
    def Testany(requests, status=None):
        i, flag, _ = _testany(requests, status)
        return i, flag

    @staticmethod
    def testany(requests, status=None):
        return _testany(requests, status)

    @staticmethod
    def Waitsome(requests, statuses=None):
        return _waitsome(requests, statuses)[0]

    @staticmethod
    def waitsome(requests, statuses=None):
        return _waitsome(requests, statuses)

    @staticmethod
    def Testsome(requests, statuses=None):
        return _testsome(requests, statuses)[0]

    @staticmethod
    def testsome(requests, statuses=None):
        return _testsome(requests, statuses)

    @staticmethod
    def Get_status_any(requests, status=None):
        """(index, flag) of a complete request, without deactivating it; (UNDEFINED, True) if none is active."""
        requests = _check(requests)
        if not any(_active(r) for r in requests):
            if status is not None:
                status._fill(ANY_SOURCE, ANY_TAG, 0)
            return UNDEFINED, True
        for i, r in enumerate(requests):
            if _active(r) and r.Get_status(status):
                return i, True
        return UNDEFINED, False

    @staticmethod
    def Get_status_all(requests, statuses=None):
        requests = _check(requests)
        if not all(r.Get_status() for r in requests):
            return False
        for i, r in enumerate(requests):
            r.Get_status(_status_at(statuses, i))
        return True

    @staticmethod
    def Get_status_some(requests, statuses=None):
        requests = _check(requests)
        if not any(_active(r) for r in requests):
            return None
        done = [i for i, r in enumerate(requests) if _active(r) and r.Get_status()]
        for k, i in enumerate(done):
            requests[i].Get_status(_status_at(statuses, k))
        return done

    get_status_any = Get_status_any
    get_status_all = Get_status_all
    get_status_some = Get_status_some

    # ------------------------------------------------------------ handle semantics
    def __bool__(self):
        return self._r is not None

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        return self._r is other._r

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __repr__(self):
        return f"<MPI.Request {'inactive' if self._r is None else self._r.what}>"


class Prequest(Request):
    """A persistent request (Send_init/Recv_init): inactive until Start(), restartable."""

    __slots__ = ()

    def __new__(cls, request=None):
        if request is not None and type(request).__name__ == "Grequest":
            raise TypeError("a generalized request is not a persistent one")
        return super().__new__(cls, request)

    @classmethod
    def _make(cls, start):
        self = object.__new__(cls)
        self._r, self._done, self._value, self._persist = None, None, None, start
        return self

    def Start(self):
        if self._persist is None:
            raise MPIException(ERR_REQUEST, "Start() on a freed persistent request")
        if self._r is not None:
            raise MPIException(ERR_REQUEST, "Start() on a persistent request that is still active")
        inner = self._persist()
        self._r, self._done = inner._r, inner._done

    start = Start

    @staticmethod
    def Startall(requests):
        for r in requests:
            r.Start()

    startall = Startall

    # partitioned requests (`_partitioned.Partitioned`) mark and ask about their parts; others have none
    def _not_partitioned(self, *args):
        raise MPIException(ERR_REQUEST, "Pready/Parrived on a request that is not partitioned "
                                        "(made by Psend_init / Precv_init)")

    Pready = Pready_range = Pready_list = Parrived = _not_partitioned

    def Free(self):
        if self._persist is None:
            raise MPIException(ERR_REQUEST, "Free() of MPI.REQUEST_NULL")
        self._r = None
        self._persist = None

    def __bool__(self):
        return self._persist is not None

    def __eq__(self, other):
        if not isinstance(other, Request):
            return NotImplemented
        if self._persist is None or other._persist is None:
            return not self and not other
        return self._persist is other._persist

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)


def _status_at(statuses, i):
    """statuses[i]; a list grows to hold it, any other sequence is only filled."""
    if statuses is None:
        return None
    if i < len(statuses):
        return statuses[i]
    if isinstance(statuses, list):
        while len(statuses) <= i:
            statuses.append(Status())
        return statuses[i]
    return None


def _check(requests):
    for r in requests:
        if not isinstance(r, Request):
            raise TypeError(f"expected MPI.Request objects, got {type(r).__name__}")
    return requests


def _waitall(requests, statuses):
    requests = _check(requests)
    values, first = [], None
    for i, r in enumerate(requests):
        try:
            values.append(r._complete(_status_at(statuses, i)))
        except MPIException as exc:
            first = first or exc
            values.append(None)
    if first is not None:
        raise first
    return values


def _active(r):
    return r._r is not None


def _testall(requests, statuses):
    requests = _check(requests)
    if not all(r._r is None or r._r.test() for r in requests):
        return False, None
    return True, _waitall(requests, statuses)


def _waitany(requests, status):
    requests = _check(requests)
    active = [(i, r) for i, r in enumerate(requests) if _active(r)]
    if not active:
        if status is not None:
            status._fill(ANY_SOURCE, ANY_TAG, 0)
        return UNDEFINED, None
    k, _ = _wait_any([r._r for _, r in active])
    i, r = active[k]
    return i, r._complete(status)


def _testany(requests, status):
    requests = _check(requests)
    active = False
    for i, r in enumerate(requests):
        if not _active(r):
            continue
        active = True
        if r._r.test():
            return i, True, r._complete(status)
    if not active:
        if status is not None:
            status._fill(ANY_SOURCE, ANY_TAG, 0)
        return UNDEFINED, True, None
    return UNDEFINED, False, None


def _testsome(requests, statuses):
    requests = _check(requests)
    if not any(_active(r) for r in requests):
        return None, None
    indices, values = [], []
    for i, r in enumerate(requests):
        if _active(r) and r._r.test():
            indices.append(i)
            values.append(r._complete(_status_at(statuses, len(indices) - 1)))
    return indices, values


def _waitsome(requests, statuses):
    requests = _check(requests)
    active = [r._r for r in requests if _active(r)]
    if not active:
        return None, None
    _wait_any(active)  # at least one is complete now; report every one that is
    return _testsome(requests, statuses)
