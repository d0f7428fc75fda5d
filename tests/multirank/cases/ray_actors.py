"""Ray actors form commlib groups: commlib's API and ray.util.collective's (backend "commlib").

usage: ray_actors.py TEMP_DIR SPEC [SPEC...], each SPEC `N:TRANSPORT` (e.g. `2:shm 3:shm 4:shm 3:socket`;
a bare N is N:shm). One Ray serves every spec, one after the other: N actors whose COMMLIB_TRANSPORT is
TRANSPORT (their runtime_env) form a group, check their results against NumPy and that their connections
use that transport, and are killed before the next spec. Prints `ray actors ok: N over TRANSPORT` for a
spec that passed, its traceback on lines `[SPEC] ...` under `ray actors failed: N over TRANSPORT` for one
that did not, and exits non-zero if any failed.
"""
import os
import sys
import time
import traceback

import numpy as np
import ray
import ray.util.collective as col

import commlib as cl
import commlib.ray
from _ray_start import specs, start, tagged

CALL_TIMEOUT = 120  # seconds for a round of calls to a spec's actors (COMMLIB_TIMEOUT is 60): a hang fails that spec
# How a connection between two actors on this host goes (the transport's describe_route) under each COMMLIB_TRANSPORT.
ROUTES = {"shm": "shared memory", "auto": "shared memory", "socket": "unix socket", "tcp": "tcp"}


@ray.remote
class Worker:
    def commlib_api(self, seed):
        g = commlib.ray.group()
        r, n = g.rank(), g.size()
        rng = np.random.default_rng(seed)
        parts = rng.standard_normal((n, 1000))  # every rank draws the same: rank k contributes parts[k]
        assert np.allclose(cl.all_reduce(parts[r], group=g), parts.sum(0))
        assert np.array_equal(cl.all_gather(parts[r], group=g), parts.reshape(-1))
        b = parts[r].copy()
        cl.broadcast(b, root=n - 1, group=g)
        assert np.array_equal(b, parts[n - 1])
        assert np.allclose(cl.reduce_scatter(np.tile(parts[r], n), group=g), parts.sum(0))
        cl.send(parts[r], (r + 1) % n, group=g)
        assert np.array_equal(cl.recv((1000,), np.float64, (r - 1) % n, group=g), parts[(r - 1) % n])
        assert cl.init() is g  # the group is this actor's commlib world: plain calls use it too
        return r

    def links(self):
        """(COMMLIB_TRANSPORT here, the mode commlib's endpoint took, how each open connection goes)."""
        ep = cl.init().transport.ep
        socks = list(ep._out.items()) + list(ep._in.items())
        return os.environ.get("COMMLIB_TRANSPORT"), ep.shm_mode, sorted({ep.describe_route(key[2], s)
                                                                         for key, s in socks})

    def ray_collective(self):
        r, n = col.get_rank(), col.get_collective_group_size()
        x = np.full(5, r + 1.0)
        col.allreduce(x)
        assert np.array_equal(x, np.full(5, n * (n + 1) / 2))
        y = np.full(3, float(r))
        col.allreduce(y, op=col.types.ReduceOp.MAX)
        assert np.array_equal(y, np.full(3, n - 1.0))
        outs = [np.zeros(2) for _ in range(n)]
        col.allgather(outs, np.full(2, float(r)))
        assert all(np.array_equal(o, np.full(2, float(k))) for k, o in enumerate(outs))
        b = np.full(4, float(r))
        col.broadcast(b, src_rank=1)
        assert np.array_equal(b, np.full(4, 1.0))
        z = np.full(4, r + 1.0)
        col.reduce(z, dst_rank=0)
        assert np.array_equal(z, np.full(4, n * (n + 1) / 2) if r == 0 else np.full(4, r + 1.0))
        out = np.zeros(2)
        col.reducescatter(out, [np.full(2, float(k + r)) for k in range(n)])
        assert np.array_equal(out, np.full(2, float(n * r + n * (n - 1) / 2)))
        if r == 0:
            col.send(np.arange(6.0), 1)
        elif r == 1:
            got = np.zeros(6)
            col.recv(got, 0)
            assert np.array_equal(got, np.arange(6.0))
        col.barrier()
        try:
            import torch
        except ImportError:
            return r
        t = torch.full((4,), float(r))
        col.allreduce(t)  # CPU torch tensors too, in place
        assert torch.equal(t, torch.full((4,), n * (n - 1) / 2))
        return r


def run(n, transport):
    actors = [Worker.options(runtime_env={"env_vars": {"COMMLIB_TRANSPORT": transport}}).remote() for _ in range(n)]
    try:
        commlib.ray.create_group(actors)
        assert ray.get([a.commlib_api.remote(7) for a in actors], timeout=CALL_TIMEOUT) == list(range(n))
        for r, (env, mode, routes) in enumerate(ray.get([a.links.remote() for a in actors], timeout=CALL_TIMEOUT)):
            assert env == mode == transport, f"rank {r}: COMMLIB_TRANSPORT {env!r}, commlib's mode {mode!r}"
            assert routes and all(route.startswith(ROUTES[transport]) for route in routes), (
                f"rank {r} over {transport}: its connections go by {routes}")
        assert ray.get([a.ray_collective.remote() for a in actors], timeout=CALL_TIMEOUT) == list(range(n))
    finally:
        for a in actors:
            ray.kill(a)


if __name__ == "__main__":
    temp_dir, todo = specs()
    start(max(n for _, n, _ in todo), temp_dir)
    failed = []
    for spec, n, transport in todo:
        transport = transport or "shm"
        t0 = time.monotonic()
        try:
            run(n, transport)
        except Exception:
            failed.append(spec)
            print(f"ray actors failed: {n} over {transport}\n{tagged(spec, traceback.format_exc())}", flush=True)
        else:
            print(f"ray actors ok: {n} over {transport} ({time.monotonic() - t0:.1f} s)", flush=True)
    ray.shutdown()
    if failed:
        sys.exit(f"ray actors: {len(failed)} of {len(todo)} failed: {' '.join(failed)}")
