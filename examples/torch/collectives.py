"""The torch.distributed calls of a typical script, on the commlib backend.

    commrun -n 4 examples/torch/collectives.py

Rank 0 prints each result; they are easy to check by hand: ranks 0..n-1
contribute their rank + 1.
"""
import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401  (registers the "commlib" backend)


def main():
    dist.init_process_group("commlib")
    rank, size = dist.get_rank(), dist.get_world_size()
    mine = torch.full((3,), float(rank + 1))

    total = mine.clone()
    dist.all_reduce(total)                                   # sum of 1..n everywhere
    biggest = mine.clone()
    dist.all_reduce(biggest, op=dist.ReduceOp.MAX)

    parts = [torch.empty(3) for _ in range(size)]
    dist.all_gather(parts, mine)                             # every rank's tensor
    flat = torch.empty(3 * size)
    dist.all_gather_into_tensor(flat, mine)

    word = torch.tensor([42 if rank == 0 else 0])
    dist.broadcast(word, src=0)

    shard = torch.empty(1)
    dist.reduce_scatter_tensor(shard, torch.arange(size, dtype=torch.float32) * (rank + 1))

    right, left = (rank + 1) % size, (rank - 1) % size      # pass a token around the ring
    token = torch.tensor([rank * 10])
    got = torch.empty(1, dtype=torch.int64)
    reqs = [dist.irecv(got, src=left), dist.isend(token, dst=right)] if size > 1 else []
    for req in reqs:
        req.wait()
    if size == 1:
        got = token.clone()

    pending = dist.all_reduce(torch.ones(2), async_op=True)  # overlap: wait later, chain a future
    doubled = pending.get_future().then(lambda fut: fut.value()[0] * 2).wait()

    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank})

    checks = [total.tolist() == [size * (size + 1) / 2] * 3, biggest.tolist() == [float(size)] * 3,
              [p[0].item() for p in parts] == [r + 1.0 for r in range(size)],
              flat.tolist() == [float(r + 1) for r in range(size) for _ in range(3)], word.item() == 42,
              shard.item() == rank * size * (size + 1) / 2, got.item() == left * 10,
              doubled.tolist() == [2.0 * size] * 2, [o["rank"] for o in objs] == list(range(size))]
    ok = torch.tensor([int(all(checks))])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if rank == 0:
        print(f"RESULT sum {total[0].item():g}")
        print(f"RESULT all_ranks_ok {bool(ok.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
