"""The torch backend's rule for torch's threads where the launcher left every rank at one a core."""
import pytest

from _needs import skip_unless_installed

skip_unless_installed("torch", "torch is not installed: pip install torch==2.13.0 (CPU build)")


@pytest.fixture(scope="module")
def _threads(torch):
    from commlib.torch import _threads
    return _threads


@pytest.fixture
def threads(torch):
    """torch's thread count, put back afterwards; the cores made to match it (torch's default)."""
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    yield 4
    torch.set_num_threads(before)


def test_ranks_at_torchs_default_share_the_cores(threads, torch, _threads, capsys, monkeypatch):
    monkeypatch.setattr(_threads.psutil, "cpu_count", lambda logical=True: 4)
    assert _threads.share_cores(0, 2, environ={}, ncores=4) == 2
    assert torch.get_num_threads() == 2
    err = capsys.readouterr().err
    assert "2 ranks on 4 cores: torch.set_num_threads(2)" in err and "OMP_NUM_THREADS" in err
    torch.set_num_threads(4)
    assert _threads.share_cores(1, 3, environ={}, ncores=4) == 1  # only the host's first rank says it
    assert torch.get_num_threads() == 1 and capsys.readouterr().err == ""


@pytest.mark.parametrize("local_size, environ, ncores, why", [
    (1, {}, 4, "one rank alone keeps torch's default"),
    (2, {"OMP_NUM_THREADS": "4"}, 4, "the user chose"),
    (2, {"MKL_NUM_THREADS": "2"}, 4, "the user chose"),
    (2, {}, 8, "2 x 4 threads fit 8 cores"),
])
def test_left_alone(threads, torch, _threads, monkeypatch, local_size, environ, ncores, why):
    monkeypatch.setattr(_threads.psutil, "cpu_count", lambda logical=True: ncores)
    assert _threads.share_cores(0, local_size, environ=environ, ncores=ncores) is None, why
    assert torch.get_num_threads() == 4


def test_threads_the_program_lowered_are_kept(threads, torch, _threads, monkeypatch):
    monkeypatch.setattr(_threads.psutil, "cpu_count", lambda logical=True: 8)
    torch.set_num_threads(3)  # below the default of 8: the program's choice
    assert _threads.share_cores(0, 4, environ={}, ncores=8) is None and torch.get_num_threads() == 3


def test_the_users_threads_that_outnumber_the_cores_get_a_hint_not_a_change(threads, torch, _threads, capsys, monkeypatch):
    monkeypatch.setattr(_threads.psutil, "cpu_count", lambda logical=True: 4)
    assert _threads.share_cores(0, 2, environ={"OMP_NUM_THREADS": "4"}, ncores=4) is None
    assert torch.get_num_threads() == 4
    assert "export OMP_WAIT_POLICY=PASSIVE" in capsys.readouterr().err
    assert _threads.share_cores(1, 2, environ={"OMP_NUM_THREADS": "4"}, ncores=4) is None  # said once a host
    assert _threads.share_cores(0, 2, environ={"OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "ACTIVE"}, ncores=4) is None
    assert capsys.readouterr().err == ""
