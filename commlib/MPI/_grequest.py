"""Generalized requests (`MPI.Grequest`): a request the program completes itself.

`Grequest.Start(query_fn, free_fn, cancel_fn, args, kwargs)` makes an active request that no
communication completes: the program calls `Complete()` (or `complete(obj)`, whose obj the lower-case
`wait`/`test` return) from any thread, typically when work it drives itself is done. Waiting then
runs `query_fn(status, *args, **kwargs)` to fill the status and `free_fn(*args, **kwargs)` to release
the program's state; `Cancel()` calls `cancel_fn(completed, *args, **kwargs)`. A callback that raises
is reported on stderr and the call raises MPI.Exception (its own class for an MPI.Exception,
ERR_OTHER otherwise), as mpi4py does.
"""
import sys
import traceback

from .._api.lifecycle import default_timeout
from .._engine.requests import Request as _EngineRequest
from ._constants import ANY_SOURCE, ANY_TAG, ERR_OTHER, ERR_REQUEST, MPIException
from ._requests import Prequest, Request, Status


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        code = exc.Get_error_class() if isinstance(exc, MPIException) else ERR_OTHER
        raise MPIException(code, f"Grequest: the {getattr(fn, '__name__', 'callback')} callback raised "
                                 f"{type(exc).__name__}: {exc}") from None


class Grequest(Request):
    """A generalized request: completed by the program (Complete), not by communication."""

    __slots__ = ()

    def __new__(cls, request=None):
        if isinstance(request, Prequest):
            raise TypeError("a persistent request is not a generalized one")
        return super().__new__(cls, request)

    @classmethod
    def Start(cls, query_fn=None, free_fn=None, cancel_fn=None, args=None, kwargs=None):
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        for name, fn in (("query_fn", query_fn), ("free_fn", free_fn), ("cancel_fn", cancel_fn)):
            if fn is not None and not callable(fn):
                raise TypeError(f"Grequest.Start: {name} must be callable or None, got {type(fn).__name__}")
        r = _Generalized("generalized request", timeout=default_timeout())  # a wait never Complete()d times out
        r.grequest = _State(query_fn, free_fn, cancel_fn, args, kwargs)

        def done(result, status):
            st = Status()
            st.source, st.tag = ANY_SOURCE, ANY_TAG
            state = r.grequest
            try:
                if state.query is not None:
                    _call(state.query, st, *state.args, **state.kwargs)
            finally:
                if state.free is not None:
                    _call(state.free, *state.args, **state.kwargs)
            if status is not None:
                status.source, status.tag, status.error = st.source, st.tag, st.error
                status._nbytes, status._cancelled = st._nbytes, st._cancelled
            return result
        return cls._wrap(r, done)

    start = Start

    def _state(self, what):
        r = self._r
        if not isinstance(r, _Generalized):
            raise MPIException(ERR_REQUEST, f"Grequest.{what}: not an active generalized request")
        return r, r.grequest

    def Complete(self):
        """Mark the request complete: a Wait returns, a Test says True."""
        self.complete(None)

    def complete(self, obj=None):
        """Complete(), with obj as what the lower-case wait() and test() return."""
        r, state = self._state("Complete")
        if state.completed:
            raise MPIException(ERR_REQUEST, "Grequest.Complete: already completed")
        state.completed = True
        r._finish(obj)

    def Cancel(self):
        """Tell the program's cancel_fn (with whether Complete was called); the request still completes
        only through Complete()."""
        _r, state = self._state("Cancel")
        if state.cancel is not None:
            _call(state.cancel, state.completed, *state.args, **state.kwargs)

    def cancel(self):
        self.Cancel()


class _Generalized(_EngineRequest):
    __slots__ = ("grequest",)


class _State:
    __slots__ = ("query", "free", "cancel", "args", "kwargs", "completed")

    def __init__(self, query, free, cancel, args, kwargs):
        self.query, self.free, self.cancel, self.args, self.kwargs = query, free, cancel, args, kwargs
        self.completed = False
