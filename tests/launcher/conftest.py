"""Runs the real commrun in a subprocess: `python -m commrun ...`.

The source tree is preferred (launcher/ appears as `commrun` through a symlink,
the repo root supplies `commlib`); if that cannot import (e.g. commlib's
extensions are only built in an installed copy), the installed package is used.
"""
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMPORT_CHECK = [sys.executable, "-c", "import commrun.cli, commlib._rendezvous"]


@pytest.fixture(scope="session")
def commrun_env(tmp_path_factory):
    links = tmp_path_factory.mktemp("commrun-source")
    os.symlink(os.path.join(REPO, "launcher"), links / "commrun")
    # Variables a developer's shell may carry that commrun would keep (and these tests check it sets).
    clean = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env = dict(clean)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(links), REPO, os.environ.get("PYTHONPATH")]))
    if subprocess.run(IMPORT_CHECK, env=env, capture_output=True).returncode == 0:
        return env
    installed = subprocess.run(IMPORT_CHECK, capture_output=True, text=True)
    if installed.returncode != 0:
        pytest.fail(f"neither the source tree nor an installed commrun imports:\n{installed.stderr}")
    return clean


class Commrun:
    def __init__(self, env, cwd, options=()):
        self.env, self.cwd = env, cwd
        self.options = tuple(options)  # commrun options every call gets (e.g. --fork)

    def script(self, name, body):
        path = self.cwd / name
        path.write_text(textwrap.dedent(body))
        return name

    def argv(self, args):
        return [sys.executable, "-m", "commrun", *self.options, *map(str, args)]

    def run(self, *args, timeout=60, input=None, env=None):
        return subprocess.run(self.argv(args), env={**self.env, **(env or {})}, cwd=self.cwd, capture_output=True,
                              text=True, timeout=timeout, input=input)

    def popen(self, *args, **kwargs):
        return subprocess.Popen(self.argv(args), env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture
def commrun(commrun_env, tmp_path, request):
    """commrun; a test parametrized indirectly over "exec"/"fork" runs once per way of starting
    ranks: exec'd interpreters (the default) and --fork."""
    mode = getattr(request, "param", "exec")
    return Commrun(commrun_env, tmp_path, ("--fork",) if mode == "fork" else ())


def pytest_collection_finish(session):
    """What each batched job runs: the mpi4py modules of test_mpi4py_suite.py's jobs (by n) and the
    docs blocks of test_docs_blocks.py's (by job_key), those this session selected."""
    for item in session.items:
        module = getattr(item, "module", None)
        if module is None or not hasattr(item, "callspec"):
            continue
        p = item.callspec.params
        if module.__name__.endswith("test_mpi4py_suite"):
            module.SELECTED.setdefault(p.get("n", 2), []).append(p["module"])
        elif module.__name__.endswith("test_docs_blocks") and item.originalname == "test_block_runs":
            module.SELECTED.setdefault(module.job_key(p["block"], p["n"]), []).append(p["block"])
