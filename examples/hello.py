"""commrun -n 4 examples/hello.py: every rank says who it is, then they add up their ranks."""
import numpy as np

import commlib as cl

g = cl.init()
total = cl.all_reduce(np.array([g.rank()], dtype=np.int64))
print(f"hello from rank {g.rank()} of {g.size()}: the ranks add up to {total[0]}")
assert total[0] == g.size() * (g.size() - 1) // 2
