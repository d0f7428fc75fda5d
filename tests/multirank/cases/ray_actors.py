"""N Ray actors form one commlib group: commlib's API and ray.util.collective's (backend "commlib").

usage: ray_actors.py N TEMP_DIR. Each actor checks its results against NumPy; prints
`ray actors ok: N` at the end.
"""
import numpy as np
import ray
import ray.util.collective as col

import commlib as cl
import commlib.ray
from _ray_start import args, start


@ray.remote
class Worker:
    def commlib_api(self, seed):
        g = commlib.ray.group()
        r, n = g.rank(), g.size()
        rng = np.random.default_rng(seed)
        parts = rng.standard_normal((n, 1000))  # every rank draws the same: rank k contributes parts[k]
        assert np.allclose(cl.all_reduce(parts[r], group=g), parts.sum(0))
        assert np.array_equal(cl.all_gather(parts[r], group=g), parts.reshape(-1))
        b = parts[r].copy()
        cl.broadcast(b, root=n - 1, group=g)
        assert np.array_equal(b, parts[n - 1])
        assert np.allclose(cl.reduce_scatter(np.tile(parts[r], n), group=g), parts.sum(0))
        cl.send(parts[r], (r + 1) % n, group=g)
        assert np.array_equal(cl.recv((1000,), np.float64, (r - 1) % n, group=g), parts[(r - 1) % n])
        assert cl.init() is g  # the group is this actor's commlib world: plain calls use it too
        return r

    def ray_collective(self):
        r, n = col.get_rank(), col.get_collective_group_size()
        x = np.full(5, r + 1.0)
        col.allreduce(x)
        assert np.array_equal(x, np.full(5, n * (n + 1) / 2))
        y = np.full(3, float(r))
        col.allreduce(y, op=col.types.ReduceOp.MAX)
        assert np.array_equal(y, np.full(3, n - 1.0))
        outs = [np.zeros(2) for _ in range(n)]
        col.allgather(outs, np.full(2, float(r)))
        assert all(np.array_equal(o, np.full(2, float(k))) for k, o in enumerate(outs))
        b = np.full(4, float(r))
        col.broadcast(b, src_rank=1)
        assert np.array_equal(b, np.full(4, 1.0))
        z = np.full(4, r + 1.0)
        col.reduce(z, dst_rank=0)
        assert np.array_equal(z, np.full(4, n * (n + 1) / 2) if r == 0 else np.full(4, r + 1.0))
        out = np.zeros(2)
        col.reducescatter(out, [np.full(2, float(k + r)) for k in range(n)])
        assert np.array_equal(out, np.full(2, float(n * r + n * (n - 1) / 2)))
        if r == 0:
            col.send(np.arange(6.0), 1)
        elif r == 1:
            got = np.zeros(6)
            col.recv(got, 0)
            assert np.array_equal(got, np.arange(6.0))
        col.barrier()
        try:
            import torch
        except ImportError:
            return r
        t = torch.full((4,), float(r))
        col.allreduce(t)  # CPU torch tensors too, in place
        assert torch.equal(t, torch.full((4,), n * (n - 1) / 2))
        return r


if __name__ == "__main__":
    n, temp_dir = args()
    start(n, temp_dir)
    actors = [Worker.remote() for _ in range(n)]
    commlib.ray.create_group(actors)
    assert ray.get([a.commlib_api.remote(7) for a in actors]) == list(range(n))
    assert ray.get([a.ray_collective.remote() for a in actors]) == list(range(n))
    ray.shutdown()
    print(f"ray actors ok: {n}", flush=True)
