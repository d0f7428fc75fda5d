"""What a torch.distributed job's start costs under commrun: exec'd ranks, `--fork`, `--fork --preload torch`.

Each way runs a 4-rank job (init_process_group("commlib"), one all_reduce checked, destroy) `--repeats`
times, interleaved so that the machine's drift hits every way alike; printed: each way's median wall
seconds and CPU seconds of the whole job (commrun and its ranks, from the children's rusage).

    python benchmarks/torch_preload.py [--n 4] [--repeats 3]
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

JOB = '''
import sys
PRELOADED = "torch" in sys.modules
import torch
import torch.distributed as dist
import commlib.torch  # noqa: F401
dist.init_process_group("commlib")
t = torch.ones(3) * (dist.get_rank() + 1)
dist.all_reduce(t)
n = dist.get_world_size()
assert t.tolist() == [n * (n + 1) / 2] * 3, t
dist.destroy_process_group()
'''
WAYS = {"exec": [], "fork": ["--fork"], "fork+preload": ["--fork", "--preload", "torch"]}


def run(script, n, options):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "commrun", *options, "-n", str(n), script], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "torch_job.py")
        with open(script, "w") as f:
            f.write(JOB)
        got = {way: [] for way in WAYS}
        for _ in range(a.repeats):
            for way, options in WAYS.items():
                got[way].append(run(script, a.n, options))
    print(f"| n = {a.n} | wall s (median of {a.repeats}) | CPU s |\n|---|---:|---:|")
    for way, runs in got.items():
        print(f"| {way} | {statistics.median(w for w, _ in runs):.2f} | {statistics.median(c for _, c in runs):.2f} |")


if __name__ == "__main__":
    main()
