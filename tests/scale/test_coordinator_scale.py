"""The real coordinator with a thousand fake ranks (and more on request): start-up, a rank lost
without a goodbye, a stall report on every rank at once, finalize (digests compared at the coordinator); what each costs is printed
(`-s`) and bounded.

COMMLIB_SCALE_RANKS="1000,2000,4000,8000" runs larger jobs (benchmarks/RESULTS.md records them);
CI runs 1,000.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakeranks  # noqa: E402

SIZES = [int(s) for s in os.environ.get("COMMLIB_SCALE_RANKS", "1000").split(",")]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("n", SIZES)
def test_fake_ranks_assemble_hear_a_loss_and_leave(n):
    phases = fakeranks.run(n, timeout=600)
    print(f"\nn={n}: " + "; ".join(f"{k} {v['seconds']:.2f} s, {v['bytes'] / 1e6:.1f} MB in {v['messages']} messages, "
                                   f"coordinator {v['cpu_s']:.2f} CPU-s, {v['threads']} threads"
                                   for k, v in phases.items()))
    start, lost, stall, finalize = phases["start"], phases["lost"], phases["stall"], phases["finalize"]
    # every rank is told every rank's host (one run: 64 ranks a host) and the addresses of its
    # O(log n) likely peers (~60 B each); a sample asks for a block more, the last rank for all. The
    # whole table to every rank was n² rows (7.6 GB at 10,000 ranks).
    assert n * 1000 < start["bytes"] < n * 300 * n.bit_length(), start
    assert start["messages"] <= 2 * n + 20, start
    assert lost["messages"] == n - 1, lost  # one notice to each other rank, nothing more
    # one event loop accepts, runs the handshakes and reads every connection: the process's main
    # thread, the loop, deliveries, a census timer (and a library's own); not one a rank or a handshake
    assert all(phase["threads"] <= 5 for phase in phases.values()), phases
    # a stall: one census (a query and an answer per rank), its reply to every rank (~6 B a rank in
    # it: the ranks of one state); a relay per asker was n² queries and n² answers
    assert stall["messages"] <= 2 * n and stall["bytes"] < n * n * 12 + n * 1000, stall
    # finalize: the coordinator compares the digests (3.8 kB each) and answers each rank once; what a
    # rank receives besides its verdict is who is finishing and who left, coalesced (a few bytes a
    # rank). Every digest to every rank was 3.8 GB at 1,000 ranks.
    assert finalize["bytes"] < n * n * 30 + n * 1000, finalize


@pytest.mark.timeout(900)
@pytest.mark.parametrize("n", SIZES)
def test_fake_hosts_behind_agents_cost_the_coordinator_a_frame_a_host(n):
    """The same job with each host's 64 ranks behind one agent's link (commrun's agents do this): a
    notice for every rank is one frame a host, not one message a rank."""
    phases = fakeranks.run(n, timeout=600, agents=True)
    print(f"\nn={n} behind agents: " + "; ".join(
        f"{k} {v['seconds']:.2f} s, {v['bytes'] / 1e6:.2f} MB in {v['messages']} frames, coordinator "
        f"{v['cpu_s']:.2f} CPU-s, {v['threads']} threads" for k, v in phases.items()))
    hosts = (n + 63) // 64
    start, lost, stall, finalize = phases["start"], phases["lost"], phases["stall"], phases["finalize"]
    assert start["messages"] <= 2 * n + 20, start  # each rank its own table (its likely peers differ)
    assert lost["messages"] == hosts and lost["bytes"] < 200 * hosts, lost  # n - 1 messages on own connections
    assert stall["messages"] <= 2 * hosts + 4, stall  # the census's query and its reply: once a host each
    # finalize: the hang-up after each goodbye (9 B a rank), the verdict and the coalesced notices once a
    # host (11 kB at 1,000 ranks; 100 kB under CI's load when each hang-up ended a goodbye's window)
    assert finalize["bytes"] < 40 * n, finalize
    assert all(phase["threads"] <= 5 for phase in phases.values()), phases
