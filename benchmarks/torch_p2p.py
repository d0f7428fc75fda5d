"""torch.distributed's blocking point-to-point (`dist.send` / `dist.recv`, what pipeline parallelism runs
on): one-way µs of an 8 B ping-pong between ranks 0 and 1, per backend, against torch's own cost of the
calls.

    commrun -n 2 python benchmarks/torch_p2p.py [--backends commlib gloo null] [--repeats 5] [--iters 2000]

Every backend named runs in the same job, interleaved (one repeat of each in turn), each in its own
process group made by `dist.new_group(backend=...)` on a default group of "commlib" (commrun exports
RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for it):

    commlib  commlib's backend (`import commlib.torch`)
    gloo     torch's own
    null     a process group whose send and recv return a completed Work without moving a byte: what
             torch's own Python and C++ cost a call, below which no backend can go (its "ping-pong" is
             a send and a recv on each rank, no waiting)

Prints, on rank 0, each backend's one-way µs (the median of the repeats, each the mean of --iters round
trips over two), the repeats' range, and its ratio to null.
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import commlib.torch  # noqa: F401  (registers "commlib")


class _Done(dist.Work):
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


class NullGroup(dist.ProcessGroup):
    """send and recv that complete at once: torch's per-call cost alone."""

    def send(self, tensors, dst, tag=0):
        return _Done()

    def recv(self, tensors, src, tag=0):
        return _Done()

    def getBackendName(self):
        return "null"


def _null(dist_opts, backend_opts=None):
    return NullGroup(int(dist_opts.group_rank), int(dist_opts.group_size))


def one_way_us(group, rank, iters):
    x = torch.zeros(2, dtype=torch.float32)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        if rank == 0:
            dist.send(x, 1, group=group)
            dist.recv(x, 1, group=group)
        elif rank == 1:
            dist.recv(x, 0, group=group)
            dist.send(x, 0, group=group)
    return (time.perf_counter() - t0) / iters / 2 * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", nargs="+", default=["commlib", "gloo", "null"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iters", type=int, default=2000)
    a = p.parse_args()
    dist.Backend.register_backend("null", _null, extended_api=True, devices=["cpu"])
    dist.init_process_group("commlib")
    rank = dist.get_rank()
    groups = {b: dist.new_group(backend=b) for b in a.backends}
    for b in a.backends:  # warm-up: connections, caches
        one_way_us(groups[b], rank, 200)
    times = {b: [] for b in a.backends}
    for _ in range(a.repeats):
        for b in a.backends:
            times[b].append(one_way_us(groups[b], rank, a.iters))
    if rank == 0:
        base = statistics.median(times["null"]) if "null" in times else None
        print(f"8 B dist.send/dist.recv ping-pong, one way (µs), n = {dist.get_world_size()}, "
              f"{a.repeats} repeats of {a.iters} round trips")
        for b in a.backends:
            med = statistics.median(times[b])
            ratio = f"  {med / base:5.2f}x null" if base else ""
            print(f"  {b:8s} {med:7.1f}  ({min(times[b]):.1f}-{max(times[b]):.1f}){ratio}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
