"""torch.distributed on the commlib backend, ranks started by srun (see torch_job.sbatch).

    srun -n 4 python examples/slurm/torch_hello.py   (with MASTER_ADDR and MASTER_PORT exported)
"""
import os
import socket

import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401  (registers the "commlib" backend)

dist.init_process_group("commlib", rank=int(os.environ["SLURM_PROCID"]),
                        world_size=int(os.environ["SLURM_NTASKS"]))
rank, size = dist.get_rank(), dist.get_world_size()
x = torch.full((1000,), float(rank + 1))
dist.all_reduce(x)
assert torch.equal(x, torch.full((1000,), size * (size + 1) / 2)), f"rank {rank}: wrong all_reduce"
print(f"torch rank {rank} of {size} on {socket.gethostname()}: all_reduce ok")
dist.destroy_process_group()
