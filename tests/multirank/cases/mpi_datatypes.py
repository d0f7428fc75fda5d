"""Derived datatypes as users write them, checked on every rank against NumPy.

usage: mpi_datatypes.py

Sections:
  halo      a 2-D grid split by columns: each rank sends its edge columns to its neighbours with a
            Create_vector type and receives them into its ghost columns (Sendrecv, Isend/Irecv)
  fft       a 3-D FFT over a slab decomposition: the transpose is one Alltoallw with Create_subarray
            types on both sides (as mpi4py-fft does it); the result is checked against numpy.fft.fftn
  gather    columns gathered into a matrix with a resized vector type (Gather, Gatherv, Scatter);
            Bcast and Allreduce of a strided type
  struct    a struct of mixed types (int, double, 3 chars) sent and received; Pack/Unpack and
            Pack_external round trips; Get_contents/decode/pickle recreate the same layout
  bottom    MPI.BOTTOM messages: a struct of absolute addresses (Get_address) over two separate arrays
            sent and received with Sendrecv and Alltoallw
  errors    a type that reaches past the buffer and a reduction over a struct: errors naming
            the problem, on every rank, and the job goes on (MPICH reads past the buffer and
            refuses predefined ops on strided types: those checks are commlib's own)

Each rank's neighbours are `right` and `left`. Run against the real mpi4py with
COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py 4.1.2 + the MPICH 5.0.2 wheel).
"""
import pickle

import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()


def halo():
    rows, cols = 6, 4  # each rank owns cols columns plus a ghost column on each side
    grid = np.zeros((rows, cols + 2))
    grid[:, 1:-1] = np.arange(rows * cols).reshape(rows, cols) + 1000 * me
    column = MPI.DOUBLE.Create_vector(rows, 1, cols + 2).Commit()
    # my last real column to the right, my left ghost from the left
    flat = grid.reshape(-1)  # a view: a column starts at its offset in the flat grid, as &grid[0][j] in C
    comm.Sendrecv([flat[cols:], 1, column], right, 0, [flat, 1, column], left, 0)
    want = np.arange(rows * cols).reshape(rows, cols)[:, -1] + 1000 * left
    c.equal(grid[:, 0], want.astype(float), "halo: left ghost column from Sendrecv")
    reqs = [comm.Irecv([flat[cols + 1:], 1, column], right, 1),
            comm.Isend([flat[1:], 1, column], left, 1)]
    MPI.Request.Waitall(reqs)
    want = np.arange(rows * cols).reshape(rows, cols)[:, 0] + 1000 * right
    c.equal(grid[:, cols + 1], want.astype(float), "halo: right ghost column from Isend/Irecv")
    c.equal(grid[:, 1:-1], np.arange(rows * cols).reshape(rows, cols) + 1000.0 * me, "halo: the interior unchanged")
    # blocking Send/Recv (packed and unpacked in one call each); the receive has room for two
    # columns (a column type resized to one double's extent) and gets one, then one and a bit
    cols2 = column.Create_resized(0, 8).Commit()
    ghosts = np.full((rows, cols + 2), -1.0)
    st = MPI.Status()
    comm.Send([flat[cols:], 1, column], right, 2)  # 48 bytes: eager, so every rank sends, then receives
    comm.Recv([ghosts, 2, cols2], left, 2, st)
    c.equal(ghosts[:, 0], np.arange(rows * cols).reshape(rows, cols)[:, -1] + 1000.0 * left,
            "halo: the column from Send/Recv")
    c.equal(ghosts[:, 1:], np.full((rows, cols + 1), -1.0), "halo: Recv of a short message leaves the rest")
    c.equal((st.Get_count(cols2), st.Get_elements(MPI.DOUBLE)), (1, rows), "halo: the short message's counts")
    comm.Send(np.arange(rows + 2.0), right, 3)  # one column and two doubles of the next
    comm.Recv([ghosts, 2, cols2], left, 3, st)
    want = np.concatenate([np.arange(rows + 2.0), np.full(rows - 2, -1.0)])
    c.equal(np.concatenate([ghosts[:, 0], ghosts[:, 1]]), want, "halo: a message ending inside an element")
    c.equal((st.Get_count(cols2), st.Get_elements(MPI.DOUBLE)), (MPI.UNDEFINED, rows + 2),
            "halo: counts of a partial element")
    cols2.Free()
    column.Free()


def fft():
    N = 4 * n  # global cube N^3, slabs of N/n planes along axis 0 before, along axis 1 after
    rng = np.random.default_rng(7)
    full = rng.standard_normal((N, N, N)) + 1j * rng.standard_normal((N, N, N))
    k = N // n
    a = np.ascontiguousarray(full[me * k:(me + 1) * k])  # (k, N, N): my planes of axis 0
    a = np.fft.fftn(a, axes=(1, 2))
    b = np.empty((N, k, N), complex)  # my planes of axis 1 after the transpose
    t = MPI.C_DOUBLE_COMPLEX
    send = [t.Create_subarray([k, N, N], [k, k, N], [0, j * k, 0]).Commit() for j in range(n)]
    recv = [t.Create_subarray([N, k, N], [k, k, N], [j * k, 0, 0]).Commit() for j in range(n)]
    comm.Alltoallw([a, ([1] * n, [0] * n), send], [b, ([1] * n, [0] * n), recv])
    b = np.fft.fft(b, axis=0)
    want = np.fft.fftn(full)[:, me * k:(me + 1) * k]
    c.close(b, want, "fft: slab FFT with an Alltoallw of subarrays matches numpy.fft.fftn", rtol=1e-9, atol=1e-9)
    for ty in send + recv:
        ty.Free()


def gather():
    m = 5
    mine = np.arange(m, dtype=np.float64) * (me + 1)
    col = MPI.DOUBLE.Create_vector(m, 1, n).Create_resized(0, 8).Commit()  # a column of an (m, n) matrix
    mat = np.zeros((m, n)) if me == 0 else None
    comm.Gather(mine, [mat, 1, col] if me == 0 else None, root=0)
    if me == 0:
        c.equal(mat, np.arange(m, dtype=float)[:, None] * (np.arange(n) + 1), "gather: columns gathered with Gather")
    counts = [1] * n
    mat2 = np.zeros((m, n)) if me == 0 else None
    comm.Gatherv(mine, [mat2, (counts, list(range(n))), col] if me == 0 else None, root=0)
    if me == 0:
        c.equal(mat2, np.arange(m, dtype=float)[:, None] * (np.arange(n) + 1), "gather: ... with Gatherv")
    src = np.arange(m * n, dtype=np.float64).reshape(m, n) if me == 0 else None
    got = np.zeros(m)
    comm.Scatter([src, 1, col] if me == 0 else None, got, root=0)
    c.equal(got, np.arange(m * n, dtype=float).reshape(m, n)[:, me], "gather: a column each with Scatter")
    every_other = MPI.INT.Create_vector(4, 1, 2).Commit()
    x = np.arange(8, dtype=np.int32) * (10 if me == 0 else -1)
    comm.Bcast([x, 1, every_other], root=0)
    want = np.arange(8, dtype=np.int32) * -1 if me else np.arange(8, dtype=np.int32) * 10
    if me:
        want[::2] = np.arange(0, 8, 2) * 10
    c.equal(x, want, "gather: Bcast of every other element leaves the rest")
    if not USING_MPI4PY:  # MPICH refuses a predefined op on a non-contiguous type ("Invalid MPI_Op")
        y, out = np.full(8, me + 1, np.int32), np.zeros(8, np.int32)
        comm.Allreduce([y, 1, every_other], [out, 1, every_other], op=MPI.SUM)
        want = np.zeros(8, np.int32)
        want[::2] = n * (n + 1) // 2
        c.equal(out, want, "gather: Allreduce of a strided type reduces only its elements")
    col.Free()
    every_other.Free()


def struct():
    rec = np.dtype([("id", np.int32), ("x", np.float64), ("tag", "S3")], align=True)
    t = MPI.Datatype.Create_struct([1, 1, 3], [rec.fields["id"][1], rec.fields["x"][1], rec.fields["tag"][1]],
                                   [MPI.INT, MPI.DOUBLE, MPI.CHAR]).Create_resized(0, rec.itemsize).Commit()
    c.equal((t.size, t.extent), (4 + 8 + 3, rec.itemsize), "struct: size and extent of an aligned record")
    out = np.zeros(3, rec)
    src = np.array([(me * 10 + i, me + i / 4, b"ab" + bytes([97 + i])) for i in range(3)], rec)
    comm.Sendrecv([src, 3, t], right, 2, [out, 3, t], left, 2)
    want = np.array([(left * 10 + i, left + i / 4, b"ab" + bytes([97 + i])) for i in range(3)], rec)
    c.ok(all(out[f].tolist() == want[f].tolist() for f in ("id", "x", "tag")), "struct: records sent and received",
         f"{out} vs {want}")
    buf = bytearray(t.Pack_size(3, comm) + 8)
    pos = t.Pack(src, buf, 4, comm)
    c.equal(pos, 4 + 3 * t.size, "struct: Pack's new position")
    back = np.zeros(3, rec)
    c.equal(t.Unpack(buf, 4, back, comm), pos, "struct: Unpack's new position")
    c.ok(back.tobytes() == np.array(src).tobytes() or all(back[f].tolist() == src[f].tolist() for f in rec.names),
         "struct: Pack then Unpack gives the records back")
    v = MPI.DOUBLE.Create_vector(3, 2, 4).Commit()
    d = np.arange(12.0)
    ext = bytearray(v.Pack_external_size("external32", 1))
    v.Pack_external("external32", d, ext, 0)
    c.equal(np.frombuffer(bytes(ext), ">f8"), d[[0, 1, 4, 5, 8, 9]], "struct: Pack_external is big-endian doubles")
    old, combiner, params = v.decode()
    c.equal((old == MPI.DOUBLE, combiner, params), (True, "VECTOR", {"count": 3, "blocklength": 2, "stride": 4}),
            "struct: decode of a vector")
    again = pickle.loads(pickle.dumps(v))
    c.equal((again.size, again.extent, again.Get_envelope()[-1]), (v.size, v.extent, MPI.COMBINER_VECTOR),
            "struct: a pickled vector type is the same layout")
    for ty in (t, v, again):
        ty.Free()


def bottom():
    ints, dbls = np.arange(3, dtype=np.int32) + 10 * me, np.arange(2.0) + me / 2
    t = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(ints), MPI.Get_address(dbls)],
                                   [MPI.INT, MPI.DOUBLE]).Commit()
    gi, gd = np.zeros(3, np.int32), np.zeros(2)
    r = MPI.Datatype.Create_struct([3, 2], [MPI.Get_address(gi), MPI.Get_address(gd)], [MPI.INT, MPI.DOUBLE]).Commit()
    comm.Sendrecv([MPI.BOTTOM, 1, t], right, 7, [MPI.BOTTOM, 1, r], left, 7)
    c.equal(gi, np.arange(3, dtype=np.int32) + 10 * left, "bottom: the ints of a struct of two arrays")
    c.equal(gd, np.arange(2.0) + left / 2, "bottom: ... and its doubles")
    gi[:], gd[:] = 0, 0
    counts = [1 if j == right else 0 for j in range(n)]
    rcounts = [1 if j == left else 0 for j in range(n)]
    comm.Alltoallw([MPI.BOTTOM, counts, [0] * n, [t] * n], [MPI.BOTTOM, (rcounts, [0] * n), [r] * n])
    c.equal((gi.tolist(), gd.tolist()), ((np.arange(3) + 10 * left).tolist(), (np.arange(2.0) + left / 2).tolist()),
            "bottom: Alltoallw at MPI.BOTTOM")
    t.Free()
    r.Free()


def errors():
    wide = MPI.DOUBLE.Create_vector(4, 1, 8).Commit()  # spans 25 doubles
    if not USING_MPI4PY:  # MPICH reads past the buffer (undefined behaviour); commlib refuses
        c.raises(ValueError, lambda: comm.Send([np.zeros(10), 1, wide], right, 3), "errors: a type past the buffer")
    pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.DOUBLE, MPI.INT]).Commit()
    rec = np.zeros(2, dtype=np.dtype([("v", np.float64), ("i", np.int32)], align=True))
    c.raises(MPI.Exception, lambda: comm.Allreduce(MPI.IN_PLACE, [rec, 2, pair], op=MPI.SUM),
             "errors: a sum over a struct of mixed types")
    x = np.array([float(me)])
    comm.Allreduce(MPI.IN_PLACE, x)
    c.equal(x, np.array([n * (n - 1) / 2]), "errors: the job goes on")
    wide.Free()
    pair.Free()


for fn in (halo, fft, gather, struct, bottom, errors):
    c.run([fn])
    comm.Barrier()
c.finish()
