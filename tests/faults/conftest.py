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


def pytest_generate_tests(metafunc):
    """Every test here runs over both same-host transports: shared memory (the default; "shm" makes a
    connection without it an error instead of a quiet fallback) and Unix sockets; a module of a
    front-end built on the API (torch: nothing of its own knows the transport) sets
    TRANSPORTS = ("shm",) and runs over the default one only, as in tests/multirank."""
    if "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", getattr(metafunc.module, "TRANSPORTS", ("shm", "socket")), indirect=True)


@pytest.fixture(autouse=True)
def transport(request, monkeypatch):
    monkeypatch.setenv("COMMLIB_TRANSPORT", request.param)
    return request.param
