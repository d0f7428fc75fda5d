"""CPU torch tensors through commlib.mesh: tensors in, tensors out, the same values as NumPy.

The named-axis collectives (and an i variant) on float32, int64, bfloat16 and
a transposed (non-contiguous) tensor; ShardedArray made from a tensor (shard and
from_local) whose moves, .local and .full() stay tensors; distributed_broadcast
of a tensor; a tensor that cannot be used gives a clear error on every rank.
"""
import numpy as np
import torch

import commlib.mesh as cm
from _common import Checker


def main():
    c = Checker("mesh_torch")
    n, r = c.size, c.rank
    shape = (2, n // 2) if n % 2 == 0 and n > 2 else (n,)
    mesh = cm.Mesh(shape, ("a", "b")[:len(shape)])
    last = mesh.axis_names[-1]
    k, m = mesh.axis_index(last), mesh.size(last)
    peers = [mesh.rank_of(mesh.coords()[:-1] + (j,)) for j in range(m)]  # the ranks along `last`, in order
    for dt in (torch.float32, torch.int64, torch.bfloat16):
        x = (torch.arange(12).reshape(3, 4) + 10 * r).to(dt)
        want = sum(np.arange(12).reshape(3, 4) + 10 * p for p in peers).astype(np.float64)
        got = mesh.psum(x, last)
        c.ok(isinstance(got, torch.Tensor) and got.dtype == dt, f"psum {dt} gives a {dt} tensor", repr(type(got)))
        c.equal(got.to(torch.float64).numpy(), want, f"psum {dt}", record=False)
        req = mesh.ipsum(x, last)
        c.equal(req.wait().to(torch.float64).numpy(), want, f"ipsum {dt}", record=False)
        g = mesh.all_gather(x, last, axis=1, tiled=True)
        c.equal(g.to(torch.float64).numpy(), np.concatenate([np.arange(12).reshape(3, 4) + 10 * p for p in peers],
                                                             axis=1).astype(np.float64), f"all_gather {dt}", record=False)
    xt = (torch.arange(4 * m, dtype=torch.float64).reshape(m, 4) + r).t()  # (4, m), not contiguous
    got = mesh.all_to_all(xt, last, split_axis=1, concat_axis=0, tiled=True)
    want = np.concatenate([(np.arange(4 * m, dtype=np.float64).reshape(m, 4) + p).T[:, k:k + 1] for p in peers])
    c.ok(isinstance(got, torch.Tensor), "all_to_all of a transposed tensor gives a tensor")
    c.equal(got.numpy(), want, "all_to_all of a transposed tensor", record=False)
    # ShardedArray from tensors
    glob = torch.arange(6 * n * 4, dtype=torch.float32).reshape(6 * n, 4)
    a = cm.shard(glob, mesh, (mesh.axis_names, None))
    c.ok(isinstance(a.local, torch.Tensor) and a.local.shape == (6, 4), "shard(tensor).local is this rank's tensor",
         f"{type(a.local)} {tuple(a.local.shape)}")
    b = cm.shard(a, mesh, (None, None) if n == 1 else (None, last))
    c.ok(isinstance(b.local, torch.Tensor), "a move keeps the tensor kind")
    full = b.full()
    c.ok(isinstance(full, torch.Tensor), "full() of a tensor-made array is a tensor")
    c.equal(full.numpy(), glob.numpy(), "full() after a move")
    part = cm.ShardedArray.from_local(torch.ones(2 * m, 3, dtype=torch.bfloat16) * (k + 1), mesh, (None, None),
                                      partial=(last,))
    rs = cm.reduce_scatter(part, 0)
    c.ok(isinstance(rs.local, torch.Tensor) and rs.local.dtype == torch.bfloat16, "reduce_scatter keeps bfloat16")
    c.equal(rs.local.to(torch.float64).numpy(), np.full((2, 3), m * (m + 1) / 2), "reduce_scatter of bf16 partials",
            record=False)
    sent = torch.arange(5, dtype=torch.int32) + 100 * r
    got = cm.distributed_broadcast(sent if r == 0 else None)
    c.ok(isinstance(got, torch.Tensor) and got.dtype == torch.int32, "distributed_broadcast of a tensor", repr(got))
    c.equal(got.numpy(), np.arange(5, dtype=np.int32), "distributed_broadcast values")
    rep = cm.distributed_broadcast(torch.ones(2, 2, dtype=torch.bfloat16) * 3 if r == 0 else None, mesh)
    c.equal(rep.full().to(torch.float32).numpy(), np.full((2, 2), 3, np.float32), "distributed_broadcast bf16 on mesh")
    c.raises(ValueError, "meta tensor", mesh.psum, torch.empty(3, device="meta"), last)
    c.raises(TypeError, "object array", mesh.psum, np.array([object()]), last)
    c.equal(mesh.psum(torch.ones(2), last).numpy(), np.full(2, m, np.float32), "psum works after the errors")
    c.finish()


if __name__ == "__main__":
    main()
