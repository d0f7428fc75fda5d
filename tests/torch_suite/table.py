"""The markdown table of torch's backend suite, gloo against commlib, from runner.py's --json files.

usage: python tests/torch_suite/table.py WS:GLOO.json:COMMLIB.json [WS:GLOO.json:COMMLIB.json ...]

One row per world size: each backend's passed / failed / skipped, the tests that pass on gloo and
not on commlib (the target is none), and those that pass on commlib only.
"""
import json
import sys


def counts(rows):
    out = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for status, _s, _w in rows.values():
        out[status] = out.get(status, 0) + 1
    return f"{out['PASS']} / {out['FAIL']} / {out['SKIP']}"


def main(argv):
    print("| world size | gloo passed / failed / skipped | commlib passed / failed / skipped "
          "| pass on gloo, not on commlib | pass on commlib only |")
    print("|---|---|---|---|---|")
    for arg in argv:
        ws, gloo_path, commlib_path = arg.split(":")
        with open(gloo_path) as f:
            gloo = json.load(f)
        with open(commlib_path) as f:
            commlib = json.load(f)
        passed = {name for name, row in gloo.items() if row[0] == "PASS"}
        ours = {name for name, row in commlib.items() if row[0] == "PASS"}
        print(f"| {ws} | {counts(gloo)} | {counts(commlib)} | {', '.join(sorted(passed - ours)) or 'none'} "
              f"| {', '.join(sorted(ours - passed)) or 'none'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
