"""Start the ranks of a launcher-less job as forks of one process that imported the heavy modules once
(test_torch_faults.py): what `torch.multiprocessing.start_processes(..., start_method="fork")` does,
without its supervision, so that a dead rank is left to the others to notice.

usage: forked_ranks.py DIR N PRELOAD SCRIPT ARGS...
  PRELOAD  modules to import before forking, comma-separated (e.g. torch,torch.distributed)

Each rank r is a fork in a session of its own, with RANK and LOCAL_RANK set (the rest of the
torchrun-style variables come from this process's environment), its stdout and stderr in
DIR/rank{r}.out and .err, running SCRIPT as __main__ and leaving through the normal interpreter exit.
DIR/pids.json holds the ranks' pids once all are started; DIR/exit.{r} holds [returncode, time] once
rank r has ended (the returncode as subprocess gives it: -signal for a rank killed by one).
"""
import importlib
import json
import os
import runpy
import sys
import time
import traceback


def _write(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def _rank(directory, r, script, args):
    """The forked rank r: never returns (SystemExit carries its code out of the interpreter)."""
    os.setsid()
    for fd, name in ((1, "out"), (2, "err")):
        target = os.open(os.path.join(directory, f"rank{r}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.environ.update(RANK=str(r), LOCAL_RANK=str(r))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        raise SystemExit(1)
    raise SystemExit(0)


def main():
    directory, n, preload, script, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
    for name in filter(None, preload.split(",")):
        importlib.import_module(name)
    pids = {}
    for r in range(n):
        pid = os.fork()
        if pid == 0:
            _rank(directory, r, script, args)
        pids[pid] = r
    _write(os.path.join(directory, "pids.json"), {str(r): pid for pid, r in pids.items()})
    while pids:
        pid, status = os.wait()
        r = pids.pop(pid, None)
        if r is not None:
            _write(os.path.join(directory, f"exit.{r}"), [os.waitstatus_to_exitcode(status), time.time()])


if __name__ == "__main__":
    main()
