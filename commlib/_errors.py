"""The exceptions of the public contract; this module imports nothing."""


class CommError(RuntimeError):
    """Base of every commlib error."""

    def __init__(self, message, *, rank=None, op=None):
        super().__init__(message)
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
