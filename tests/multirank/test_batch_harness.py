"""The batched runner itself (cases/_batch.py and _harness.BatchJob): each way a check can go wrong is
reported on that check alone, naming the ranks, and the job goes on or names what it did not run."""
import pytest

from _harness import BatchJob

TRANSPORTS = ("shm",)
FIRST = ["passes", "part.planted_on_rank_1", "batch_selftest_program", "records_a_failure_on_rank_1", "raises_everywhere", "differs_across_ranks",
         "passes_after_failures", "records_nothing", "raises_on_rank_0_only", "after_a_lost_schedule"]


def _failure(job, name):
    with pytest.raises(pytest.fail.Exception) as info:
        job.verdict(name)
    return str(info.value)


@pytest.mark.timeout(120)
def test_each_failure_is_reported_on_its_own_check(tmp_path):
    job = BatchJob("batch_selftest.py", 3, FIRST, {"COMMLIB_TIMEOUT": "3"}, 100, tmp_path)
    job.verdict("passes")
    msg = _failure(job, "part.planted_on_rank_1")
    assert "rank 1: section label: planted on rank 1" in msg and "rank 0:" not in msg.split("--- job")[0]
    msg = _failure(job, "batch_selftest_program")
    assert "rank 1: program label: planted on rank 1 of a program" in msg and "rank 0:" not in msg.split("--- job")[0]
    msg = _failure(job, "records_a_failure_on_rank_1")
    assert "rank 1: planted mismatch" in msg and "rank 0:" not in msg.split("--- job")[0]
    msg = _failure(job, "raises_everywhere")
    assert msg.count("ValueError: planned on every rank") == 3 and "later checks" not in msg.split("--- job")[0]
    msg = _failure(job, "differs_across_ranks")
    assert "result bytes differ across ranks" in msg
    job.verdict("passes_after_failures")  # the job went on after three failed checks
    assert "the check ran without recording a single result on any rank" in _failure(job, "records_nothing")
    msg = _failure(job, "raises_on_rank_0_only")
    assert "RuntimeError: planned on rank 0 alone" in msg and "(later checks were not run)" in msg
    msg = _failure(job, "after_a_lost_schedule")
    assert "not run (the job ended in check 'raises_on_rank_0_only')" in msg


@pytest.mark.timeout(120)
def test_a_hung_check_names_itself_and_the_rest_are_not_run(tmp_path):
    job = BatchJob("batch_selftest.py", 2, ["passes", "hangs_on_rank_0", "after_the_hang"], None, 100, tmp_path)
    job.verdict("passes")
    assert job.seconds < 30, f"the hung check held the job {job.seconds:.0f} s (its deadline is 1 s)"
    msg = _failure(job, "hangs_on_rank_0")
    assert "rank 0: hung: still running after its deadline of 1 s" in msg and "time.sleep(60)" in msg
    assert "not run (the job ended in check 'hangs_on_rank_0')" in _failure(job, "after_the_hang")
