"""The exceptions of the public contract; this module imports nothing."""

ERR_OTHER = 16  # the MPI error class of commlib's own errors (MPI-5 standard ABI values throughout)
ERR_UNKNOWN = 14
_ERROR_STRINGS = {  # error class or code -> its string; commlib.MPI adds the program's own (Add_error_*)
    0: "MPI_SUCCESS: no errors", 1: "MPI_ERR_BUFFER: invalid buffer pointer",
    2: "MPI_ERR_COUNT: invalid count argument", 3: "MPI_ERR_TYPE: invalid datatype", 4: "MPI_ERR_TAG: invalid tag",
    5: "MPI_ERR_COMM: invalid communicator", 6: "MPI_ERR_RANK: invalid rank", 7: "MPI_ERR_REQUEST: invalid request",
    8: "MPI_ERR_ROOT: invalid root", 9: "MPI_ERR_GROUP: invalid group", 10: "MPI_ERR_OP: invalid reduce operation",
    11: "MPI_ERR_TOPOLOGY: invalid topology", 12: "MPI_ERR_DIMS: invalid dimension argument",
    13: "MPI_ERR_ARG: invalid argument", 14: "MPI_ERR_UNKNOWN: unknown error",
    15: "MPI_ERR_TRUNCATE: message truncated", 16: "MPI_ERR_OTHER: known error not in list",
    17: "MPI_ERR_INTERN: internal error", 18: "MPI_ERR_PENDING: pending request",
    19: "MPI_ERR_IN_STATUS: error code is in status", 20: "MPI_ERR_ACCESS: permission denied",
    21: "MPI_ERR_AMODE: invalid file access mode", 22: "MPI_ERR_ASSERT: invalid assert argument",
    23: "MPI_ERR_BAD_FILE: invalid file name", 24: "MPI_ERR_BASE: invalid base address",
    25: "MPI_ERR_CONVERSION: data conversion error", 26: "MPI_ERR_DISP: invalid displacement",
    27: "MPI_ERR_DUP_DATAREP: data representation already defined",
    28: "MPI_ERR_FILE_EXISTS: file exists", 29: "MPI_ERR_FILE_IN_USE: file in use",
    30: "MPI_ERR_FILE: invalid file handle", 31: "MPI_ERR_INFO_KEY: invalid info key",
    32: "MPI_ERR_INFO_NOKEY: info key not defined", 33: "MPI_ERR_INFO_VALUE: invalid info value",
    34: "MPI_ERR_INFO: invalid info object", 35: "MPI_ERR_IO: I/O error", 36: "MPI_ERR_KEYVAL: invalid keyval",
    37: "MPI_ERR_LOCKTYPE: invalid lock type", 38: "MPI_ERR_NAME: name not published",
    39: "MPI_ERR_NO_MEM: out of memory", 40: "MPI_ERR_NOT_SAME: arguments not the same on every process",
    41: "MPI_ERR_NO_SPACE: no space left", 42: "MPI_ERR_NO_SUCH_FILE: no such file",
    43: "MPI_ERR_PORT: invalid port name", 44: "MPI_ERR_QUOTA: quota exceeded",
    45: "MPI_ERR_READ_ONLY: read-only file", 46: "MPI_ERR_RMA_ATTACH: memory cannot be attached",
    47: "MPI_ERR_RMA_CONFLICT: conflicting accesses to a window",
    48: "MPI_ERR_RMA_RANGE: target memory outside the window", 49: "MPI_ERR_RMA_SHARED: memory cannot be shared",
    50: "MPI_ERR_RMA_SYNC: wrong synchronisation of RMA calls", 51: "MPI_ERR_SERVICE: invalid service name",
    52: "MPI_ERR_SIZE: invalid size", 53: "MPI_ERR_SPAWN: error spawning processes",
    54: "MPI_ERR_UNSUPPORTED_DATAREP: unsupported data representation",
    55: "MPI_ERR_UNSUPPORTED_OPERATION: unsupported operation", 56: "MPI_ERR_WIN: invalid window",
    57: "MPI_ERR_RMA_FLAVOR: wrong window flavor", 58: "MPI_ERR_PROC_ABORTED: a process aborted",
    59: "MPI_ERR_VALUE_TOO_LARGE: value too large", 60: "MPI_ERR_SESSION: invalid session",
    61: "MPI_ERR_ERRHANDLER: invalid error handler", 62: "MPI_ERR_ABI: ABI mismatch",
    101: "MPI_ERR_PROC_FAILED: a process failed", 102: "MPI_ERR_PROC_FAILED_PENDING: a process failed (pending)",
    103: "MPI_ERR_REVOKED: the communicator was revoked"}
_CODE_CLASS = {}  # an error code the program added -> its class (classes map to themselves)


class MPIException(RuntimeError):
    """An MPI error code with a message: `commlib.MPI.Exception`, and the base of CommError,
    so that `except MPI.Exception` also catches commlib's own errors. It compares, hashes and
    converts as its error code (as mpi4py's does); its class is that of the code."""

    _code = ERR_OTHER

    def __init__(self, ierr=ERR_OTHER, message=None):
        if isinstance(ierr, str) and message is None:
            ierr, message = ERR_OTHER, ierr
        ierr = int(ierr)
        self._code = ERR_UNKNOWN if ierr < 0 else ierr
        super().__init__(message if message is not None else self.error_string)

    @property
    def error_code(self):
        return self._code

    @property
    def error_class(self):
        return _CODE_CLASS.get(self._code, self._code)

    @property
    def error_string(self):
        got = _ERROR_STRINGS.get(self._code)
        return got if got is not None else f"MPI error code {self._code}"

    def Get_error_class(self):
        return self.error_class

    def Get_error_code(self):
        return self._code

    def Get_error_string(self):
        return self.error_string

    def __int__(self):
        return self._code

    def __bool__(self):
        return self._code != 0

    def __eq__(self, other):
        if isinstance(other, (int, MPIException)):
            return self._code == int(other)
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __lt__(self, other):
        return self._code < int(other)

    def __le__(self, other):
        return self._code <= int(other)

    def __gt__(self, other):
        return self._code > int(other)

    def __ge__(self, other):
        return self._code >= int(other)

    def __hash__(self):
        return hash(self._code)

    def __repr__(self):
        if type(self) is MPIException and str(self) == self.error_string:
            return f"MPI.Exception({self._code})"
        return f"{type(self).__name__}({str(self)!r})"


class CommError(MPIException):
    """Base of every commlib error."""

    def __init__(self, message, *, rank=None, op=None):
        RuntimeError.__init__(self, message)
        self.rank = rank  # the peer rank the error is about, when there is one
        self.op = op  # the operation name, when there is one

    __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__  # one failure is not another


class CommTimeout(CommError, TimeoutError):
    """An operation waited longer than the group's timeout."""


class PeerLost(CommError, ConnectionError):
    """A peer closed its connection, died, or reported a failure."""


class MismatchError(CommError):
    """Ranks called different collectives, or with arguments that must agree."""


class AuthError(CommError, PermissionError):
    """A connection did not prove knowledge of the job's secret."""
