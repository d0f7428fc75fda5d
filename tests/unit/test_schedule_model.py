"""The alpha-beta model of schedules (benchmarks/schedule_model.py) on the real plans, in process."""
import os
import sys

import pytest

from commlib import _plan
from commlib._algorithms import doubling, ring, tree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import schedule_model as sm  # noqa: E402

pytestmark = pytest.mark.timeout(120)
MiB = 1 << 20


def test_a_ring_all_reduce_on_one_host_is_2n_minus_2_steps_and_no_network():
    links = sm.Links(per_host=8, alpha_local=1e-6, beta_local=1e-9, copy_beta=0.0)
    res = sm.play(8, ring.all_reduce, 8 * MiB, links)
    assert res.steps == 14 and res.nic_bytes == 0 and res.mesh == 2
    assert res.time == pytest.approx(14 * (1e-6 + MiB * 1e-9), rel=1e-6)  # lock-step: one block a step


def test_network_bytes_count_what_leaves_each_host():
    links = sm.Links(per_host=1)
    res = sm.play(4, ring.all_reduce, 4 * MiB, links)
    assert res.nic_bytes == 2 * 3 * MiB  # 2(n-1) blocks of B/n leave every host
    assert res.nic_time == pytest.approx(res.nic_bytes * links.beta_net)
    two_hosts = sm.play(4, ring.all_reduce, 4 * MiB, sm.Links(per_host=2))
    assert two_hosts.nic_bytes == 2 * 3 * MiB  # one rank of each host talks across: the same bytes


def test_recursive_doubling_is_log2_n_steps():
    for n, steps in ((2, 1), (16, 4), (64, 6)):
        assert sm.play(n, doubling.all_reduce, 1024, sm.Links(per_host=4)).steps == steps
    assert sm.play(12, doubling.all_reduce, 1024, sm.Links(per_host=4)).steps == 3 + 2  # fold in and out


def test_a_chain_broadcast_streams_instead_of_storing_and_forwarding():
    links = sm.Links(per_host=1, copy_beta=0.0)
    nbytes = 16 * MiB
    chain = sm.play(8, lambda n, r: tree.broadcast_chain(n, r, 0), nbytes, links)
    one_hop = links.alpha_net + nbytes * links.beta_net
    assert chain.steps == 7 and one_hop < chain.time < 2 * one_hop  # pipelined: not 7 hops of the whole
    binomial = sm.play(8, lambda n, r: tree.broadcast_tree(n, r, 0), nbytes, links)
    assert binomial.steps == 3 and binomial.time == pytest.approx(3 * one_hop, rel=1e-6)


def test_every_modelled_algorithm_completes_on_odd_and_even_n():
    for (kind, algo), plan_of in sm.PLANS.items():
        for n in (2, 3, 5, 8):
            if (kind, algo) in sm.POW2_ONLY and n & (n - 1):
                continue
            res = sm.play(n, plan_of, 4096 * n, sm.Links(per_host=2))
            assert res.steps >= 1 and res.time > 0, (kind, algo, n)


def test_a_schedule_that_deadlocks_is_reported():
    def plan_of(n, r):  # every rank waits to receive from its left neighbour first: nobody sends
        b = _plan.Builder("stuck", 1)
        b.step(src=(r - 1) % n, recv=b.whole(_plan.RES))
        b.step((r + 1) % n, b.whole(_plan.RES))
        return b.plan()
    with pytest.raises(RuntimeError, match="deadlocks"):
        sm.play(3, plan_of, 64, sm.Links(per_host=1))


def test_host_aware_all_reduces_against_the_flat_ring():
    """64 ranks, 16 a host. Leaders: a tree in each host, a ring of 4 leaders, a tree back: few
    steps (for small payloads). Rails: a reduce-scatter in each host, 16 rings of 4 side by side,
    an all-gather: fewer NIC bytes than the flat ring's, in 15 + 6 + 15 steps instead of 126."""
    links = sm.Links(per_host=16, copy_beta=0.0)
    flat_small, flat_large = (sm.play(64, ring.all_reduce, b, links) for b in (64, 16 * MiB))
    leaders = sm.play(64, sm.hosted(("all_reduce", "leaders"), links, 64), 64, links)
    assert leaders.steps == 4 + 2 * 3 + 4 and leaders.time < flat_small.time / 4
    rails = sm.play(64, sm.hosted(("all_reduce", "rails"), links, 64), 16 * MiB, links)
    assert rails.steps == 15 + 2 * 3 + 15 and flat_large.steps == 126
    assert rails.nic_bytes == 2 * 3 * (16 * MiB // 4) < flat_large.nic_bytes  # 2(L-1)/L of B, not 2(n-1)/n
    assert rails.time < flat_large.time
    for n in (5, 12, 33):  # hosts of uneven sizes: no deadlock
        assert sm.play(n, sm.hosted(("all_reduce", "leaders"), sm.Links(per_host=4), n), 4096,
                       sm.Links(per_host=4)).steps > 0
