"""Algorithm schedules on an in-memory fake transport: threads as ranks, no sockets.

The fake implements the one primitive the algorithms use, Op.exchange, with
unbounded FIFO queues per (src, dst) pair, so these tests check the
schedules themselves (which block goes where, in which order) for many
group sizes in milliseconds.
"""
import ctypes
import queue
import threading

import numpy as np
import pytest

from commlib import _kernels
from commlib._algorithms import doubling, logstep, pairwise, ring, tree
from commlib import _algorithms

pytestmark = pytest.mark.timeout(60)


def _view(addr, nbytes, dtype=np.uint8):
    if nbytes == 0:
        return np.empty(0, dtype)
    return np.ctypeslib.as_array((ctypes.c_char * nbytes).from_address(addr)).view(np.uint8).view(dtype)


class FakeOp:
    def __init__(self, rank, size, boxes, dtype, op="sum"):
        self.rank, self.size, self.boxes, self.dtype, self.redop = rank, size, boxes, np.dtype(dtype), op

    def exchange(self, dst, send_ptr, send_len, src, recv_ptr, recv_len, *, reduce_dst=0, init=0, relay=None,
                 swap=False):
        if dst is not None and relay is None:
            self.boxes[self.rank, dst].put(bytes(_view(send_ptr, send_len)))
        if src is not None:
            data = self.boxes[src, self.rank].get(timeout=10)
            assert len(data) == recv_len, (self.rank, src, len(data), recv_len)
            if reduce_dst:
                if init:
                    ctypes.memmove(reduce_dst, init, recv_len)
                dst_arr = _view(reduce_dst, recv_len, self.dtype)
                got = np.frombuffer(data, self.dtype).copy()
                if swap:  # op(received, mine)
                    _kernels.reduce_into(got, dst_arr, self.redop)
                    dst_arr[...] = got
                else:
                    _kernels.reduce_into(dst_arr, got, self.redop)
            else:
                _view(recv_ptr, recv_len)[:] = np.frombuffer(data, np.uint8)
        if dst is not None and relay is not None:  # forward once everything arrived
            self.boxes[self.rank, dst].put(bytes(_view(send_ptr, send_len)))

    @staticmethod
    def copy(dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)


def run_ranks(size, body, dtype=np.float64, op="sum"):
    boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    results, errors = [None] * size, []

    def main(r):
        try:
            results[r] = body(FakeOp(r, size, boxes, dtype, op))
        except BaseException as exc:  # reported below
            errors.append((r, exc))

    threads = [threading.Thread(target=main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for (a, b), q in boxes.items():
        assert q.empty(), f"message from {a} to {b} never received"
    return results


def inputs(size, count, dtype=np.float64):
    return [((np.arange(count) * 7 + r * 13) % 11).astype(dtype) for r in range(size)]


SIZES = [1, 2, 3, 4, 5, 7, 8]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [0, 1, 3, 10, 37])
def test_ring_all_reduce_in_and_out_of_place(size, count):
    xs = inputs(size, count)

    def body(op):
        src = xs[op.rank].copy()
        out = np.empty_like(src)
        ring.all_reduce(op, src.ctypes.data, out.ctypes.data, count, 8)
        inplace = xs[op.rank].copy()
        return out, src, inplace

    if size == 1:
        return
    res = run_ranks(size, body)
    for out, src, _ in res:
        np.testing.assert_array_equal(out, sum(xs))
    for r, (_, src, _) in enumerate(res):
        np.testing.assert_array_equal(src, xs[r])  # input untouched out of place


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [0, 1, 5, 16])
def test_doubling_all_reduce_every_size(size, count):
    xs = inputs(size, count)

    def body(op):
        buf = xs[op.rank].copy()
        snap = np.empty(max(buf.nbytes, 1), np.uint8)
        doubling.all_reduce(op, buf.ctypes.data, buf.nbytes, snap.ctypes.data)
        return buf

    for out in run_ranks(size, body):
        np.testing.assert_array_equal(out, sum(xs))


@pytest.mark.parametrize("size", SIZES)
def test_barrier_schedule_pairs_up(size):
    run_ranks(size, lambda op: doubling.barrier(op))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root", [0, 1, 6])
@pytest.mark.parametrize("algo", [tree.broadcast_tree, tree.broadcast_chain])
def test_broadcast_every_root(size, root, algo):
    root %= size
    xs = inputs(size, 9)

    def body(op):
        buf = xs[op.rank].copy()
        algo(op, buf.ctypes.data, buf.nbytes, root)
        return buf

    for out in run_ranks(size, body):
        np.testing.assert_array_equal(out, xs[root])


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root", [0, 2, 5])
@pytest.mark.parametrize("algo", [tree.reduce_tree, tree.reduce_chain])
def test_reduce_every_root(size, root, algo):
    root %= size
    xs = inputs(size, 6)

    def body(op):
        src = xs[op.rank].copy()
        acc = np.full_like(src, np.nan)
        algo(op, src.ctypes.data, acc.ctypes.data, src.nbytes, root)
        np.testing.assert_array_equal(src, xs[op.rank])
        return acc

    res = run_ranks(size, body)
    np.testing.assert_array_equal(res[root], sum(xs))


@pytest.mark.parametrize("size", SIZES)
def test_gather_scatter_all_to_all_ppermute(size):
    xs = inputs(size, 4)
    root = size - 1

    def body(op):
        r = op.rank
        out = np.empty(4 * size) if r == root else None
        tree.gather_linear(op, xs[r].ctypes.data, out.ctypes.data if out is not None else 0, 32, root)
        full = np.concatenate(xs) if r == root else None
        mine = np.empty(4)
        tree.scatter_linear(op, full.ctypes.data if full is not None else 0, mine.ctypes.data, 32, root)
        send = [np.full(2, 100 * r + j, np.float64) for j in range(size)]
        recv = [np.empty(2) for _ in range(size)]
        pairwise.all_to_all(op, [b.ctypes.data for b in send], [b.ctypes.data for b in recv], 16)
        shifted = np.zeros(3)
        x = np.full(3, float(r))
        pairwise.ppermute(op, (r + 1) % size, (r - 1) % size, x.ctypes.data, shifted.ctypes.data, 24)
        return out, mine, recv, shifted

    res = run_ranks(size, body)
    np.testing.assert_array_equal(res[root][0], np.concatenate(xs))
    for r, (_, mine, recv, shifted) in enumerate(res):
        np.testing.assert_array_equal(mine, xs[r])
        for j in range(size):
            np.testing.assert_array_equal(recv[j], np.full(2, 100 * j + r))
        np.testing.assert_array_equal(shifted, np.full(3, float((r - 1) % size)))


def test_ring_blocks_cover_the_buffer():
    for count in range(0, 30):
        for size in range(1, 9):
            offsets, lengths = ring.blocks(count, size)
            assert sum(lengths) == count and max(lengths) - min(lengths) <= 1
            assert all(offsets[i] + lengths[i] == (offsets[i + 1] if i + 1 < size else count) for i in range(size))


def test_choose_thresholds_and_override(monkeypatch):
    assert _algorithms.choose("all_reduce", 8, 4) == "doubling"
    assert _algorithms.choose("all_reduce", 64 << 20, 4) == "ring"
    monkeypatch.setenv("COMMLIB_ALGO_ALL_REDUCE", "ring")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    assert _algorithms.choose("all_reduce", 8, 4) == "ring"
    monkeypatch.setenv("COMMLIB_ALGO_ALL_REDUCE", "bogus")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    with pytest.raises(ValueError, match="bogus"):
        _algorithms.choose("all_reduce", 8, 4)


@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_doubling_gives_identical_nan_bits_on_every_rank(size):
    """op(a, b) and op(b, a) differ in which NaN survives; partners must agree anyway."""
    xs = [np.full(3, np.nan if r % 2 else -np.nan) for r in range(size)]

    def body(op):
        buf = xs[op.rank].copy()
        snap = np.empty(buf.nbytes, np.uint8)
        doubling.all_reduce(op, buf.ctypes.data, buf.nbytes, snap.ctypes.data)
        return buf.view(np.uint64).copy()

    res = run_ranks(size, body)
    assert all(np.array_equal(res[0], b) for b in res)


@pytest.mark.parametrize("size", [2, 3, 4, 5, 8])
def test_ring_reduce_scatter_with_its_own_destinations(size):
    """The reduce-scatter schedule as the API runs it: two scratch blocks, the own block into out."""
    count = 3
    xs = inputs(size, count * size)

    def body(op):
        out = np.empty(count)
        tmps = [np.empty(count) for _ in range(2)]
        dst_of = ring.reduce_scatter_destinations(op.rank, size, out.ctypes.data, [t.ctypes.data for t in tmps])
        assert dst_of[op.rank] == out.ctypes.data
        ring.reduce_scatter(op, xs[op.rank].ctypes.data, dst_of, [i * count for i in range(size)],
                            [count] * size, 8)
        return out

    total = sum(xs)
    for r, out in enumerate(run_ranks(size, body)):
        np.testing.assert_array_equal(out, total[r * count:(r + 1) * count])


@pytest.mark.parametrize("size", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("root", [0, 1])
@pytest.mark.parametrize("chain", [False, True])
def test_reduce_with_accumulators_only_where_the_schedule_needs_them(size, root, chain):
    """Ranks the leaf rule says need no buffer get none (address 0): the schedule must never touch it."""
    root %= size
    xs = inputs(size, 6)

    def body(op):
        need = tree.reduce_needs_accumulator(op.rank, root, size, chain)
        acc = np.empty(6) if need else None
        algo = tree.reduce_chain if chain else tree.reduce_tree
        algo(op, xs[op.rank].ctypes.data, acc.ctypes.data if acc is not None else 0, 48, root)
        return acc

    res = run_ranks(size, body)
    assert res[root] is not None
    np.testing.assert_array_equal(res[root], sum(xs))


@pytest.mark.parametrize("size", SIZES + [6, 9, 16])
@pytest.mark.parametrize("count", [0, 1, 3, 10, 37])
def test_rabenseifner_all_reduce_in_and_out_of_place(size, count):
    xs = inputs(size, count)

    def body(op):
        src = xs[op.rank].copy()
        out = np.full_like(src, np.nan)
        logstep.all_reduce(op, src.ctypes.data, out.ctypes.data, count, 8)
        inplace = xs[op.rank].copy()
        logstep.all_reduce(op, inplace.ctypes.data, inplace.ctypes.data, count, 8)
        return out, src, inplace

    res = run_ranks(size, body)
    for r, (out, src, inplace) in enumerate(res):
        np.testing.assert_array_equal(out, sum(xs))
        np.testing.assert_array_equal(inplace, sum(xs))
        np.testing.assert_array_equal(src, xs[r])  # input untouched out of place


@pytest.mark.parametrize("size", [3, 5, 6, 8])
def test_rabenseifner_gives_identical_bits_on_every_rank(size):
    """Each block is reduced at one rank and copied verbatim: float sums agree to the bit."""
    rng = np.random.default_rng(size)
    xs = [rng.standard_normal(29) * 10.0 ** rng.integers(-8, 8, 29) for _ in range(size)]

    def body(op):
        buf = xs[op.rank].copy()
        logstep.all_reduce(op, buf.ctypes.data, buf.ctypes.data, 29, 8)
        return buf.view(np.uint64).copy()

    res = run_ranks(size, body)
    assert all(np.array_equal(res[0], b) for b in res)


@pytest.mark.parametrize("size", SIZES + [6, 9, 16])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_log_step_all_gather_every_size(size, count):
    """Recursive doubling at powers of two (in place), Bruck through scratch otherwise."""
    xs = inputs(size, count)

    def body(op):
        out = np.full(size * count, np.nan)
        out[op.rank * count:(op.rank + 1) * count] = xs[op.rank]
        scratch = np.empty(max(out.nbytes, 1), np.uint8)
        logstep.all_gather(op, out.ctypes.data, count * 8, scratch.ctypes.data)
        return out

    for out in run_ranks(size, body):
        np.testing.assert_array_equal(out, np.concatenate(xs))


@pytest.mark.parametrize("size", [2, 3, 5, 8, 13, 16])
def test_log_step_counts(size):
    """ceil(log2 n) rounds for the all-gather; 2 log2 p (+2 on folded ranks) for the all-reduce."""
    steps = {}

    class Counting(FakeOp):
        def exchange(self, *args, **kw):
            steps[self.rank, kind] = steps.get((self.rank, kind), 0) + 1
            return FakeOp.exchange(self, *args, **kw)

    global_boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    logn = (size - 1).bit_length()
    p = 1 << (size.bit_length() - 1)
    for kind in ("ag", "ar"):
        def main(r):
            op = Counting(r, size, global_boxes, np.float64)
            buf = np.zeros(4 * size)
            if kind == "ag":
                logstep.all_gather(op, buf.ctypes.data, 32, np.empty(buf.nbytes, np.uint8).ctypes.data)
            else:
                logstep.all_reduce(op, buf.ctypes.data, buf.ctypes.data, 4 * size, 8)
        threads = [threading.Thread(target=main, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    for r in range(size):
        assert steps[r, "ag"] == logn
        folded = r < size - p or r >= p
        assert steps[r, "ar"] == (2 if r >= p else 2 * (p.bit_length() - 1) + 2 * folded)


def test_choose_log_step_overrides(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.setenv("COMMLIB_ALGO_ALL_GATHER", "bruck")
    assert _algorithms.choose("all_gather", 64 << 20, 4) == "bruck"
    monkeypatch.setenv("COMMLIB_ALGO_ALL_REDUCE", "rabenseifner")
    assert _algorithms.choose("all_reduce", 8, 3) == "rabenseifner"
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_ALL_GATHER")
    monkeypatch.delenv("COMMLIB_ALGO_ALL_REDUCE")
    assert _algorithms.choose("all_gather", 64 << 20, 4) == "ring"
    assert _algorithms.choose("all_gather", 8 * 16, 16) == "bruck"
    assert _algorithms.choose("all_gather", 1024, 3) == "ring"  # no fewer steps at n=3
    assert _algorithms.choose("all_gather", 1024, 2) == "ring"
    assert _algorithms.choose("all_reduce", 64 << 20, 4) == "ring"
    assert _algorithms.choose("all_reduce", 1 << 20, 4) == "rabenseifner"
    assert _algorithms.choose("all_reduce", 4 << 20, 6) == "ring"
    assert _algorithms.choose("all_reduce", 1 << 20, 6) == "rabenseifner"
    assert _algorithms.choose("all_reduce", 1 << 20, 2) == "ring"
    assert _algorithms.choose("all_reduce", 256 << 10, 8) == "rabenseifner"
    assert _algorithms.choose("all_reduce", 128 << 10, 4) == "doubling"
    assert _algorithms.choose("all_reduce", 256 << 10, 4) == "rabenseifner"
    # reduce_scatter: recursive halving at power-of-two n (n = 2: up to 64 KiB, else 16 MiB),
    # doubling when small at other n >= 3, else the ring
    assert _algorithms.choose("reduce_scatter", 16, 4) == "halving"
    assert _algorithms.choose("reduce_scatter", 16 << 20, 8) == "halving"
    assert _algorithms.choose("reduce_scatter", 64 << 20, 4) == "ring"
    assert _algorithms.choose("reduce_scatter", 16 << 10, 3) == "doubling"
    assert _algorithms.choose("reduce_scatter", 32 << 10, 6) == "ring"
    assert _algorithms.choose("reduce_scatter", 16, 2) == "halving"  # one step, the ring's bytes, one call
    assert _algorithms.choose("reduce_scatter", 128 << 10, 2) == "ring"
    assert _algorithms.choose("broadcast", 64 << 10, 4) == "tree"
    assert _algorithms.choose("broadcast", 128 << 10, 4) == "chain"


@pytest.mark.parametrize("size", [2, 4, 8, 16])
@pytest.mark.parametrize("block", [0, 1, 3])
def test_log_step_reduce_scatter_halving(size, block):
    """Recursive halving leaves rank r's fully reduced block r in place, in log2 n steps, and sends
    (n - 1)/n of the buffer."""
    xs = inputs(size, size * block)
    sent = {}

    class Counting(FakeOp):
        def exchange(self, dst, send_ptr, send_len, *args, **kw):
            steps, nbytes = sent.get(self.rank, (0, 0))
            sent[self.rank] = (steps + 1, nbytes + send_len)
            return FakeOp.exchange(self, dst, send_ptr, send_len, *args, **kw)

    def body(op):
        op.__class__ = Counting
        buf = xs[op.rank].copy()
        logstep.reduce_scatter(op, buf.ctypes.data, buf.size, 8)
        return buf[op.rank * block:(op.rank + 1) * block].copy()

    total = np.sum(xs, axis=0)
    for r, got in enumerate(run_ranks(size, body)):
        np.testing.assert_allclose(got, total[r * block:(r + 1) * block])
        assert sent[r] == ((size - 1).bit_length(), (size - 1) * block * 8)
