"""One all_reduce between Ray actors: commlib.ray against ray.util.collective's gloo and Ray's object store.

usage: python benchmarks/ray_allreduce.py [--n 2 4] [--rounds 5] [--sizes 8 1048576 16777216]

A local Ray (on 127.0.0.2, so every byte stays on loopback); for each n, n actors (float64 arrays):
  commlib      ray.util.collective.allreduce on a group with backend="commlib"
  gloo         the same call on a group with backend="gloo" (Ray's torch.distributed gloo group)
  objectstore  every actor ray.put()s its array; every actor ray.get()s all n and sums them
The engines are interleaved round by round. Two figures each:
  in-actor     per-call time inside the actors: K calls back to back, the slowest actor's mean,
               median over rounds (not for the object store, whose exchange needs the driver)
  round        one call on every actor as the driver sees it (task submission and ray.get included),
               median of K rounds
Prints a Markdown table; numbers are medians, with the spread (min–max over rounds) of the in-actor ones.
"""
import argparse
import statistics
import time

import numpy as np
import ray
import ray.util.collective as col

import commlib.ray  # noqa: F401  (registers the "commlib" backend in this driver)


@ray.remote
class Member:
    def __init__(self, rank):
        self.rank = rank
        self.x = {}

    def ready(self):
        return True

    def _arr(self, nbytes):
        """This actor's array of `nbytes`, all ones again (in-place sums grow it)."""
        if nbytes not in self.x:
            self.x[nbytes] = np.empty(max(1, nbytes // 8))
        self.x[nbytes].fill(1.0)
        return self.x[nbytes]

    def loop(self, group, nbytes, calls):
        x = self._arr(nbytes)
        col.allreduce(x, group_name=group)  # warm
        t = time.perf_counter()
        for _ in range(calls):
            col.allreduce(x, group_name=group)
        return (time.perf_counter() - t) / calls

    def once(self, group, nbytes):
        col.allreduce(self._arr(nbytes), group_name=group)

    def put(self, nbytes):
        return [ray.put(self._arr(nbytes))]  # wrapped: the driver passes the ref on, not the array

    def gather_sum(self, refs):
        return float(sum(ray.get(refs))[0])


def calls_for(nbytes):
    return max(3, min(300, int(0.1 / (100e-6 + nbytes / 2e8))))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2, 4])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 1 << 20, 16 << 20])
    args = p.parse_args()
    ray.init(num_cpus=max(args.n), include_dashboard=False, _node_ip_address="127.0.0.2", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "commlib.ray.setup_worker"})
    rows = []
    for n in args.n:
        actors = [Member.remote(r) for r in range(n)]
        ray.get([a.ready.remote() for a in actors])
        col.create_collective_group(actors, n, list(range(n)), backend="commlib", group_name=f"cl{n}")
        col.create_collective_group(actors, n, list(range(n)), backend="gloo", group_name=f"gloo{n}")
        for nbytes in args.sizes:
            calls = calls_for(nbytes)
            inside = {"commlib": [], "gloo": []}
            rounds = {"commlib": [], "gloo": [], "objectstore": []}
            for _ in range(args.rounds):
                for engine, group in (("commlib", f"cl{n}"), ("gloo", f"gloo{n}")):
                    inside[engine].append(max(ray.get([a.loop.remote(group, nbytes, calls) for a in actors])))
                    t = time.perf_counter()
                    ray.get([a.once.remote(group, nbytes) for a in actors])
                    rounds[engine].append(time.perf_counter() - t)
                t = time.perf_counter()
                refs = [r[0] for r in ray.get([a.put.remote(nbytes) for a in actors])]
                sums = ray.get([a.gather_sum.remote(refs) for a in actors])
                rounds["objectstore"].append(time.perf_counter() - t)
                assert sums == [float(n)] * n, sums
            rows.append((n, nbytes, inside, rounds))
            print(f"n={n} {nbytes} B done", flush=True)
        for a in actors:
            ray.kill(a)
    ray.shutdown()
    print("\n| n | size | commlib in-actor | gloo in-actor | gloo / commlib | round: commlib | round: gloo "
          "| round: object store |")
    print("|---|---|---|---|---|---|---|---|")
    for n, nbytes, inside, rounds in rows:
        ci, gi = statistics.median(inside["commlib"]), statistics.median(inside["gloo"])
        spread = {k: f"{min(v) * 1e6:.0f}–{max(v) * 1e6:.0f}" for k, v in inside.items()}
        print(f"| {n} | {nbytes} B | {ci * 1e6:.1f} µs ({spread['commlib']}) | {gi * 1e6:.1f} µs "
              f"({spread['gloo']}) | {gi / ci:.1f}× | "
              + " | ".join(f"{statistics.median(rounds[k]) * 1e3:.2f} ms" for k in ("commlib", "gloo", "objectstore"))
              + " |")


if __name__ == "__main__":
    main()
