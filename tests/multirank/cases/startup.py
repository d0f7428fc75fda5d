"""Start-up at scale: init(), a first all_reduce(np.ones(1)) and a barrier, the whole program.

Every rank connects to the coordinator and to the ring neighbour (in the background) at once, and
all_reduce's recursive doubling opens log2(n) more connections per rank in a burst: the set-up
paths that many ranks starting together stress.
"""
import sys

import numpy as np

import commlib as cl

g = cl.init(strict=True)
total = cl.all_reduce(np.ones(1))
cl.barrier()
if total.shape == (1,) and total[0] == g.size():
    print(f"rank {g.rank()}: 2 checks ok")
else:
    print(f"rank {g.rank()}: FAIL all_reduce(np.ones(1)) gave {total!r}, expected [{g.size()}.]")
    sys.exit(1)
