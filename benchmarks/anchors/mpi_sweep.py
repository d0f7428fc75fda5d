"""mpi4py anchor: the common sweep over Open MPI. Run by mpirun, e.g.

    mpirun --allow-run-as-root --oversubscribe -n 4 \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        benchmarks/.env/bin/python benchmarks/anchors/mpi_sweep.py --impl mpi-tcp

(``--mca btl self,vader`` for shared memory). Buffer-based calls only
(Allreduce with IN_PLACE, Allgather, Reduce_scatter_block, Bcast, Send/Recv).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sweep  # noqa: E402


def _mismatch(arr, value):
    if arr.size and not np.all(arr == value):
        return f"expected {value}, got e.g. {arr.flat[0]}"
    return None


class MPIBackend(_sweep.Backend):
    def __init__(self, impl):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.impl = impl
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def barrier(self):
        self.comm.Barrier()

    def gather_f64(self, values):
        values = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty((self.size, values.size), dtype=np.float64)
        self.comm.Allgather(values, out)
        return out

    def prepare(self, op, count):
        MPI, comm, n, r = self.MPI, self.comm, self.size, self.rank
        x = np.full(count, r + 1, dtype=np.float32)
        total = _sweep.expected_sum(n)
        if op == "all_reduce":
            def run():
                comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)

            def check():
                bad = _mismatch(x, total)
                x.fill(0)  # keep later iterations finite
                return bad
            return run, check
        if op == "all_gather":
            blk = x[: count // n]
            out = np.empty(count, dtype=np.float32)

            def run():
                comm.Allgather(blk, out)

            def check():
                for q in range(n):
                    bad = _mismatch(out[q * (count // n):(q + 1) * (count // n)], q + 1)
                    if bad:
                        return bad
                return None
            return run, check
        if op == "reduce_scatter":
            out = np.empty(count // n, dtype=np.float32)

            def run():
                comm.Reduce_scatter_block(x, out, op=MPI.SUM)
            return run, lambda: _mismatch(out, total)
        if op == "broadcast":
            def run():
                comm.Bcast(x, root=0)
            return run, lambda: _mismatch(x, 1)
        if op == "pingpong":
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
                    pass
            return run, (lambda: _mismatch(buf, 1)) if r < 2 else None
        raise ValueError(op)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", default="mpi", help="name written into the JSON lines (mpi-tcp, mpi-shm)")
    _sweep.add_arguments(p)
    args = p.parse_args()
    b = MPIBackend(args.impl)
    rc = _sweep.run_sweep(b, args)
    b.barrier()
    return rc


if __name__ == "__main__":
    sys.exit(main())
