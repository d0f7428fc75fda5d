"""The mpi4py-compatible layer (`from commlib import MPI`) against commlib's own API and real mpi4py.

One program, the same timing code for all three; only the calls differ:

    --impl commlib-mpi   from commlib import MPI   (commrun -n N benchmarks/mpi_layer.py --impl commlib-mpi)
    --impl commlib       commlib's own API         (commrun -n N benchmarks/mpi_layer.py --impl commlib)
    --impl mpi4py        from mpi4py import MPI    (mpirun -n N ... python benchmarks/mpi_layer.py --impl mpi4py)

Ops (NumPy float32 buffers unless said otherwise; MPI call / commlib call):

    allreduce     Allreduce(x, y, op=SUM)        cl.all_reduce(x, out=y)
    bcast         Bcast(x, root=0)               cl.broadcast(x)
    allgather     Allgather(blk, out)            cl.all_gather(blk)      (bytes = the gathered array,
                                                                          rounded up to n elements)
    pingpong_buf  Send / Recv, ranks 0 <-> 1     cl.send / cl.recv_into
    pingpong_obj  send / recv of a small dict and of a 1 MiB bytes object (bytes = pickled size)
                                                 cl.send_obj / cl.recv_obj

Sizes: 8 B to 64 MiB in x8 steps for the collectives, 8 B to 16 MiB for
pingpong_buf. Each point: warm-up iterations (3; 1 from 16 MiB up; the first
one's result is checked), then as many timed iterations as fit in --budget
seconds (at least 5; 3 from 16 MiB up; at most --max-iters), each preceded by
a barrier. Statistic: the median over iterations of the maximum over ranks of
each rank's time; ping-pong: rank 0's round trip / 2. busbw (GB/s = 1e9 B/s)
uses nccl-tests' factors: allreduce 2(n-1)/n, allgather (n-1)/n, the rest 1.

Rank 0 writes one JSON line per point to stdout, or appends it to --out:

    {"impl", "n", "op", "bytes", "median_us", "busbw", "algbw", "iters", "min_us", "round"[, "check_failed"]}

benchmarks/mpi_layer.sh runs all three at n = 2 and 4, interleaved;
benchmarks/mpi_layer_table.py turns the lines into a markdown table.
"""
import argparse
import gc
import pickle
import sys

import numpy as np

import _benchlib as bl
from _benchlib import COLL_SIZES, MiB, P2P_SIZES

IMPLS = ("commlib-mpi", "commlib", "mpi4py")
OPS = ("allreduce", "bcast", "allgather", "pingpong_buf", "pingpong_obj")


def small_dict():
    return {"op": "step", "iter": 12345, "lr": 0.01, "shape": [3, 4], "name": "worker-1", "done": False}


def big_bytes():
    return (np.arange(MiB, dtype=np.uint32) * 2654435761 % 251).astype(np.uint8).tobytes()  # 1 MiB


OBJECTS = {"dict": small_dict, "bytes_1MiB": big_bytes}


class MPIImpl:
    """mpi4py's API: the same code serves `from commlib import MPI` and `from mpi4py import MPI`."""

    def __init__(self, name):
        if name == "mpi4py":
            from mpi4py import MPI
        else:
            from commlib import MPI
        self.MPI, self.comm, self.name = MPI, MPI.COMM_WORLD, name
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def barrier(self):
        self.comm.Barrier()

    def gather_f64(self, values):
        values = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty((self.size, values.size), dtype=np.float64)
        self.comm.Allgather(values, out)
        return out

    def prepare(self, op, count, obj=None):
        MPI, comm, n, r = self.MPI, self.comm, self.size, self.rank
        if op == "allreduce":
            x = np.full(count, r + 1, dtype=np.float32)
            y = np.empty_like(x)

            def run():
                comm.Allreduce(x, y, op=MPI.SUM)
            return run, lambda: bl.mismatch(y, n * (n + 1) / 2)
        if op == "bcast":
            x = np.full(count, r + 1, dtype=np.float32)

            def run():
                comm.Bcast(x, root=0)
            return run, lambda: bl.mismatch(x, 1)
        if op == "allgather":
            blk = np.full(count // n, r + 1, dtype=np.float32)
            out = np.empty(count, dtype=np.float32)

            def run():
                comm.Allgather(blk, out)
            return run, lambda: bl.gathered(out, count, n)
        if op == "pingpong_buf":
            x = np.full(count, r + 1, dtype=np.float32)
            buf = np.empty_like(x)
            if r == 0:
                def run():
                    comm.Send(x, dest=1, tag=7)
                    comm.Recv(buf, source=1, tag=7)
            elif r == 1:
                def run():
                    comm.Recv(buf, source=0, tag=7)
                    comm.Send(buf, dest=0, tag=7)
            else:
                def run():
                    return None
            return run, (lambda: bl.mismatch(buf, 1)) if r < 2 else None
        if op == "pingpong_obj":
            got = {}
            if r == 0:
                def run():
                    comm.send(obj, dest=1, tag=7)
                    got["v"] = comm.recv(source=1, tag=7)
            elif r == 1:
                def run():
                    got["v"] = comm.recv(source=0, tag=7)
                    comm.send(got["v"], dest=0, tag=7)
            else:
                def run():
                    return None
            return run, (lambda: None if got.get("v") == obj else "object differs") if r < 2 else None
        raise ValueError(op)


class CommlibImpl:
    """commlib's own API."""

    def __init__(self, name):
        import commlib as cl
        self.cl, self.name = cl, name
        g = cl.init()
        self.rank, self.size = g.rank(), g.size()

    def barrier(self):
        self.cl.barrier()

    def gather_f64(self, values):
        values = np.ascontiguousarray(values, dtype=np.float64)
        return np.asarray(self.cl.all_gather(values)).reshape(self.size, values.size)

    def prepare(self, op, count, obj=None):
        cl, n, r = self.cl, self.size, self.rank
        if op == "allreduce":
            x = np.full(count, r + 1, dtype=np.float32)
            y = np.empty_like(x)

            def run():
                cl.all_reduce(x, out=y)
            return run, lambda: bl.mismatch(y, n * (n + 1) / 2)
        if op == "bcast":
            x = np.full(count, r + 1, dtype=np.float32)

            def run():
                cl.broadcast(x)
            return run, lambda: bl.mismatch(x, 1)
        if op == "allgather":
            blk = np.full(count // n, r + 1, dtype=np.float32)
            res = {}

            def run():
                res["out"] = cl.all_gather(blk)
            return run, lambda: bl.gathered(res["out"], count, n)
        if op == "pingpong_buf":
            x = np.full(count, r + 1, dtype=np.float32)
            buf = np.empty_like(x)
            if r == 0:
                def run():
                    cl.send(x, 1, tag=7)
                    cl.recv_into(buf, 1, tag=7)
            elif r == 1:
                def run():
                    cl.recv_into(buf, 0, tag=7)
                    cl.send(buf, 0, tag=7)
            else:
                def run():
                    return None
            return run, (lambda: bl.mismatch(buf, 1)) if r < 2 else None
        if op == "pingpong_obj":
            got = {}
            if r == 0:
                def run():
                    cl.send_obj(obj, 1, tag=7)
                    got["v"] = cl.recv_obj(1, tag=7)
            elif r == 1:
                def run():
                    got["v"] = cl.recv_obj(0, tag=7)
                    cl.send_obj(got["v"], 0, tag=7)
            else:
                def run():
                    return None
            return run, (lambda: None if got.get("v") == obj else "object differs") if r < 2 else None
        raise ValueError(op)


def run_point(impl, op, nbytes, args, obj=None, label=None):
    n = impl.size
    if obj is not None:
        count = 0
        nbytes = len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    else:
        count = max(1, nbytes // 4)
        if op == "allgather":
            count = max(n, -(-count // n) * n)
        nbytes = count * 4
    run, check = impl.prepare(op, count, obj)
    times, iters, bad, problem = bl.measure(impl, run, check, nbytes, args)
    allt = impl.gather_f64(times)
    del run, check
    gc.collect()
    per_iter = allt[0] / 2.0 if op.startswith("pingpong") else allt.max(axis=0)
    return bl.record(impl.name, n, op if label is None else f"{op}:{label}", nbytes, per_iter, iters, bad,
                     problem, args.round, bl.busbw_factor(op, n))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", required=True, choices=IMPLS)
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--sizes", nargs="+", type=bl.parse_size, default=None,
                   help="collective sizes in bytes (K/M suffixes); default 8 B..16 MiB x8 and 64 MiB")
    p.add_argument("--p2p-sizes", nargs="+", type=bl.parse_size, default=None,
                   help="Send/Recv ping-pong sizes; default 8 B..16 MiB x8")
    bl.add_timing_args(p)
    bl.add_output_args(p)
    args = p.parse_args(argv)

    impl = CommlibImpl(args.impl) if args.impl == "commlib" else MPIImpl(args.impl)
    cap = int(args.max_mib * MiB)
    coll = [s for s in (args.sizes or COLL_SIZES) if s <= cap]
    p2p = [s for s in (args.p2p_sizes or P2P_SIZES) if s <= cap]
    sink = bl.Sink(args.out, impl.rank)
    emit = sink.emit

    for op in args.ops:
        if op.startswith("pingpong") and impl.size < 2:
            emit({"impl": impl.name, "n": impl.size, "op": op, "skipped": "ping-pong needs 2 ranks",
                  "round": args.round})
            continue
        if op == "pingpong_obj":
            for label, make in OBJECTS.items():
                emit(run_point(impl, op, 0, args, obj=make(), label=label))
        else:
            for nbytes in (p2p if op == "pingpong_buf" else coll):
                emit(run_point(impl, op, nbytes, args))
    impl.barrier()
    if impl.rank == 0:
        sink.close()
        if sink.failed:
            print(f"{impl.name}: {sink.failed} point(s) returned wrong results", file=sys.stderr)
    return 1 if sink.failed else 0


if __name__ == "__main__":
    sys.exit(main())
