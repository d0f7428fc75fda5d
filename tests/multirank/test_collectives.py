"""all_gather, reduce_scatter, broadcast, reduce, gather, scatter, all_to_all and barrier, out= arguments
and groups sharing connections, through the real launcher: one job per (group size, transport) runs
every check of cases/collectives.py."""
from _harness import batched

NS = [1, 2, 3, 4]

test_collectives = batched("collectives.py", NS)
# 10 ranks: a large broadcast or reduce below BROADCAST_CHAIN_BYTES / REDUCE_CHAIN_BYTES takes the tree,
# above it the chain; gather and scatter the binomial tree; all_to_all Bruck's, forced.
test_collectives_ten_ranks = batched("collectives.py", [10], only=["broadcast_and_reduce_ten_ranks",
                                                                  "gather_scatter_ten_ranks",
                                                                  "all_to_all_forced[bruck]"],
                                     doc="Over 20 s (10-25 s on 2 cores): ten ranks, each an interpreter importing "
                                         "NumPy, on two cores, and the trees and Bruck's all_to_all only ten ranks "
                                         "reach.")
