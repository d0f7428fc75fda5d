"""Fixtures of the fault suite; the helpers live in faultlib.py (importable as `faultlib`)."""
import pytest

from faultlib import Job, take_figures


@pytest.fixture
def jobs(tmp_path):
    """Factory for Jobs; at teardown nothing the test started may survive."""
    started = []

    def make(body, n, **kwargs):
        sub = tmp_path / f"job{len(started)}"
        sub.mkdir()
        job = Job(sub, body, n, **kwargs)
        started.append(job)
        return job

    yield make
    for job in started:
        if job.proc is not None:
            if job.proc.poll() is None or job.leftovers():
                job.kill_all()
            job._finish()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    # The test's figures ride in its report: tests/conftest.py collects and prints them (from an
    # xdist worker the report goes to the controller)
    if call.when == "teardown":
        report.user_properties += [("fault-figure", figure) for figure in take_figures()]


@pytest.fixture(autouse=True, params=["shm", "socket"])
def transport(request, monkeypatch):
    """Every test here runs over both same-host transports: shared memory (the default; "shm" makes
    a connection without it an error instead of a quiet fallback) and Unix sockets."""
    monkeypatch.setenv("COMMLIB_TRANSPORT", request.param)
    return request.param
