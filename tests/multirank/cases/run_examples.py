"""The example programs named on the command line, run one after another in each rank as
`python EXAMPLE` would run them (runpy, as __main__): one job for all of them at a size
(_harness.examples_job reads the output back, example by example).

usage: commrun -n N run_examples.py EXAMPLE.py...
Before each example every rank prints `EXAMPLE NAME`, after it `EXAMPLE-OK NAME`; one that raises
or exits non-zero prints `EXAMPLE-FAILED NAME: ERROR` instead (its traceback on stderr) and the next
one still runs. Exits 1 if any failed.
"""
import os
import runpy
import sys
import traceback


def main(paths):
    failed = 0
    for path in paths:
        name = os.path.basename(path)
        print(f"EXAMPLE {name}", flush=True)
        sys.argv = [path]
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))  # as `python EXAMPLE` puts its directory first
        try:
            runpy.run_path(path, run_name="__main__")
            error = None
        except SystemExit as exc:
            error = None if exc.code in (0, None) else f"exited with {exc.code!r}"
        except Exception as exc:  # reported, and the next example still runs
            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}"
        finally:
            sys.path.pop(0)
        if error is None:
            print(f"EXAMPLE-OK {name}", flush=True)
        else:
            failed += 1
            print(f"EXAMPLE-FAILED {name}: {error}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
