"""An actor killed mid-collective: PeerLost on the others, then Ray restarts the actors and the group
is made again.

usage: ray_actor_killed.py N TEMP_DIR. Prints `survivor R: PeerLost: ...` for every other rank,
`lost in S s`, then `restarted ok: N`.
"""
import os
import time

import numpy as np
import ray

import commlib as cl
import commlib.ray
from _ray_start import args, start


@ray.remote(max_restarts=1)
class Worker:
    def pid(self):
        return os.getpid()

    def step(self, value):
        g = commlib.ray.group()
        return cl.all_reduce(np.full(1000, value), group=g)[0]

    def loop(self, seconds):
        """All-reduces until the group fails (bounded); the error goes back to the driver."""
        g = commlib.ray.group()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            cl.all_reduce(np.ones(20_000), group=g)
        return "no failure"


def pid_when_up(actor, old=None, timeout=60):
    """The actor's pid once it answers from a process other than `old` (ray.kill returns before the
    process is gone, and a restarting actor is unavailable for a while)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid = ray.get(actor.pid.remote(), timeout=timeout)
            if pid != old:
                return pid
        except ray.exceptions.ActorUnavailableError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the actor did not come back from a new process within {timeout} s")
        time.sleep(0.2)


if __name__ == "__main__":
    n, temp_dir = args()
    start(n, temp_dir)
    actors = [Worker.remote() for _ in range(n)]
    pids = [pid_when_up(a) for a in actors]
    commlib.ray.create_group(actors)
    assert ray.get([a.step.remote(1.0) for a in actors]) == [float(n)] * n
    loops = [a.loop.remote(90) for a in actors]
    time.sleep(1.0)  # the loops are running
    start_kill = time.monotonic()
    ray.kill(actors[1], no_restart=False)  # Ray restarts it (max_restarts=1): a new process
    for r, ref in enumerate(loops):
        if r == 1:
            continue
        try:
            ray.get(ref, timeout=60)
            raise SystemExit(f"rank {r}: the loop ended without an error")
        except cl.PeerLost as e:  # Ray's RayTaskError(PeerLost) is also a PeerLost
            print(f"survivor {r}: PeerLost: {str(e).splitlines()[-1]}", flush=True)
    print(f"lost in {time.monotonic() - start_kill:.1f} s", flush=True)
    # Ray's retry: restart the survivors as well (each actor is then a fresh process) and make the
    # group again.
    for r, a in enumerate(actors):
        if r != 1:
            ray.kill(a, no_restart=False)
    restarted = [pid_when_up(a, old) for a, old in zip(actors, pids)]
    assert not set(restarted) & set(pids), (pids, restarted)  # every actor is a new process
    commlib.ray.create_group(actors)
    assert ray.get([a.step.remote(2.0) for a in actors]) == [2.0 * n] * n
    ray.shutdown()
    print(f"restarted ok: {n}", flush=True)
