"""Start-up at scale: how long n ranks take from launch to init(), a first all_reduce, and exit.

Three ways to start a job, run interleaved so machine noise hits both alike:

- ``commrun``: ``python -m commrun -n N startup.py --rank``
- ``fork``:    ``python -m commrun --fork -n N startup.py --rank`` (ranks forked from a commrun that
  imported NumPy and commlib once)
- ``slurm``:   N plain processes with SLURM_PROCID/SLURM_NTASKS/SLURM_NODELIST/... set by hand, no
  launcher (rank 0 hosts the coordinator, as under ``srun``)

Each rank records wall-clock times (``time.time()``, one clock for every process on the host)
after its first line of Python, after ``import commlib``, after ``init()``, after a first
``all_reduce(np.ones(1))`` (checked against n) and after ``barrier()``; the job's figure for a phase
is the slowest rank's time, measured from the moment the launcher (or the first rank) was started.
"exit" is when the last process has exited (finalize() included); "cpu" the CPU seconds of the whole
job (launcher and ranks), which machine noise moves much less than the wall-clock figures.

Every process of every path stays in this script's session: with the kernel's autogroup scheduling
(/proc/sys/kernel/sched_autogroup_enabled) CPU is shared fairly between *sessions*, so ranks started
in sessions of their own would take the machine from everything else while commrun's ranks share
one session's share, and the two paths could not be compared. Run the script itself with `setsid`.

    python benchmarks/startup.py --n 8 16 32 64 --repeats 3
    python benchmarks/startup.py --n 64 --paths commrun --repeats 1 --profile /tmp/prof

``--profile DIR`` writes cProfile output of rank 0 (rank0.prof) and per-rank phase lines; with
``COMMLIB_BENCH_PROFILE_COORD=1`` in the environment of commrun it is not needed: the phases are
enough to tell import, rendezvous and connection set-up apart.
"""
import argparse
import json
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import time

_T_MAIN = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ("main", "import", "init", "all_reduce", "barrier", "finalize")
MARK = "STARTUP "


def rank_main():
    """One rank: time the phases, print them as one JSON line."""
    t0 = float(os.environ["STARTUP_T0"])
    prof_dir = os.environ.get("STARTUP_PROFILE")
    times = {"main": _T_MAIN}
    profiler = None
    if prof_dir and os.environ.get("COMMLIB_RANK", os.environ.get("SLURM_PROCID")) == "0":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    import numpy as np
    import commlib as cl

    times["import"] = time.time()
    g = cl.init(strict=True)
    times["init"] = time.time()
    total = cl.all_reduce(np.ones(1))
    times["all_reduce"] = time.time()
    if total[0] != g.size():
        raise SystemExit(f"rank {g.rank()}: all_reduce gave {total[0]}, expected {g.size()}")
    cl.barrier()
    times["barrier"] = time.time()
    rank = g.rank()
    cl.finalize()
    times["finalize"] = time.time()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(prof_dir, "rank0.prof"))
    print(MARK + json.dumps({"rank": rank, **{k: v - t0 for k, v in times.items()}}), flush=True)


def _env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMMLIB_RANK", "COMMLIB_SIZE", "COMMLIB_COORDINATOR", "COMMLIB_SECRET",
                                "COMMLIB_LOCAL", "SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env.setdefault("COMMLIB_TIMEOUT", "120")
    env.update(extra)
    return env


def _free_job_id():
    """A Slurm job id whose derived coordinator port (20000 + id % 20000 at step 0) is free now."""
    for _ in range(100):
        job = random.randrange(100000, 900000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 20000 + job % 20000))
                return job
            except OSError:
                continue
    raise RuntimeError("no free port for the Slurm-style coordinator")


def run_job(path, n, timeout, profile):
    """Start one job; return {phase: slowest rank's seconds since launch} plus 'exit'."""
    me = os.path.abspath(__file__)
    extra = {"STARTUP_PROFILE": profile} if profile else {}
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    extra["STARTUP_T0"] = repr(t0)
    if path == "floor":  # what n interpreters cost that only import numpy and commlib, then exit
        procs = [subprocess.Popen([sys.executable, "-c", "import numpy, commlib"], env=_env(extra), cwd="/tmp",
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(n)]
    elif path in ("commrun", "fork"):
        fork = ["--fork"] if path == "fork" else []
        procs = [subprocess.Popen([sys.executable, "-m", "commrun", *fork, "-n", str(n), "--no-tag-output", me, "--rank"],
                                  env=_env(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd="/tmp")]
    else:
        job = _free_job_id()
        base = dict(extra, SLURM_NTASKS=str(n), SLURM_NODELIST="localhost", SLURM_JOB_ID=str(job),
                    SLURM_STEP_ID="0", SLURM_NNODES="1", SLURM_NODEID="0", SLURM_TASKS_PER_NODE=str(n),
                    COMMLIB_SECRET=os.urandom(32).hex())
        procs = [subprocess.Popen([sys.executable, me, "--rank"],
                                  env=_env(dict(base, SLURM_PROCID=str(r), SLURM_LOCALID=str(r))),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp")
                 for r in range(n)]
    outs, errs, failed = [], [], []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            failed.append(f"timed out after {timeout} s")
        outs.append(out)
        errs.append(err)
        if p.returncode:
            failed.append(f"exit code {p.returncode}")
    t_exit = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the launcher and every rank it waited for
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    if path == "floor":
        if failed:
            raise RuntimeError(f"floor n={n}: {', '.join(failed)}")
        return {"exit": t_exit, "cpu": cpu}
    ranks = [json.loads(line[len(MARK):]) for out in outs for line in out.splitlines() if line.startswith(MARK)]
    if failed or len(ranks) != n:
        tail = "\n".join("".join(errs).splitlines()[-15:])
        raise RuntimeError(f"{path} n={n}: {', '.join(failed) or f'{len(ranks)} of {n} ranks reported'}\n{tail}")
    result = {ph: max(r[ph] for r in ranks) for ph in PHASES}
    result["first_main"] = min(r["main"] for r in ranks)
    result["exit"] = t_exit
    result["cpu"] = cpu
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--paths", default="commrun,slurm", help="comma list of commrun, fork, slurm, floor (n interpreters that import numpy and commlib)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per job")
    ap.add_argument("--profile", metavar="DIR", help="cProfile rank 0 into DIR/rank0.prof")
    ap.add_argument("--json", metavar="PATH", help="also write every run's figures here")
    args = ap.parse_args()
    if args.rank:
        return rank_main()
    paths = args.paths.split(",")
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    runs = {}
    for rep in range(args.repeats):
        for n in args.n:
            for path in paths if rep % 2 == 0 else paths[::-1]:
                try:
                    res = run_job(path, n, args.timeout, args.profile)
                except RuntimeError as e:
                    print(f"FAILED {e}", file=sys.stderr, flush=True)
                    res = None
                runs.setdefault((path, n), []).append(res)
                if res:
                    print(f"rep {rep} {path:7s} n={n:3d} " + " ".join(f"{k}={v:.2f}" for k, v in res.items()),
                          flush=True)
    cols = ("import", "init", "all_reduce", "barrier", "finalize", "exit", "cpu")
    print(f"\nmedian of {args.repeats} (min-max), seconds since launch; slowest rank; cpu: CPU seconds of the "
          f"whole job; "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| path | n | ok | " + " | ".join(cols) + " |")
    print("|---|---:|---:|" + "---:|" * len(cols))
    for (path, n), rs in runs.items():
        ok = [r for r in rs if r]
        cells = [f"{statistics.median(r[c] for r in ok):.2f} ({min(r[c] for r in ok):.2f}-{max(r[c] for r in ok):.2f})"
                 if ok and c in ok[0] else "-" for c in cols]
        print(f"| {path} | {n} | {len(ok)}/{len(rs)} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"path": p, "n": n, "runs": rs} for (p, n), rs in runs.items()], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
