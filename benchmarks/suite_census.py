"""How many processes the test suite starts, and what they cost: every Python process counted.

    python benchmarks/suite_census.py [--log FILE] [-- PYTEST ARGS...]     (runs `python -m pytest -q ...`)
    python benchmarks/suite_census.py --log FILE --summary                  (tables from a log, no run)

A temporary `sitecustomize` (on PYTHONPATH for the run only; never part of the package) appends one
line per Python process at its exit: its kind (a rank: COMMLIB_RANK set; a launcher: commrun, as
the console script or `python -m commrun`; other), its own CPU seconds (user + system), its life in
seconds, the test that started it (PYTEST_CURRENT_TEST, which subprocesses inherit) and its command
line. A process that ends by a signal or os._exit (a killed rank, a forked one) writes nothing: the
counts are floors.
Then the summary: processes and CPU by kind, and the files that start the most.
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile

_HOOK = '''
import atexit, os, sys, time
_t0 = time.monotonic()
def _census():
    try:
        t = os.times()
        argv = " ".join(sys.argv[:3])[:200].replace("\\t", " ")
        first = sys.argv[0] if sys.argv else ""
        kind = ("rank" if "COMMLIB_RANK" in os.environ else
                "launcher" if os.path.basename(first) == "commrun" or first.endswith("/__main__.py") and
                os.path.basename(os.path.dirname(first)) in ("commrun", "launcher") else "other")
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        with open({log!r}, "a") as f:
            f.write(f"{{kind}}\\t{{t.user + t.system:.3f}}\\t{{time.monotonic() - _t0:.3f}}\\t{{test}}\\t{{argv}}\\n")
    except Exception as exc:  # a census line lost is a count short by one, said so on stderr
        print(f"suite_census: {{exc}}", file=sys.stderr)
atexit.register(_census)
'''


def summary(log):
    by_kind, by_file = collections.Counter(), collections.defaultdict(collections.Counter)
    cpu = collections.Counter()
    with open(log) as f:
        for line in f:
            kind, sec, _life, test, _argv = (line.rstrip("\n").split("\t") + [""] * 5)[:5]
            by_kind[kind] += 1
            cpu[kind] += float(sec)
            name = test.split("::")[0] or "(outside a test)"
            by_file[name][kind] += 1
            by_file[name]["cpu"] += float(sec)
    print("| kind | processes | CPU-s (their own) |\n|---|---:|---:|")
    for kind in ("launcher", "rank", "other"):
        print(f"| {kind} | {by_kind[kind]:,} | {cpu[kind]:,.0f} |")
    print("\n| file | launchers | ranks | CPU-s |\n|---|---:|---:|---:|")
    for name, c in sorted(by_file.items(), key=lambda kv: -kv[1]["launcher"])[:15]:
        print(f"| {name} | {c['launcher']} | {c['rank']} | {c['cpu']:.0f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log", help="the census file (default: a new one in a temporary directory)")
    p.add_argument("--summary", action="store_true", help="only summarise --log")
    p.add_argument("pytest_args", nargs="*")
    a = p.parse_args()
    if a.summary:
        summary(a.log)
        return 0
    hook_dir = tempfile.mkdtemp(prefix="commlib-census-")
    log = a.log or os.path.join(hook_dir, "census.log")
    with open(os.path.join(hook_dir, "sitecustomize.py"), "w") as f:
        f.write(_HOOK.format(log=os.path.abspath(log)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [hook_dir, os.environ.get("PYTHONPATH")])))
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", *a.pytest_args], env=env)
    print(f"census: {log}")
    summary(log)
    return rc


if __name__ == "__main__":
    sys.exit(main())
