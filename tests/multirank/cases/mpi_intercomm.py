"""Intercommunicators as programs use them, checked on every rank.

usage: mpi_intercomm.py

Sections (at n = 1 only `single`: no two disjoint groups exist):
  manager   a manager/worker job: world rank 0 is the manager group, the rest the workers, joined by
            Create_intercomm; the manager Bcasts parameters with MPI.ROOT, Scatters work, Gathers
            and Reduces the results (buffers and objects, Scatterv/Igatherv of uneven parts, Ibcast
            and a persistent Bcast), the workers name root 0
  pingpong  the two halves (ranks below n // 2 and the rest: unequal at odd n): ping-pong between
            local rank i and remote rank i (Send/Recv, Isend/Irecv, send/recv, Ssend, Sendrecv,
            persistent Send_init/Recv_init, Probe + Mprobe), and every rank sends to every remote
            rank: statuses of ANY_SOURCE receives give remote ranks
  merge     Merge back to an intracommunicator (low half first, then with the high flags swapped),
            its ranks, and an Allreduce of it checked against NumPy
  collect   the `all` collectives and reductions each way (Allgather(v), Alltoall(v/w), Allreduce,
            Reduce_scatter(_block), Barrier), their I forms and a persistent Allreduce, and the object
            forms (allgather, alltoall, allreduce)
  derive    Dup, Split, Create, Compare, Free, Comm.fromhandle; Split where one side has no rank of a
            color gives COMM_NULL
  errors    a remote rank that does not exist (MPI.Exception of class ERR_RANK naming it), a bad root
            (ERR_ROOT), MPI.IN_PLACE (ERR_BUFFER), Scan (no such attribute, as mpi4py), Intracomm(ic)
            and Intercomm(intracomm) (TypeError); commlib only: a remote_leader that is not there,
            raised on every rank of both groups

Inputs are functions of (world rank, size), so each rank checks its own results. Run against the
real mpi4py with COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py 4.1.2 + MPICH).
"""
import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

world = MPI.COMM_WORLD
me, n = world.Get_rank(), world.Get_size()
c = Checker()


def halves():
    """(intercomm of the low and high halves, True on the high half, the local intracomm)."""
    high = me >= n // 2
    local = world.Split(int(high), me)
    return local.Create_intercomm(0, world, 0 if high else n // 2, tag=11), high, local


def single():
    c.equal(world.Is_inter(), False, "world is not inter")
    c.raises(TypeError, lambda: MPI.Intercomm(world), "Intercomm(intracomm)")


def manager():
    manager_side = me == 0
    local = world.Split(0 if manager_side else 1, me)
    ic = local.Create_intercomm(0, world, 1 if manager_side else 0, tag=7)
    workers = n - 1
    c.equal((ic.Is_inter(), ic.Get_size(), ic.Get_remote_size()),
            (True, 1 if manager_side else workers, workers if manager_side else 1), "sizes")
    c.equal(ic.Get_rank(), 0 if manager_side else me - 1, "local rank")
    c.equal(ic.Get_remote_group().Get_size(), ic.Get_remote_size(), "remote group")
    params = np.arange(4, dtype=np.float64) + 0.5
    if manager_side:
        ic.Bcast(params, root=MPI.ROOT)
        work = np.arange(workers * 3, dtype=np.int32).reshape(workers, 3)
        ic.Scatter(work, None, root=MPI.ROOT)
        results = np.full((workers, 4), -1.0)
        ic.Gather(None, results, root=MPI.ROOT)
        c.close(results, np.outer(np.arange(1, workers + 1), params), "Gather of results")
        total = np.zeros(4)
        ic.Reduce(None, total, op=MPI.SUM, root=MPI.ROOT)
        c.close(total, params * workers * (workers + 1) / 2, "Reduce of results")
        c.equal(ic.bcast({"job": "go"}, root=MPI.ROOT), None, "bcast object at the root")
        c.equal(ic.scatter([f"task {i}" for i in range(workers)], root=MPI.ROOT), None, "scatter objects")
        c.equal(ic.gather(None, root=MPI.ROOT), [f"done {i}" for i in range(workers)], "gather objects")
        c.equal(ic.reduce(None, op=MPI.SUM, root=MPI.ROOT), sum(range(workers)), "reduce objects")
        counts = [k + 1 for k in range(workers)]  # worker k sends and gets k + 1 elements
        ic.Scatterv([np.arange(sum(counts), dtype=np.float32), counts], None, root=MPI.ROOT)
        vres = np.full(sum(counts), -1, np.int16)
        ic.Igatherv(None, [vres, counts], root=MPI.ROOT).Wait()
        c.equal(vres, np.repeat(np.arange(workers), counts).astype(np.int16), "Igatherv of results")
        pb = ic.Bcast_init(params, root=MPI.ROOT)
        for k in range(2):
            params += 1
            pb.Start()
            pb.Wait()
        pb.Free()
        ic.Ibcast(params, root=MPI.ROOT).Wait()
    else:
        got = np.zeros(4)
        ic.Bcast(got, root=0)
        c.close(got, params, "Bcast from the manager")
        mine = np.zeros(3, dtype=np.int32)
        ic.Scatter(None, mine, root=0)
        c.equal(mine, np.arange(3, dtype=np.int32) + 3 * ic.rank, "Scatter to a worker")
        ic.Gather(got * (ic.rank + 1), None, root=0)
        ic.Reduce(got * (ic.rank + 1), None, op=MPI.SUM, root=0)
        c.equal(ic.bcast(None, root=0), {"job": "go"}, "bcast object")
        c.equal(ic.scatter(None, root=0), f"task {ic.rank}", "scatter object")
        c.equal(ic.gather(f"done {ic.rank}", root=0), None, "gather object")
        c.equal(ic.reduce(ic.rank, op=MPI.SUM, root=0), None, "reduce object")
        k = ic.rank
        part = np.empty(k + 1, np.float32)
        ic.Scatterv(None, part, root=0)
        c.equal(part, np.arange(k * (k + 1) // 2, (k + 1) * (k + 2) // 2, dtype=np.float32), "Scatterv")
        ic.Igatherv(np.full(k + 1, k, np.int16), None, root=0).Wait()
        pb = ic.Bcast_init(got, root=0)
        for step in range(2):
            pb.Start()
            pb.Wait()
            c.close(got, params + step + 1, f"persistent Bcast round {step}")
        pb.Free()
        ic.Ibcast(got, root=0).Wait()
        c.close(got, params + 2, "Ibcast")
    ic.Free()
    local.Free()


def pingpong():
    ic, high, local = halves()
    r, rsize = ic.Get_rank(), ic.Get_remote_size()
    st = MPI.Status()
    if r < rsize:  # local rank r plays with remote rank r
        a = np.arange(6, dtype=np.int64) + 100 * me
        b = np.empty_like(a)
        if not high:
            ic.Send(a, r, tag=1)
            ic.Recv(b, r, tag=2, status=st)
            c.equal((st.Get_source(), st.Get_tag()), (r, 2), "Recv status")
            c.equal(b, a + 1, "ping-pong Send/Recv")
            ic.send(("ping", me), r, tag=3)
            c.equal(ic.recv(source=r, tag=4), ("pong", me), "ping-pong send/recv")
            ic.Ssend(a, r, tag=5)
        else:
            ic.Recv(b, MPI.ANY_SOURCE, tag=1, status=st)
            c.equal(st.Get_source(), r, "ANY_SOURCE status is a remote rank")
            ic.Send(b + 1, r, tag=2)
            msg = ic.recv(source=MPI.ANY_SOURCE, tag=3, status=st)
            c.equal(st.Get_source(), r, "object status source")
            ic.send(("pong", msg[1]), r, tag=4)
            ic.Probe(MPI.ANY_SOURCE, 5, st)
            c.equal((st.Get_source(), st.Get_count(MPI.INT64_T)), (r, 6), "Probe")
            m = ic.Mprobe(r, 5)
            ic_b = np.empty(6, np.int64)
            m.Recv(ic_b, st)
            c.equal((st.Get_source(), ic_b[0]), (r, 100 * (me - n // 2)), "Mprobe + Message.Recv")
        out = np.empty(4)
        rq = ic.Irecv(out, r, tag=6)
        sq = ic.Isend(np.full(4, float(me)), r, tag=6)
        MPI.Request.Waitall([rq, sq], [st, MPI.Status()])
        other = r + n // 2 if not high else r
        c.equal((out[0], st.Get_source()), (float(other), r), "Isend/Irecv")
        got = np.empty(2)
        ic.Sendrecv(np.full(2, float(me)), r, 7, got, r, 7, st)
        c.equal((got[0], st.Get_source()), (float(other), r), "Sendrecv")
        sbuf, rbuf = np.zeros(3), np.zeros(3)
        ps, pr = ic.Send_init(sbuf, r, 8), ic.Recv_init(rbuf, r, 8)
        for k in range(2):
            sbuf[:] = k + me
            MPI.Prequest.Startall([ps, pr])
            MPI.Request.Waitall([ps, pr])
            c.equal(rbuf[0], float(k + other), f"persistent round {k}")
        ps.Free()
        pr.Free()
    # every rank to every remote rank: ANY_SOURCE receives report each remote rank once
    reqs = [ic.isend(r * 1000 + j, j, tag=9) for j in range(rsize)]
    seen = {}
    for _ in range(rsize):
        v = ic.recv(source=MPI.ANY_SOURCE, tag=9, status=st)
        seen[st.Get_source()] = v
    MPI.Request.Waitall(reqs)
    c.equal(seen, {j: j * 1000 + r for j in range(rsize)}, "sources of all-to-all messages")
    ic.Free()
    local.Free()


def merge():
    ic, high, local = halves()
    x = np.arange(10, dtype=np.float64) * (me + 1)
    for flag, first_low in ((high, True), (not high, False)):
        m = ic.Merge(high=flag)
        want = me if first_low else (me - n // 2 if high else me + (n - n // 2))
        c.equal((m.Get_size(), m.Get_rank(), m.Is_inter()), (n, want, False), f"Merge(high={flag}) ranks")
        out = np.empty_like(x)
        m.Allreduce(x, out, op=MPI.SUM)
        c.close(out, np.arange(10) * sum(range(1, n + 1)), "Allreduce over the merged intracomm")
        m.Free()
    ic.Free()
    local.Free()


def collect():
    ic, high, local = halves()
    r, size, rsize = ic.Get_rank(), ic.Get_size(), ic.Get_remote_size()
    base = n // 2 if not high else 0  # world rank of remote rank 0
    remote = np.arange(rsize) + base  # world ranks of the remote group
    width = 2 if high else 3  # elements each rank of a side contributes
    rwidth = 3 if high else 2
    ic.Barrier()
    # Allgather: the remote group's blocks
    out = np.full(rsize * rwidth, -1, np.int32)
    ic.Allgather(np.full(width, me, np.int32), out)
    c.equal(out, np.repeat(remote, rwidth).astype(np.int32), "Allgather")
    req = ic.Iallgather(np.full(width, me, np.int32), out.fill(-1) or out)
    req.Wait()
    c.equal(out, np.repeat(remote, rwidth).astype(np.int32), "Iallgather")
    # Allgatherv with per-remote-rank counts (remote rank j sends j + 1 elements)
    counts = [j + 1 for j in range(rsize)]
    outv = np.full(sum(counts), -1.0)
    ic.Allgatherv(np.full(r + 1, float(me)), [outv, counts])
    c.equal(outv, np.repeat(remote, counts).astype(float), "Allgatherv")
    # Alltoall: block j goes to remote rank j
    send = np.array([me * 100 + j for j in range(rsize) for _ in range(2)], np.int64)
    recv = np.empty(2 * rsize, np.int64)
    ic.Alltoall(send, recv)
    c.equal(recv, np.repeat(remote * 100 + r, 2), "Alltoall")
    ic.Ialltoall(send, recv.fill(0) or recv).Wait()
    c.equal(recv, np.repeat(remote * 100 + r, 2), "Ialltoall")
    rv = np.empty(2 * rsize, np.int64)
    ic.Alltoallv([send, [2] * rsize], [rv, [2] * rsize])
    c.equal(rv, np.repeat(remote * 100 + r, 2), "Alltoallv")
    rw = np.empty(2 * rsize, np.int64)
    t = MPI.INT64_T
    ic.Alltoallw([send, [2] * rsize, [16 * j for j in range(rsize)], [t] * rsize],
                 [rw, [2] * rsize, [16 * j for j in range(rsize)], [t] * rsize])
    c.equal(rw, np.repeat(remote * 100 + r, 2), "Alltoallw")
    # Allreduce: the reduction of the remote group's data
    x = np.arange(5, dtype=np.float64) + me
    y = np.empty(5)
    ic.Allreduce(x, y, op=MPI.SUM)
    want = np.arange(5) * rsize + remote.sum()
    c.close(y, want, "Allreduce")
    ic.Iallreduce(x, y.fill(0) or y, op=MPI.SUM).Wait()
    c.close(y, want, "Iallreduce")
    ic.Allreduce(x, y, op=MPI.MAX)
    c.close(y, np.arange(5) + remote.max(), "Allreduce MAX")
    preq = ic.Allreduce_init(x, y, op=MPI.SUM)
    for k in range(2):
        x += 1
        preq.Start()
        preq.Wait()
        c.close(y, want + (k + 1) * rsize, f"persistent Allreduce round {k}")
    preq.Free()
    x -= 2
    # Reduce_scatter_block: both sides reduce vectors of 6 elements, scattered over the other side
    per = 6 // size if 6 % size == 0 else None
    if 6 % size == 0 and 6 % rsize == 0:
        blk = np.empty(per)
        ic.Reduce_scatter_block(np.arange(6, dtype=np.float64) + me, blk, op=MPI.SUM)
        full = np.arange(6) * rsize + remote.sum()
        c.close(blk, full[r * per:(r + 1) * per], "Reduce_scatter_block")
    # Reduce_scatter with counts: rank r of this side gets r + 1 elements of a vector of sum(counts)
    mycounts = [k + 1 for k in range(size)]
    total = sum(mycounts)
    if total == sum(k + 1 for k in range(rsize)):
        part = np.empty(r + 1)
        ic.Reduce_scatter(np.arange(total, dtype=np.float64) * (me + 1), part, mycounts, op=MPI.SUM)
        full = np.arange(total) * (remote + 1).sum()
        lo = sum(mycounts[:r])
        c.close(part, full[lo:lo + r + 1], "Reduce_scatter")
    ic.Ibarrier().Wait()
    # objects
    c.equal(ic.allgather(me), list(remote), "allgather objects")
    c.equal(ic.alltoall([(me, j) for j in range(rsize)]), [(int(w), r) for w in remote], "alltoall objects")
    c.equal(ic.allreduce(me, op=MPI.SUM), int(remote.sum()), "allreduce objects")
    c.equal(ic.allreduce([me], op=MPI.SUM), list(remote), "allreduce of lists (concatenated in rank order)")
    ic.barrier()
    ic.Free()
    local.Free()


def derive():
    ic, high, local = halves()
    r, size, rsize = ic.Get_rank(), ic.Get_size(), ic.Get_remote_size()
    d = ic.Dup()
    c.equal((type(d) is MPI.Intercomm, d.Get_size(), d.Get_remote_size(), d.Get_rank()),
            (True, size, rsize, r), "Dup")
    c.equal(MPI.Comm.Compare(ic, d), MPI.CONGRUENT, "Compare(dup)")
    c.equal(MPI.Comm.Compare(ic, ic), MPI.IDENT, "Compare(self)")
    c.equal(MPI.Comm.Compare(ic, world), MPI.UNEQUAL, "Compare(intercomm, world)")
    h = MPI.Comm.fromhandle(ic.handle)
    c.equal((type(h) is MPI.Intercomm, h == ic), (True, True), "fromhandle")
    # the dup is a context of its own: a message on ic is not received on d
    if r < rsize:
        ic.send("on ic", r, tag=1)
        d.send("on d", r, tag=1)
        c.equal((d.recv(source=r, tag=1), ic.recv(source=r, tag=1)), ("on d", "on ic"), "Dup's own context")
    d.Free()
    c.equal(d == MPI.COMM_NULL, True, "Free")
    # Split by parity of the local rank: colors that one side lacks give COMM_NULL
    s = ic.Split(r % 2, -r)
    has = (r % 2) < rsize
    c.equal(s != MPI.COMM_NULL, has, "Split gives COMM_NULL where the other side lacks the color")
    if s != MPI.COMM_NULL:
        mine = [k for k in range(size) if k % 2 == r % 2]
        theirs = [k for k in range(rsize) if k % 2 == r % 2]
        c.equal((s.Get_size(), s.Get_remote_size(), s.Get_rank()),
                (len(mine), len(theirs), sorted(mine, key=lambda k: -k).index(r)), "Split sizes")
        c.equal(s.allgather(r), sorted(theirs, key=lambda k: -k), "Split's remote group, ordered by key")
        s.Free()
    # Create: local rank 0 alone on each side
    g0 = ic.Get_group().Incl([0])
    cr = ic.Create(g0)
    c.equal(cr != MPI.COMM_NULL, r == 0, "Create")
    if cr != MPI.COMM_NULL:
        c.equal((cr.Get_size(), cr.Get_remote_size(), cr.allreduce(me)), (1, 1, n // 2 if not high else 0),
                "Create of the leaders")
        cr.Free()
    g0.Free()
    ic.Free()
    local.Free()


def errors():
    ic, high, local = halves()
    rsize = ic.Get_remote_size()
    e = c.raises(MPI.Exception, lambda: ic.Send(np.zeros(1), rsize + 3), "Send to a remote rank that is not there")
    if e is not None:
        c.equal(e.Get_error_class(), MPI.ERR_RANK, "ERR_RANK")
        if not USING_MPI4PY:
            c.ok(str(rsize + 3) in str(e), "the message names the rank", str(e))
    e = c.raises(MPI.Exception, lambda: ic.Bcast(np.zeros(1), root=rsize + 1), "bad root")
    if e is not None:
        c.equal(e.Get_error_class(), MPI.ERR_ROOT, "ERR_ROOT")
    e = c.raises(MPI.Exception, lambda: ic.Allreduce(MPI.IN_PLACE, np.zeros(2)), "IN_PLACE on an intercomm")
    if e is not None:
        c.equal(e.Get_error_class(), MPI.ERR_BUFFER, "ERR_BUFFER")
    c.raises(AttributeError, lambda: ic.Scan(np.zeros(1), np.zeros(1)), "Scan on an intercomm")
    c.raises(AttributeError, lambda: ic.exscan(1), "exscan on an intercomm")
    c.equal(hasattr(ic, "Scan"), False, "an Intercomm has no Scan")
    c.raises(TypeError, lambda: MPI.Intracomm(ic), "Intracomm(intercomm)")
    c.raises(TypeError, lambda: MPI.Intercomm(world), "Intercomm(intracomm)")
    if not USING_MPI4PY:  # MPICH checks remote_leader at the leader only: the rest of its group would wait
        e = c.raises(MPI.Exception, lambda: local.Create_intercomm(0, world, n + 5), "Create_intercomm: bad leader")
        if e is not None:
            c.ok(e.Get_error_class() == MPI.ERR_RANK and str(n + 5) in str(e), "ERR_RANK naming it", str(e))
    ic.Barrier()  # the intercomm still works after the errors
    ic.Free()
    local.Free()


c.run([single] if n == 1 else [single, manager, pingpong, merge, collect, derive, errors])
c.finish()
