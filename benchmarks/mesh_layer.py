"""The mesh layer's cost: ShardedArray layout changes against the same collective called by hand.

    commrun -n N benchmarks/mesh_layer.py [--sizes-mib 1 16 64] [--iters 15]

A float32 (rows, cols) global array on a 1-D mesh ("x",) of all ranks, split along
dimension 0. Two moves, each timed both ways on the same commlib group, the two
interleaved iteration by iteration (a barrier before each call):

    a2a        shard(a, mesh, (None, "x"))   vs  cl.all_to_all(a.local, split_axis=1, concat_axis=0)
    replicate  shard(a, mesh, (None, None))  vs  cl.all_gather(a.local)

Statistic: the median over iterations of the slowest rank's time. Rank 0 prints
one line per point: op, MiB, mesh µs, by-hand µs, mesh / by hand.
"""
import argparse
import time

import numpy as np

import commlib as cl
from commlib.mesh import Mesh, shard


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes-mib", type=float, nargs="+", default=[1, 16, 64])
    p.add_argument("--iters", type=int, default=15)
    args = p.parse_args()
    world = cl.init()
    n = world.size()
    mesh = Mesh((n,), ("x",))
    g = mesh.group("x")
    if world.rank() == 0:
        print(f"# n={n}  op  MiB  mesh_us  hand_us  mesh/hand", flush=True)
    for mib in args.sizes_mib:
        cols = 1024 * n
        rows = max(n, int(mib * 2 ** 20 / 4 / cols) // n * n)
        glob = np.ones((rows, cols), np.float32)
        a = shard(glob, mesh, ("x", None))
        moves = {"a2a": (lambda: shard(a, mesh, (None, "x")),
                         lambda: cl.all_to_all(a.local, split_axis=1, concat_axis=0, group=g)),
                 "replicate": (lambda: shard(a, mesh, (None, None)), lambda: cl.all_gather(a.local, group=g))}
        for op, (by_mesh, by_hand) in moves.items():
            times = {"mesh": [], "hand": []}
            for it in range(args.iters + 2):
                for name, fn in (("mesh", by_mesh), ("hand", by_hand)) if it % 2 else (("hand", by_hand),
                                                                                     ("mesh", by_mesh)):
                    cl.barrier()
                    t0 = time.perf_counter()
                    fn()
                    if it >= 2:  # two warm-up rounds
                        times[name].append(time.perf_counter() - t0)
            worst = {k: cl.all_reduce(np.array(v), "max") for k, v in times.items()}
            med = {k: float(np.median(v)) * 1e6 for k, v in worst.items()}
            if world.rank() == 0:
                print(f"n={n} {op} {rows * cols * 4 / 2 ** 20:.0f} {med['mesh']:.0f} {med['hand']:.0f} "
                      f"{med['mesh'] / med['hand']:.3f}", flush=True)


if __name__ == "__main__":
    main()
