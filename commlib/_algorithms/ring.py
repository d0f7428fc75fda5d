"""Ring reduce-scatter and all-gather: the bandwidth-optimal schedules.

The flat buffer of `count` elements is cut into `size` blocks of near-equal
length. In the reduce-scatter, at step s rank r sends block (r-s-1) to its
right neighbour and receives block (r-s-2) from its left neighbour, reducing
it into its own copy as the bytes arrive (the step loop in `_io.pyx` does this through a
small scratch ring, so received data is touched once, in cache). After size-1
steps rank r owns the fully reduced block r. Every block is reduced along the
ring in one fixed order and then copied verbatim, so all ranks finish with
bit-identical results whatever the dtype.

The all-gather then circulates the finished blocks: at step s rank r sends
block (r-s) and receives block (r-s-1) straight into the output, no copy.

Pipelining: within a step, sending and receiving overlap (full duplex) and
the reduction runs chunk by chunk behind the receive, so a step takes about
as long as moving one block. Each rank moves 2(size-1)/size of the buffer in
each direction: the minimum for an all-reduce.
"""


def blocks(count, size):
    """(offsets, lengths) in elements of `size` near-equal blocks."""
    base, extra = divmod(count, size)
    lengths = [base + (i < extra) for i in range(size)]
    offsets = [0] * size
    for i in range(1, size):
        offsets[i] = offsets[i - 1] + lengths[i - 1]
    return offsets, lengths


def reduce_scatter(op, src, dst_of, offsets, lengths, item):
    """Reduce `src` (address) over the ring; block b ends reduced at dst_of[b].

    dst_of[b] is where block b is reduced into when it arrives; the caller
    maps the final block (r) to the output and the others to wherever they
    are needed next (the output again for all_reduce, scratch otherwise).
    """
    n, r = op.size, op.rank
    right, left = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):
        sb, rb = (r - s - 1) % n, (r - s - 2) % n
        send = src + offsets[sb] * item if s == 0 else dst_of[sb]
        init = src + offsets[rb] * item
        op.exchange(right, send, lengths[sb] * item, left, 0, lengths[rb] * item,
                    reduce_dst=dst_of[rb], init=0 if init == dst_of[rb] else init)


def all_gather(op, base, offsets, lengths, item):
    """Circulate blocks so every rank holds all of them; block r is already in place."""
    n, r = op.size, op.rank
    right, left = (r + 1) % n, (r - 1) % n
    for s in range(n - 1):
        sb, rb = (r - s) % n, (r - s - 1) % n
        op.exchange(right, base + offsets[sb] * item, lengths[sb] * item,
                    left, base + offsets[rb] * item, lengths[rb] * item)


def all_reduce(op, src, out, count, item):
    """All-reduce `count` elements from address `src` into address `out` (may be equal)."""
    offsets, lengths = blocks(count, op.size)
    dst_of = [out + o * item for o in offsets]
    reduce_scatter(op, src, dst_of, offsets, lengths, item)
    all_gather(op, out, offsets, lengths, item)


def reduce_scatter_destinations(rank, size, out, tmps):
    """dst_of for a reduce-scatter into `out` (block `rank`) using two scratch blocks `tmps`.

    At step s the block received is reduced into scratch, alternating between
    the two (a block reduced at step s is sent at step s+1 while the next one
    arrives); the last step's block, this rank's own, lands in `out`.
    """
    dst_of = [0] * size
    for s in range(size - 1):
        dst_of[(rank - s - 2) % size] = out if s == size - 2 else tmps[s % 2]
    return dst_of
