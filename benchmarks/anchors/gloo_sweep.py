"""torch.distributed gloo anchor: the common sweep. One process per rank, started
by the orchestrator with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT
and GLOO_SOCKET_IFNAME=lo (so gloo's pairs bind loopback, not the hostname's
address). Example for 2 ranks:

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 \
        GLOO_SOCKET_IFNAME=lo benchmarks/.env/bin/python benchmarks/anchors/gloo_sweep.py & done; wait

Calls: all_reduce (in place), all_gather_into_tensor, reduce_scatter_tensor,
broadcast, send/recv; CPU float32 tensors.
"""
import argparse
import datetime
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sweep  # noqa: E402


def _mismatch(t, value):
    a = t.numpy()
    if a.size and not np.all(a == value):
        return f"expected {value}, got e.g. {a.flat[0]}"
    return None


class GlooBackend(_sweep.Backend):
    impl = "gloo"

    def __init__(self, timeout_s):
        warnings.filterwarnings("ignore", category=FutureWarning)  # *_tensor names deprecated in 2.13
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=timeout_s))
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.ops = tuple(_sweep.OPS)

    def barrier(self):
        self.dist.barrier()

    def gather_f64(self, values):
        t = self.torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
        out = self.torch.empty(self.size * t.numel(), dtype=self.torch.float64)
        self.dist.all_gather_into_tensor(out, t)
        return out.numpy().reshape(self.size, -1)

    def prepare(self, op, count):
        torch, dist, n, r = self.torch, self.dist, self.size, self.rank
        x = torch.full((count,), float(r + 1), dtype=torch.float32)
        total = _sweep.expected_sum(n)
        if op == "all_reduce":
            def run():
                dist.all_reduce(x, op=dist.ReduceOp.SUM)

            def check():
                bad = _mismatch(x, total)
                x.zero_()
                return bad
            return run, check
        if op == "all_gather":
            blk = x[: count // n].clone()
            out = torch.empty(count, dtype=torch.float32)

            def run():
                dist.all_gather_into_tensor(out, blk)

            def check():
                for q in range(n):
                    bad = _mismatch(out[q * (count // n):(q + 1) * (count // n)], q + 1)
                    if bad:
                        return bad
                return None
            return run, check
        if op == "reduce_scatter":
            out = torch.empty(count // n, dtype=torch.float32)

            def run():
                dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)
            return run, lambda: _mismatch(out, total)
        if op == "broadcast":
            def run():
                dist.broadcast(x, src=0)
            return run, lambda: _mismatch(x, 1)
        if op == "pingpong":
            buf = torch.empty_like(x)
            if r == 0:
                def run():
                    dist.send(x, dst=1, tag=7)
                    dist.recv(buf, src=1, tag=7)
            elif r == 1:
                def run():
                    dist.recv(buf, src=0, tag=7)
                    dist.send(buf, dst=0, tag=7)
            else:
                def run():
                    pass
            return run, (lambda: _mismatch(buf, 1)) if r < 2 else None
        raise ValueError(op)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=300, help="gloo per-operation timeout in seconds")
    _sweep.add_arguments(p)
    args = p.parse_args()
    b = GlooBackend(args.timeout)
    try:
        rc = _sweep.run_sweep(b, args)
        b.barrier()
    finally:
        b.dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
