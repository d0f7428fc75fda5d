"""all_gather's out= and recycled results, and each all_gather / all_reduce algorithm forced, at n = 1..8
(the ring all-gather runs by default at large sizes and inside the ring all-reduce).

n = 5..8 run on a 2-core machine oversubscribed; the Bruck (non-power-of-two) and
recursive-doubling (power-of-two) all-gather and Rabenseifner's fold for the ranks
above a power of two each get several group sizes.
"""
from _harness import batched

# Each check of cases/log_step.py runs with each pair of forced algorithms; one job per (n, transport).
test_forced = batched("log_step.py", [1, 2, 3, 4, 5, 6, 7, 8])
