"""commlib.MPI's process topologies as data (`_topology.py`), the partitioned overlap rule, and the
neighbourhood collectives and partitioned requests in-process on COMM_SELF."""
import itertools

import numpy as np
import pytest

from commlib import MPI
from commlib.MPI._partitioned import overlapping, wire_tag
from commlib.MPI._topology import (UNWEIGHTED, WEIGHTS_EMPTY, GraphTopo, adjacent_problem, cart_topology,
                                   dist_graph_edges, graph_args, graph_problem, weights_arg)

PROC_NULL = MPI.PROC_NULL


def pairing(neighbors):
    """{(sender, send slot): (receiver, receive slot)} as the tags pair messages; every message must
    find exactly one receive, and every receive one message."""
    pairs = {}
    for r, nb in neighbors.items():
        for k, (dst, tag) in enumerate(zip(nb.destinations, nb.stags)):
            if dst == PROC_NULL:
                continue
            slots = [i for i, (src, t) in enumerate(zip(neighbors[dst].sources, neighbors[dst].rtags))
                     if src == r and t == tag]
            assert len(slots) == 1, (r, k, slots)
            pairs[r, k] = (dst, slots[0])
    wanted = sum(1 for nb in neighbors.values() for s in nb.sources if s != PROC_NULL)
    assert len(set(pairs.values())) == len(pairs) == wanted
    return pairs


@pytest.mark.parametrize("dims", [[1], [2], [3], [1, 1], [2, 2], [2, 1], [1, 3], [3, 2], [2, 2, 2]])
@pytest.mark.parametrize("periodic", [True, False])
def test_cartesian_blocks_go_towards_the_facing_side(dims, periodic):
    topo = cart_topology(dims, periodic, int(np.prod(dims)))
    neighbors = {r: topo.neighbors(r) for r in range(int(np.prod(dims)))}
    for r, nb in neighbors.items():
        coords = topo.coords(r)
        for k, dst in enumerate(nb.destinations):  # per dimension -1 then +1, PROC_NULL past an edge
            d, step = divmod(k, 2)
            c = coords[d] + (1 if step else -1)
            if not periodic and not 0 <= c < dims[d]:
                assert dst == PROC_NULL
            else:
                assert topo.coords(dst)[d] == c % dims[d]
    for (r, k), (dst, slot) in pairing(neighbors).items():
        assert slot == k ^ 1, (dims, r, k)  # sent towards -1, received as from +1 (even at size 1 or 2)


def test_graph_duplicates_pair_in_order():
    # node 0 lists 1 twice and itself twice; node 1 lists 0 twice
    topo = GraphTopo((4, 6), (1, 1, 0, 0, 0, 0))
    neighbors = {0: topo.neighbors(0), 1: topo.neighbors(1)}
    assert neighbors[0].sources == [1, 1, 0, 0] and neighbors[1].sources == [0, 0]
    assert pairing(neighbors) == {(0, 0): (1, 0), (0, 1): (1, 1), (0, 2): (0, 2), (0, 3): (0, 3),
                                  (1, 0): (0, 0), (1, 1): (0, 1)}


def test_graph_arguments():
    assert graph_args([0, 2, 4], [1, 0, 0, 1]) == ([2, 4], [1, 0, 0, 1])  # mpi4py's standard index array
    assert graph_args(np.array([2, 4]), [1, 0, 0, 1]) == ([2, 4], [1, 0, 0, 1])
    assert graph_args([0], []) == ([0], [])
    assert graph_problem([2, 4], [1, 0, 0, 1], 2) is None
    assert "3 nodes" in graph_problem([1, 2, 3], [0, 0, 0], 2)
    assert "decrease" in graph_problem([2, 1], [0, 1], 2)
    assert "only 1 edges" in graph_problem([2, 2], [0], 2)
    assert "edge 5" in graph_problem([1, 2], [5, 0], 4)
    with pytest.raises(TypeError):
        graph_args([1.5], [0])


def test_weights():
    assert weights_arg(None, 3, "w", "weights") is None
    assert weights_arg(UNWEIGHTED, 3, "w", "weights") is None
    assert weights_arg(WEIGHTS_EMPTY, 0, "w", "weights") == []
    assert weights_arg((1, 2), 2, "w", "weights") == [1, 2]
    with pytest.raises(ValueError, match="WEIGHTS_EMPTY"):
        weights_arg(WEIGHTS_EMPTY, 1, "w", "weights")
    with pytest.raises(ValueError, match="2 weights for 3"):
        weights_arg([1, 2], 3, "w", "weights")


def test_adjacent_consistency():
    n = 4
    ring = [([(i - 1) % n, (i + 1) % n], [(i + 1) % n, (i - 1) % n]) for i in range(n)]
    assert adjacent_problem(ring, n) is None
    assert adjacent_problem([([0, 0], [0, 0])], 1) is None
    assert adjacent_problem([([PROC_NULL], [PROC_NULL, 1]), ([0], [])], 2) is None
    bad = [([], [1]), ([], [])]
    assert adjacent_problem(bad, 2) == ("rank 0 lists rank 1 as a destination 1 time(s) but rank 1 lists rank 0 "
                                        "as a source 0 time(s)")


def test_dist_graph_edges_from_any_rank():
    # rank 0 gives 0->1 (w 5) and 2->1 (w 6); rank 1 gives 1->0 twice (w 7, 8); rank 2 gives nothing
    specs = [([0, 2], [1, 1], [1, 1], [5, 6]), ([1], [2], [0, 0], [7, 8]), ([], [], [], None)]
    t1 = dist_graph_edges(specs, 1)
    assert (t1.sources, t1.destinations, t1.sourceweights, t1.destweights) == ([0, 2], [0, 0], [5, 6], [7, 8])
    t0 = dist_graph_edges(specs, 0)
    assert (t0.sources, t0.destinations) == ([1, 1], [1])
    t2 = dist_graph_edges(specs, 2)
    assert (t2.sources, t2.destinations, t2.sourceweights) == ([], [1], None)
    pairing({r: dist_graph_edges(specs, r).neighbors(r) for r in range(3)})


@pytest.mark.parametrize("nsend,nrecv", [(8, 4), (4, 8), (3, 2), (2, 3), (1, 5), (5, 5), (7, 3)])
def test_partition_overlap(nsend, nrecv):
    for j in range(nrecv):
        lo, hi = j / nrecv, (j + 1) / nrecv
        want = [i for i in range(nsend) if i / nsend < hi and (i + 1) / nsend > lo]
        assert list(overlapping(j, nrecv, nsend)) == want
    assert sorted(set(itertools.chain.from_iterable(overlapping(j, nrecv, nsend) for j in range(nrecv)))) == \
        list(range(nsend))


def test_wire_tags_count_requests_per_peer_and_tag():
    a, b = wire_tag(-5, "send", 1, 3), wire_tag(-5, "send", 1, 3)
    assert b == a + 1 and a >> 62 == 1
    assert wire_tag(-5, "send", 1, 4) != a and wire_tag(-5, "recv", 1, 3) == a  # each side counts its own
    assert wire_tag(-5, "send", 1, MPI.TAG_UB) < 1 << 63


def test_self_neighbourhood_collectives():
    cart = MPI.COMM_SELF.Create_cart([1], periods=[True])
    got = np.zeros(2)
    cart.Neighbor_alltoall(np.array([1.0, 2.0]), got)
    assert got.tolist() == [2.0, 1.0]  # towards -1 arrives as from +1
    assert cart.neighbor_alltoall(["down", "up"]) == ["up", "down"]
    line = MPI.COMM_SELF.Create_cart([1], periods=[False])
    assert line.inedges == [PROC_NULL, PROC_NULL] and line.neighbor_allgather(1) == [None, None]
    with pytest.raises(TypeError):
        MPI.Graphcomm(cart)
    with pytest.raises(TypeError):
        MPI.Topocomm(MPI.COMM_SELF)
    assert type(MPI.Comm.fromhandle(cart.handle)) is MPI.Cartcomm
    assert MPI.COMM_SELF.Create_dist_graph([], [], []).Get_dist_neighbors() == ([], [], None)


def test_self_partitioned_other_partition_counts():
    sbuf, rbuf = np.arange(12.0), np.zeros(12)
    sreq = MPI.COMM_SELF.Psend_init(sbuf, 3, 0, 1)
    rreq = MPI.COMM_SELF.Precv_init(rbuf, 4, 0, 1)
    rreq.Start()
    sreq.Start()
    sreq.Pready(1)  # elements 4..7: receive partition 1 (3..5) also needs part 0
    assert [rreq.Parrived(j) for j in range(4)] == [False, False, False, False]
    sreq.Pready_list([0])
    assert [rreq.Parrived(j) for j in range(4)] == [True, True, False, False]
    with pytest.raises(MPI.Exception, match=r"partitions \[0, 2\] marked ready twice"):
        sreq.Pready_list([2, 2, 0])  # a bad list marks none
    sreq.Pready_range(2, 2)
    MPI.Request.Waitall([sreq, rreq])
    assert rbuf.tolist() == sbuf.tolist()
    with pytest.raises(ValueError):  # 5 elements do not make 4 equal partitions
        MPI.COMM_SELF.Precv_init(np.zeros(5), 4, 0, 1)
    with pytest.raises(MPI.Exception, match="partitions must be a positive int"):
        MPI.COMM_SELF.Psend_init(sbuf, 0, 0, 1)


def test_topology_mixins_shadow_no_method_of_an_intracommunicator():
    """A topology communicator is an intracommunicator for every collective: the neighbourhood and
    topology methods mixed into Topocomm and its subclasses may not replace one of Intracomm's
    (its private helpers included: Neighborhood's argument parsers once took the place of
    Alltoall's and Allgather's, and those failed on every Cartesian communicator)."""
    from commlib.MPI._comm import Cartcomm, Distgraphcomm, Graphcomm, Intracomm, Topocomm
    from commlib.MPI._neighbor import Neighborhood
    from commlib.MPI._topology import Cartesian, DistGraph, Graph, Topology

    for mixin in (Neighborhood, Topology, Cartesian, Graph, DistGraph):
        clash = sorted(name for name in vars(mixin) if not name.startswith("__") and hasattr(Intracomm, name))
        assert not clash, f"{mixin.__name__} shadows Intracomm's {clash}"
    for cls in (Topocomm, Cartcomm, Graphcomm, Distgraphcomm):
        for name in ("_allgather_args", "_alltoall_args", "_alltoallw_args", "Alltoall", "Allgather", "Alltoallw"):
            assert getattr(cls, name) is getattr(Intracomm, name), (cls.__name__, name)
