"""The mpi4py suite's verdict count (benchmarks/mpi4py_suite.py), in-process: what the regression
floors of tests/launcher/test_mpi4py_suite.py are compared with."""
import importlib.util
import pathlib

_spec = importlib.util.spec_from_file_location(
    "mpi4py_suite", pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "mpi4py_suite.py")
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)


def test_each_test_counts_once_by_its_verdict():
    text = ("test_a (t.C.test_a) ... ok\ntest_b (t.C.test_b) ... FAIL\ntest_c (t.C.test_c) ... skipped 'why'\n"
            "test_a (t.C.test_a) ... ok\ntest_d (t.C.test_d) ... expected failure\n")
    assert suite.count_verdicts(text) == {"passed": 2, "failed": 1, "skipped": 1}


def test_a_verdict_pushed_to_the_next_line_still_counts():
    # a spawned child writes to rank 0's stdout between a test's name and its verdict
    text = "test_a (t.C.test_a) ... child says hi\nok\ntest_b (t.C.test_b) ... \nERROR\ntest_c (t.C.test_c) ... ok\n"
    assert suite.count_verdicts(text) == {"passed": 2, "failed": 1, "skipped": 0}


def test_a_stray_verdict_word_without_a_pending_test_counts_nothing():
    text = "ok\ntest_a (t.C.test_a) ... ok\nok\nsome output\nFAIL\n"
    assert suite.count_verdicts(text) == {"passed": 1, "failed": 0, "skipped": 0}


def test_rank_0s_stream_is_put_back_together_from_tagged_chunks():
    out = "[0] test_a (t.C.test_a) ... [1] test_a (t.C.test_a) ... [1] ok\n[0] ok\n"
    assert suite.count_verdicts(suite._rank0(out)) == {"passed": 1, "failed": 0, "skipped": 0}
