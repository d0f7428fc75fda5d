"""Two ranks a host, rank 3 slow before each all_sum, a send across hosts: for commrun --trace."""
import time

import numpy as np

import commlib as cl

g = cl.init()
r = g.rank()
x = np.ones(1000)
for i in range(3):
    if r == 3:
        time.sleep(0.3)  # late on purpose, everyone waits for rank 3 (well beyond a loaded machine's scheduling delays)
    cl.all_sum(x)
if r == 0:
    cl.send(x, 3)
elif r == 3:
    cl.recv_like(x, 0)
pair = g.split(r // 2)  # the two ranks of each host
cl.all_sum(x, group=pair)
print(f"rank {r}: done", flush=True)
