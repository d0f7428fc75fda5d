"""A wait on an irecv that another thread completes at the same moment.

`Progress.wait` sees the request's one-call slot (`Request._posted`) set and calls
`FastPaths._recv_posted`; meanwhile the engine's progress thread may match the frame and finish the
request, which clears the slot. The wait must then hand over to the engine's loop (which sees the
request done), not fail: reading the slot a second time found None and raised
"TypeError: cannot unpack non-iterable NoneType object" in a rank of an 8-rank job under load.
"""
import types

import pytest

from commlib._engine.fastpath import FastPaths
from commlib._engine.matching import Posted
from commlib._engine.requests import Request

pytestmark = pytest.mark.timeout(30)


class _Engine(FastPaths):
    """Just enough engine for `_recv_posted`'s first look: no failure, and a one-call path that must
    not be reached."""

    def __init__(self):
        self.transport = types.SimpleNamespace(ep=types.SimpleNamespace(failure=None))
        self.reached = False

    def one_call(self, ctx):
        self.reached = True
        raise AssertionError("the one-call path was tried for a request already complete")


def test_a_wait_on_a_request_completed_meanwhile_hands_over():
    engine = _Engine()
    req = Request("irecv(tag=3)")
    posted = Posted(1, 3, into=bytearray(8), req=req, extra=(lambda msg, payload: payload, (0, 8), False))
    req._posted = (types.SimpleNamespace(gid=0), posted)
    req._finish("done")  # the progress thread matched it first: the slot is cleared
    assert req._posted is None
    assert engine._recv_posted(req, None) is False  # the engine's wait takes it from here
    assert not engine.reached and req.test() and req.wait() == "done"


def test_a_failed_job_leaves_the_wait_to_the_engine():
    engine = _Engine()
    engine.transport.ep.failure = RuntimeError("a peer was lost")
    req = Request("irecv(tag=3)")
    req._posted = (types.SimpleNamespace(gid=0), Posted(1, 3, into=bytearray(8), req=req, extra=(None, (0, 8), False)))
    assert engine._recv_posted(req, None) is False and not engine.reached
