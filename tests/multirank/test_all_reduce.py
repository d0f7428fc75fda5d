"""all_reduce through the real launcher: every op x dtype x size, layouts, algorithms, chunking.

One job per (group size, transport) runs every check of cases/all_reduce.py; each check is an item."""
from _harness import batched

# n=1 never reaches an algorithm (the size-1 group copies): the forced-algorithm and chunk checks start at 2.
test_all_reduce = batched("all_reduce.py", [1, 2, 3, 4])
