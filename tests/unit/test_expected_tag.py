"""An ANY_TAG one-call receive expects the tag its source sent last, a user's tag only.

The engine keeps, per (group, source), the tag of the last frame received (`Engine._last_tag`), and a
blocking ANY_TAG receive expects a frame of that tag (any other is handed to the engine, which matches
it). A layer's own receives (commlib.MPI's, on negative tags) record theirs there too; an ANY_TAG
receive must never expect one of those, or it would take a layer's frame. In-process.
"""
import types

import pytest

from commlib._engine.fastpath import FastPaths
from commlib._engine.matching import ANY_TAG

pytestmark = pytest.mark.timeout(30)


def _engine(last):
    e = FastPaths.__new__(FastPaths)
    e._last_tag = last
    return e


def test_the_hint_is_the_last_user_tag_and_never_a_layers_own():
    ctx = types.SimpleNamespace(gid=7)
    assert _engine({})._expected_tag(ctx, 1, ANY_TAG) == 0
    assert _engine({(7, 1): 42})._expected_tag(ctx, 1, ANY_TAG) == 42
    assert _engine({(7, 1): -5})._expected_tag(ctx, 1, ANY_TAG) == 0  # a layer's negative tag
    assert _engine({(7, 1): 42})._expected_tag(ctx, 1, 3) == 3  # a named tag is itself
    assert _engine({(8, 1): 42})._expected_tag(ctx, 1, ANY_TAG) == 0  # another group's
