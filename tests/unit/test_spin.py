"""The adaptive spin rule (in-process, no sockets): a prompt peer earns the full spin, a late one none."""
import pytest

from commlib._errors import CommError
import os

from commlib._transport import _io, spin_policy, SPIN_MAX_US, SPIN_MAX_SHARED_US, SPIN_YIELD_US

pytestmark = pytest.mark.timeout(30)

CAP = 200e-6
FAST = _io.SPIN_FAST


def settle(waits, avg=0.0, cap=CAP):
    for w in waits:
        avg = _io.learn_wait(avg, w, cap)
    return avg


def test_budget_is_the_cap_for_a_prompt_peer_and_nothing_for_a_late_one():
    assert _io.spin_budget(0.0, CAP) == CAP
    assert _io.spin_budget(FAST, CAP) == CAP
    assert _io.spin_budget(2 * FAST, CAP) == 0.0
    assert _io.spin_budget(1.0, CAP) == 0.0
    mid = _io.spin_budget(1.5 * FAST, CAP)
    assert 0 < mid < CAP and mid == pytest.approx(CAP / 2)
    # monotone: a later peer never earns a longer spin
    budgets = [_io.spin_budget(k * 1e-6, CAP) for k in range(0, 80)]
    assert all(a >= b for a, b in zip(budgets, budgets[1:]))


def test_prompt_waits_keep_the_full_spin():
    avg = settle([3e-6, 5e-6, 2e-6, 8e-6] * 10)
    assert avg < FAST and _io.spin_budget(avg, CAP) == CAP


def test_a_usually_late_peer_loses_the_spin_and_regains_it_when_prompt_again():
    avg = settle([1e-3] * 6)  # a peer that keeps us waiting a millisecond (busy, or sharing our core)
    assert _io.spin_budget(avg, CAP) == 0.0
    # unspun waits on a prompt peer include poll's wake-up (~10-20 us): still "prompt"
    avg = settle([15e-6] * 12, avg)
    assert _io.spin_budget(avg, CAP) == CAP


def test_one_long_idle_period_is_forgotten_after_a_few_prompt_waits():
    avg = settle([4e-6] * 10)
    avg = _io.learn_wait(avg, 30.0, CAP)  # half a minute idle: clipped, not remembered as 30 s
    assert avg <= 0.25 * 2 * CAP + 4e-6
    avg = settle([4e-6] * 8, avg)
    assert _io.spin_budget(avg, CAP) == CAP


def test_occasional_late_waits_among_prompt_ones_keep_a_spin():
    avg = 0.0
    for i in range(200):
        avg = _io.learn_wait(avg, 1e-3 if i % 10 == 0 else 3e-6, CAP)
    # right after a late wait the budget may dip, but it recovers within a few waits
    assert _io.spin_budget(settle([3e-6] * 4, avg), CAP) == CAP


def test_a_yielding_spin_calls_a_peer_prompt_for_longer():
    # ranks share cores: a prompt answer includes the partner's turn on our core
    yfast = _io.SPIN_FAST_YIELD
    assert yfast > FAST
    cap = 50e-6
    assert _io.spin_budget(2 * FAST, cap, True) == cap  # no spin for a busy spinner, the full one here
    assert _io.spin_budget(2 * FAST, cap) == 0.0
    assert _io.spin_budget(2 * yfast, cap, True) == 0.0
    avg = 0.0
    for _ in range(20):
        avg = _io.learn_wait(avg, 60e-6, cap, True)
    assert _io.spin_budget(avg, cap, True) == cap
    for _ in range(20):  # a peer that is really late still loses the spin
        avg = _io.learn_wait(avg, 5e-3, cap, True)
    assert _io.spin_budget(avg, cap, True) == 0.0


def test_a_zero_cap_never_spins():
    assert _io.spin_budget(0.0, 0.0) == 0.0
    assert settle([1e-3] * 5, cap=0.0) > 2 * FAST  # still learns: the clip does not hide lateness


def test_spin_policy_env(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("COMMLIB_SPIN_YIELD_US", raising=False)
    monkeypatch.setenv("COMMLIB_SPIN_US", "37")
    assert spin_policy() == (pytest.approx(37e-6), False, False)
    monkeypatch.setenv("COMMLIB_SPIN_US", "0")
    assert spin_policy() == (0.0, False, False)
    monkeypatch.delenv("COMMLIB_SPIN_US")
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", "1")
    assert spin_policy() == (pytest.approx(SPIN_MAX_US * 1e-6), True, False)
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", str(cores + 1))  # ranks outnumber cores: spin by yielding
    assert spin_policy() == (pytest.approx(SPIN_YIELD_US * 1e-6), True, True)
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", str(2 * cores + 1))  # ... up to two ranks a core
    assert spin_policy() == (pytest.approx(SPIN_MAX_SHARED_US * 1e-6), True, False)
    monkeypatch.setenv("COMMLIB_SPIN_YIELD_US", "30")  # unless asked for
    assert spin_policy() == (pytest.approx(30e-6), True, True)
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", str(cores + 1))
    monkeypatch.setenv("COMMLIB_SPIN_YIELD_US", "0")  # 0 turns it off
    assert spin_policy() == (pytest.approx(SPIN_MAX_SHARED_US * 1e-6), True, False)
    monkeypatch.setenv("COMMLIB_LOCAL_SIZE", "1")  # never when every rank has a core
    monkeypatch.setenv("COMMLIB_SPIN_YIELD_US", "30")
    assert spin_policy() == (pytest.approx(SPIN_MAX_US * 1e-6), True, False)
    monkeypatch.setenv("COMMLIB_SPIN_US", "fast")
    with pytest.raises(CommError, match="COMMLIB_SPIN_US"):
        spin_policy()
