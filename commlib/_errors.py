"""The exceptions of the public contract; this module imports nothing."""

ERR_OTHER = 16  # the MPI error class of commlib's own errors (MPI-5 standard ABI value)
_ERROR_STRINGS = {0: "MPI_SUCCESS: no errors", 1: "MPI_ERR_BUFFER: invalid buffer pointer",
                  2: "MPI_ERR_COUNT: invalid count argument", 3: "MPI_ERR_TYPE: invalid datatype",
                  4: "MPI_ERR_TAG: invalid tag", 5: "MPI_ERR_COMM: invalid communicator",
                  6: "MPI_ERR_RANK: invalid rank", 7: "MPI_ERR_REQUEST: invalid request",
                  8: "MPI_ERR_ROOT: invalid root", 9: "MPI_ERR_GROUP: invalid group",
                  10: "MPI_ERR_OP: invalid reduce operation", 11: "MPI_ERR_TOPOLOGY: invalid topology",
                  12: "MPI_ERR_DIMS: invalid dimension argument", 13: "MPI_ERR_ARG: invalid argument",
                  14: "MPI_ERR_UNKNOWN: unknown error", 15: "MPI_ERR_TRUNCATE: message truncated",
                  16: "MPI_ERR_OTHER: known error not in list", 17: "MPI_ERR_INTERN: internal error",
                  19: "MPI_ERR_PENDING: pending request", 20: "MPI_ERR_IN_STATUS: error code is in status"}


class MPIException(RuntimeError):
    """An MPI error class with a message: `commlib.MPI.Exception`, and the base of CommError,
    so that `except MPI.Exception` also catches commlib's own errors."""

    error_class = ERR_OTHER

    def __init__(self, ierr=ERR_OTHER, message=None):
        if isinstance(ierr, str) and message is None:
            ierr, message = ERR_OTHER, ierr
        self.error_class = int(ierr)
        super().__init__(message if message is not None else self.error_string)

    @property
    def error_code(self):
        return self.error_class

    @property
    def error_string(self):
        return _ERROR_STRINGS.get(self.error_class, f"MPI error class {self.error_class}")

    def Get_error_class(self):
        return self.error_class

    def Get_error_code(self):
        return self.error_class

    def Get_error_string(self):
        return self.error_string

    def __int__(self):
        return self.error_class

    def __bool__(self):
        return self.error_class != 0

    def __eq__(self, other):
        if isinstance(other, int):
            return self.error_class == other
        return self is other

    __hash__ = RuntimeError.__hash__


class CommError(MPIException):
    """Base of every commlib error."""

    def __init__(self, message, *, rank=None, op=None):
        RuntimeError.__init__(self, message)
        self.rank = rank  # the peer rank the error is about, when there is one
        self.op = op  # the operation name, when there is one


class CommTimeout(CommError, TimeoutError):
    """An operation waited longer than the group's timeout."""


class PeerLost(CommError, ConnectionError):
    """A peer closed its connection, died, or reported a failure."""


class MismatchError(CommError):
    """Ranks called different collectives, or with arguments that must agree."""


class AuthError(CommError, PermissionError):
    """A connection did not prove knowledge of the job's secret."""
