"""`python -m commlib.bench` from an unbuilt source checkout's root imports the checkout, not the
installed commlib: the ImportError says that the checkout shadows the installed package (and where
each is) instead of telling the user to `pip install .`, which they did."""
import os
import shutil
import subprocess
import sys

import pytest

import commlib

pytestmark = pytest.mark.timeout(60)
INSTALLED = os.path.dirname(os.path.abspath(commlib.__file__))

# Only path-based finders: a development install's own finder (pip install -e) would map the
# checkout's missing submodules onto the built package, which hides the case users meet.
PROGRAM = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
sys.path[:0] = sys.argv[1:]
import commlib
"""


def _import(cwd, *path):
    return subprocess.run([sys.executable, "-c", PROGRAM, *path], capture_output=True, text=True, timeout=30, cwd=cwd)


def test_an_unbuilt_checkout_that_shadows_the_installed_package_says_so(tmp_path):
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    (checkout / "commlib").mkdir(parents=True)
    shutil.copy(os.path.join(INSTALLED, "__init__.py"), checkout / "commlib")
    site.mkdir()
    (site / "commlib").symlink_to(INSTALLED)
    run = _import(tmp_path, str(checkout), str(site))
    assert run.returncode == 1
    assert f"unbuilt source checkout ({checkout / 'commlib'})" in run.stderr, run.stderr
    assert f"shadows the installed commlib ({site / 'commlib'})" in run.stderr, run.stderr
    assert "run from another directory" in run.stderr


def test_an_unbuilt_package_with_nothing_installed_says_to_build_it(tmp_path):
    (tmp_path / "commlib").mkdir()
    shutil.copy(os.path.join(INSTALLED, "__init__.py"), tmp_path / "commlib")
    run = subprocess.run([sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import commlib",
                          str(tmp_path)], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert run.returncode == 1
    assert "compiled extensions are missing; build them with `pip install .`" in run.stderr, run.stderr
