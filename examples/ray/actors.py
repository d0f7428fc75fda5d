"""Data-parallel least squares on Ray actors: each actor holds a shard, commlib averages the gradients.

    python examples/ray/actors.py [N_ACTORS]

The actors form a commlib group (commlib.ray.create_group); inside them commlib's own API runs on it.
After the steps every actor holds the same weights, those of one process on the whole data.
"""
import sys

import numpy as np
import ray

import commlib as cl
import commlib.ray

STEPS, LR = 50, 0.1


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((240, 5))
    return x, x @ np.arange(1.0, 6.0) + 0.01 * rng.standard_normal(240)


@ray.remote
class Trainer:
    def fit(self):
        g = commlib.ray.group()                      # this actor's commlib group
        r, n = g.rank(), g.size()
        x, y = data()
        x, y = x[r::n], y[r::n]                      # this actor's shard
        w = np.zeros(5)
        for _ in range(STEPS):
            grad = x.T @ (x @ w - y) / len(y)
            cl.all_reduce(grad, out=grad, group=g)   # sum over the actors, in place
            w -= LR * grad / n
        return w


def main(n=4):
    ray.init(runtime_env={"worker_process_setup_hook": "commlib.ray.setup_worker"})
    actors = [Trainer.remote() for _ in range(n)]
    commlib.ray.create_group(actors)
    results = ray.get([a.fit.remote() for a in actors])
    x, y = data()                                    # one process, the whole data
    w = np.zeros(5)
    for _ in range(STEPS):
        w -= LR * x.T @ (x @ w - y) / len(y)
    assert all(np.allclose(r, w) for r in results), (results, w)
    print(f"{n} actors trained the same weights as one process: {np.round(results[0], 3)}")
    ray.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
