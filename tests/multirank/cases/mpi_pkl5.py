"""mpi4py.util.pkl5 as its users write it, checked on every rank.

usage: mpi_pkl5.py [--big GIB]

Sections:
  p2p       objects holding NumPy arrays (out of band) and plain values: send/recv around a ring,
            issend + mprobe().irecv(), sendrecv with a status, improbe polling, PROC_NULL
  chunks    a small `_bigmpi.blocksize`: each buffer goes as many messages and arrives whole
  colls     bcast, gather, scatter, allgather and alltoall of objects with arrays
  big       (--big GIB) one object of that many GiB from rank 0 to rank 1 through pkl5, checked
            by a sample of its bytes

Run against the real mpi4py with COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py
4.1.2 + the MPICH 5.0.2 wheel).
"""
import sys

import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

if USING_MPI4PY:
    from mpi4py.util import pkl5
else:
    from commlib.MPI.util import pkl5

comm = pkl5.Intracomm(MPI.COMM_WORLD)
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()


def payload(rank, k):
    return {"rank": rank, "data": np.arange(k, dtype=np.float64) * (rank + 1), "tag": f"r{rank}",
            "pair": (np.full(3, rank, np.int32), b"x" * k)}


def same(got, want):
    return (got["rank"] == want["rank"] and np.array_equal(got["data"], want["data"]) and got["tag"] == want["tag"]
            and np.array_equal(got["pair"][0], want["pair"][0]) and got["pair"][1] == want["pair"][1])


def p2p():
    for k in (0, 10, 100_000):  # 100,000 doubles: 800 KB out of band
        req = comm.isend(payload(me, k), right, 1)
        got = comm.recv(None, left, 1)
        req.wait()
        c.ok(same(got, payload(left, k)), f"p2p: isend/recv of {k} doubles")
        req = comm.issend(payload(me, k), right, 2)
        st = MPI.Status()
        got = comm.mprobe(left, 2).irecv().wait(st)
        req.wait()
        c.ok(same(got, payload(left, k)) and (st.Get_source(), st.Get_tag()) == (left, 2),
             f"p2p: issend and mprobe().irecv() of {k} doubles, with the status")
    st = MPI.Status()
    got = comm.sendrecv(payload(me, 7), right, 3, None, left, 3, st)
    c.ok(same(got, payload(left, 7)) and st.Get_source() == left, "p2p: sendrecv")
    req = comm.isend(np.arange(5) + me, right, 4)
    m = None
    while m is None:
        m = comm.improbe(left, 4)
    c.equal(m.recv(), np.arange(5) + left, "p2p: improbe polling then recv")
    req.wait()
    c.ok(comm.recv(None, MPI.PROC_NULL) is None, "p2p: a receive from PROC_NULL is None")


def chunks():
    if USING_MPI4PY:
        return  # a private knob of each implementation
    old = pkl5._bigmpi.blocksize
    pkl5._bigmpi.blocksize = 1000
    try:
        big = np.arange(300_000, dtype=np.int64) + me  # 2.4 MB: 2,400 messages of 1,000 bytes
        req = comm.isend(big, right, 5)
        got = comm.recv(None, left, 5)
        req.wait()
        c.equal(got, np.arange(300_000, dtype=np.int64) + left, "chunks: a buffer in 1,000-byte messages")
    finally:
        pkl5._bigmpi.blocksize = old


def colls():
    obj = comm.bcast(payload(0, 50_000) if me == 0 else None, root=0)
    c.ok(same(obj, payload(0, 50_000)), "colls: bcast")
    got = comm.gather(payload(me, 1000), root=n - 1)
    if me == n - 1:
        c.ok(len(got) == n and all(same(g, payload(i, 1000)) for i, g in enumerate(got)), "colls: gather")
    else:
        c.ok(got is None, "colls: gather is None off the root")
    mine = comm.scatter([payload(i, 100) for i in range(n)] if me == 0 else None, root=0)
    c.ok(same(mine, payload(me, 100)), "colls: scatter")
    every = comm.allgather(np.full(4, me))
    c.equal(np.array(every), np.repeat(np.arange(n), 4).reshape(n, 4), "colls: allgather")
    back = comm.alltoall([np.full(2, me * 10 + j) for j in range(n)])
    c.equal(np.array(back), np.array([np.full(2, i * 10 + me) for i in range(n)]), "colls: alltoall")


def big(gib):
    if n < 2:
        return
    nbytes = int(gib * (1 << 30))
    if me == 0:
        blob = np.empty(nbytes, np.uint8)
        blob[::4096] = np.arange(len(blob[::4096])) % 251
        comm.send({"blob": blob}, 1, 9)
        del blob
    elif me == 1:
        got = comm.recv(None, 0, 9)["blob"]
        c.equal(got.nbytes, nbytes, f"big: {gib} GiB arrived whole")
        c.ok(np.array_equal(got[::4096], np.arange(len(got[::4096])) % 251), f"big: a sample of {gib} GiB is right")
    comm.Barrier()


for fn in (p2p, chunks, colls):
    c.run([fn])
    comm.Barrier()
if "--big" in sys.argv:
    c.run([lambda: big(float(sys.argv[sys.argv.index("--big") + 1]))])
c.finish()
