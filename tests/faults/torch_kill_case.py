"""A torch.distributed job in which one rank dies in the middle of its work (test_torch_faults.py).

usage: torch_kill_case.py MODE VICTIM HOW [--ignore-sigterm]
  MODE    sync   a loop of verified dist.all_reduce
          async  a loop of dist.all_reduce(async_op=True) + work.wait()
          ddp    DistributedDataParallel training steps (the survivors are inside loss.backward(),
                 waiting on the gradient all_reduce, when the victim dies)
  VICTIM  the rank that dies, at iteration KILL_AT, after sleeping SETTLE_S so that every survivor
          is already blocked on it
  HOW     sigkill (os.kill(os.getpid(), SIGKILL)) | exit (os._exit(3))
  --ignore-sigterm  survive commrun's SIGTERM (commrun SIGKILLs the rest after --grace)

Backend: TORCH_TEST_BACKEND ("commlib", the default, imports commlib.torch; or "gloo").
Works under commrun and without any launcher (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).

Every line of interest is a `@@ {json}` record (the fault suite's convention) and, for people,
`SURVIVOR rank R caught RuntimeError: <message>`. A survivor that catches a RuntimeError (any
subclass) records when, where and what, then checks that the group stays failed (the next
all_reduce must raise too, quickly) and that destroy_process_group() returns, and exits with
SURVIVOR_CODE through the normal interpreter exit. Anything else it catches exits with
OTHER_CODE; a loop that ends without an error exits 0 (the test fails both).
"""
import datetime
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")
if BACKEND == "commlib":
    import commlib.torch  # noqa: F401  (registers the "commlib" backend)

KILL_AT = 5
SETTLE_S = 0.5
ITERATIONS = 400  # far more than the victim lives
SURVIVOR_CODE, OTHER_CODE = 17, 18
PG_TIMEOUT_S = 60  # a missed detection surfaces as a timeout error (the test's bound is far lower)


def emit(**fields):
    print("@@ " + json.dumps(fields), flush=True)


def exit_process(code):
    """With gloo, skip the interpreter's finalization: torch 2.13's ProcessGroupGloo worker threads
    can abort the process at exit (pytorch/pytorch#179291; see cases/torch_train.py). The backend
    under test, commlib, goes through the normal exit."""
    sys.stdout.flush()
    sys.stderr.flush()
    if BACKEND == "gloo":
        os._exit(code)
    sys.exit(code)


def die(how, rank):
    emit(t_kill=time.time(), victim=rank, how=how)
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)


def main():
    mode, victim, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    rank, n = dist.get_rank(), dist.get_world_size()
    emit(ready=True, rank=rank, size=n, pid=os.getpid())

    if mode == "ddp":
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x, y = torch.randn(8, 16), torch.randn(8, 4)
    t = torch.full((1 << 16,), float(rank + 1))
    expected = n * (n + 1) / 2
    where = "start"
    i = 0
    try:
        for i in range(ITERATIONS):
            if rank == victim and i == KILL_AT:
                time.sleep(SETTLE_S)  # the survivors are blocked on this rank by now
                die(how, rank)
            if mode == "sync":
                where = "dist.all_reduce"
                y_ = t.clone()
                dist.all_reduce(y_)
                assert float(y_[0]) == expected and float(y_[-1]) == expected, (float(y_[0]), expected)
            elif mode == "async":
                where = "dist.all_reduce(async_op=True)"
                y_ = t.clone()
                work = dist.all_reduce(y_, async_op=True)
                where = "work.wait()"
                work.wait()
                assert float(y_[0]) == expected and float(y_[-1]) == expected, (float(y_[0]), expected)
            elif mode == "ddp":
                opt.zero_grad()
                where = "DDP forward"
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                where = "loss.backward()"
                loss.backward()
                where = "optimizer step"
                opt.step()
            else:
                raise SystemExit(f"unknown mode {mode!r}")
    except Exception as err:
        t_caught = time.time()
        runtime = isinstance(err, RuntimeError)
        msg = str(err)
        one_line = " | ".join(line for line in msg.splitlines() if line.strip())
        print(f"SURVIVOR rank {rank} caught {type(err).__name__}"
              f"{' (a RuntimeError)' if runtime and type(err) is not RuntimeError else ''}: {one_line}", flush=True)
        rec = dict(rank=rank, t=t_caught, etype=type(err).__name__, runtime_error=runtime, msg=msg, i=i, where=where,
                   mro=[c.__name__ for c in type(err).__mro__])
        if not runtime:
            rec["traceback"] = "".join(traceback.format_exception(err))
        # A failed group stays failed: the next collective raises too, and at once.
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
            rec["sticky"] = "all_reduce returned"
        except Exception as err2:
            rec["sticky"] = type(err2).__name__
            rec["sticky_runtime_error"] = isinstance(err2, RuntimeError)
            rec["sticky_msg"] = str(err2)[:500]
        rec["sticky_s"] = time.monotonic() - t0
        emit(**rec)
        t0 = time.monotonic()
        try:
            dist.destroy_process_group()
            rec2 = dict(destroyed=True)
        except Exception as err3:
            rec2 = dict(destroyed=False, destroy_error=f"{type(err3).__name__}: {err3}"[:500])
        emit(rank=rank, destroy_s=time.monotonic() - t0, t_exit=time.time(), **rec2)
        exit_process(SURVIVOR_CODE if runtime else OTHER_CODE)
    emit(rank=rank, etype="none", msg=f"the loop ended after {ITERATIONS} iterations without an error", t=time.time())
    exit_process(0)


if __name__ == "__main__":
    main()
