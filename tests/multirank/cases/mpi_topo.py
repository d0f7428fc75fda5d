"""Process topologies, neighbourhood collectives and partitioned point-to-point, checked on every rank.

usage: mpi_topo.py

Sections:
  halo         a 2-D periodic Cartesian grid (Compute_dims) exchanging the edges of each rank's
               block with Neighbor_alltoall: each halo holds the neighbour's facing edge, also where a
               dimension of size 1 or 2 makes both neighbours one process (MPI 4's direction rule);
               the Ineighbor and persistent forms; a non-periodic line leaves the halo at an edge untouched
  ring         a ring made with Create_dist_graph_adjacent (each rank both neighbours, duplicates at
               n <= 2): Neighbor_allgatherv with uneven counts and gaps between blocks, Neighbor_alltoallv
               pairing duplicate neighbours in order, weights and the topology queries
  graphs       Create_graph (the standard index array) with neighbor_allgather of objects;
               Create_dist_graph from edges given by other ranks, its weights, Neighbor_alltoallw;
               Create_dist_graph_adjacent with PROC_NULL neighbours
  partitioned  a partitioned send of 8 parts filled by 4 threads, each marking its parts ready
               (Pready, Pready_range, Pready_list), received as 4 partitions polled with Parrived, 3 rounds
  polled       (commlib only) Parrived polled with the progress thread kept idle still sees every part
  large        blocks and partitions of 800 KB, past the engine's eager size
  collectives  every collective of Comm (buffers, vectors, objects, blocking, non-blocking and persistent)
               on a Cartesian, a graph and a distributed-graph communicator: the same results as on
               the world (a topology communicator is an intracommunicator for every collective)
  errors       bad graph arguments: a clear MPI.Exception naming the rank, on every rank, and the job
               goes on; (commlib only: MPICH checks none of them, then aborts or hangs) an edge or a
               neighbour that is no rank, ranks disagreeing on a graph, a neighbourhood collective on an
               inconsistent distributed graph, Pready misuse, a partitioned receive from ANY_SOURCE

Run against the real mpi4py with COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py 4.1.2 +
MPICH; the parts marked commlib-only would hang or abort there).
"""
import threading
import time

import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()
L = 4  # a rank's block is L x L


def block_of(rank):
    return rank * 1000 + np.arange(L)[:, None] * 10 + np.arange(L)[None, :]


def halo():
    dims = MPI.Compute_dims(n, 2)
    cart = comm.Create_cart(dims, periods=[True, True])
    want_edges = [r for d in range(2) for r in cart.Shift(d, 1)]
    c.equal(cart.inedges, want_edges, "halo: inedges in MPI's order")
    c.equal(cart.outedges, want_edges, "halo: outedges")
    c.equal(cart.degrees, (4, 4), "halo: degrees")
    c.equal(cart.topology, MPI.CART, "halo: topology")
    mine = block_of(me).astype(np.float64)
    # towards -x my first row, towards +x my last row, towards -y my first column, towards +y my last
    send = np.stack([mine[0], mine[-1], mine[:, 0], mine[:, -1]])
    (xm, xp), (ym, yp) = cart.Shift(0, 1), cart.Shift(1, 1)
    # from -x its last row, from +x its first row, from -y its last column, from +y its first column
    want = np.stack([block_of(xm)[-1], block_of(xp)[0], block_of(ym)[:, -1], block_of(yp)[:, 0]]).astype(np.float64)
    got = np.full((4, L), -1.0)
    cart.Neighbor_alltoall(send, got)
    c.equal(got, want, f"halo: Neighbor_alltoall on dims {dims}")
    got[...] = -1
    cart.Ineighbor_alltoall(send, got).Wait()
    c.equal(got, want, "halo: Ineighbor_alltoall")
    req = cart.Neighbor_alltoall_init(send, got)
    for k in range(3):
        got[...] = -1
        send += 0.5  # a persistent collective reads its buffers at each Start
        req.Start()
        req.Wait()
        c.equal(got, want + 0.5 * (k + 1), f"halo: persistent Neighbor_alltoall, round {k}")
    req.Free()
    if not USING_MPI4PY and 2 in dims:  # (commlib) one rank both neighbours: each block's frame comes as
        # its receive expects it (both sides in tag order), so none takes the engine's matching path
        import commlib
        engine = commlib.init().engine
        handed = []
        engine._hand_over = lambda conn, header: handed.append(header) or type(engine)._hand_over(engine, conn,
                                                                                                   header)
        try:
            for _ in range(10):
                cart.Neighbor_alltoall(send, got)
        finally:
            del engine._hand_over
        c.equal(got, want + 1.5, "halo: Neighbor_alltoall, repeated")
        c.equal(len(handed), 0, f"halo: on dims {dims}, no frame came before another of the same neighbour")
    cart.Free()
    line = comm.Create_cart([n], periods=[False])
    got = np.full(2, -1, dtype=np.int32)
    line.Neighbor_allgather(np.array([me], dtype=np.int32), got)
    c.equal(got.tolist(), [me - 1 if me > 0 else -1, me + 1 if me < n - 1 else -1],
            "halo: a non-periodic edge leaves its block untouched")
    c.equal(line.neighbor_allgather(me), [me - 1 if me > 0 else None, me + 1 if me < n - 1 else None],
            "halo: neighbor_allgather on a line (None past an edge)")
    line.Free()


def sized(rank, k):
    """Rank `rank`'s block k of Neighbor_alltoallv: rank + k + 1 values."""
    return rank * 100 + k * 10 + np.arange(rank + k + 1, dtype=np.int64)


def ring():
    topo = comm.Create_dist_graph_adjacent([left, right], [right, left], sourceweights=[1, 2], destweights=[3, 4])
    c.equal(topo.topology, MPI.DIST_GRAPH, "ring: topology")
    c.equal(topo.Get_dist_neighbors_count(), (2, 2, True), "ring: neighbour counts")
    c.equal(topo.Get_dist_neighbors(), ([left, right], [right, left], ([1, 2], [3, 4])), "ring: neighbours")
    c.equal(topo.inoutedges, ([left, right], [right, left]), "ring: inoutedges")
    # uneven counts: rank r sends r + 1 values; the receive leaves a gap of 2 after each block
    counts = [left + 1, right + 1]
    displs = [0, left + 3]
    recv = np.full(sum(counts) + 4, -7, dtype=np.int32)
    topo.Neighbor_allgatherv(np.arange(me + 1, dtype=np.int32) + 10 * me, [recv, (counts, displs), MPI.INT])
    want = np.full_like(recv, -7)
    want[:counts[0]] = np.arange(left + 1) + 10 * left
    want[displs[1]:displs[1] + counts[1]] = np.arange(right + 1) + 10 * right
    c.equal(recv, want, "ring: Neighbor_allgatherv with uneven counts and gaps")
    recv[...] = -7
    topo.Ineighbor_allgatherv(np.arange(me + 1, dtype=np.int32) + 10 * me, [recv, (counts, displs), MPI.INT]).Wait()
    c.equal(recv, want, "ring: Ineighbor_allgatherv")
    # alltoallv: block k goes to destination k; from source i comes that rank's block for me
    sblocks = [sized(me, 0), sized(me, 1)]
    scounts = [b.size for b in sblocks]
    rblocks = [sized(left, 0), sized(right, 1)]  # left sends me its block 0, right its block 1
    rcounts = [b.size for b in rblocks]
    recv = np.full(sum(rcounts), -1, dtype=np.int64)
    topo.Neighbor_alltoallv([np.concatenate(sblocks), scounts], [recv, rcounts])
    c.equal(recv, np.concatenate(rblocks), "ring: Neighbor_alltoallv pairs (duplicate) neighbours in order")
    c.equal(topo.neighbor_alltoall([("to", right, me), ("to", left, me)]), [("to", me, left), ("to", me, right)],
            "ring: neighbor_alltoall")
    topo.Free()


def graphs():
    index, edges = [0], []
    for i in range(n):  # node i: i - 1, i + 1 (a ring as a general graph)
        edges += [(i - 1) % n, (i + 1) % n]
        index.append(len(edges))
    g = comm.Create_graph(index, edges)
    c.equal(g.topology, MPI.GRAPH, "graphs: topology")
    c.equal(g.Get_dims(), (n, 2 * n), "graphs: dims")
    c.equal(g.Get_topo(), (index[1:], edges), "graphs: Get_topo")
    c.equal(g.neighbors, [left, right], "graphs: neighbors")
    c.equal(g.Get_neighbors_count(right), 2, "graphs: Get_neighbors_count")
    c.equal(g.neighbor_allgather({"rank": me}), [{"rank": left}, {"rank": right}], "graphs: neighbor_allgather")
    c.equal(type(MPI.Comm.fromhandle(g.handle)), MPI.Graphcomm, "graphs: fromhandle gives a Graphcomm")
    g.Free()
    # every edge i -> i + 1 is given by rank i + 1 (not by either end's own lists), weighted 10 * i
    src = [left]
    dg = comm.Create_dist_graph(src, [1], [me], [10 * left])
    c.equal(dg.Get_dist_neighbors(), ([left], [right], ([10 * left], [10 * me])), "graphs: Create_dist_graph edges")
    sbuf = np.array([me, me + 0.5])
    rbuf = np.full(2, -1.0)
    dg.Neighbor_alltoallw([sbuf, ([2], [0]), [MPI.DOUBLE]], [rbuf, ([2], [0]), [MPI.DOUBLE]])
    c.equal(rbuf.tolist(), [left, left + 0.5], "graphs: Neighbor_alltoallw")
    dg.Free()
    pn = comm.Create_dist_graph_adjacent([MPI.PROC_NULL, me], [me, MPI.PROC_NULL])
    got = np.full(2, -1, dtype=np.int32)
    pn.Neighbor_alltoall(np.array([me, -5], dtype=np.int32), got)
    c.equal(got.tolist(), [-1, me], "graphs: PROC_NULL neighbours send nothing and leave their block")
    c.equal(pn.neighbor_alltoall(["a", "b"]), [None, "a"], "graphs: neighbor_alltoall with PROC_NULL")
    pn.Free()


PARTS, RECV_PARTS, THREADS = 8, 4, 4


def partitioned():
    per = 3
    sbuf = np.zeros(PARTS * per, dtype=np.float64)
    rbuf = np.full(PARTS * per, -1.0)
    sreq = comm.Psend_init(sbuf, PARTS, right, 7)
    rreq = comm.Precv_init(rbuf, RECV_PARTS, left, 7)
    for rnd in range(3):
        rbuf[...] = -1
        rreq.Start()
        comm.Barrier()
        c.ok(not any(rreq.Parrived(j) for j in range(RECV_PARTS)), f"partitioned: nothing arrived before any Pready "
                                                                    f"(round {rnd})")
        comm.Barrier()
        sreq.Start()

        def fill(t):
            mine = list(range(t, PARTS, THREADS))  # thread t's parts
            for p in mine:
                sbuf[p * per:(p + 1) * per] = me * 100 + rnd * 10 + p
            if t % 3 == 0:
                for p in mine:
                    sreq.Pready(p)
            elif t % 3 == 1:
                sreq.Pready_list(mine)
            else:
                for p in mine:
                    sreq.Pready_range(p, p)
        threads = [threading.Thread(target=fill, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        seen = set()
        while len(seen) < RECV_PARTS:
            seen.update(j for j in range(RECV_PARTS) if rreq.Parrived(j))
        for t in threads:
            t.join()
        status = MPI.Status()
        rreq.Wait(status)
        sreq.Wait()
        want = np.repeat(left * 100 + rnd * 10 + np.arange(PARTS, dtype=np.float64), per)
        c.equal(rbuf, want, f"partitioned: 8 parts from 4 threads into 4 partitions, round {rnd}")
        c.equal((status.Get_source(), status.Get_tag()), (left, 7), f"partitioned: status, round {rnd}")
        c.ok(sreq != MPI.REQUEST_NULL and rreq != MPI.REQUEST_NULL, "partitioned: persistent requests stay")
    sreq.Free()
    rreq.Free()
    c.ok(sreq == MPI.REQUEST_NULL and rreq == MPI.REQUEST_NULL, "partitioned: freed")


def polled_alone():
    """(commlib) With the progress thread kept from servicing anything, a rank that polls Parrived
    still gets every partition: the poll itself makes progress, as MPI_Parrived does."""
    if USING_MPI4PY or n == 1:
        return
    import commlib
    engine = commlib.init().engine
    poll_once = engine._poll_once

    def idle_thread(timeout_ms):  # the progress thread looks, finds nothing (a thread kept busy elsewhere)
        if threading.current_thread() is engine._thread:
            time.sleep(0.001)
            return False
        return poll_once(timeout_ms)
    buf = np.full(4 * 5, -1.0)
    sreq, rreq = comm.Psend_init(np.arange(20.0) + me, 4, right, 8), comm.Precv_init(buf, 4, left, 8)
    engine._poll_once = idle_thread
    try:
        rreq.Start()
        sreq.Start()
        comm.Barrier()
        sreq.Pready_range(0, 3)
        deadline = time.monotonic() + 20
        while not all(rreq.Parrived(j) for j in range(4)) and time.monotonic() < deadline:
            pass
        c.ok(all(rreq.Parrived(j) for j in range(4)), "partitioned: a rank that polls Parrived gets every part "
                                                     "with its progress thread idle")
    finally:
        engine._poll_once = poll_once
    rreq.Wait()
    sreq.Wait()
    c.equal(buf, np.arange(20.0) + left, "partitioned: polled alone, the data")
    sreq.Free()
    rreq.Free()


def large():
    ring = comm.Create_dist_graph_adjacent([left, right], [right, left])
    big = 100_000  # 800 KB blocks: past the engine's eager size, so sends wait for their receives
    send = np.stack([np.full(big, me * 10 + 1.0), np.full(big, me * 10 + 2.0)])
    got = np.zeros((2, big))
    ring.Neighbor_alltoall(send, got)
    c.equal((got[0].min(), got[0].max(), got[1].min(), got[1].max()),
            (left * 10 + 1.0, left * 10 + 1.0, right * 10 + 2.0, right * 10 + 2.0), "large: Neighbor_alltoall")
    ring.Free()
    sbuf = np.repeat(np.arange(4.0) + 10 * me, big)
    rbuf = np.zeros(4 * big)
    sreq, rreq = comm.Psend_init(sbuf, 4, right, 9), comm.Precv_init(rbuf, 2, left, 9)
    MPI.Prequest.Startall([rreq, sreq])
    sreq.Pready_range(2, 3)
    sreq.Pready_list([1, 0])
    MPI.Request.Waitall([sreq, rreq])
    c.equal(rbuf.reshape(4, big)[:, ::997], np.repeat(np.arange(4.0) + 10 * left, big).reshape(4, big)[:, ::997],
            "large: partitioned parts of 800 KB")
    sreq.Free()
    rreq.Free()


def errors():
    def named(e):
        if not USING_MPI4PY:
            c.ok(f"rank {me}" in str(e), "errors: the message names the rank", str(e))
    c.raises(MPI.Exception, lambda: comm.Create_graph([1] * (n + 1), [0]), "errors: more nodes than ranks", named)
    c.raises(ValueError, lambda: comm.Create_dist_graph([me], [1, 2], [right]), "errors: degrees for no sources")
    c.raises(ValueError, lambda: comm.Create_dist_graph_adjacent([left], [right], MPI.WEIGHTS_EMPTY,
                                                                 MPI.WEIGHTS_EMPTY), "errors: empty weights, degree 1")
    x = np.array([float(me)])
    comm.Allreduce(MPI.IN_PLACE, x)
    c.equal(x.tolist(), [n * (n - 1) / 2], "errors: the job goes on")
    if USING_MPI4PY:
        return  # below: what MPICH does not check (and then hangs or aborts on)
    c.raises(MPI.Exception, lambda: comm.Create_graph([2] * n, [n] * (2 * n)), "errors: an edge to no node",
             named)
    c.raises(MPI.Exception, lambda: comm.Create_dist_graph_adjacent([n + 5], [right]), "errors: a source that "
             "is no rank", named)
    c.raises(MPI.Exception, lambda: comm.Create_dist_graph([me], [1], [n]), "errors: a destination that is no rank",
             named)
    if n > 1:
        e = c.raises(MPI.Exception, lambda: comm.Create_graph([1, 2][:n] + [2] * max(0, n - 2),
                                                               [0, 0] if me else [0, 1]),
                     "errors: ranks passing different graphs")
        c.ok(e is None or "different graphs" in str(e), "errors: ... says so", str(e))
        bad = comm.Create_dist_graph_adjacent([left] if me else [], [right])  # rank 0 leaves out its source
        e = c.raises(MPI.Exception, lambda: bad.Neighbor_allgather(np.zeros(1), np.zeros(len(bad.inedges))),
                     "errors: a collective on an inconsistent graph, on every rank")
        c.ok(e is None or "lists rank 0 as a destination" in str(e), "errors: ... names the edge", str(e))
        bad.Free()
    req = comm.Psend_init(np.zeros(4), 2, right, 3)
    c.raises(MPI.Exception, lambda: req.Pready(0), "errors: Pready before Start")
    rreq = comm.Precv_init(np.zeros(4), 2, left, 3)
    rreq.Start()
    req.Start()
    req.Pready(1)
    c.raises(MPI.Exception, lambda: req.Pready(1), "errors: Pready twice")
    c.raises(MPI.Exception, lambda: req.Pready(2), "errors: Pready of no partition")
    req.Pready(0)
    MPI.Request.Waitall([req, rreq])
    c.raises(MPI.Exception, lambda: comm.Precv_init(np.zeros(4), 2), "errors: a partitioned receive from ANY_SOURCE")
    comm.Barrier()


def topologies():
    """A Cartesian, a graph and a distributed-graph communicator over every rank of the world."""
    cart = comm.Create_cart([n], periods=[True])
    index = list(np.cumsum([1] * n))
    graph = comm.Create_graph(index, [(r + 1) % n for r in range(n)])
    dist = comm.Create_dist_graph_adjacent([left], [right])
    return [("Cartesian", cart), ("graph", graph), ("distributed graph", dist)]


def collectives():
    k = 3
    counts = [r + 1 for r in range(n)]
    displs = list(np.cumsum([0] + counts[:-1]))
    for name, t in topologies():
        tag = f"collectives on a {name} communicator"
        c.equal((t.Get_rank(), t.Get_size()), (me, n), f"{tag}: rank and size")
        t.Barrier()
        mine = np.arange(k, dtype=np.float64) + 10 * me
        b = mine.copy() if me == 0 else np.zeros(k)
        t.Bcast(b, root=0)
        c.equal(b, np.arange(k, dtype=np.float64), f"{tag}: Bcast")
        everyone = np.stack([np.arange(k, dtype=np.float64) + 10 * r for r in range(n)])
        got = np.zeros((n, k)) if me == n - 1 else None
        t.Gather(mine, got, root=n - 1)
        if me == n - 1:
            c.equal(got, everyone, f"{tag}: Gather")
        part = np.zeros(k)
        t.Scatter(everyone if me == 0 else None, part, root=0)
        c.equal(part, everyone[me], f"{tag}: Scatter")
        got = np.zeros((n, k))
        t.Allgather(mine, got)
        c.equal(got, everyone, f"{tag}: Allgather")
        flat = np.zeros(sum(counts))
        t.Allgatherv(np.full(counts[me], float(me)), [flat, counts, displs, MPI.DOUBLE])
        c.equal(flat, np.repeat(np.arange(n, dtype=np.float64), counts), f"{tag}: Allgatherv")
        if me == 0:
            vgot = np.zeros(sum(counts))
            t.Gatherv(np.full(counts[me], float(me)), [vgot, counts, displs, MPI.DOUBLE], root=0)
            c.equal(vgot, np.repeat(np.arange(n, dtype=np.float64), counts), f"{tag}: Gatherv")
        else:
            t.Gatherv(np.full(counts[me], float(me)), None, root=0)
        vpart = np.zeros(counts[me])
        t.Scatterv([np.repeat(np.arange(n, dtype=np.float64), counts), counts, displs, MPI.DOUBLE] if me == 0
                   else None, vpart, root=0)
        c.equal(vpart, np.full(counts[me], float(me)), f"{tag}: Scatterv")
        send = np.array([100 * me + r for r in range(n)], dtype=np.float64)
        got = np.zeros(n)
        t.Alltoall(send, got)
        c.equal(got, np.array([100 * r + me for r in range(n)], dtype=np.float64), f"{tag}: Alltoall")
        got = np.zeros(n)
        t.Alltoallv([send, [1] * n, list(range(n)), MPI.DOUBLE], [got, [1] * n, list(range(n)), MPI.DOUBLE])
        c.equal(got, np.array([100 * r + me for r in range(n)], dtype=np.float64), f"{tag}: Alltoallv")
        got = np.zeros(n)
        t.Alltoallw([send, [1] * n, [8 * i for i in range(n)], [MPI.DOUBLE] * n],
                    [got, [1] * n, [8 * i for i in range(n)], [MPI.DOUBLE] * n])
        c.equal(got, np.array([100 * r + me for r in range(n)], dtype=np.float64), f"{tag}: Alltoallw")
        total = np.zeros(k)
        t.Allreduce(mine, total, op=MPI.SUM)
        c.equal(total, everyone.sum(axis=0), f"{tag}: Allreduce")
        red = np.zeros(k)
        t.Reduce(mine, red if me == 0 else None, op=MPI.MAX, root=0)
        if me == 0:
            c.equal(red, everyone.max(axis=0), f"{tag}: Reduce")
        blk = np.zeros(1)
        t.Reduce_scatter_block(np.arange(n, dtype=np.float64) + me, blk, op=MPI.SUM)
        c.equal(blk[0], float(n * me + sum(range(n))), f"{tag}: Reduce_scatter_block")
        rs = np.zeros(counts[me])
        t.Reduce_scatter(np.ones(sum(counts)), rs, recvcounts=counts, op=MPI.SUM)
        c.equal(rs, np.full(counts[me], float(n)), f"{tag}: Reduce_scatter")
        sc = np.zeros(k)
        t.Scan(mine, sc, op=MPI.SUM)
        c.equal(sc, everyone[:me + 1].sum(axis=0), f"{tag}: Scan")
        ex = np.full(k, -1.0)
        t.Exscan(mine, ex, op=MPI.SUM)
        if me > 0:
            c.equal(ex, everyone[:me].sum(axis=0), f"{tag}: Exscan")
        # objects
        c.equal(t.bcast({"from": me}, root=0), {"from": 0}, f"{tag}: bcast")
        c.equal(t.allgather(me), list(range(n)), f"{tag}: allgather")
        c.equal(t.gather(me, root=0), list(range(n)) if me == 0 else None, f"{tag}: gather")
        c.equal(t.scatter([r * 2 for r in range(n)] if me == 0 else None, root=0), me * 2, f"{tag}: scatter")
        c.equal(t.alltoall([(me, r) for r in range(n)]), [(r, me) for r in range(n)], f"{tag}: alltoall")
        c.equal(t.allreduce(me, op=MPI.SUM), sum(range(n)), f"{tag}: allreduce")
        c.equal(t.reduce(me, op=MPI.MAX, root=0), n - 1 if me == 0 else None, f"{tag}: reduce")
        c.equal(t.scan(1), me + 1, f"{tag}: scan")
        got = t.exscan(1)
        if me > 0:
            c.equal(got, me, f"{tag}: exscan")
        # non-blocking and persistent
        reqs, outs = [], {}
        outs["Iallreduce"] = np.zeros(k)
        reqs.append(t.Iallreduce(mine, outs["Iallreduce"], op=MPI.SUM))
        outs["Iallgather"] = np.zeros((n, k))
        reqs.append(t.Iallgather(mine, outs["Iallgather"]))
        outs["Ialltoall"] = np.zeros(n)
        reqs.append(t.Ialltoall(send, outs["Ialltoall"]))
        outs["Ibcast"] = mine.copy() if me == 0 else np.zeros(k)
        reqs.append(t.Ibcast(outs["Ibcast"], root=0))
        reqs.append(t.Ibarrier())
        MPI.Request.Waitall(reqs)
        c.equal(outs["Iallreduce"], everyone.sum(axis=0), f"{tag}: Iallreduce")
        c.equal(outs["Iallgather"], everyone, f"{tag}: Iallgather")
        c.equal(outs["Ialltoall"], np.array([100 * r + me for r in range(n)], dtype=np.float64), f"{tag}: Ialltoall")
        c.equal(outs["Ibcast"], np.arange(k, dtype=np.float64), f"{tag}: Ibcast")
        if not USING_MPI4PY or hasattr(t, "Allreduce_init"):
            out = np.zeros(k)
            p = t.Allreduce_init(mine, out, op=MPI.SUM)
            for _ in range(2):
                out[:] = 0
                p.Start()
                p.Wait()
                c.equal(out, everyone.sum(axis=0), f"{tag}: Allreduce_init")
            p.Free()
        t.Free()


for fn in (halo, ring, graphs, collectives, partitioned, polled_alone, large, errors):
    c.run([fn])
    comm.Barrier()
c.finish()
