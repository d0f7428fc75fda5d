"""The collectives each ShardedArray move uses, planned in-process (no sockets): the fewest the pair of
layouts allows, by the rules of commlib/mesh/_sharded.py's docstring.

A wrong route (gather then slice where an all_to_all suffices, psum then slice
where a psum_scatter suffices, a collective for a local slice) gives the same
data, so the multi-rank tests cannot see it; these tests do.
"""
import pytest

from commlib.mesh import Mesh
from commlib.mesh._sharded import _layout, plan


class _World:
    """The little of a Group a Mesh reads to lay out ranks."""

    gid = 1

    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def check_rank(self, r, what):
        return r


class _PlanMesh(Mesh):
    def group(self, axes):  # sub-groups are not needed to plan
        return self.axes(axes)


def _steps(mesh, shape, src, target, partial=()):
    steps, index = plan(mesh, shape, _layout(mesh, src, len(shape)), frozenset(partial),
                        _layout(mesh, target, len(shape)))
    return [(s.kind, s.axes, s.dim, s.other, s.sizes) for s in steps], index


@pytest.fixture
def line():
    return _PlanMesh((4,), ("x",), group=_World(4, 1))


@pytest.fixture
def grid():
    return _PlanMesh((2, 3), ("dp", "tp"), group=_World(6, 4))  # rank 4: dp 1, tp 1


@pytest.mark.parametrize("src,target,partial,want", [
    (("x", None), (None, "x"), (), [("all_to_all", ("x",), 1, 0, ())]),
    (("x", None), (None, None), (), [("all_gather", ("x",), 0, 0, ())]),
    ((None, "x"), ("x", None), (), [("all_to_all", ("x",), 0, 1, ())]),
    (("x", None), ("x", None), (), []),
    ((None, None), ("x", None), (), []),
    ((None, None), (None, "x"), ("x",), [("psum_scatter", ("x",), 1, 0, ())]),
    ((None, None), (None, None), ("x",), [("psum", ("x",), 0, 0, ())]),
])
def test_line_moves(line, src, target, partial, want):
    assert _steps(line, (8, 12), src, target, partial)[0] == want


def test_replicated_to_sharded_is_a_local_slice(line):
    steps, index = _steps(line, (8, 12), (None, None), (None, "x"))
    assert steps == [] and index == (slice(None), slice(3, 6))  # rank 1 of 4: columns 3..5


def test_uneven_split_gathers_padded_blocks_then_slices(line):
    # 7 rows do not split evenly over 4: no all_to_all; the rows are gathered (blocks of np.array_split)
    steps, index = _steps(line, (7, 12), ("x", None), (None, "x"))
    assert steps == [("all_gather", ("x",), 0, 0, (2, 2, 2, 1))]
    assert index == (slice(None), slice(3, 6))


def test_partial_into_uneven_shard_sums_then_slices(line):
    steps, index = _steps(line, (7,), (None,), ("x",), ("x",))
    assert steps == [("psum", ("x",), 0, 0, ())] and index == (slice(2, 4),)


@pytest.mark.parametrize("src,target,partial,want", [
    ((("dp", "tp"), None), (None, ("dp", "tp")), (), [("all_to_all", ("dp", "tp"), 1, 0, ())]),
    (("dp", "tp"), ("dp", None), (), [("all_gather", ("tp",), 1, 0, ())]),
    (("dp", None), ("dp", "tp"), ("tp",), [("psum_scatter", ("tp",), 1, 0, ())]),
    ((None, None), (("dp", "tp"), None), ("dp", "tp"), [("psum_scatter", ("dp", "tp"), 0, 0, ())]),
    # reduce-scatter over tp, then the dp sum on a third of the data: fewer bytes than one 6-rank psum
    ((None, None), ("tp", None), ("dp", "tp"), [("psum_scatter", ("tp",), 0, 0, ()), ("psum", ("dp",), 0, 0, ())]),
    (("dp", None), (None, None), ("tp",), [("psum", ("tp",), 0, 0, ()), ("all_gather", ("dp",), 0, 0, ())]),
    (("dp", "tp"), ("tp", "dp"), (), [("all_gather", ("dp",), 0, 0, ()), ("all_gather", ("tp",), 1, 0, ())]),
    (("tp", None), (None, "tp"), (), [("all_to_all", ("tp",), 1, 0, ())]),
    (("dp", "tp"), (None, None), (), [("all_gather", ("dp",), 0, 0, ()), ("all_gather", ("tp",), 1, 0, ())]),
])
def test_grid_moves(grid, src, target, partial, want):
    assert _steps(grid, (6, 12), src, target, partial)[0] == want


def test_plans_are_cached_per_mesh(line):
    a = plan(line, (8, 12), (("x",), ()), frozenset(), ((), ("x",)))
    b = plan(line, (8, 12), (("x",), ()), frozenset(), ((), ("x",)))
    assert a is b and len(line._plans) == 1
