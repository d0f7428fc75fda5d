"""The first failure wins, in-process: commrun's choice of the rank to blame, the sys.exit hint, and
the text peers give for a rank that finished."""
import signal
import time
import sys
import threading
import types

import pytest

from commlib._api import lifecycle
from commlib._transport import notices as notices_module
from commlib._transport.notices import Notices
from commrun import supervise

pytestmark = pytest.mark.timeout(20)


class _Proc:
    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        return self.returncode


class _Coordinator:
    def __init__(self):
        self.heard, self.died, self.announced = {}, [], {}

    def departures(self):
        return dict(self.heard)

    def announced_exits(self):
        return dict(self.announced)

    def notify_died(self, rank, code, words):
        self.died.append((rank, code))


def _job(n):
    ranks = [types.SimpleNamespace(rank=r, proc=_Proc(100 + r), describe=lambda r=r: f"rank {r}") for r in range(n)]
    job = supervise._Job(ranks, _Coordinator(), None, 3.0)
    job.live = list(ranks)
    return job, ranks


def test_a_rank_heard_from_first_is_blamed_though_reaped_last(monkeypatch):
    said = []
    monkeypatch.setattr(supervise, "say", said.append)
    job, ranks = _job(4)
    job.coordinator.heard = {1: 10.0, 3: 11.0}  # rank 1's program ended first, then rank 3 reported PeerLost
    monkeypatch.setattr(supervise.time, "monotonic", lambda: 12.0)
    ranks[3].proc.returncode = 3
    job.reap()
    assert said == [] and job.blame_by == 12.0 + supervise.NOTICE_S  # rank 1 still runs: wait for it
    ranks[1].proc.returncode = 7
    job.on_signal(signal.SIGCHLD)  # as the kernel says when it ends
    job.reap()
    assert said == ["rank 1 exited with code 7"] and job.result == 7 and job.blame_by is None


def test_reaping_waits_for_sigchld_or_a_second(monkeypatch):
    """A wake-up (a rank's output line) polls no rank; SIGCHLD, or a second since the last reap, does."""
    now = [12.0]
    monkeypatch.setattr(supervise.time, "monotonic", lambda: now[0])
    job, ranks = _job(3)
    polls = []
    for rank in ranks:
        real = rank.proc.poll
        rank.proc.poll = lambda real=real, r=rank.rank: polls.append(r) or real()
    job.reap()  # the first one looks
    assert sorted(polls) == [0, 1, 2]
    polls.clear()
    ranks[0].proc.returncode = 0
    job.reap()
    assert polls == [] and len(job.live) == 3
    job.on_signal(signal.SIGCHLD)
    job.reap()
    assert sorted(polls) == [0, 1, 2] and [r.rank for r in job.live] == [1, 2]
    polls.clear()
    ranks[1].proc.returncode = 0
    now[0] += 1.0  # a SIGCHLD lost on the way: found within a second
    job.reap()
    assert sorted(polls) == [1, 2] and [r.rank for r in job.live] == [2]


def test_blame_does_not_wait_past_its_deadline(monkeypatch):
    said = []
    monkeypatch.setattr(supervise, "say", said.append)
    job, ranks = _job(3)
    job.coordinator.heard = {1: 10.0, 2: 11.0}
    now = [12.0]
    monkeypatch.setattr(supervise.time, "monotonic", lambda: now[0])
    ranks[2].proc.returncode = 3
    job.reap()
    assert said == []
    now[0] = 12.0 + supervise.NOTICE_S
    job.tick()  # rank 1 never ended: the failure seen is the one named
    assert said == ["rank 2 exited with code 3"] and job.result == 3


def test_a_clean_exit_is_never_blamed_and_a_signal_stop_keeps_its_code(monkeypatch):
    said = []
    monkeypatch.setattr(supervise, "say", said.append)
    job, ranks = _job(3)
    job.coordinator.heard = {0: 1.0, 2: 2.0}
    monkeypatch.setattr(supervise.time, "monotonic", lambda: 5.0)
    ranks[0].proc.returncode = 0
    ranks[2].proc.returncode = -9
    job.reap()
    assert said == ["rank 2 killed by SIGKILL"] and job.result == 137


def test_exit_hint(monkeypatch):
    monkeypatch.setattr(sys, "exit", sys.exit)  # restored after the test
    monkeypatch.setattr(lifecycle, "_exit_status", lifecycle._NOT_CALLED)
    assert lifecycle._exit_code(lifecycle._exit_status) is None  # sys.exit not called
    lifecycle._install_exit_hint()
    lifecycle._install_exit_hint()  # once only
    assert getattr(sys.exit, "_commlib_hint", False)
    with pytest.raises(SystemExit) as e:
        sys.exit(7)
    assert e.value.code == 7 and lifecycle._exit_code(lifecycle._exit_status) == 7
    def in_a_thread():  # sys.exit there ends that thread only: not the process's code
        try:
            sys.exit(9)
        except SystemExit:
            return

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert lifecycle._exit_code(lifecycle._exit_status) == 7
    for status, code in ((None, 0), (0, 0), (300, 44), ("bye", 1)):
        with pytest.raises(SystemExit):
            sys.exit(status)
        assert lifecycle._exit_code(lifecycle._exit_status) == code


def _notices(at_exit=None, exit_code=None):
    """Notices of rank 0 after the coordinator said rank 1 is finishing (at_exit None: said nothing
    of how its program ended, as for a plain finalize())."""
    n = Notices(types.SimpleNamespace(rank=0))
    ends = [] if at_exit is None else [[at_exit, exit_code, [1]]]
    n.on_notice({"kind": "finishing", "rank": 1, "ranks": [1], "ends": ends})
    return n


@pytest.mark.parametrize("ended, text", [
    ({"at_exit": False, "exit_code": None}, "it called finalize()"),
    ({"at_exit": True, "exit_code": None}, "its program ended without calling finalize()"),
    ({"at_exit": True, "exit_code": 7}, "exited with code 7"),
    ({}, "it called finalize()"),  # not listed in "ends": a plain finalize()
])
def test_what_peers_say_of_a_rank_that_finished(ended, text):
    n = _notices(**ended)
    assert n.finishing(1) and not n.finishing(2)
    assert n.gone(1) == text
    sent = []
    n.send = sent.append
    n.coordinator_rank = 0  # the coordinator is a rank's: no launcher reports exits, nothing to wait for
    assert n.departure(1) == text
    assert sent == [{"kind": "release", "rank": 0}]  # so the coordinator's verdict need not wait for our digest


def test_departure_takes_the_launchers_exit_report():
    n = _notices(at_exit=True, exit_code=None)
    n.send = lambda msg: None
    n.on_notice({"kind": "died", "rank": 1, "code": 0, "message": "exited with code 0"})
    assert n.departure(1) == "exited with code 0"


class _FailingEndpoint:
    def __init__(self):
        self.rank, self.closed, self.failures = 0, False, []

    def fail(self, exc, remote=False):
        self.failures.append((type(exc).__name__, str(exc), time.monotonic()))


@pytest.mark.parametrize("coordinator_rank", [0, None])
def test_a_lost_rank_fails_at_once_where_no_launcher_reports_exits(coordinator_rank):
    """torchrun, Ray, srun: a rank hosts the coordinator and no exit status will ever come, so a
    "lost" notice is the cause (Ray Train tore survivors down during a wait for a better one).
    Under commrun the launcher's "died" notice may follow: it gets a moment (LOST_GRACE_S)."""
    ep = _FailingEndpoint()
    n = Notices(ep)
    n.coordinator_rank = coordinator_rank
    t0 = time.monotonic()
    n.on_notice({"kind": "lost", "rank": 1, "message": "rank 1 closed its coordinator connection"})
    if coordinator_rank is not None:
        assert ep.failures and ep.failures[0][0] == "PeerLost"
        assert "rank 0: lost rank 1 (rank 1 closed its coordinator connection)" in ep.failures[0][1]
    else:
        assert not ep.failures  # waiting for the launcher's word
        deadline = time.monotonic() + 5
        while not ep.failures and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ep.failures and ep.failures[0][2] - t0 >= notices_module.LOST_GRACE_S * 0.9


def test_a_rank_that_announced_its_exit_code_is_named_though_still_running(monkeypatch):
    """Rank 1's at-exit digest said sys.exit(7), then its interpreter took longer than NOTICE_S to
    end; rank 2, told, exited with PeerLost's 3 meanwhile: rank 1 is named, with its 7."""
    said = []
    monkeypatch.setattr(supervise, "say", said.append)
    job, ranks = _job(3)
    job.coordinator.heard = {1: 10.0, 2: 11.0}
    job.coordinator.announced = {1: 7}
    now = [12.0]
    monkeypatch.setattr(supervise.time, "monotonic", lambda: now[0])
    ranks[2].proc.returncode = 3
    job.reap()
    assert said == []  # waiting for rank 1
    now[0] = 12.0 + supervise.NOTICE_S
    job.tick()
    assert said == ["rank 1 exited with code 7"] and job.result == 7
