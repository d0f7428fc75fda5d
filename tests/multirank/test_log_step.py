"""all_gather's out= and recycled results, and each all_gather / all_reduce algorithm forced, at n = 1..8
(the ring all-gather runs by default at large sizes and inside the ring all-reduce).

n = 5..8 run on a 2-core machine oversubscribed; the Bruck (non-power-of-two) and
recursive-doubling (power-of-two) all-gather and Rabenseifner's fold for the ranks
above a power of two each get several group sizes.
"""
import pytest

NS = [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("ag, ar", [("pairwise", "ring"), ("bruck", "rabenseifner"), ("", "doubling")])
def test_forced(n, ag, ar, assert_ranks_ok, run):
    env = {"COMMLIB_ALGO_ALL_REDUCE": ar}
    if ag:
        env["COMMLIB_ALGO_ALL_GATHER"] = ag
    assert_ranks_ok(run(n, "log_step.py", env=env, timeout=230), n,
                    f"COMMLIB_ALGO_ALL_GATHER={ag or '(default)'} COMMLIB_ALGO_ALL_REDUCE={ar}")
