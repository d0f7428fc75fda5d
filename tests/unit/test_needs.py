"""The suite's skip rule for optional engines (tests/_needs.py): found or not, never imported."""
import os
import subprocess
import sys

from _needs import installed

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_installed_finds_what_is_there_and_not_what_is_not():
    assert installed("json") and installed("email.mime")
    assert not installed("commlib_no_such_module")
    assert not installed("commlib_no_such_package.sub")  # a missing parent is "not installed", not an error


def test_a_module_is_found_without_being_imported():
    code = ("import sys; from _needs import installed; assert installed('xml.dom.minidom'); "
            "print('xml.dom.minidom' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=TESTS)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # (its parent package, xml.dom, is imported to find it)


def test_a_missing_engine_skips_the_module_with_its_reason(pytester):
    pytester.syspathinsert(TESTS)
    pytester.makepyfile(test_engine="""
        from _needs import skip_unless_installed
        skip_unless_installed("commlib_no_such_engine", "the engine is not installed: pip install it")
        def test_never():
            raise AssertionError("ran")
    """)
    result = pytester.runpytest("-rs", "-p", "no:xdist", "-p", "no:cacheprovider", "-p", "no:benchmark")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the engine is not installed: pip install it*"])


pytest_plugins = ["pytester"]
