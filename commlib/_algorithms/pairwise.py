"""Pairwise schedules: all-to-all and ppermute.

All-to-all (pairwise exchange): in step k = 1 .. size-1 rank r sends its
block for rank r+k while it receives rank r-k's block for it, full duplex,
so every link carries one block per step and no rank waits on a rank that
is itself waiting (each step's sends and receives pair up exactly). The
block for itself is copied locally.

ppermute: each rank sends to at most one rank and receives from at most one
(the permutation is checked by the caller), all in a single full-duplex step.
"""


def all_to_all(op, send_ptrs, recv_ptrs, nbytes):
    """send_ptrs[j]: block for rank j; recv_ptrs[j]: where rank j's block lands."""
    n, r = op.size, op.rank
    op.copy(recv_ptrs[r], send_ptrs[r], nbytes)
    for k in range(1, n):
        dst, src = (r + k) % n, (r - k) % n
        op.exchange(dst, send_ptrs[dst], nbytes, src, recv_ptrs[src], nbytes)


def ppermute(op, dst, src, send_ptr, recv_ptr, nbytes):
    """Send to dst and receive from src (either may be None) in one step."""
    if dst is None and src is None:
        return
    if dst == op.rank and src == op.rank:
        op.copy(recv_ptr, send_ptr, nbytes)
        return
    op.exchange(dst, send_ptr, nbytes, src, recv_ptr, nbytes)
