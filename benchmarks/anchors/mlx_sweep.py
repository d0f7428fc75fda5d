"""MLX anchor: the common sweep over mlx.core.distributed's "ring" backend (CPU).

The orchestrator starts each rank itself (mlx.launch relays output through a
spinning thread, which would steal one of the two cores) with MLX_RANK and
MLX_HOSTFILE pointing at a JSON file: a list with one entry per rank, each a
list of "ip:port" strings (one per connection), e.g.
[["127.0.0.1:41001"], ["127.0.0.1:41002"]]. Only loopback addresses are used.

    MLX_RANK=0 MLX_HOSTFILE=/tmp/h.json benchmarks/.env/bin/python benchmarks/anchors/mlx_sweep.py &
    MLX_RANK=1 MLX_HOSTFILE=/tmp/h.json benchmarks/.env/bin/python benchmarks/anchors/mlx_sweep.py

Calls: all_sum, all_gather, sum_scatter (reduce_scatter, if the ring backend
implements it), send/recv between ring neighbours 0 and 1; mx.eval forces each
lazy result. MLX has no broadcast and no barrier: broadcast is skipped and the
barrier is an all_sum of one element. MLX arrays are immutable, so each call
allocates its output (as it does for MLX users).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sweep  # noqa: E402


def _mismatch(a, value):
    a = np.asarray(a)
    if a.size and not np.all(a == value):
        return f"expected {value}, got e.g. {a.flat[0]}"
    return None


class MLXBackend(_sweep.Backend):
    impl = "mlx"

    def __init__(self, probe_reduce_scatter):
        import mlx.core as mx
        self.mx = mx
        mx.set_default_device(mx.cpu)
        self.group = mx.distributed.init(strict=True, backend="ring")
        self.rank = self.group.rank()
        self.size = self.group.size()
        self._one = mx.ones((1,), dtype=mx.float32)
        ops = ["all_reduce", "all_gather", "pingpong"]
        self.skip_reasons = {"broadcast": "mlx.core.distributed has no broadcast"}
        if probe_reduce_scatter and self.size > 1:
            # Older ring backends throw here; a throw on every rank is safe to catch.
            try:
                y = mx.distributed.sum_scatter(mx.ones((self.size,), dtype=mx.float32))
                mx.eval(y)
                ops.append("reduce_scatter")
            except Exception as e:  # noqa: BLE001
                self.skip_reasons["reduce_scatter"] = f"sum_scatter failed on the ring backend: {e}"
        self.ops = tuple(ops)

    def barrier(self):
        self.mx.eval(self.mx.distributed.all_sum(self._one))

    def gather_f64(self, values):
        mx = self.mx
        # float32 microseconds keep ~7 digits, plenty for timings
        a = mx.array(np.ascontiguousarray(values, dtype=np.float64).astype(np.float32) * 1e6)
        out = mx.distributed.all_gather(a)
        mx.eval(out)
        return np.array(out, dtype=np.float64).reshape(self.size, -1) / 1e6

    def prepare(self, op, count):
        mx, n, r = self.mx, self.size, self.rank
        x = mx.full((count,), float(r + 1), dtype=mx.float32)
        mx.eval(x)
        total = _sweep.expected_sum(n)
        res = {}
        if op == "all_reduce":
            def run():
                res["y"] = mx.distributed.all_sum(x)
                mx.eval(res["y"])
            return run, lambda: _mismatch(res["y"], total)
        if op == "all_gather":
            blk = x[: count // n]
            mx.eval(blk)

            def run():
                res["y"] = mx.distributed.all_gather(blk)
                mx.eval(res["y"])

            def check():
                y = np.array(res["y"])
                for q in range(n):
                    bad = _mismatch(y[q * (count // n):(q + 1) * (count // n)], q + 1)
                    if bad:
                        return bad
                return None
            return run, check
        if op == "reduce_scatter":
            def run():
                res["y"] = mx.distributed.sum_scatter(x)
                mx.eval(res["y"])
            return run, lambda: _mismatch(res["y"], total)
        if op == "pingpong":
            if r == 0:
                def run():
                    mx.eval(mx.distributed.send(x, 1))
                    res["y"] = mx.distributed.recv_like(x, 1)
                    mx.eval(res["y"])
            elif r == 1:
                def run():
                    res["y"] = mx.distributed.recv_like(x, 0)
                    mx.eval(res["y"])
                    mx.eval(mx.distributed.send(res["y"], 0))
            else:
                def run():
                    pass
            return run, (lambda: _mismatch(res["y"], 1)) if r < 2 else None
        raise ValueError(op)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-reduce-scatter", dest="rs", action="store_false",
                   help="do not probe sum_scatter (it hung older ring backends)")
    _sweep.add_arguments(p)
    args = p.parse_args()
    b = MLXBackend(args.rs and "reduce_scatter" in args.ops)
    rc = _sweep.run_sweep(b, args)
    b.barrier()
    return rc


if __name__ == "__main__":
    sys.exit(main())
