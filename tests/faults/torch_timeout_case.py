"""init_process_group(timeout=) bounds the group's operations: rank 0 waits in an all_reduce
for a rank 1 that is busy elsewhere (alive, just late) and must get a RuntimeError near the timeout."""
import datetime
import sys
import time

import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401

timeout_s, late_s = float(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("commlib", timeout=datetime.timedelta(seconds=timeout_s))
rank = dist.get_rank()
dist.barrier()
if rank == 1:
    time.sleep(late_s)  # alive, not calling the collective
t0 = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
    print(f"rank {rank}: all_reduce returned after {time.monotonic() - t0:.2f} s", flush=True)
except RuntimeError as exc:
    print(f"rank {rank}: RuntimeError after {time.monotonic() - t0:.2f} s: {type(exc).__name__}: {exc}", flush=True)
