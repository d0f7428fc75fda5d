"""What MPI hangs on its objects besides their data: attributes under keyvals, error handlers, and the
error classes and codes a program adds.

Attributes: `Create_keyval(copy_fn, delete_fn, nopython)` gives a key of one object kind (Comm,
Datatype or Win); `Set_attr`/`Get_attr`/`Delete_attr` keep a value per object under it. `Dup` copies
each attribute as its keyval says (copy_fn None or False: not copied; True: the same value; a callable:
its result, NotImplemented meaning not copied); `Delete_attr`, `Free` and overwriting a value call
delete_fn. A callback that raises is reported on stderr and the call raises MPI.Exception(ERR_OTHER),
as mpi4py does on MPICH.

Error handlers: `ERRORS_RETURN` (the default here, as in mpi4py: an error raises MPI.Exception),
`ERRORS_ARE_FATAL` / `ERRORS_ABORT` (an error aborts the job after reporting it) and handlers made by
`Create_errhandler(fn)` (fn(obj, errorcode) is called, and the call returns None, as mpi4py on MPICH
does: the handler owns the error). A new communicator starts with ERRORS_RETURN, as mpi4py makes
every one it creates (not inheriting its parent's handler). Objects whose handler is
not ERRORS_RETURN route their methods' errors through `dispatch`; until a program sets one, no method
pays for it (the wrapping is installed on first use, as for packed datatypes).
"""
import itertools
import sys
import threading
import traceback

from .._errors import _CODE_CLASS, _ERROR_STRINGS, MPIException
from ._constants import (ERR_ARG, ERR_ERRHANDLER, ERR_KEYVAL, ERR_LASTCODE, ERR_OTHER, KEYVAL_INVALID, SUCCESS)

_lock = threading.Lock()
_next_keyval = itertools.count(0x2400_0001)
_keyvals = {}  # keyval -> _Keyval


class _Keyval:
    __slots__ = ("kind", "copy", "delete", "nopython", "freed")

    def __init__(self, kind, copy, delete, nopython):
        self.kind, self.copy, self.delete, self.nopython, self.freed = kind, copy, delete, nopython, False


def _callback_failed(what, kind, keyval):
    """A copy or delete callback raised: say so on stderr (with its traceback) and raise ERR_OTHER."""
    traceback.print_exc(file=sys.stderr)
    return MPIException(ERR_OTHER, f"{kind}.{what}: the {what.lower()} callback of keyval {keyval} raised "
                                   f"{sys.exc_info()[0].__name__}")


class Attributes:
    """Mixin: attribute caching for an MPI object kind. A class provides `_attrs()` (its attribute dict,
    shared by every handle of the object, or None for a null object), `_builtin_attr(keyval)` (a
    predefined attribute's value, or `_NONE`) and `_kind` (the class name keyvals are made for)."""

    __slots__ = ()
    _kind = "Comm"

    @classmethod
    def Create_keyval(cls, copy_fn=None, delete_fn=None, nopython=False):
        """A new attribute key for objects of this kind."""
        for name, fn in (("copy_fn", copy_fn), ("delete_fn", delete_fn)):
            if fn is not None and fn is not True and fn is not False and not callable(fn):
                raise TypeError(f"{cls._kind}.Create_keyval: {name} must be callable, True, False or None, "
                                f"got {type(fn).__name__}")
        with _lock:
            k = next(_next_keyval)
            _keyvals[k] = _Keyval(cls._kind, copy_fn, delete_fn, bool(nopython))
        return k

    @classmethod
    def Free_keyval(cls, keyval):
        """Free a keyval (attributes already set under it stay until deleted); returns KEYVAL_INVALID."""
        _keyval(cls._kind, keyval, "Free_keyval").freed = True
        return KEYVAL_INVALID

    def Set_attr(self, keyval, attrval):
        kv = _keyval(self._kind, keyval, "Set_attr")
        if kv.freed:
            raise MPIException(ERR_KEYVAL, f"{self._kind}.Set_attr: keyval {keyval} has been freed")
        attrs = self._attrs_of("Set_attr")
        if keyval in attrs:
            self._delete_one(attrs, keyval, "Set_attr")
        attrs[keyval] = attrval

    def Get_attr(self, keyval):
        value = self._builtin_attr(keyval)
        if value is not _NONE:
            return value
        if keyval == KEYVAL_INVALID:
            raise MPIException(ERR_KEYVAL, f"{self._kind}.Get_attr: MPI.KEYVAL_INVALID is not an attribute key")
        _keyval(self._kind, keyval, "Get_attr")
        return self._attrs_of("Get_attr").get(keyval)

    def Delete_attr(self, keyval):
        _keyval(self._kind, keyval, "Delete_attr")
        attrs = self._attrs_of("Delete_attr")
        if keyval not in attrs:
            raise MPIException(ERR_KEYVAL, f"{self._kind}.Delete_attr: no attribute is set under keyval {keyval}")
        self._delete_one(attrs, keyval, "Delete_attr")

    # -- for the object's own Dup and Free
    def _attrs_of(self, what):
        attrs = self._attrs()
        if attrs is None:
            raise MPIException(self._null_error, f"{self._kind}.{what}: operation on a null {self._kind}")
        return attrs

    def _delete_one(self, attrs, keyval, what):
        """Remove one attribute, calling its delete callback (the value goes even when it raises)."""
        value = attrs.pop(keyval)
        kv = _keyvals.get(keyval)
        if kv is not None and callable(kv.delete):
            try:
                kv.delete(self, keyval, value)
            except Exception:
                raise _callback_failed("Delete", self._kind, keyval) from None

    def _copy_attrs(self, new):
        """Dup: copy this object's attributes to `new` as their keyvals say."""
        attrs = self._attrs()
        if not attrs:
            return
        out = new._attrs()
        for keyval, value in list(attrs.items()):
            kv = _keyvals.get(keyval)
            fn = None if kv is None else kv.copy
            if fn is None or fn is False:
                continue
            if fn is True:
                out[keyval] = value
                continue
            try:
                got = fn(self, keyval, value)
            except Exception:
                raise _callback_failed("Copy", self._kind, keyval) from None
            if got is not NotImplemented:
                out[keyval] = got

    def _delete_attrs(self):
        """Free: delete every attribute (callbacks in reverse order of setting), the first error raised
        once all are gone."""
        attrs = self._attrs()
        if not attrs:
            return
        first = None
        for keyval in reversed(list(attrs)):
            try:
                self._delete_one(attrs, keyval, "Free")
            except MPIException as exc:
                first = first or exc
        if first is not None:
            raise first


_NONE = object()  # _builtin_attr: not a predefined attribute


def _keyval(kind, keyval, what):
    kv = _keyvals.get(keyval) if isinstance(keyval, int) else None
    if kv is None or kv.kind != kind:
        raise MPIException(ERR_KEYVAL, f"{kind}.{what}: {keyval!r} is not a {kind} keyval")
    return kv


# ------------------------------------------------------------------ error handlers
_MAX_USER = 32  # user error handlers per object kind, as mpi4py allows


class Errhandler:
    """An error handler handle: ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT, ERRHANDLER_NULL or one
    made by `Comm.Create_errhandler(fn)` (and Win's, File's, Session's)."""

    __slots__ = ("_h", "__weakref__")

    def __new__(cls, errhandler=None):
        if errhandler is not None and not isinstance(errhandler, Errhandler):
            raise TypeError(f"expected an MPI.Errhandler, got {type(errhandler).__name__}")
        self = object.__new__(cls)
        self._h = _NULL_H if errhandler is None else errhandler._h
        return self

    @classmethod
    def _made(cls, h):
        self = object.__new__(cls)
        self._h = h
        return self

    def Free(self):
        if self._h is _NULL_H:
            raise MPIException(ERR_ERRHANDLER, "Errhandler.Free: operation on MPI.ERRHANDLER_NULL")
        if any(self is p for p in _PREDEFINED_OBJECTS):
            return  # freeing a predefined handler itself leaves it usable, as MPI says
        self._h = _NULL_H

    def free(self):
        """Free() made safe: nothing for ERRHANDLER_NULL."""
        if self._h is not _NULL_H:
            self.Free()

    def __bool__(self):
        return self._h is not _NULL_H

    def __eq__(self, other):
        if not isinstance(other, Errhandler):
            return NotImplemented
        return self._h is other._h

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # unhashable, as mpi4py's handles (equal handles may be freed apart)

    def __reduce__(self):
        name = self._h.name
        if self._h.fn is not None:
            raise ValueError(f"cannot pickle a user error handler ({self._h.name})")
        if any(self is p for p in _PREDEFINED_OBJECTS):
            return (_predefined, (name,))
        return (_predefined_copy, (type(self), name))

    def __repr__(self):
        return f"<MPI.Errhandler {self._h.name}>"


class _H:
    """The state an Errhandler handle names."""

    __slots__ = ("name", "kind", "fn", "__weakref__")

    def __init__(self, name, kind, fn=None):
        self.name, self.kind, self.fn = name, kind, fn


_NULL_H = _H("MPI_ERRHANDLER_NULL", None)
_RETURN_H = _H("MPI_ERRORS_RETURN", "return")
_FATAL_H = _H("MPI_ERRORS_ARE_FATAL", "fatal")
_ABORT_H = _H("MPI_ERRORS_ABORT", "abort")
ERRHANDLER_NULL = Errhandler._made(_NULL_H)
ERRORS_RETURN = Errhandler._made(_RETURN_H)
ERRORS_ARE_FATAL = Errhandler._made(_FATAL_H)
ERRORS_ABORT = Errhandler._made(_ABORT_H)
_PREDEFINED_OBJECTS = (ERRHANDLER_NULL, ERRORS_RETURN, ERRORS_ARE_FATAL, ERRORS_ABORT)
_BY_NAME = {e._h.name: e for e in _PREDEFINED_OBJECTS}
_user_count = {}


def _predefined(name):
    return _BY_NAME[name]


def _predefined_copy(cls, name):
    return cls(_BY_NAME[name])


_installers = []  # called once, when some object first gets a handler other than ERRORS_RETURN
_installed = False


def on_first_handler(fn):
    """Register fn() to run when the first non-default error handler is set (it wraps the methods)."""
    _installers.append(fn)


class ErrorHandling:
    """Mixin: error handlers for an MPI object kind. A class provides `_errh_get()` / `_errh_set(h)` (the
    _H state kept with the object) and `_kind`."""

    __slots__ = ()

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        if not callable(errhandler_fn):
            raise TypeError(f"{cls._kind}.Create_errhandler: expected a callable fn(obj, errorcode), "
                            f"got {type(errhandler_fn).__name__}")
        with _lock:
            n = _user_count.get(cls._kind, 0)
            if n >= _MAX_USER:
                raise MPIException(ERR_OTHER, f"{cls._kind}.Create_errhandler: at most {_MAX_USER} user error "
                                              f"handlers per object kind")
            _user_count[cls._kind] = n + 1
        return Errhandler._made(_H(f"{cls._kind} error handler {errhandler_fn!r}", "user", errhandler_fn))

    def Get_errhandler(self):
        """A new handle of this object's error handler (free it with Free())."""
        return Errhandler._made(self._errh_get())

    def Set_errhandler(self, errhandler):
        global _installed
        if not isinstance(errhandler, Errhandler):
            raise TypeError(f"{self._kind}.Set_errhandler: expected an MPI.Errhandler, "
                            f"got {type(errhandler).__name__}")
        if errhandler._h is _NULL_H:
            raise MPIException(ERR_ARG, f"{self._kind}.Set_errhandler: MPI.ERRHANDLER_NULL is not a handler")
        if errhandler._h is not _RETURN_H and not _installed:
            _installed = True
            for fn in _installers:
                fn()
        self._errh_set(errhandler._h)

    def Call_errhandler(self, errorcode):
        """Invoke this object's error handler with errorcode, as MPI would on an error."""
        _invoke(self, self._errh_get(), int(errorcode), None)

    errhandler = property(Get_errhandler, Set_errhandler)


def _invoke(obj, h, code, exc):
    if h.kind == "user":
        h.fn(obj, code)
    elif h.kind in ("fatal", "abort") and code != SUCCESS:
        from . import _lifecycle_abort
        what = str(exc) if exc is not None else MPIException(code).error_string
        _lifecycle_abort(code, f"an MPI error with {h.name} set on {obj!r}: {what}")


def dispatch(obj, exc):
    """An MPI error raised in one of obj's methods: run obj's handler. True when a handler of the
    program's took it (the call then returns None, as MPI returns to the caller after the handler);
    ERRORS_ARE_FATAL and ERRORS_ABORT stop the job; ERRORS_RETURN lets the exception propagate."""
    getter = getattr(obj, "_errh_get", None)
    if getter is None:
        return False
    try:
        h = getter()
    except MPIException:  # a null object has no handler: the error speaks for itself
        return False
    if h is _RETURN_H:
        return False
    _invoke(obj, h, int(getattr(exc, "error_code", ERR_OTHER)), exc)
    return True


def guarded(fn):
    """fn, its MPI errors passed through the object's error handler first."""
    def call(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except MPIException as exc:
            if not dispatch(self, exc):
                raise
            return None
    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    call.__wrapped__, call._guarded = fn, True
    return call


def guard_class(cls):
    """Wrap the public methods of cls (and only its own) with `guarded`."""
    for name, fn in list(vars(cls).items()):
        if (name[:1].isupper() and callable(fn) and not isinstance(fn, (classmethod, staticmethod, property, type))
                and not getattr(fn, "_guarded", False) and name not in _UNGUARDED):
            setattr(cls, name, guarded(fn))


_UNGUARDED = {"Get_errhandler", "Set_errhandler", "Call_errhandler", "Free", "Abort"}


# ------------------------------------------------------------------ error classes and codes a program adds
_last_used = [ERR_LASTCODE]


def last_used_code():
    return _last_used[0]


def Add_error_class():
    """A new error class (its string empty until Add_error_string)."""
    with _lock:
        _last_used[0] += 1
        code = _last_used[0]
        _CODE_CLASS[code] = code
        _ERROR_STRINGS[code] = ""
    return code


def Add_error_code(errorclass):
    """A new error code of errorclass (a predefined class or one from Add_error_class)."""
    errorclass = int(errorclass)
    if errorclass not in _ERROR_STRINGS or _CODE_CLASS.get(errorclass, errorclass) != errorclass:
        raise MPIException(ERR_ARG, f"Add_error_code: {errorclass} is not an error class")
    with _lock:
        _last_used[0] += 1
        code = _last_used[0]
        _CODE_CLASS[code] = errorclass
        _ERROR_STRINGS[code] = ""
    return code


def Add_error_string(errorcode, string):
    errorcode = int(errorcode)
    if errorcode <= ERR_LASTCODE or errorcode not in _CODE_CLASS:
        raise MPIException(ERR_ARG, f"Add_error_string: {errorcode} is not an error class or code added by "
                                    f"the program")
    _ERROR_STRINGS[errorcode] = str(string)


def _added(code, what):
    code = int(code)
    if code <= ERR_LASTCODE or code not in _CODE_CLASS:
        raise MPIException(ERR_ARG, f"{what}: {code} is not an error class or code added by the program")
    return code


def Remove_error_class(errorclass):
    code = _added(errorclass, "Remove_error_class")
    if _CODE_CLASS[code] != code:
        raise MPIException(ERR_ARG, f"Remove_error_class: {code} is an error code, not a class")
    if any(c != code and k == code for c, k in _CODE_CLASS.items()):
        raise MPIException(ERR_OTHER, f"Remove_error_class: error class {code} still has codes")
    if _ERROR_STRINGS.get(code):
        raise MPIException(ERR_OTHER, f"Remove_error_class: error class {code} still has a string")
    del _CODE_CLASS[code], _ERROR_STRINGS[code]


def Remove_error_code(errorcode):
    code = _added(errorcode, "Remove_error_code")
    if _CODE_CLASS[code] == code:
        raise MPIException(ERR_ARG, f"Remove_error_code: {code} is an error class, not a code")
    if _ERROR_STRINGS.get(code):
        raise MPIException(ERR_OTHER, f"Remove_error_code: error code {code} still has a string")
    del _CODE_CLASS[code], _ERROR_STRINGS[code]


def Remove_error_string(errorcode):
    code = _added(errorcode, "Remove_error_string")
    _ERROR_STRINGS[code] = ""
