"""Buffer and object collectives of the mpi4py-compatible layer (commlib.MPI; mpi4py for validation).

usage: mpi_coll.py SEED PART
  reduce   Bcast, Reduce, Allreduce: dtypes, sizes, ops, typecode strings, IN_PLACE / None
  gather   Gather, Scatter, Allgather, Alltoall: count inference, IN_PLACE / None
  scan     Scan, Exscan, Reduce_scatter_block, Reduce_scatter (recvcounts None and explicit)
  vector   Gatherv, Scatterv, Allgatherv, Alltoallv in every message form
  objects  bcast, reduce, allreduce, scan, exscan (MPI ops, non-commutative callables, MAXLOC/MINLOC),
           gather, scatter, allgather, alltoall, barrier
  persistent  Barrier_init, Bcast_init, Allreduce_init, Reduce_init, Allgather_init, Alltoall_init,
           Gatherv_init, Scan_init: started many times, each Start reading the buffers as they are
  errors   a bad root (past the end, negative) -> MPI.Exception with ERR_ROOT on every caller; BufferError
           (non-contiguous, read-only), ValueError (count remainder, mismatched buffers); the program goes on

Every input is a pure function of (SEED, label, rank), so each rank computes every expected
result with numpy on its own.
"""
import sys
import zlib

import numpy as np

from _batch import sections
from _mpicase import MPI, USING_MPI4PY, Checker

SEED = int(sys.argv[1])
PART = sys.argv[2] if len(sys.argv) > 2 else None  # none when _batch.py runs every section as a check
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
ck = Checker(comm)

DTYPES = ["int32", "int64", "float32", "float64", "complex128", "uint8"]
SIZES = [0, 1, 1000, 300000]
SENTINEL = 77


def rng(*label):
    return np.random.default_rng([SEED, zlib.crc32(repr(label).encode())])


def small(label, r, n, dt, lo=-8, hi=9):
    """Small integers (exact in every dtype and every summation order) as dtype dt."""
    dt = np.dtype(dt)
    v = rng(label, r).integers(lo, hi, n)
    if dt.kind == "u":
        v = np.abs(v)
    if dt.kind == "c":
        v = v + 1j * rng(label, r, "imag").integers(lo, hi, n)
    return v.astype(dt)


def fold(arrays, fn):
    """Left fold in rank order (arrays or plain objects)."""
    acc = arrays[0].copy() if isinstance(arrays[0], np.ndarray) else arrays[0]
    for a in arrays[1:]:
        acc = fn(acc, a)
    return acc


def np_op(name, dt):
    """The numpy equivalent of an MPI op on arrays of dtype dt (logical ops give 0/1 in dt)."""
    dt = np.dtype(dt)
    logical = {"LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor}
    if name in logical:
        return lambda a, b: logical[name](a != 0, b != 0).astype(dt)
    return {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum,
            "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}[name]


def check_reduced(out, xs, name, dt, label):
    """out == the rank-order fold of xs with op `name`."""
    want = fold(xs, np_op(name, dt)).astype(dt)
    if len(xs) == 1 and name in ("LAND", "LOR", "LXOR"):
        # a single contribution: MPI copies it (Open MPI keeps -1), the spec's 0/1 result is fine too
        return ck.equal(out != 0, want != 0, label)
    return ck.equal(out, want, label)


# (op name, dtypes, value range) for the op matrix; PROD uses factors in [-2, 2] (exact up to 4 ranks)
OP_MATRIX = [
    ("SUM", ["int32", "int64", "float32", "float64", "complex128", "uint8"], (-8, 9)),
    ("PROD", ["int32", "int64", "float64", "complex128"], (-2, 3)),
    ("MAX", ["int32", "int64", "float32", "float64", "uint8"], (-50, 51)),
    ("MIN", ["int32", "int64", "float32", "float64", "uint8"], (-50, 51)),
    ("LAND", ["int32", "uint8", "int64"], (-1, 2)),
    ("LOR", ["int32", "uint8", "int64"], (-1, 2)),
    ("LXOR", ["int32", "uint8", "int64"], (-1, 2)),
    ("BAND", ["int32", "uint8", "int64"], (-100, 101)),
    ("BOR", ["int32", "uint8", "int64"], (-100, 101)),
    ("BXOR", ["int32", "uint8", "int64"], (-100, 101)),
]


# ---------------------------------------------------------------------------- reduce

def bcast_dtypes_sizes():
    for i, dt in enumerate(DTYPES):
        for n in SIZES:
            if n == 300000 and dt not in ("float64", "uint8"):
                continue
            root = (i + n) % size
            want = small(("bc", dt, n), root, n, dt)
            buf = want.copy() if rank == root else np.full(n, SENTINEL, dtype=dt)
            comm.Bcast(buf, root=root)
            ck.equal(buf, want, f"Bcast {dt} n={n} root={root}")


def bcast_forms():
    root = size - 1
    want = small("bcf", root, 10, "d")
    buf = want.copy() if rank == root else np.zeros(10)
    comm.Bcast([buf, "d"], root)
    ck.equal(buf, want, "Bcast [buf, 'd']")
    buf = want.copy() if rank == root else np.zeros(10)
    comm.Bcast([buf, MPI.DOUBLE], root=root)
    ck.equal(buf, want, "Bcast [buf, MPI.DOUBLE]")
    # [buf, count, datatype]: only a prefix moves, the rest stays as it was
    buf = want.copy() if rank == root else np.full(10, -1.0)
    comm.Bcast([buf, 4, MPI.DOUBLE], root=root)
    ck.equal(buf, want if rank == root else np.concatenate([want[:4], np.full(6, -1.0)]), "Bcast [buf, 4, DOUBLE]")
    # the datatype wins over the buffer's format: bytes reinterpreted as int32
    ints = np.array([1, -2, 300000, 7], dtype=np.int32)
    raw = bytearray(ints.tobytes()) if rank == root else bytearray(16)
    comm.Bcast([raw, "i"], root=root)
    ck.equal(np.frombuffer(bytes(raw), dtype=np.int32), ints, "Bcast [bytearray, 'i']")
    # 0-d array is one element
    z = np.array(42 if rank == 0 else 0, dtype="i")
    comm.Bcast(z, root=0)
    ck.equal(int(z), 42, "Bcast 0-d array")
    # Fortran-ordered 2-D arrays are contiguous buffers too
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3) if rank == 0 else np.zeros((2, 3)))
    comm.Bcast(f, root=0)
    ck.equal(f, np.arange(6.0).reshape(2, 3), "Bcast into a Fortran-ordered array")
    # a slice view is written in place
    base = np.zeros(12, dtype=np.int64)
    src = np.arange(5, dtype=np.int64) + 100
    view = base[3:8]
    if rank == 0:
        view[:] = src
    comm.Bcast(view, root=0)
    ck.equal(base, np.concatenate([np.zeros(3, np.int64), src, np.zeros(4, np.int64)]), "Bcast into a slice view")


def allreduce_dtypes_sizes():
    for dt in DTYPES:
        for n in SIZES:
            if n == 300000 and dt not in ("float64", "int32"):
                continue
            xs = [small(("ar", dt, n), r, n, dt) for r in range(size)]
            out = np.full(n, SENTINEL, dtype=dt)
            comm.Allreduce(xs[rank], out, op=MPI.SUM)
            ck.equal(out, fold(xs, np.add), f"Allreduce SUM {dt} n={n}")


def allreduce_ops():
    for name, dts, (lo, hi) in OP_MATRIX:
        op = getattr(MPI, name)
        for dt in dts:
            xs = [small(("ops", name, dt), r, 257, dt, lo, hi) for r in range(size)]
            out = np.zeros(257, dtype=dt)
            comm.Allreduce(xs[rank], out, op)
            check_reduced(out, xs, name, dt, f"Allreduce {name} {dt}")


def allreduce_float_tolerance():
    for dt, rtol in (("float64", 1e-12), ("float32", 1e-5)):
        xs = [rng("arf", dt, r).standard_normal(5000).astype(dt) for r in range(size)]
        out = np.empty(5000, dtype=dt)
        comm.Allreduce(sendbuf=xs[rank], recvbuf=out, op=MPI.SUM)
        want = fold([x.astype(np.float64) for x in xs], np.add)
        ck.close(out, want, f"Allreduce SUM random {dt}", rtol=rtol, atol=rtol * 10)


def allreduce_forms():
    xs = [small("arc", r, 6, "d") for r in range(size)]
    out = np.zeros(6)
    comm.Allreduce([xs[rank], "d"], [out, "d"], op=MPI.SUM)
    ck.equal(out, fold(xs, np.add), "Allreduce [buf, 'd']")
    out = np.zeros(6)
    comm.Allreduce([xs[rank], MPI.DOUBLE], [out, MPI.DOUBLE], MPI.MAX)
    ck.equal(out, fold(xs, np.maximum), "Allreduce [buf, MPI.DOUBLE] MAX")
    ints = [small("ari", r, 4, "i") for r in range(size)]
    raw_in = np.frombuffer(ints[rank].tobytes(), dtype=np.uint8).copy()
    raw_out = np.zeros(16, dtype=np.uint8)
    comm.Allreduce([raw_in, "i"], [raw_out, "i"], op=MPI.SUM)
    ck.equal(raw_out.view(np.int32), fold(ints, np.add), "Allreduce uint8 bytes as [buf, 'i']")
    # 2-D arrays, MPI.INT
    m = [small("ar2", r, 12, "i").reshape(3, 4) for r in range(size)]
    out = np.zeros((3, 4), dtype="i")
    comm.Allreduce([m[rank], MPI.INT], [out, MPI.INT])
    ck.equal(out, fold(m, np.add), "Allreduce 2-D [buf, MPI.INT] default op SUM")
    # 0-d arrays are one element
    z = np.array(0, dtype="i")
    comm.Allreduce(np.array(rank + 1, dtype="i"), z)
    ck.equal(int(z), size * (size + 1) // 2, "Allreduce 0-d arrays")
    # IN_PLACE and None as sendbuf
    for tag, sb in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        buf = xs[rank].copy()
        comm.Allreduce(sb, buf, op=MPI.SUM)
        ck.equal(buf, fold(xs, np.add), f"Allreduce {tag}")
        buf = [x.astype("i") for x in xs]
        mine = buf[rank].copy()
        comm.Allreduce(sb, [mine, MPI.INT], op=MPI.MIN)
        ck.equal(mine, fold(buf, np.minimum), f"Allreduce {tag} [buf, MPI.INT] MIN")


def reduce_checks():
    for i, (dt, n) in enumerate([("float64", 1000), ("int32", 1), ("int64", 0), ("complex128", 300000),
                                 ("uint8", 1000), ("float32", 1000)]):
        root = i % size
        xs = [small(("red", dt, n), r, n, dt) for r in range(size)]
        out = np.full(n, SENTINEL, dtype=dt)
        comm.Reduce(xs[rank], out, op=MPI.SUM, root=root)
        want = fold(xs, np.add) if rank == root else np.full(n, SENTINEL, dtype=dt)
        ck.equal(out, want, f"Reduce {dt} n={n} root={root} (recvbuf untouched off-root)")
    for name, dts, (lo, hi) in OP_MATRIX:
        dt = dts[0]
        root = size - 1
        xs = [small(("redop", name), r, 33, dt, lo, hi) for r in range(size)]
        out = np.zeros(33, dtype=dt) if rank == root else None
        comm.Reduce(xs[rank], out, op=getattr(MPI, name), root=root)
        if rank == root:
            check_reduced(out, xs, name, dt, f"Reduce {name} {dt} (None recvbuf off-root)")
    # IN_PLACE / None as sendbuf at the root; None recvbuf elsewhere
    for tag, sb in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        root = 1 % size
        xs = [small(("redip", tag), r, 50, "d") for r in range(size)]
        if rank == root:
            buf = xs[rank].copy()
            comm.Reduce(sb, buf, op=MPI.SUM, root=root)
            ck.equal(buf, fold(xs, np.add), f"Reduce {tag} at root")
        else:
            comm.Reduce(sendbuf=xs[rank], recvbuf=None, op=MPI.SUM, root=root)
    # typecode strings
    xs = [small("redtc", r, 9, "f") for r in range(size)]
    out = np.zeros(9, dtype="f")
    comm.Reduce([xs[rank], "f"], [out, "f"], MPI.MAX, 0)
    if rank == 0:
        ck.equal(out, fold(xs, np.maximum), "Reduce [buf, 'f'] MAX")


# ---------------------------------------------------------------------------- gather

def blocks(label, dt, k):
    return [small((label, dt, k), r, k, dt) for r in range(size)]


def gather_scatter_sizes():
    cases = [(dt, k) for dt in DTYPES for k in (0, 1, 1000)] + [("float64", 300000), ("uint8", 300000)]
    for i, (dt, k) in enumerate(cases):
        root = i % size
        xs = blocks("ga", dt, k)
        recv = np.full(size * k, SENTINEL, dtype=dt) if rank == root else None
        comm.Gather(xs[rank], recv, root=root)
        if rank == root:
            ck.equal(recv, np.concatenate(xs), f"Gather {dt} k={k} root={root}")
        # Scatter: root's sendbuf split in `size` blocks; sendbuf None elsewhere
        whole = small(("sc", dt, k), root, size * k, dt)
        mine = np.full(k, SENTINEL, dtype=dt)
        comm.Scatter(whole if rank == root else None, mine, root=root)
        ck.equal(mine, whole[rank * k:(rank + 1) * k], f"Scatter {dt} k={k} root={root}")
        # Allgather
        out = np.full(size * k, SENTINEL, dtype=dt)
        comm.Allgather(xs[rank], out)
        ck.equal(out, np.concatenate(xs), f"Allgather {dt} k={k}")
        # Alltoall: rank r's block j goes to rank j
        if k <= 1000 or dt == "float64":
            sends = [small(("a2a", dt, k), r, size * k, dt) for r in range(size)]
            out = np.full(size * k, SENTINEL, dtype=dt)
            comm.Alltoall(sends[rank], out)
            want = np.concatenate([sends[r][rank * k:(rank + 1) * k] for r in range(size)])
            ck.equal(out, want, f"Alltoall {dt} k={k}")


def gather_forms():
    xs = blocks("gf", "i", 3)
    # 2-D receive buffer: one row per rank, count inferred as len / size
    recv = np.zeros((size, 3), dtype="i") if rank == 0 else None
    comm.Gather([xs[rank], "i"], [recv, "i"] if rank == 0 else None, root=0)
    if rank == 0:
        ck.equal(recv, np.stack(xs), "Gather 2-D [buf, 'i'] into rows")
    recv = np.zeros(size * 3, dtype="i")
    comm.Gather(sendbuf=[xs[rank], MPI.INT], recvbuf=[recv, MPI.INT], root=size - 1)
    if rank == size - 1:
        ck.equal(recv, np.concatenate(xs), "Gather keywords, recvbuf given off-root too")
    # Gather of 0-d arrays
    z = np.array(rank * 10, dtype="d")
    recv = np.zeros(size) if rank == 0 else None
    comm.Gather(z, recv, root=0)
    if rank == 0:
        ck.equal(recv, np.arange(size) * 10.0, "Gather 0-d arrays")
    # Scatter of a 2-D array, [buf, 'd']
    whole = np.arange(size * 4, dtype="d").reshape(size, 4)
    mine = np.zeros(4)
    comm.Scatter([whole, "d"] if rank == 0 else None, [mine, "d"], root=0)
    ck.equal(mine, whole[rank], "Scatter 2-D rows [buf, 'd']")
    # Allgather into a 2-D buffer, Alltoall of 2-D buffers
    out = np.zeros((size, 2), dtype=np.int64)
    comm.Allgather(np.array([rank, -rank], dtype=np.int64), out)
    ck.equal(out, np.array([[r, -r] for r in range(size)], dtype=np.int64), "Allgather 2-D")
    send = np.array([[rank * 100 + j, j] for j in range(size)], dtype="i")
    out = np.zeros((size, 2), dtype="i")
    comm.Alltoall([send, MPI.INT], [out, MPI.INT])
    ck.equal(out, np.array([[r * 100 + rank, rank] for r in range(size)], dtype="i"), "Alltoall 2-D [buf, INT]")


def gather_in_place():
    for tag, ip in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        root = (size - 1) if tag == "None" else 0
        xs = blocks(("gip", tag), "d", 5)
        if rank == root:
            recv = np.full(size * 5, -1.0)
            recv[root * 5:(root + 1) * 5] = xs[root]
            comm.Gather(ip, recv, root=root)
            ck.equal(recv, np.concatenate(xs), f"Gather {tag} at root")
        else:
            comm.Gather(xs[rank], None, root=root)
        # Scatter with IN_PLACE / None as the root's recvbuf: the root's block stays in sendbuf
        whole = small(("sip", tag), root, size * 5, "d")
        if rank == root:
            keep = whole.copy()
            comm.Scatter(keep, ip, root=root)
            ck.equal(keep, whole, f"Scatter {tag} recvbuf at root leaves sendbuf alone")
        else:
            mine = np.zeros(5)
            comm.Scatter(None, mine, root=root)
            ck.equal(mine, whole[rank * 5:(rank + 1) * 5], f"Scatter to non-root beside {tag} root")
        # Allgather in place: each rank's block already at its position
        buf = np.full(size * 5, -1.0)
        buf[rank * 5:(rank + 1) * 5] = xs[rank]
        comm.Allgather(ip, buf)
        ck.equal(buf, np.concatenate(xs), f"Allgather {tag}")
        # Alltoall in place: the receive buffer holds the send data
        sends = [small(("a2aip", tag), r, size * 3, "i") for r in range(size)]
        buf = sends[rank].copy()
        comm.Alltoall(ip, buf)
        want = np.concatenate([sends[r][rank * 3:(rank + 1) * 3] for r in range(size)])
        ck.equal(buf, want, f"Alltoall {tag}")


# ---------------------------------------------------------------------------- scan

def scan_checks():
    for name, dts, (lo, hi) in OP_MATRIX:
        for dt in dts[:2]:
            xs = [small(("scan", name, dt), r, 40, dt, lo, hi) for r in range(size)]
            out = np.full(40, SENTINEL, dtype=dt)
            comm.Scan(xs[rank], out, op=getattr(MPI, name))
            check_reduced(out, xs[:rank + 1], name, dt, f"Scan {name} {dt}")
            out = np.full(40, SENTINEL, dtype=dt)
            comm.Exscan(xs[rank], out, op=getattr(MPI, name))
            if rank > 0:
                check_reduced(out, xs[:rank], name, dt, f"Exscan {name} {dt}")
            else:
                ck.equal(out, np.full(40, SENTINEL, dtype=dt), f"Exscan {name} {dt} (rank 0 untouched)")
    for n in (0, 1, 1000, 300000):
        xs = [small(("scann", n), r, n, "d") for r in range(size)]
        out = np.full(n, -1.0)
        comm.Scan(xs[rank], out)  # default op SUM
        ck.equal(out, fold(xs[:rank + 1], np.add), f"Scan SUM float64 n={n}")
        out = np.full(n, -1.0)
        comm.Exscan([xs[rank], "d"], [out, "d"])
        ck.equal(out, fold(xs[:rank], np.add) if rank else np.full(n, -1.0), f"Exscan SUM float64 n={n}")
    for tag, ip in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        xs = [small(("scanip", tag), r, 7, "i") for r in range(size)]
        buf = xs[rank].copy()
        comm.Scan(ip, buf, op=MPI.SUM)
        ck.equal(buf, fold(xs[:rank + 1], np.add), f"Scan {tag}")
        buf = xs[rank].copy()
        comm.Exscan(ip, buf, op=MPI.SUM)
        if rank > 0:  # MPI leaves rank 0's buffer undefined in place
            ck.equal(buf, fold(xs[:rank], np.add), f"Exscan {tag}")


def even_counts(total):
    return [total // size + (1 if r < total % size else 0) for r in range(size)]


def reduce_scatter_checks():
    for dt in ("int32", "float64", "complex128", "uint8"):
        for k in (0, 1, 1000):
            xs = [small(("rsb", dt, k), r, size * k, dt) for r in range(size)]
            out = np.full(k, SENTINEL, dtype=dt)
            comm.Reduce_scatter_block(xs[rank], out, op=MPI.SUM)
            ck.equal(out, fold(xs, np.add)[rank * k:(rank + 1) * k], f"Reduce_scatter_block {dt} k={k}")
    xs = [small("rsbmax", r, size * 4, "i") for r in range(size)]
    out = np.zeros(4, dtype="i")
    comm.Reduce_scatter_block([xs[rank], "i"], [out, "i"], MPI.MAX)
    ck.equal(out, fold(xs, np.maximum)[rank * 4:(rank + 1) * 4], "Reduce_scatter_block MAX [buf, 'i']")
    for tag, ip in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        xs = [small(("rsbip", tag), r, size * 3, "d") for r in range(size)]
        buf = xs[rank].copy()
        comm.Reduce_scatter_block(ip, buf, op=MPI.SUM)
        ck.equal(buf[:3], fold(xs, np.add)[rank * 3:(rank + 1) * 3], f"Reduce_scatter_block {tag}")
    # Reduce_scatter, recvcounts None: the total split as evenly as possible (extras to the first ranks)
    for total in (size * 5, size * 5 + size - 1 if size > 1 else 5, 0, 1000):
        counts = even_counts(total)
        offs = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        xs = [small(("rs", total), r, total, "d") for r in range(size)]
        out = np.full(counts[rank], -1.0)
        comm.Reduce_scatter(xs[rank], out, recvcounts=None, op=MPI.SUM)
        ck.equal(out, fold(xs, np.add)[offs[rank]:offs[rank + 1]], f"Reduce_scatter recvcounts=None total={total}")
    # explicit counts: list and numpy int array, some zero
    counts = [(2 * r + 1) % 4 for r in range(size)]
    total = sum(counts)
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    for form, rc in (("list", counts), ("ndarray", np.array(counts, dtype=np.int64))):
        xs = [small(("rsx", form), r, total, "i") for r in range(size)]
        out = np.full(counts[rank], SENTINEL, dtype="i")
        comm.Reduce_scatter(xs[rank], out, rc, MPI.SUM)
        ck.equal(out, fold(xs, np.add)[offs[rank]:offs[rank + 1]], f"Reduce_scatter counts as {form}")
    for tag, ip in (("IN_PLACE", MPI.IN_PLACE), ("None", None)):
        xs = [small(("rsip", tag), r, total, "d") for r in range(size)]
        buf = xs[rank].copy()
        comm.Reduce_scatter(ip, buf, recvcounts=counts, op=MPI.SUM)
        ck.equal(buf[:counts[rank]], fold(xs, np.add)[offs[rank]:offs[rank + 1]], f"Reduce_scatter {tag}")


# ---------------------------------------------------------------------------- vector

def vcounts(r):
    return (2 * r + 1) % 4  # 1, 3, 1, 3 ... ; rank 0 of an even world sends 1


def gatherv_checks():
    counts = [vcounts(r) for r in range(size)]
    if size > 2:
        counts[-1] = 0  # a zero-length contribution
    xs = [small("gv", r, counts[r], "d") for r in range(size)]
    packed = np.concatenate(xs)
    total = sum(counts)
    displs = [int(sum(counts[:r])) + 2 * r for r in range(size)]  # gaps of two between blocks
    span = displs[-1] + counts[-1] + 2
    gapped = np.full(span, -1.0)
    for r in range(size):
        gapped[displs[r]:displs[r] + counts[r]] = xs[r]
    forms = [
        ("[buf, counts(list)]", lambda b: [b, counts], total, packed),
        ("[buf, counts(ndarray)]", lambda b: [b, np.array(counts, dtype=np.int32)], total, packed),
        ("[buf, (counts, displs), DOUBLE]", lambda b: [b, (counts, displs), MPI.DOUBLE], span, gapped),
        ("[buf, (counts, None), 'd']", lambda b: [b, (counts, None), "d"], total, packed),
        ("[buf, counts, displs, 'd']", lambda b: [b, np.array(counts), np.array(displs), "d"], span, gapped),
    ]
    for i, (name, make, length, want) in enumerate(forms):
        root = i % size
        recv = np.full(length, -1.0)
        comm.Gatherv(xs[rank], make(recv) if rank == root else None, root=root)
        if rank == root:
            ck.equal(recv, want, f"Gatherv {name} root={root}")
        # Allgatherv with the same form
        recv = np.full(length, -1.0)
        comm.Allgatherv([xs[rank], MPI.DOUBLE], make(recv))
        ck.equal(recv, want, f"Allgatherv {name}")
    # one int for all counts, and displs None
    xs = [small("gv1", r, 3, "i") for r in range(size)]
    recv = np.zeros(3 * size, dtype="i")
    comm.Gatherv(xs[rank], [recv, 3] if rank == 0 else None, root=0)
    if rank == 0:
        ck.equal(recv, np.concatenate(xs), "Gatherv [buf, 3] (one int for all)")
    recv = np.zeros(3 * size, dtype="i")
    comm.Allgatherv(xs[rank], [recv, (3, None), MPI.INT])
    ck.equal(recv, np.concatenate(xs), "Allgatherv [buf, (3, None), INT]")
    # Allgatherv with IN_PLACE: each block at its displacement
    buf = np.full(span, -1.0)
    xs = [small("gv", r, counts[r], "d") for r in range(size)]
    buf[displs[rank]:displs[rank] + counts[rank]] = xs[rank]
    comm.Allgatherv(MPI.IN_PLACE, [buf, (counts, displs), MPI.DOUBLE])
    ck.equal(buf, gapped, "Allgatherv IN_PLACE (counts, displs)")
    # Gatherv at root with IN_PLACE
    root = size - 1
    if rank == root:
        buf = np.full(span, -1.0)
        buf[displs[root]:displs[root] + counts[root]] = xs[root]
        comm.Gatherv(MPI.IN_PLACE, [buf, (counts, displs), "d"], root=root)
        ck.equal(buf, gapped, "Gatherv IN_PLACE at root")
    else:
        comm.Gatherv(xs[rank], None, root=root)


def allgatherv_paths():
    """Allgatherv's two ways: blocks that fit one all_gather of equal slots (the small ones), and larger
    ones as messages between the ranks; blocking and non-blocking alike. A rank that sends more than its
    receive count: MPI.Exception ERR_TRUNCATE where that block is received, and the next call works."""
    for label, per in (("small", 5), ("large", 20_000)):  # 40 B and 160 KB a block (float64)
        counts = [per + r for r in range(size)]
        xs = [small("agv" + label, r, counts[r], "d") for r in range(size)]
        displs = [int(sum(counts[:r])) + r for r in range(size)]  # a gap of one after each block
        want = np.full(displs[-1] + counts[-1] + 1, -1.0)
        for r in range(size):
            want[displs[r]:displs[r] + counts[r]] = xs[r]
        recv = np.full_like(want, -1.0)
        comm.Allgatherv(xs[rank], [recv, (counts, displs), MPI.DOUBLE])
        ck.equal(recv, want, f"Allgatherv, {label} blocks")
        recv = np.full_like(want, -1.0)
        comm.Iallgatherv(xs[rank], [recv, (counts, displs), MPI.DOUBLE]).Wait()
        ck.equal(recv, want, f"Iallgatherv, {label} blocks")
    if USING_MPI4PY or size == 1:  # (MPI leaves a count mismatch erroneous: MPICH does not check it)
        return
    recv = np.full(4 * size, -1.0)
    mine = np.full(5 if rank == 0 else 4, float(rank))  # rank 0 sends one more than the others receive
    try:
        comm.Allgatherv(mine, [recv, [4] * size, MPI.DOUBLE])
        raised = None
    except MPI.Exception as exc:
        raised = exc
    ck.ok(raised is not None and raised.Get_error_class() == MPI.ERR_TRUNCATE and "from rank 0" in str(raised),
          f"Allgatherv: rank 0's block too long is ERR_TRUNCATE where it is received (got {raised!r})")
    ck.equal(recv[4:], np.repeat(np.arange(1, size, dtype=float), 4), "Allgatherv: the other blocks arrived")
    comm.Allgatherv(np.full(4, float(rank)), [recv, [4] * size, MPI.DOUBLE])
    ck.equal(recv, np.repeat(np.arange(size, dtype=float), 4), "Allgatherv after the refused one")


def scatterv_checks():
    counts = [vcounts(r) for r in range(size)]
    if size > 2:
        counts[1] = 0
    total = sum(counts)
    displs = [int(sum(counts[:r])) + r for r in range(size)]  # gaps of one
    span = displs[-1] + counts[-1] + 1
    forms = [
        ("[buf, counts]", lambda b: [b, counts], False),
        ("[buf, (counts, displs), INT64_T]", lambda b: [b, (counts, displs), MPI.INT64_T], True),
        ("[buf, ndarray counts, displs, 'l']", lambda b: [b, np.array(counts), displs, "l"], True),
        ("[buf, (counts, None), 'l']", lambda b: [b, (counts, None), "l"], False),
    ]
    for i, (name, make, gapped) in enumerate(forms):
        root = (i + 1) % size
        whole = small(("sv", name), root, span if gapped else total, np.int64)
        starts = displs if gapped else [int(sum(counts[:r])) for r in range(size)]
        mine = np.full(counts[rank], SENTINEL, dtype=np.int64)
        comm.Scatterv(make(whole) if rank == root else None, mine, root=root)
        ck.equal(mine, whole[starts[rank]:starts[rank] + counts[rank]], f"Scatterv {name} root={root}")
    # one int for all
    whole = np.arange(4 * size, dtype="f")
    mine = np.zeros(4, dtype="f")
    comm.Scatterv([whole, 4, None, MPI.FLOAT] if rank == 0 else None, mine, root=0)
    ck.equal(mine, whole[rank * 4:(rank + 1) * 4], "Scatterv [buf, 4, None, FLOAT]")
    # IN_PLACE recvbuf at root
    whole = np.arange(total, dtype="d") + 0.5
    starts = [int(sum(counts[:r])) for r in range(size)]
    if rank == 0:
        keep = whole.copy()
        comm.Scatterv([keep, counts], MPI.IN_PLACE, root=0)
        ck.equal(keep, whole, "Scatterv IN_PLACE at root")
    else:
        mine = np.zeros(counts[rank])
        comm.Scatterv(None, mine, root=0)
        ck.equal(mine, whole[starts[rank]:starts[rank] + counts[rank]], "Scatterv beside an IN_PLACE root")


def alltoallv_checks():
    def cnt(src, dst):  # elements src sends to dst
        return (src + 2 * dst) % 3

    data = {r: small("a2av", r, sum(cnt(r, j) for j in range(size)), "d") for r in range(size)}

    def piece(src, dst):
        off = sum(cnt(src, j) for j in range(dst))
        return data[src][off:off + cnt(src, dst)]

    scounts = [cnt(rank, j) for j in range(size)]
    rcounts = [cnt(i, rank) for i in range(size)]
    want = np.concatenate([piece(i, rank) for i in range(size)])
    # packed, counts only
    out = np.full(sum(rcounts), -1.0)
    comm.Alltoallv([data[rank], scounts], [out, rcounts])
    ck.equal(out, want, "Alltoallv [buf, counts]")
    # explicit displacements with gaps on both sides, 3- and 4-item forms, ndarray counts
    sdispls = [sum(scounts[:j]) + j for j in range(size)]
    sbuf = np.full(sdispls[-1] + scounts[-1] + 1, 999.0)
    for j in range(size):
        sbuf[sdispls[j]:sdispls[j] + scounts[j]] = piece(rank, j)
    rdispls = [sum(rcounts[:i]) + 2 * i for i in range(size)]
    span = rdispls[-1] + rcounts[-1] + 2
    wanted = np.full(span, -1.0)
    for i in range(size):
        wanted[rdispls[i]:rdispls[i] + rcounts[i]] = piece(i, rank)
    out = np.full(span, -1.0)
    comm.Alltoallv([sbuf, (scounts, sdispls), MPI.DOUBLE], [out, np.array(rcounts), np.array(rdispls), "d"])
    ck.equal(out, wanted, "Alltoallv (counts, displs) / counts, displs forms with gaps")
    # one int for all, displs None
    sb = np.array([rank * 10 + j for j in range(size) for _ in range(2)], dtype="i")
    out = np.zeros(2 * size, dtype="i")
    comm.Alltoallv([sb, (2, None), MPI.INT], [out, 2])
    ck.equal(out, np.array([i * 10 + rank for i in range(size) for _ in range(2)], dtype="i"),
             "Alltoallv one int for all")


# ---------------------------------------------------------------------------- objects

def compose(f, g):
    """Affine maps t -> a*t + b as (a, b): apply f, then g. Associative, not commutative."""
    return (f[0] * g[0], f[1] * g[0] + g[1])


def affine(r):
    return ((r % 3) - 1 or 2, r * 3 + 1)


def objects_bcast_reduce():
    for root in range(size):
        obj = {"root": root, "data": list(range(root + 3)), "arr": np.arange(root + 1.0)}
        got = comm.bcast(obj if rank == root else "ignored", root=root)
        ck.ok(got["root"] == root and got["data"] == obj["data"] and np.array_equal(got["arr"], obj["arr"]),
              f"bcast dict root={root}", repr(got))
    ck.equal(comm.bcast(None, root=0), None, "bcast None")
    # reduce: None off-root, numbers / lists / arrays with SUM
    for root in range(size):
        got = comm.reduce(rank + 1, op=MPI.SUM, root=root)
        ck.equal(got, size * (size + 1) // 2 if rank == root else None, f"reduce SUM root={root}")
    got = comm.reduce([rank], root=size - 1)
    ck.equal(got, list(range(size)) if rank == size - 1 else None, "reduce lists concatenate in rank order")
    got = comm.allreduce(np.arange(3) * (rank + 1))
    ck.equal(got, np.arange(3) * (size * (size + 1) // 2), "allreduce ndarray SUM")
    vals = [int(v) for v in rng("objv").integers(-20, 20, size)]
    v = vals[rank]
    checks = [("SUM", sum(vals)), ("PROD", int(np.prod(vals))), ("MAX", max(vals)), ("MIN", min(vals)),
              ("LAND", fold(vals, lambda a, b: bool(a) & bool(b))), ("LOR", fold(vals, lambda a, b: bool(a) | bool(b))),
              ("LXOR", fold(vals, lambda a, b: bool(a) ^ bool(b))),  # one rank: the value itself, as in MPI
              ("BAND", fold(vals, lambda a, b: a & b)), ("BOR", fold(vals, lambda a, b: a | b)),
              ("BXOR", fold(vals, lambda a, b: a ^ b))]
    for name, want in checks:
        got = comm.allreduce(v, op=getattr(MPI, name))
        ck.ok(got == want, f"allreduce object {name}", f"got {got!r}, want {want!r}")
        got = comm.reduce(v, op=getattr(MPI, name), root=0)
        ck.ok(got == want if rank == 0 else got is None, f"reduce object {name}", f"got {got!r}, want {want!r}")
    # non-commutative callables: the result is the rank-order fold
    cat = lambda a, b: a + b  # noqa: E731
    letters = "abcdefghij"
    ck.equal(comm.allreduce(letters[rank], op=cat), letters[:size], "allreduce string concat (callable)")
    ck.equal(comm.reduce(letters[rank] * 2, op=cat, root=size - 1),
             "".join(c * 2 for c in letters[:size]) if rank == size - 1 else None, "reduce string concat at last rank")
    want = fold([affine(r) for r in range(size)], compose)
    ck.equal(comm.allreduce(affine(rank), op=compose), want, "allreduce affine composition (non-commutative)")
    ck.equal(comm.reduce(affine(rank), op=compose, root=0), want if rank == 0 else None,
             "reduce affine composition")
    ck.equal(comm.allreduce([rank, -rank], op=MPI.SUM), [x for r in range(size) for x in (r, -r)],
             "allreduce list concat with MPI.SUM")
    # MAXLOC / MINLOC with ties: the smaller index wins
    tie = [int(x) for x in rng("loc").integers(0, 2, size)]
    got = comm.allreduce((tie[rank], rank), op=MPI.MAXLOC)
    mx = max(tie)
    ck.equal(tuple(got), (mx, tie.index(mx)), "allreduce MAXLOC ties -> smaller index")
    got = comm.allreduce((tie[rank], rank), op=MPI.MINLOC)
    mn = min(tie)
    ck.equal(tuple(got), (mn, tie.index(mn)), "allreduce MINLOC ties -> smaller index")
    got = comm.allreduce((rank // 2, rank), op=MPI.MAXLOC)
    ck.equal(tuple(got), ((size - 1) // 2, 2 * ((size - 1) // 2)), "allreduce MAXLOC (r//2, r)")
    got = comm.allreduce((-(rank // 2), rank), op=MPI.MINLOC)
    ck.equal(tuple(got), (-((size - 1) // 2), 2 * ((size - 1) // 2)), "allreduce MINLOC (-(r//2), r)")
    got = comm.reduce((1.5, size - 1 - rank), op=MPI.MAXLOC, root=0)
    ck.equal(None if got is None else tuple(got), (1.5, 0) if rank == 0 else None, "reduce MAXLOC all tied")


def objects_scan():
    ck.equal(comm.scan(rank + 1), (rank + 1) * (rank + 2) // 2, "scan SUM default")
    ck.equal(comm.exscan(rank + 1), rank * (rank + 1) // 2 if rank else None, "exscan SUM (rank 0 None)")
    ck.equal(comm.scan(rank + 2, op=MPI.PROD), int(np.prod(np.arange(2, rank + 3))), "scan PROD")
    ck.equal(comm.scan(str(rank), op=lambda a, b: a + b), "".join(map(str, range(rank + 1))), "scan string concat")
    ck.equal(comm.exscan(str(rank), op=lambda a, b: a + b), "".join(map(str, range(rank))) if rank else None,
             "exscan string concat")
    ck.equal(comm.scan(affine(rank), compose), fold([affine(r) for r in range(rank + 1)], compose),
             "scan affine composition")
    ck.equal(comm.exscan(affine(rank), op=compose),
             fold([affine(r) for r in range(rank)], compose) if rank else None, "exscan affine composition")
    ck.equal(comm.scan([rank]), list(range(rank + 1)), "scan lists")
    ck.equal(comm.exscan(size - rank, op=MPI.MAX), size if rank else None, "exscan MAX")
    ck.equal(comm.scan(rank, op=MPI.MIN), 0, "scan MIN")
    got = comm.scan((rank % 2, rank), op=MPI.MAXLOC)
    ck.equal(tuple(got), (1, 1) if rank >= 1 else (0, 0), "scan MAXLOC")


def objects_gather():
    for root in range(size):
        got = comm.gather({"r": rank}, root=root)
        ck.equal(got, [{"r": r} for r in range(size)] if rank == root else None, f"gather root={root}")
        seq = [("item", i, root) for i in range(size)] if rank == root else None
        ck.equal(comm.scatter(seq, root=root), ("item", rank, root), f"scatter root={root}")
    ck.equal(comm.allgather(rank * 2), [r * 2 for r in range(size)], "allgather")
    ck.equal(comm.allgather(None), [None] * size, "allgather None")
    ck.equal(comm.alltoall([(rank, j) for j in range(size)]), [(i, rank) for i in range(size)], "alltoall")
    big = np.arange(100000) * rank
    got = comm.allgather(big)
    ck.ok(all(np.array_equal(got[r], np.arange(100000) * r) for r in range(size)), "allgather big arrays")
    ck.equal(comm.scatter(list(range(size)), root=0) if rank == 0 else comm.scatter(None, root=0), rank,
             "scatter with None off-root")
    ck.equal(comm.barrier(), None, "barrier returns None")
    ck.equal(comm.Barrier(), None, "Barrier returns None")
    ck.equal(comm.bcast(obj=[1, 2], root=0), [1, 2], "bcast obj= keyword")
    ck.equal(comm.gather(sendobj=rank, root=0), list(range(size)) if rank == 0 else None, "gather keywords")


# ---------------------------------------------------------------------------- errors

def is_err_root(label):
    def check(e):
        ck.ok(isinstance(e, RuntimeError), f"{label}: MPI.Exception is a RuntimeError", type(e).__mro__)
        ck.equal(e.Get_error_class(), MPI.ERR_ROOT, f"{label}: Get_error_class() == ERR_ROOT")
    return check


def bad_root_buffers():
    bad = size  # one past the last rank
    buf = np.zeros(4)
    calls = [
        ("Bcast", lambda: comm.Bcast(buf, root=bad)),
        ("Reduce", lambda: comm.Reduce(np.ones(4), np.zeros(4), op=MPI.SUM, root=bad)),
        ("Gather", lambda: comm.Gather(np.ones(2), np.zeros(2 * size), root=bad)),
        ("Scatter", lambda: comm.Scatter(np.zeros(2 * size), np.zeros(2), root=bad)),
        ("Gatherv", lambda: comm.Gatherv(np.ones(2), [np.zeros(2 * size), 2], root=bad)),
        ("Scatterv", lambda: comm.Scatterv([np.zeros(2 * size), 2], np.zeros(2), root=bad)),
    ]
    for name, call in calls:
        ck.raises(MPI.Exception, call, f"{name} root=size -> MPI.Exception", is_err_root(name))
    # the program goes on: a real Bcast after the failures
    buf = np.arange(4.0) if rank == 0 else np.zeros(4)
    comm.Bcast(buf, root=0)
    ck.equal(buf, np.arange(4.0), "Bcast works after bad roots")


def bad_root_objects():
    bad = size + 3
    calls = [
        ("bcast", lambda: comm.bcast("x", root=bad)),
        ("reduce", lambda: comm.reduce(1, op=MPI.SUM, root=bad)),
        ("gather", lambda: comm.gather(1, root=bad)),
        ("scatter", lambda: comm.scatter([1] * size, root=bad)),
    ]
    for name, call in calls:
        ck.raises(MPI.Exception, call, f"{name} root=size+3 -> MPI.Exception", is_err_root(name))
    ck.equal(comm.allreduce(1), size, "allreduce works after bad roots")
    ck.equal(comm.bcast("after", root=size - 1), "after", "bcast works after bad roots")


def bad_arguments():
    """Errors every rank detects alike before any traffic; the world goes on afterwards."""
    ck.raises(BufferError, lambda: comm.Allreduce(np.zeros(10)[::2], np.zeros(5)), "non-contiguous sendbuf")
    readonly = np.zeros(5)
    readonly.flags.writeable = False
    ck.raises(BufferError, lambda: comm.Allreduce(np.ones(5), readonly), "read-only recvbuf")
    ck.raises(ValueError, lambda: comm.Allreduce(np.zeros(5), np.zeros(6)), "Allreduce send/recv counts differ")
    ck.raises(ValueError, lambda: comm.Allreduce(np.zeros(5), np.zeros(5, "i")), "Allreduce datatypes differ")
    if size >= 2:  # with one block any length divides
        ck.raises(ValueError, lambda: comm.Allgather(np.zeros(2), np.zeros(2 * size + 1)),
                  "Allgather recvbuf len not a multiple of size -> ValueError")
        ck.raises(ValueError, lambda: comm.Alltoall(np.zeros(2 * size + 1), np.zeros(2 * size)),
                  "Alltoall sendbuf len not a multiple of size -> ValueError")
        ck.raises(ValueError, lambda: comm.Alltoall(np.zeros(2 * size), np.zeros(2 * size + 1)),
                  "Alltoall recvbuf len not a multiple of size -> ValueError")
    # [None, datatype] is a zero-length message in every collective
    comm.Bcast([None, "d"], root=0)
    comm.Allreduce([None, "d"], [None, "d"], op=MPI.SUM)
    comm.Allgather([None, MPI.INT], [None, MPI.INT])
    ck.ok(True, "[None, datatype] zero-length collectives")
    out = np.zeros(size, dtype="i")
    comm.Allgather(np.array([rank], dtype="i"), out)
    ck.equal(out, np.arange(size, dtype="i"), "Allgather after the argument errors")


def negative_roots():
    # negative roots are invalid on an intracommunicator (not Python-style indices)
    ck.raises(MPI.Exception, lambda: comm.Bcast(np.zeros(2), root=-1), "Bcast root=-1", is_err_root("Bcast -1"))
    ck.raises(MPI.Exception, lambda: comm.Reduce(np.zeros(2), np.zeros(2), root=-2), "Reduce root=-2",
              is_err_root("Reduce -2"))
    ck.raises(MPI.Exception, lambda: comm.bcast(1, root=-1), "bcast root=-1", is_err_root("bcast -1"))
    ck.raises(MPI.Exception, lambda: comm.reduce(1, root=-1), "reduce root=-1", is_err_root("reduce -1"))
    ck.equal(comm.allreduce(rank), size * (size - 1) // 2, "allreduce after negative roots")


def exception_class():
    ck.ok(issubclass(MPI.Exception, RuntimeError), "MPI.Exception subclasses RuntimeError")
    e = MPI.Exception(MPI.ERR_ROOT)
    ck.equal(e.Get_error_class(), MPI.ERR_ROOT, "MPI.Exception(ERR_ROOT).Get_error_class()")
    ck.equal(e.Get_error_code(), MPI.ERR_ROOT, "MPI.Exception(ERR_ROOT).Get_error_code()")
    ck.ok(isinstance(e.Get_error_string(), str) and e.Get_error_string(), "Get_error_string() non-empty str")


def persistent_checks():
    x, out = np.zeros(5), np.zeros(5)
    req = comm.Allreduce_init(x, out, MPI.SUM)
    for step in range(4):  # each Start reads x as it is now
        x[:] = rank + step
        req.Start()
        req.Wait()
        ck.equal(out, np.full(5, sum(r + step for r in range(size)), float), f"persistent: Allreduce_init start {step}")
    req.Free()
    ck.ok(not req, "persistent: a freed request is null")
    b = np.zeros(3, np.int32)
    bc = comm.Bcast_init(b, root=size - 1)
    bar = comm.Barrier_init()
    for step in range(3):
        if rank == size - 1:
            b[:] = step + 10
        MPI.Prequest.Startall([bc, bar])
        MPI.Request.Waitall([bc, bar])
        ck.equal(b, np.full(3, step + 10, np.int32), f"persistent: Bcast_init start {step}")
    red = np.zeros(2)
    r = comm.Reduce_init(np.full(2, rank + 1.0), red, MPI.MAX, 0, MPI.INFO_NULL)  # info positional, as MPI has it
    r.Start()
    r.Wait()
    if rank == 0:
        ck.equal(red, np.full(2, float(size)), "persistent: Reduce_init with a positional info")
    ag = np.zeros(size, np.int64)
    a2 = np.zeros(size, np.int64)
    reqs = [comm.Allgather_init(np.array([rank], np.int64), ag),
            comm.Alltoall_init(np.arange(size, dtype=np.int64) + 100 * rank, a2)]
    MPI.Prequest.Startall(reqs)
    MPI.Request.Waitall(reqs)
    ck.equal(ag, np.arange(size, dtype=np.int64), "persistent: Allgather_init")
    ck.equal(a2, np.arange(size, dtype=np.int64) * 100 + rank, "persistent: Alltoall_init")
    counts = [i + 1 for i in range(size)]
    gv = np.zeros(sum(counts)) if rank == 0 else None
    g = comm.Gatherv_init(np.full(rank + 1, float(rank)), [gv, counts] if rank == 0 else None, root=0)
    g.Start()
    g.Wait()
    if rank == 0:
        ck.equal(gv, np.repeat(np.arange(size, dtype=float), counts), "persistent: Gatherv_init")
    sc = np.zeros(1)
    s = comm.Scan_init(np.array([1.0]), sc, MPI.SUM)
    s.Start()
    s.Wait()
    ck.ok(sc[0] == rank + 1, "persistent: Scan_init")
    for q in reqs + [bc, bar, r, g, s]:
        q.Free()


PARTS = {
    "reduce": [bcast_dtypes_sizes, bcast_forms, allreduce_dtypes_sizes, allreduce_ops, allreduce_float_tolerance,
               allreduce_forms, reduce_checks],
    "gather": [gather_scatter_sizes, gather_forms, gather_in_place],
    "scan": [scan_checks, reduce_scatter_checks],
    "vector": [gatherv_checks, allgatherv_paths, scatterv_checks, alltoallv_checks],
    "objects": [objects_bcast_reduce, objects_scan, objects_gather],
    "persistent": [persistent_checks],
    "errors": [bad_root_buffers, bad_root_objects, negative_roots, bad_arguments, exception_class],
}

if __name__ == "__main__":
    ck.run(PARTS[PART])
    comm.Barrier()
    ck.finish()
else:  # a batched job (_batch.py): each section is a check
    sections(PARTS, ck)
