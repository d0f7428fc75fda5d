"""Algorithm plans on an in-memory fake transport: threads as ranks, no sockets.

Each algorithm builds a plan (`commlib._plan`); the fake runs that very plan,
row by row, where the executor's own address arithmetic (`_io.resolve`) puts
each region, with unbounded FIFO queues per (src, dst) pair and every region
checked to lie inside the buffers the call gave. So these tests check the
schedules the executor runs (which block goes where, in which order) for
every group size from 1 to 9 (and some larger) in milliseconds.
"""
import collections
import ctypes
import queue
import threading

import numpy as np
import pytest

from commlib import _algorithms, _kernels, _plan
from commlib._algorithms import doubling, hier, logstep, pairwise, ring, tree
from commlib._plan import RES, SCRATCH, T0, T1, X, bounds, slots
from commlib._transport import _io

pytestmark = pytest.mark.timeout(60)

SIZES = list(range(1, 10))


def _view(addr, nbytes, dtype=np.uint8):
    if nbytes == 0:
        return np.empty(0, dtype)
    return np.ctypeslib.as_array((ctypes.c_char * nbytes).from_address(addr)).view(np.uint8).view(dtype)


class FakeRank:
    """One rank: runs plans over the shared queues, counting steps and bytes sent."""

    def __init__(self, rank, size, boxes, dtype, op="sum"):
        self.rank, self.size, self.boxes, self.dtype, self.redop = rank, size, boxes, np.dtype(dtype), op
        self.steps = self.sent = 0

    def run(self, plan, buffers, bnds):
        """buffers: {slot: ndarray, or (ndarray, bytes its address stands before)}; the plan's regions
        must lie inside them."""
        assert plan.slots <= set(buffers), (plan, sorted(plan.slots), sorted(buffers))
        addr = [0] * _plan.NSLOTS
        spans = []
        for slot, buf in buffers.items():
            shift = 0
            if isinstance(buf, tuple):
                buf, shift = buf
            if buf is not None:
                addr[slot] = buf.ctypes.data - shift
                spans.append((buf.ctypes.data, buf.ctypes.data + buf.nbytes))

        def inside(ptr, n):
            assert n == 0 or any(lo <= ptr and ptr + n <= hi for lo, hi in spans), (plan, ptr, n, spans)

        for row in _io.resolve(plan.rows, addr, np.asarray(bnds, dtype=np.int64)):
            if row[0] == "copy":
                _, dst, src, n = row
                inside(dst, n)
                inside(src, n)
                if n and dst != src:
                    ctypes.memmove(dst, src, n)
                continue
            _, dst, send_ptr, send_len, src, recv_ptr, recv_len, reduce_dst, init, swap, relay = row
            self.steps += 1
            if dst is not None:
                inside(send_ptr, send_len)
                self.sent += send_len
            if dst is not None and relay is None:
                self.boxes[self.rank, dst].put(bytes(_view(send_ptr, send_len)))
            if src is not None:
                data = self.boxes[src, self.rank].get(timeout=10)
                assert len(data) == recv_len, (plan, self.rank, src, len(data), recv_len)
                if reduce_dst:
                    inside(reduce_dst, recv_len)
                    if init:
                        inside(init, recv_len)
                        ctypes.memmove(reduce_dst, init, recv_len)
                    dst_arr = _view(reduce_dst, recv_len, self.dtype)
                    got = np.frombuffer(data, self.dtype).copy()
                    if swap:  # op(received, mine)
                        _kernels.reduce_into(got, dst_arr, self.redop)
                        dst_arr[...] = got
                    else:
                        _kernels.reduce_into(dst_arr, got, self.redop)
                else:
                    inside(recv_ptr, recv_len)
                    _view(recv_ptr, recv_len)[:] = np.frombuffer(data, np.uint8)
            if dst is not None and relay is not None:  # forward once everything arrived / was reduced
                assert send_ptr == (reduce_dst or recv_ptr)
                self.boxes[self.rank, dst].put(bytes(_view(send_ptr, send_len)))


def run_ranks(size, body, dtype=np.float64, op="sum"):
    boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    results, errors = [None] * size, []
    ranks = [FakeRank(r, size, boxes, dtype, op) for r in range(size)]

    def main(r):
        try:
            results[r] = body(ranks[r])
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
    return results, ranks


def inputs(size, count, dtype=np.float64):
    return [((np.arange(count) * 7 + r * 13) % 11).astype(dtype) for r in range(size)]


ALL_REDUCE = {"doubling": doubling.all_reduce, "ring": ring.all_reduce, "rabenseifner": logstep.all_reduce}


@pytest.mark.parametrize("size", SIZES + [16])
@pytest.mark.parametrize("count", [0, 1, 3, 10, 37])
@pytest.mark.parametrize("algo", sorted(ALL_REDUCE))
def test_all_reduce_in_and_out_of_place(algo, size, count):
    xs = inputs(size, count)

    def body(f):
        plan = ALL_REDUCE[algo](size, f.rank)
        src = xs[f.rank].copy()
        out = np.full_like(src, np.nan)
        snap = np.empty(src.nbytes, np.uint8)
        f.run(plan, {X: src, RES: out, SCRATCH: snap}, bounds(count, 8, plan.parts))
        inplace = xs[f.rank].copy()
        f.run(plan, {X: inplace, RES: inplace, SCRATCH: snap}, bounds(count, 8, plan.parts))
        return out, src, inplace

    res, _ = run_ranks(size, body)
    for r, (out, src, inplace) in enumerate(res):
        np.testing.assert_array_equal(out, sum(xs))
        np.testing.assert_array_equal(inplace, sum(xs))
        np.testing.assert_array_equal(src, xs[r])  # input untouched out of place


def host_layouts(size):
    """Host maps of a group of `size`: one host, a host each, 2 and 3 a host in order, hosts
    interleaved (rank k on host k % 2), and uneven hosts out of order."""
    layouts = {"one host": (0,) * size, "a host each": tuple(range(size)),
               "2 a host": tuple(k // 2 for k in range(size)), "3 a host": tuple(k // 3 for k in range(size)),
               "interleaved": tuple(k % 2 for k in range(size)),
               "uneven": tuple("cab"[min(k, 2) if k < 4 else k % 3] for k in range(size))}
    return list(dict.fromkeys(layouts.values()))


def equal_hosts(hosts):
    counts = {h: hosts.count(h) for h in hosts}
    return len(set(counts.values())) == 1


HOST_AWARE = {"leaders": (hier.all_reduce, lambda hosts: True), "rails": (hier.all_reduce_rails, equal_hosts)}


@pytest.mark.parametrize("size", SIZES + [16])
@pytest.mark.parametrize("count", [0, 1, 3, 10, 37])
@pytest.mark.parametrize("algo", sorted(HOST_AWARE))
def test_host_aware_all_reduce_on_every_host_layout(algo, size, count):
    xs = inputs(size, count)
    make, fits = HOST_AWARE[algo]
    for hosts in host_layouts(size):
        if not fits(hosts):
            with pytest.raises(ValueError, match="same number of ranks on every host"):
                make(hosts, 0)
            continue

        def body(f):
            plan = make(hosts, f.rank)
            src = xs[f.rank].copy()
            out = np.full_like(src, np.nan)
            f.run(plan, {X: src, RES: out}, bounds(count, 8, plan.parts))
            inplace = xs[f.rank].copy()
            f.run(plan, {X: inplace, RES: inplace}, bounds(count, 8, plan.parts))
            return out, src, inplace

        res, ranks = run_ranks(size, body)
        for r, (out, src, inplace) in enumerate(res):
            np.testing.assert_array_equal(out, sum(xs), err_msg=str(hosts))
            np.testing.assert_array_equal(inplace, sum(xs), err_msg=str(hosts))
            np.testing.assert_array_equal(src, xs[r])
        local = {k: [j for j in range(size) if hosts[j] == hosts[k]].index(k) for k in range(size)}
        for f in ranks:  # across hosts: leaders only talk to leaders, a rail's ranks to its rail
            plan = make(hosts, f.rank)
            across = {p for p in plan.peers if hosts[p] != hosts[f.rank]}
            assert all(local[p] == local[f.rank] for p in across), (hosts, f.rank, across)
            assert algo == "rails" or not across or local[f.rank] == 0, (hosts, f.rank, across)


@pytest.mark.parametrize("size", [5, 8, 12])
@pytest.mark.parametrize("algo", sorted(HOST_AWARE))
def test_host_aware_all_reduce_gives_identical_bits_on_every_rank(algo, size):
    rng = np.random.default_rng(size)
    xs = [(rng.standard_normal(1000) * 10.0 ** rng.integers(-6, 6)).astype(np.float32) for _ in range(size)]
    make, fits = HOST_AWARE[algo]
    for hosts in filter(fits, host_layouts(size)):
        def body(f):
            plan = make(hosts, f.rank)
            out = np.empty_like(xs[f.rank])
            f.run(plan, {X: xs[f.rank].copy(), RES: out}, bounds(1000, 4, plan.parts))
            return out

        res, _ = run_ranks(size, body, dtype=np.float32)
        for out in res[1:]:
            assert out.tobytes() == res[0].tobytes(), hosts
        np.testing.assert_allclose(res[0], np.sum(np.array(xs, np.float64), axis=0), rtol=1e-3, atol=1e-3)


def host_layouts_more(size):
    """host_layouts() and two more: hosts of 4 in order, and 3 hosts round-robin."""
    return list(dict.fromkeys(host_layouts(size) + [tuple(k // 4 for k in range(size)),
                                                    tuple(k % 3 for k in range(size))]))


def run_reduce(size, xs, plan_of):
    """Each rank's RES after its reduce plan (None where the plan uses none); X left intact."""
    def body(f):
        plan = plan_of(f.rank)
        src = xs[f.rank].copy()
        acc = np.full_like(src, np.nan) if RES in plan.slots else None
        f.run(plan, {X: src, RES: acc}, bounds(len(src), src.itemsize, plan.parts))
        np.testing.assert_array_equal(src, xs[f.rank])
        return acc

    return run_ranks(size, body)[0]


def leaders_of(hosts, root=None):
    """Each host's leader: its lowest rank, or root on root's host."""
    lowest = {h: min(k for k in range(len(hosts)) if hosts[k] == h) for h in set(hosts)}
    return set(lowest.values()) if root is None else {root} | {v for h, v in lowest.items() if h != hosts[root]}


def only_leaders_cross(plan_of, hosts, leaders):
    """Every rank's peers on other hosts are leaders, and only leaders have any."""
    for r in range(len(hosts)):
        across = {p for p in plan_of(r).peers if hosts[p] != hosts[r]}
        assert not across or (r in leaders and across <= leaders), (hosts, r, across)


@pytest.mark.parametrize("size", SIZES + [12, 16])
@pytest.mark.parametrize("root", [0, 1, 5])
def test_host_aware_broadcast_every_root_and_layout(size, root):
    root %= size
    xs = inputs(size, 9)
    for hosts in host_layouts_more(size):
        for make in (hier.broadcast, hier.broadcast_large):
            def body(f):
                buf = xs[f.rank].copy()
                plan = make(hosts, f.rank, root)
                f.run(plan, {RES: buf}, bounds(9, 8, plan.parts))
                return buf

            for out in run_ranks(size, body)[0]:
                np.testing.assert_array_equal(out, xs[root], err_msg=f"{make.__name__} {hosts}")
            only_leaders_cross(lambda r: make(hosts, r, root), hosts, leaders_of(hosts, root))
        received = collections.Counter(  # each host receives the payload across the network once
            hosts[r] for r in range(size) for row in hier.broadcast(hosts, r, root).rows
            if int(row[2]) >= 0 and hosts[int(row[2])] != hosts[r])
        assert set(received.values()) <= {1} and len(received) == len(set(hosts)) - 1, (hosts, received)


@pytest.mark.parametrize("size", SIZES + [12, 16])
@pytest.mark.parametrize("root", [0, 2, 7])
def test_host_aware_reduce_every_root_and_layout(size, root):
    root %= size
    xs = inputs(size, 6)
    for hosts in host_layouts_more(size):
        res = run_reduce(size, xs, lambda r: hier.reduce(hosts, r, root))
        np.testing.assert_array_equal(res[root], sum(xs), err_msg=str(hosts))
        only_leaders_cross(lambda r: hier.reduce(hosts, r, root), hosts, leaders_of(hosts, root))


@pytest.mark.parametrize("size", [4, 6, 8, 9, 12, 16])
@pytest.mark.parametrize("root", [0, 1, 5, 11])
@pytest.mark.parametrize("count", [0, 1, 7, 37])
def test_reduce_by_rails_every_root_and_equal_layout(size, root, count):
    root %= size
    xs = inputs(size, count)
    for hosts in host_layouts_more(size):
        if not equal_hosts(hosts):
            with pytest.raises(ValueError, match="same number of ranks on every host"):
                hier.reduce_rails(hosts, 0, root)
            continue
        res = run_reduce(size, xs, lambda r: hier.reduce_rails(hosts, r, root))
        np.testing.assert_array_equal(res[root], sum(xs), err_msg=str(hosts))
        local = {k: [j for j in range(size) if hosts[j] == hosts[k]].index(k) for k in range(size)}
        sent = collections.Counter()  # units each host sends to other hosts
        for r in range(size):
            plan = hier.reduce_rails(hosts, r, root)
            across = {p for p in plan.peers if hosts[p] != hosts[r]}
            assert all(local[p] == local[r] for p in across), (hosts, r, across)  # along its rail only
            for row in plan.rows:
                if int(row[1]) >= 0 and hosts[int(row[1])] != hosts[r]:
                    sent[hosts[r]] += int(row[5]) - int(row[4])
        nhosts = len(set(hosts))
        if nhosts > 1:  # the ring's L - 1 sub-blocks, and at most the whole super-block in the gather
            assert max(sent.values()) <= 2 * size, (hosts, sent)


def heard(size, plan_of):
    """Play header-only plans with every message carrying the set of ranks its sender has heard
    from (itself included): what each rank has heard of when its plan ends."""
    boxes = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
    known = [{r} for r in range(size)]

    def main(r):
        for row in plan_of(r).rows:
            dst, src = int(row[1]), int(row[2])
            if dst >= 0:
                boxes[r, dst].put(frozenset(known[r]))
            if src >= 0:
                known[r] |= boxes[src, r].get(timeout=10)

    threads = [threading.Thread(target=main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(q.empty() for q in boxes.values())
    return known


@pytest.mark.parametrize("size", SIZES + [12, 16])
def test_host_aware_barrier_hears_from_every_rank(size):
    """No rank leaves before every rank has entered: each ends having heard, through the
    messages' chain, from all; across hosts only the leaders talk, ceil(log2 hosts) rounds."""
    for hosts in host_layouts_more(size):
        known = heard(size, lambda r: hier.barrier(hosts, r))
        assert all(k == set(range(size)) for k in known), hosts
        leaders = leaders_of(hosts)
        only_leaders_cross(lambda r: hier.barrier(hosts, r), hosts, leaders)
        for r in leaders:
            across = [row for row in hier.barrier(hosts, r).rows if int(row[1]) >= 0 and hosts[int(row[1])] != hosts[r]]
            assert len(across) == (len(set(hosts)) - 1).bit_length(), (hosts, r)
    known = heard(size, lambda r: doubling.barrier(size, r))  # the check itself: the flat one passes it
    assert all(k == set(range(size)) for k in known)
    if size > 2:  # ... and a plan that skips a round fails it
        assert any(k != set(range(size)) for k in heard(size, lambda r: _plan.Plan(
            "short", 1, doubling.barrier(size, r).rows[:-1])))


@pytest.mark.parametrize("size", SIZES + [12, 16])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_host_aware_all_gather_on_block_layouts(size, count):
    """Hosts of consecutive ranks: every rank ends with every block; across hosts only leaders talk,
    each host's blocks crossing its link once a round of ceil(log2 hosts); hosts out of order
    are refused (the ring in host order serves them)."""
    xs = inputs(size, count)
    for hosts in host_layouts_more(size):
        if not hier.contiguous(hosts):
            with pytest.raises(ValueError, match="consecutive"):
                hier.all_gather(hosts, 0)
            continue

        def body(f):
            out = np.full(size * count, np.nan)
            out[f.rank * count:(f.rank + 1) * count] = xs[f.rank]
            f.run(hier.all_gather(hosts, f.rank), {RES: out}, bounds(size * count, 8, size))
            return out

        for out in run_ranks(size, body)[0]:
            np.testing.assert_array_equal(out, np.concatenate(xs) if xs else out, err_msg=str(hosts))
        only_leaders_cross(lambda r: hier.all_gather(hosts, r), hosts, leaders_of(hosts))


@pytest.mark.parametrize("size", SIZES)
def test_barrier_schedule_pairs_up(size):
    _, ranks = run_ranks(size, lambda f: f.run(doubling.barrier(size, f.rank), {}, bounds(0, 1, 1)))
    assert all(f.steps == (size - 1).bit_length() and f.sent == 0 for f in ranks)


@pytest.mark.parametrize("size", SIZES + [12, 16, 23])
@pytest.mark.parametrize("root", [0, 1, 6])
@pytest.mark.parametrize("algo", [tree.broadcast_tree, tree.broadcast_chain, tree.broadcast_linear,
                                  tree.broadcast_scatter_gather])
@pytest.mark.parametrize("count", [9, 3, 0])
def test_broadcast_every_root(size, root, algo, count):
    root %= size
    xs = inputs(size, count)

    def body(f):
        buf = xs[f.rank].copy()
        plan = algo(size, f.rank, root)
        f.run(plan, {RES: buf}, bounds(count, 8, plan.parts))
        return buf

    for out in run_ranks(size, body)[0]:
        np.testing.assert_array_equal(out, xs[root])


@pytest.mark.parametrize("size", [5, 16, 23, 100])
def test_scatter_gather_broadcast_steps_and_bytes(size):
    """At most 3 ceil(log2 n) rows a rank (a wrapped range is two messages), and no rank takes in
    more than twice the payload."""
    logn = (size - 1).bit_length()
    for r in range(size):
        plan = tree.broadcast_scatter_gather(size, r, 3 % size)
        assert len(plan.rows) <= 3 * logn, (r, len(plan.rows))
        received = sum(int(row[8]) - int(row[7]) for row in plan.rows if int(row[2]) >= 0)
        assert received <= 2 * size, (r, received)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root", [0, 2, 5])
@pytest.mark.parametrize("algo", [tree.reduce_tree, tree.reduce_chain])
def test_reduce_with_accumulators_only_where_the_plan_uses_them(size, root, algo):
    """A rank whose plan does not use RES gets no accumulator: its rows must never touch one."""
    root %= size
    xs = inputs(size, 6)
    res = run_reduce(size, xs, lambda r: algo(size, r, root))
    np.testing.assert_array_equal(res[root], sum(xs))
    leaves = [r for r in range(size) if res[r] is None]
    if size > 2 and algo is tree.reduce_tree:
        assert leaves  # the binomial tree's odd relative ranks send x straight up


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root", [0, 1, 8])
def test_gather_scatter_every_root(size, root):
    root %= size
    xs = inputs(size, 4)

    def body(f):
        r = f.rank
        out = np.full(4 * size, np.nan) if r == root else None
        f.run(tree.gather_linear(size, r, root), {X: xs[r].copy(), RES: out}, bounds(4 * size, 8, size))
        full = np.concatenate(xs) if r == root else None
        mine = np.full(4, np.nan)
        f.run(tree.scatter_linear(size, r, root), {X: full, RES: mine}, bounds(4 * size, 8, size))
        return out, mine

    res, _ = run_ranks(size, body)
    np.testing.assert_array_equal(res[root][0], np.concatenate(xs))
    for r, (_, mine) in enumerate(res):
        np.testing.assert_array_equal(mine, xs[r])


@pytest.mark.parametrize("size", SIZES)
def test_all_to_all_and_ppermute(size):
    def body(f):
        r = f.rank
        send = np.repeat(100.0 * r + np.arange(size), 2)
        recv = np.full(2 * size, np.nan)
        f.run(pairwise.all_to_all(size, r), {X: send, RES: recv}, bounds(2 * size, 8, size))
        shifted = np.zeros(3)
        plan = pairwise.ppermute(r, (r + 1) % size, (r - 1) % size)
        f.run(plan, {X: np.full(3, float(r)), RES: shifted}, bounds(3, 8, 1))
        return recv, shifted

    for r, (recv, shifted) in enumerate(run_ranks(size, body)[0]):
        np.testing.assert_array_equal(recv, np.repeat(100.0 * np.arange(size) + r, 2))
        np.testing.assert_array_equal(shifted, np.full(3, float((r - 1) % size)))


@pytest.mark.parametrize("per_host,nhosts", [(1, 1), (2, 1), (1, 3), (2, 2), (2, 3), (3, 2), (3, 3), (4, 4), (2, 5)])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_all_to_all_by_rails(per_host, nhosts, count):
    """Every block reaches its rank through one exchange within the host and one along the rail;
    a rank talks to its host's other ranks and to its own local index on the other hosts only.
    Hosts of unequal sizes or ranks out of host order are refused."""
    size = per_host * nhosts
    hosts = tuple(k // per_host for k in range(size))

    def body(f):
        r = f.rank
        send = np.repeat(100.0 * r + np.arange(size), count)
        recv = np.full(count * size, np.nan)
        plan = hier.all_to_all_rails(hosts, r)
        f.run(plan, {X: send.copy(), RES: recv, SCRATCH: np.empty(send.nbytes, np.uint8)},
              bounds(count * size, 8, size))
        np.testing.assert_array_equal(send, np.repeat(100.0 * r + np.arange(size), count))
        return recv

    for r, recv in enumerate(run_ranks(size, body)[0]):
        np.testing.assert_array_equal(recv, np.repeat(100.0 * np.arange(size) + r, count))
    for r in range(size):
        peers = hier.all_to_all_rails(hosts, r).peers
        assert all(hosts[p] == hosts[r] or p % per_host == r % per_host for p in peers), (r, peers)
        assert len(peers) == per_host - 1 + nhosts - 1, (r, peers)
    with pytest.raises(ValueError, match="same number of ranks"):
        hier.all_to_all_rails((0, 0, 1), 0)
    with pytest.raises(ValueError, match="consecutive"):
        hier.all_to_all_rails((0, 1, 0, 1), 0)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("count", [0, 1, 3])
@pytest.mark.parametrize("algo", [ring.reduce_scatter, pairwise.reduce_scatter])
def test_reduce_scatter_into_one_block(size, count, algo):
    """The reduce-scatter as the API runs it: the own block into RES; the ring's blocks in transit in
    T0/T1, the pairwise one reducing every peer's slice straight into RES."""
    xs = inputs(size, count * size)

    def body(f):
        plan = algo(size, f.rank)
        assert plan.slots <= ({X, RES, T0, T1} if algo is ring.reduce_scatter else {X, RES})
        out = np.full(count, np.nan)
        f.run(plan, {X: xs[f.rank].copy(), RES: out, T0: np.empty(count), T1: np.empty(count)},
              bounds(count * size, 8, size))
        return out

    total = sum(xs)
    for r, out in enumerate(run_ranks(size, body)[0]):
        np.testing.assert_array_equal(out, total[r * count:(r + 1) * count])


@pytest.mark.parametrize("size", SIZES + [16])
@pytest.mark.parametrize("count", [0, 1, 5])
@pytest.mark.parametrize("algo", [ring.all_gather, logstep.all_gather, pairwise.all_gather])
def test_all_gather_every_size(size, count, algo):
    """The ring; recursive doubling at powers of two (in place), Bruck through scratch otherwise;
    every block straight from its owner."""
    xs = inputs(size, count)

    def body(f):
        out = np.full(size * count, np.nan)
        out[f.rank * count:(f.rank + 1) * count] = xs[f.rank]
        f.run(algo(size, f.rank), {RES: out, SCRATCH: np.empty(out.nbytes, np.uint8)},
              bounds(size * count, 8, size))
        return out

    for out in run_ranks(size, body)[0]:
        np.testing.assert_array_equal(out, np.concatenate(xs))


@pytest.mark.parametrize("size", SIZES + [12, 16])
def test_ring_all_gather_in_host_order_when_ranks_alternate_hosts(size):
    """Ranks placed round-robin: the ring runs host by host (a block crosses to the next host once
    a step) and every rank still ends with every block in rank order; block placement keeps the
    ring in rank order."""
    count = 5
    xs = inputs(size, count)
    for hosts in host_layouts(size):
        order = ring.host_order(hosts)
        if order is None:
            crossings = sum(hosts[k] != hosts[(k + 1) % size] for k in range(size))
            assert len(set(hosts)) < 2 or crossings <= len(set(hosts)), hosts
            continue
        assert sorted(order) == list(range(size)) and [hosts[k] for k in order] == sorted(
            (hosts[k] for k in range(size)), key=lambda h: hosts.index(h)), (hosts, order)

        def body(f):
            out = np.full(size * count, np.nan)
            out[f.rank * count:(f.rank + 1) * count] = xs[f.rank]
            plan = ring.all_gather_in(order, f.rank)
            f.run(plan, {RES: out}, bounds(size * count, 8, size))
            right = set(p for p in plan.peers)
            return out, right

        res, _ = run_ranks(size, body)
        for r, (out, peers) in enumerate(res):
            np.testing.assert_array_equal(out, np.concatenate(xs), err_msg=str(hosts))
            across = {p for p in peers if hosts[p] != hosts[r]}
            assert len(across) <= 2, (hosts, r, peers)  # only a host's ends talk across
        crossing = sum(any(hosts[p] != hosts[r] for p in peers) for r, (_, peers) in enumerate(res))
        assert crossing <= 2 * len(set(hosts)), (hosts, crossing)
    assert ring.host_order(tuple(k % 4 for k in range(16)))[:5] == (0, 4, 8, 12, 1)
    assert ring.host_order(tuple(k // 4 for k in range(16))) is None


@pytest.mark.parametrize("size", SIZES + [12])
@pytest.mark.parametrize("root", [0, 1, 4])
def test_chains_in_host_order_when_ranks_alternate_hosts(size, root):
    """Broadcast and reduce chains along ring.host_order from any root: every result right, and
    the chain passes from one host to the next once a host (plus the way back to the root's)."""
    root %= size
    xs = inputs(size, 7)
    for hosts in host_layouts(size):
        order = ring.host_order(hosts)
        if order is None:
            continue

        def body(f):
            buf = xs[f.rank].copy()
            bplan = tree.broadcast_chain_in(order, f.rank, root)
            f.run(bplan, {RES: buf}, bounds(7, 8, 1))
            rplan = tree.reduce_chain_in(order, f.rank, root)
            src, acc = xs[f.rank].copy(), np.full(7, np.nan)
            f.run(rplan, {X: src, RES: acc if RES in rplan.slots else None}, bounds(7, 8, 1))
            return buf, acc, bplan.peers | rplan.peers

        res, _ = run_ranks(size, body)
        for r, (buf, acc, peers) in enumerate(res):
            np.testing.assert_array_equal(buf, xs[root], err_msg=str(hosts))
            if r == root:
                np.testing.assert_array_equal(acc, sum(xs), err_msg=str(hosts))
        hops = {(r, p) for r, (_, _, peers) in enumerate(res) for p in peers if hosts[p] != hosts[r]}
        assert len(hops) <= 2 * (len(set(hosts)) + 1), (hosts, root, sorted(hops))


@pytest.mark.parametrize("size", [2, 3, 5])
def test_ring_all_gather_with_uneven_blocks(size):
    """Units may be any boundaries: the object all-gather's blocks differ in length per rank."""
    lens = [8 * (r + 1) for r in range(size)]
    bnds = _plan.explicit_bounds(lens)

    def body(f):
        out = np.zeros(int(bnds[-1]), np.uint8)
        out[bnds[f.rank]:bnds[f.rank + 1]] = f.rank + 1
        f.run(ring.all_gather(size, f.rank), {RES: out}, bnds)
        return out

    want = np.repeat(np.arange(1, size + 1, dtype=np.uint8), lens)
    for out in run_ranks(size, body)[0]:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("size", [2, 3, 4, 8])
@pytest.mark.parametrize("algo", sorted(ALL_REDUCE))
def test_all_reduce_gives_identical_bits_on_every_rank(size, algo):
    """op(a, b) and op(b, a) differ in which NaN survives and in float rounding; ranks must agree anyway."""
    rng = np.random.default_rng(size)
    xs = [rng.standard_normal(29) * 10.0 ** rng.integers(-8, 8, 29) for _ in range(size)]
    xs[0][:3] = np.nan
    xs[-1][:3] = -np.nan

    def body(f):
        plan = ALL_REDUCE[algo](size, f.rank)
        buf = xs[f.rank].copy()
        f.run(plan, {X: buf, RES: buf, SCRATCH: np.empty(buf.nbytes, np.uint8)}, bounds(29, 8, plan.parts))
        return buf.view(np.uint64).copy()

    res, _ = run_ranks(size, body)
    assert all(np.array_equal(res[0], b) for b in res)


def test_ring_blocks_cover_the_buffer_as_the_plan_bounds_do():
    for count in range(0, 30):
        for size in range(1, 9):
            offsets, lengths = ring.blocks(count, size)
            assert sum(lengths) == count and max(lengths) - min(lengths) <= 1
            assert list(bounds(count, 4, size)) == [4 * o for o in offsets] + [4 * count]


@pytest.mark.parametrize("size", [2, 3, 5, 8, 9, 13, 16])
def test_log_step_counts(size):
    """ceil(log2 n) rounds for the all-gather; 2 log2 p (+2 on folded ranks) for the all-reduce."""
    logn = (size - 1).bit_length()
    p = 1 << (size.bit_length() - 1)
    for r in range(size):
        assert logstep.all_gather(size, r).steps() == logn
        folded = r < size - p or r >= p
        assert logstep.all_reduce(size, r).steps() == (2 if r >= p else 2 * (p.bit_length() - 1) + 2 * folded)
        assert ring.all_reduce(size, r).steps() == 2 * (size - 1)


@pytest.mark.parametrize("size", [2, 4, 8, 16])
@pytest.mark.parametrize("block", [0, 1, 3])
def test_log_step_reduce_scatter_halving(size, block):
    """Recursive halving leaves rank r's fully reduced block in RES, in log2 n steps, and sends
    (n - 1)/n of the buffer; x is left as it was."""
    xs = inputs(size, size * block)

    def body(f):
        x = xs[f.rank].copy()
        out = np.full(block, np.nan)
        f.run(logstep.reduce_scatter(size, f.rank), {X: x, RES: out, SCRATCH: np.empty(x.nbytes, np.uint8)},
              bounds(x.size, 8, size))
        np.testing.assert_array_equal(x, xs[f.rank])
        return out

    total = np.sum(xs, axis=0)
    res, ranks = run_ranks(size, body)
    for r, got in enumerate(res):
        np.testing.assert_allclose(got, total[r * block:(r + 1) * block])
        assert (ranks[r].steps, ranks[r].sent) == ((size - 1).bit_length(), (size - 1) * block * 8)


@pytest.mark.parametrize("size", SIZES)
def test_plans_are_cached_values(size):
    """One plan per (algorithm, size, rank[, root]): built once, read-only, naming only group ranks."""
    for r in range(size):
        for make in (doubling.all_reduce, ring.all_reduce, logstep.all_reduce, ring.all_gather,
                     logstep.all_gather, pairwise.all_to_all, doubling.barrier, ring.reduce_scatter,
                     pairwise.all_gather, pairwise.reduce_scatter):
            plan = make(size, r)
            assert make(size, r) is plan
            assert not plan.rows.flags.writeable
            assert plan.peers <= set(range(size)) - {r}
        for make in (tree.broadcast_tree, tree.broadcast_chain, tree.broadcast_linear, tree.reduce_tree, tree.reduce_chain,
                     tree.gather_linear, tree.scatter_linear):
            assert make(size, r, 0) is make(size, r, 0)
            assert make(size, r, 0).peers <= set(range(size)) - {r}


def test_builder_refuses_inconsistent_rows():
    b = _plan.Builder("t", 2)
    with pytest.raises(ValueError, match="relay"):
        b.step(1, (RES, 0, 1), 0, (RES, 1, 2), relay="received")
    with pytest.raises(ValueError, match="init"):
        b.step(src=0, recv=(RES, 0, 1), reduce=True, init=(X, 1, 2))


def test_executor_checks_a_plan_against_its_bounds():
    plan = ring.all_reduce(4, 0)
    sfd = np.full(len(plan), -1, np.int32)
    ring_buf = np.empty(1 << 14, np.uint8)
    stepper = _io.Stepper(np.zeros(4, np.int64), 4096, -1, ring_buf.ctypes.data, ring_buf.nbytes, 0.0, 0.0)
    with pytest.raises(ValueError, match="4 units but 2 bounds"):
        _io.execute(stepper, plan.rows, plan.parts, slots(), bounds(8, 4, 1), sfd, sfd, b"\0" * 56, 0, 0, 0.0, 0, False)


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
    # reduce_scatter: recursive halving at power-of-two n (n = 2: up to 64 KiB, else 2 MiB),
    # doubling when small at other n >= 3, else the direct schedule up to 8 ranks, the ring beyond
    assert _algorithms.choose("reduce_scatter", 16, 4) == "halving"
    assert _algorithms.choose("reduce_scatter", 2 << 20, 8) == "halving"
    assert _algorithms.choose("reduce_scatter", 4 << 20, 4) == "pairwise"  # then every peer's slice straight in
    assert _algorithms.choose("reduce_scatter", 64 << 20, 4) == "pairwise"
    assert _algorithms.choose("reduce_scatter", 16 << 10, 3) == "doubling"
    assert _algorithms.choose("reduce_scatter", 32 << 10, 6) == "pairwise"
    assert _algorithms.choose("reduce_scatter", 32 << 10, 9) == "ring"  # no full mesh beyond 8 ranks
    assert _algorithms.choose("reduce_scatter", 64 << 20, 16) == "ring"
    assert _algorithms.choose("reduce_scatter", 16, 2) == "halving"  # one step, the ring's bytes, one call
    assert _algorithms.choose("reduce_scatter", 128 << 10, 2) == "ring"
    assert _algorithms.choose("broadcast", 64 << 10, 4) == "linear"  # the root writes every copy
    assert _algorithms.choose("broadcast", 8, 8) == "linear"
    assert _algorithms.choose("broadcast", 8, 9) == "tree"  # log2 n rounds beyond 8 ranks
    assert _algorithms.choose("broadcast", 64 << 20, 2) == "tree"  # one send either way
    assert _algorithms.choose("broadcast", 128 << 10, 4) == "chain"


def test_host_layout_is_made_only_where_hosts_matter():
    HostLayout = _algorithms.HostLayout
    assert HostLayout.of(["a"] * 4) is None  # one host: the flat schedules
    assert HostLayout.of(["a", "b", "c"]) is None  # a host each: host-aware is the flat ring
    lay = HostLayout.of(["b", "b", "a", "a"])
    assert (lay.hosts, lay.nhosts, lay.equal) == ((0, 0, 1, 1), 2, True)
    lay = HostLayout.of(["x", "y", "x"])
    assert (lay.hosts, lay.nhosts, lay.equal) == ((0, 1, 0), 2, False)
    assert "2 hosts" in repr(lay)


def test_choose_host_aware_all_reduce_above_the_latency_bound_sizes(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_ALL_REDUCE", raising=False)
    equal, unequal = _algorithms.HostLayout.of([0, 0, 1, 1]), _algorithms.HostLayout.of([0, 0, 1])
    # small payloads: the same choice as without hosts (the one-call path's table holds it)
    for nbytes in (8, 4 << 10, 128 << 10):
        assert _algorithms.choose("all_reduce", nbytes, 4, equal) == _algorithms.choose("all_reduce", nbytes, 4)
    assert _algorithms.choose("all_reduce", 32 << 10, 3, unequal) == "doubling"
    for nbytes in (256 << 10, 1 << 20, 64 << 20):
        assert _algorithms.choose("all_reduce", nbytes, 4, equal) == "rails"
        assert _algorithms.choose("all_reduce", nbytes, 4, None) in ("ring", "rabenseifner")
    # leaders from ALL_REDUCE_LEADERS_BYTES: below, a flat schedule
    assert _algorithms.choose("all_reduce", 512 << 10, 3, unequal) == _algorithms.choose("all_reduce", 512 << 10, 3)
    for nbytes in (1 << 20, 64 << 20):
        assert _algorithms.choose("all_reduce", nbytes, 3, unequal) == "leaders"
    many = _algorithms.HostLayout.of([k // 16 for k in range(1024)])
    assert _algorithms.choose("all_reduce", 1 << 20, 1024, many) == "rails"
    assert _algorithms.choose("all_reduce", 8 << 10, 1024, many) == "doubling"


def test_choose_leaders_for_the_latency_bound_collectives_over_hosts(monkeypatch):
    """broadcast and reduce where the flat choice is the tree, the barrier where hosts are consecutive,
    the all-gather by host only when forced; one host (or one rank a host) keeps the flat schedules."""
    monkeypatch.setattr("commlib._algorithms._forced", {})
    for kind in ("BROADCAST", "REDUCE", "ALL_GATHER", "BARRIER"):
        monkeypatch.delenv(f"COMMLIB_ALGO_{kind}", raising=False)
    block = _algorithms.HostLayout.of([k // 4 for k in range(16)])
    robin = _algorithms.HostLayout.of([k % 4 for k in range(16)])
    assert block.contiguous and not robin.contiguous
    choose = _algorithms.choose
    assert choose("barrier", 0, 16, block) == "leaders"
    assert choose("barrier", 0, 16, robin) == "doubling"
    for layout in (block, robin):
        assert choose("broadcast", 8, 16, layout) == choose("reduce", 8, 16, layout) == "leaders"
        assert choose("broadcast", 64 << 20, 16, layout) == "chain"  # the chain already runs host by host
        assert choose("broadcast", 1 << 20, 16, layout) == "scatter_gather"  # (the tree without hosts)
        assert choose("broadcast", 1 << 20, 16, None) == "tree"
        assert choose("broadcast", (1 << 20) - 8, 16, layout) == "leaders"
        assert choose("reduce", 64 << 20, 16, layout) == "chain"
    assert choose("all_gather", 16 * 8, 16, block) == choose("all_gather", 16 * 8, 16, robin) == "bruck"
    assert choose("all_gather", 64 << 20, 16, block) == "ring"
    assert choose("broadcast", 8, 4, _algorithms.HostLayout.of([0, 0, 1, 1])) == "linear"  # one hop for all
    for kind, flat in (("barrier", "doubling"), ("broadcast", "tree"), ("reduce", "tree"), ("all_gather", "bruck")):
        assert choose(kind, 128, 16, None) == flat
    monkeypatch.setenv("COMMLIB_ALGO_ALL_GATHER", "leaders")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    with pytest.raises(ValueError, match="consecutive"):
        choose("all_gather", 8, 16, robin)
    assert choose("all_gather", 8, 16, block) == "leaders"
    assert "leaders (4 hosts; the flat choice: tree" in _algorithms._why("broadcast", "leaders", 8, 16, block)
    many = _algorithms.HostLayout.of([k // 16 for k in range(1024)])
    assert choose("broadcast", 64 << 20, 1024, many) == "scatter_gather"  # 64 KiB a rank: not yet the chain
    assert choose("broadcast", 64 << 20, 1024, None) == "chain"
    assert choose("broadcast", 256 << 20, 1024, many) == "chain"


def test_choose_all_to_all_by_rails_beyond_the_mesh_size(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_ALL_TO_ALL", raising=False)
    choose = _algorithms.choose
    equal = _algorithms.HostLayout.of([k // 16 for k in range(128)])
    unequal = _algorithms.HostLayout.of([min(k // 16, 6) for k in range(128)])
    robin = _algorithms.HostLayout.of([k % 8 for k in range(128)])
    for nbytes in (128, 128 << 10, 128 << 20):
        assert choose("all_to_all", nbytes, 128, equal) == "rails"
        assert choose("all_to_all", nbytes, 128, unequal) == choose("all_to_all", nbytes, 128, robin) \
            == choose("all_to_all", nbytes, 128, None)
    small = _algorithms.HostLayout.of([k // 8 for k in range(64)])
    assert choose("all_to_all", 64, 64, small) == "pairwise"  # (up to 64 ranks: measured, not faster)
    assert "rails (8 hosts of 16 consecutive ranks" in _algorithms._why("all_to_all", "rails", 128, 128, equal)
    monkeypatch.setenv("COMMLIB_ALGO_ALL_TO_ALL", "rails")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    assert choose("all_to_all", 64, 4, _algorithms.HostLayout.of([0, 0, 1, 1])) == "rails"
    with pytest.raises(ValueError, match="as many ranks on every host"):
        choose("all_to_all", 64, 128, robin)


def test_choose_reduce_by_rails_for_large_blocks_on_equal_hosts(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_REDUCE", raising=False)
    choose = _algorithms.choose
    many = _algorithms.HostLayout.of([k // 16 for k in range(1024)])
    robin = _algorithms.HostLayout.of([k % 64 for k in range(1024)])
    unequal = _algorithms.HostLayout.of([min(k // 16, 62) for k in range(1024)])
    for nbytes in (1 << 20, 16 << 20, 128 << 20):  # up to 128 KiB a rank
        assert choose("reduce", nbytes, 1024, many) == choose("reduce", nbytes, 1024, robin) == "rails"
        assert choose("reduce", nbytes, 1024, unequal) in ("leaders", "chain")  # (the flat choice, by host)
    assert choose("reduce", (1 << 20) - 8, 1024, many) == "leaders"  # the tree's log2 n rounds, by host
    assert choose("reduce", 256 << 20, 1024, many) == "chain"  # 256 KiB a rank: the chain's pipeline
    assert choose("reduce", 4 << 20, 16, _algorithms.HostLayout.of([k // 4 for k in range(16)])) == "chain"
    assert "REDUCE_RAILS_BLOCK" in _algorithms._why("reduce", "rails", 16 << 20, 1024, many)
    monkeypatch.setenv("COMMLIB_ALGO_REDUCE", "rails")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    with pytest.raises(ValueError, match="COMMLIB_ALGO_REDUCE=rails needs as many ranks on every host"):
        choose("reduce", 8, 1024, unequal)
    assert choose("reduce", 8, 4, None) == "rails"  # (on one host: the reduce-scatter and gather within it)


def test_forced_host_aware_all_reduce(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.setenv("COMMLIB_ALGO_ALL_REDUCE", "leaders")
    assert _algorithms.choose("all_reduce", 8, 4, None) == "leaders"
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.setenv("COMMLIB_ALGO_ALL_REDUCE", "rails")
    assert _algorithms.choose("all_reduce", 8, 4, _algorithms.HostLayout.of([0, 0, 1, 1])) == "rails"
    assert _algorithms.choose("all_reduce", 8, 4, None) == "rails"  # one host (or one a host): equal
    with pytest.raises(ValueError, match="unequal numbers.*use leaders"):
        _algorithms.choose("all_reduce", 8, 3, _algorithms.HostLayout.of([0, 0, 1]))


def test_debug_line_names_the_host_layout(monkeypatch):
    lay = _algorithms.HostLayout.of([0, 0, 1])
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_ALL_REDUCE", raising=False)
    assert _algorithms._why("all_reduce", "leaders", 1 << 20, 3, lay) == (
        "all_reduce of 1048576 B on 3 ranks: leaders (2 hosts, unequal numbers of ranks, "
        "ALL_REDUCE_LEADERS_BYTES=1048576)")


def test_large_broadcast_and_reduce_chain_only_with_enough_bytes_a_rank(monkeypatch):
    """Beyond 4 ranks a chain's n - 1 hops cost more than the tree's log2 n whole transfers unless
    the buffer is past the measured one-host crossover (BROADCAST_CHAIN_BYTES, REDUCE_CHAIN_BYTES) and
    each rank's share is at least CHAIN_BLOCK_BYTES (the alpha-beta model's crossover at scale)."""
    monkeypatch.setattr("commlib._algorithms._forced", {})
    for var in ("COMMLIB_ALGO_BROADCAST", "COMMLIB_ALGO_REDUCE"):
        monkeypatch.delenv(var, raising=False)
    block = _algorithms.CHAIN_BLOCK_BYTES
    for kind, floor in (("broadcast", _algorithms.BROADCAST_CHAIN_BYTES + 1), ("reduce", _algorithms.REDUCE_CHAIN_BYTES)):
        for n in (3, 4):  # measured on the 2-core machine: the chain from its small-size threshold
            assert _algorithms.choose(kind, 16 << 20, n) == "chain"
            assert _algorithms.choose(kind, 1 << 20, n) == "chain"
        for n in (5, 8, 16, 32):  # measured on 16 cores: the tree up to the floor
            assert _algorithms.choose(kind, floor - 1, n) == "tree"
            assert _algorithms.choose(kind, floor, n) == "chain"
            assert _algorithms.choose(kind, 512 << 10, n) == "tree"
        for n in (256, 1024, 10_000):  # the model: the chain from CHAIN_BLOCK_BYTES a rank
            assert _algorithms.choose(kind, block * n, n) == "chain"
            assert _algorithms.choose(kind, block * n - 1, n) == "tree"
        assert _algorithms.choose(kind, 16 << 20, 1024) == "tree"
        assert _algorithms.choose(kind, 256 << 20, 1024) == "chain"
    assert "CHAIN_BLOCK_BYTES" in _algorithms._why("broadcast", "tree", 1 << 20, 64)
    assert "REDUCE_CHAIN_BYTES" in _algorithms._why("reduce", "tree", 1 << 20, 8)



@pytest.mark.parametrize("size", SIZES + [13, 16, 17])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_binomial_gather_and_scatter_every_root(size, count):
    """Each inner rank holds only its subtree's blocks (scratch_blocks), every region lies inside the
    buffers given, and the root talks to log2 n ranks, not n - 1."""
    xs = inputs(size, count)
    for root in sorted({0, 1 % size, size // 2, size - 1}):
        def body(f):
            r = f.rank
            blocks, first = tree.scratch_blocks(size, r, root)
            scratch = (np.full(max(blocks, 1) * count, np.nan), first * count * 8)
            out = np.full(count * size, np.nan) if r == root else None
            gather = tree.gather_tree(size, r, root)
            f.run(gather, {X: xs[r].copy(), RES: out, SCRATCH: scratch}, bounds(count * size, 8, size))
            full = np.concatenate(xs) if r == root else None
            mine = np.full(count, np.nan)
            scatter = tree.scatter_tree(size, r, root)
            f.run(scatter, {X: full, RES: mine, SCRATCH: scratch}, bounds(count * size, 8, size))
            return out, mine, gather, scatter

        res, _ = run_ranks(size, body)
        np.testing.assert_array_equal(res[root][0], np.concatenate(xs) if size else None, err_msg=f"root {root}")
        for r, (_, mine, gather, scatter) in enumerate(res):
            np.testing.assert_array_equal(mine, xs[r], err_msg=f"root {root}, rank {r}")
            assert len(gather.peers) <= max(1, (size - 1).bit_length()) + (r != root)
            assert gather.steps() == scatter.steps()
        assert len(res[root][2].peers) == (size - 1).bit_length()


def test_gather_and_scatter_take_the_binomial_tree_beyond_eight_ranks(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    for var in ("COMMLIB_ALGO_GATHER", "COMMLIB_ALGO_SCATTER"):
        monkeypatch.delenv(var, raising=False)
    for kind in ("gather", "scatter"):
        assert _algorithms.choose(kind, 8 << 10, 8) == "linear"
        assert _algorithms.choose(kind, 8 << 10, 9) == "tree"
        block = _algorithms.GATHER_TREE_BLOCK  # measured on one host: the tree for small blocks only
        for n in (9, 16, 64):
            assert _algorithms.choose(kind, block * n, n) == "tree"
            assert _algorithms.choose(kind, block * n + 1, n) == "linear"
        assert _algorithms.choose(kind, 1 << 20, 65) == "tree"  # the model beyond one host's ranks
        assert _algorithms.choose(kind, _algorithms.GATHER_TREE_BYTES, 1024) == "tree"
        assert _algorithms.choose(kind, _algorithms.GATHER_TREE_BYTES + 1, 1024) == "linear"  # scratch bound
        assert _algorithms.choose(kind, 0, 1024) == "linear"
        assert "GATHER_LINEAR_RANKS" in _algorithms._why(kind, "tree", 1 << 20, 64)
    monkeypatch.setenv("COMMLIB_ALGO_GATHER", "tree")
    monkeypatch.setattr("commlib._algorithms._forced", {})
    assert _algorithms.choose("gather", 8, 2) == "tree"


@pytest.mark.parametrize("size", SIZES + [13, 16, 17, 33])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_bruck_all_to_all_without_a_full_mesh(size, count):
    """Block j of rank r's X lands in block r of rank j's RES, as the pairwise exchange does, with at
    most 2 ceil(log2 n) peers a rank."""
    xs = [np.arange(size * count, dtype=np.float64) + 1000 * r for r in range(size)]

    def body(f):
        plan = logstep.all_to_all(size, f.rank)
        out = np.full(size * count, np.nan)
        f.run(plan, {X: xs[f.rank].copy(), RES: out, SCRATCH: np.full(size * count, np.nan)},
              bounds(size * count, 8, size))
        return out, plan

    res, _ = run_ranks(size, body)
    for r, (out, plan) in enumerate(res):
        want = np.concatenate([xs[j][r * count:(r + 1) * count] for j in range(size)]) if count else out
        np.testing.assert_array_equal(out, want, err_msg=f"rank {r}")
        assert len(plan.peers) <= 2 * (size - 1).bit_length()


def test_all_to_all_avoids_a_full_mesh_at_scale(monkeypatch):
    monkeypatch.setattr("commlib._algorithms._forced", {})
    monkeypatch.delenv("COMMLIB_ALGO_ALL_TO_ALL", raising=False)
    A = _algorithms
    assert A.choose("all_to_all", 1 << 20, 4) == "pairwise"
    assert A.choose("all_to_all", 8 * 64, 64) == "pairwise"  # a mesh of 63 is fine
    assert A.choose("all_to_all", A.ALL_TO_ALL_BRUCK_BLOCK * 65, 65) == "bruck"
    assert A.choose("all_to_all", A.ALL_TO_ALL_BRUCK_BLOCK * 65 + 1, 65) == "pairwise"
    assert A.choose("all_to_all", 64 << 20, 513) == "bruck"  # beyond 512 ranks at any size
    assert "ALL_TO_ALL_MESH_MAX" in A._why("all_to_all", "bruck", 8, 1000)
