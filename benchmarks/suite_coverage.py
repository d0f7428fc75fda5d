"""Line coverage of commlib/ by the test suite, rank processes included.

    python benchmarks/suite_coverage.py [PYTEST ARGS...]      (default: the whole suite, as the README runs it)

Every Python process the suite starts (pytest's workers, commrun, each rank, the helpers they start)
records its coverage: a `sitecustomize` in a temporary directory put first on PYTHONPATH starts
coverage.py in each (COVERAGE_PROCESS_START), in parallel mode, saving on os._exit and SIGTERM too
(ranks that die or are killed by the tests under test lose what they ran since their last save).
Then the data are combined and the total printed with the per-file table. Needs `pip install
coverage` (not a dependency of commlib or of its tests). Processes a test starts with a scrubbed
environment (no PYTHONPATH) are not counted: the same in any two runs compared.
"""
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RC = """[run]
parallel = true
source = {repo}/commlib
data_file = {data}/.coverage
patch = _exit
sigterm = true
[report]
precision = 1
[paths]
source =
    {repo}/commlib
"""


def main(args):
    try:
        import coverage  # noqa: F401
    except ImportError:
        sys.exit("coverage is not installed: pip install coverage")
    work = tempfile.mkdtemp(prefix="commlib-cov-")
    data = os.path.join(work, "data")
    os.makedirs(data)
    rc_path = os.path.join(work, "coveragerc")
    with open(rc_path, "w") as f:
        f.write(RC.format(repo=REPO, data=data))
    with open(os.path.join(work, "sitecustomize.py"), "w") as f:
        f.write("import coverage\ncoverage.process_startup()\n")
    env = dict(os.environ, COVERAGE_PROCESS_START=rc_path,
               PYTHONPATH=os.pathsep.join(filter(None, [work, os.environ.get("PYTHONPATH")])))
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=REPO, env=env)
    clean = {k: v for k, v in os.environ.items() if k != "COVERAGE_PROCESS_START"}
    subprocess.run([sys.executable, "-m", "coverage", "combine", f"--rcfile={rc_path}", "-q"], cwd=REPO, env=clean,
                   check=True)
    report = subprocess.run([sys.executable, "-m", "coverage", "report", f"--rcfile={rc_path}", "--sort=cover"],
                            cwd=REPO, env=clean, capture_output=True, text=True, check=True).stdout
    print(report)
    total = report.strip().splitlines()[-1]
    print(f"pytest exit code {test.returncode}; data in {data}\n{total}")
    return test.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
