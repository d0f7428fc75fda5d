"""commrun -n 4 examples/hello.py: every rank says who it is."""
import os

rank, size = int(os.environ.get("COMMLIB_RANK", 0)), int(os.environ.get("COMMLIB_SIZE", 1))
print(f"hello from rank {rank} of {size}")
