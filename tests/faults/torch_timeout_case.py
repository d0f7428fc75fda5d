"""init_process_group(timeout=) bounds the group's operations: rank 0 waits in an all_reduce
for a rank 1 that is busy elsewhere (alive, just late) and must get a RuntimeError near the timeout.
Rank 1 stays away until rank 0 has reported (a file in the working directory), at most late_s."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401

timeout_s, late_s = float(sys.argv[1]), float(sys.argv[2])
dist.init_process_group("commlib", timeout=datetime.timedelta(seconds=timeout_s))
rank = dist.get_rank()
dist.barrier()
REPORTED = "rank0-reported"  # in the job's own working directory (the test's tmp_path)
if rank == 1:
    late_until = time.monotonic() + late_s
    while not os.path.exists(REPORTED) and time.monotonic() < late_until:
        time.sleep(0.05)  # alive, not calling the collective
t0 = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
    print(f"rank {rank}: all_reduce returned after {time.monotonic() - t0:.2f} s", flush=True)
except RuntimeError as exc:
    print(f"rank {rank}: RuntimeError after {time.monotonic() - t0:.2f} s: {type(exc).__name__}: {exc}", flush=True)
finally:
    if rank == 0:
        open(REPORTED, "w").close()
