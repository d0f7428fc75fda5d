"""Ray Train's TorchTrainer with TorchConfig(backend="commlib"): DDP on N CPU workers, checked
against one process training on the whole batches.

usage: ray_train.py TEMP_DIR SPEC [SPEC...], each SPEC `N` or `N:crash` (e.g. `2 3:crash`): one Ray serves
every trainer, run one after the other, each with an output directory of its own. With `crash`, rank 1
dies (os._exit) mid-training in the first attempt; FailureConfig(max_failures=1) makes Ray Train start the
worker group again, and the second attempt must train to the same weights; each survivor of the first
attempt prints the error it met (`[SPEC] survivor R: ...`). Prints `ray train ok: N workers, backend
commlib` (`..., after a worker died` with crash) for a trainer that passed, its traceback on lines
`[SPEC] ...` under `ray train failed: SPEC` for one that did not, and exits non-zero if any failed.
"""
import os
import sys
import time
import traceback

import ray.train
import torch
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from _ray_start import specs, start, tagged

STEPS, BATCH = 12, 24


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def batch(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, 8, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def weights(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def train_loop(config):
    import torch.distributed as dist
    from ray.train.torch import prepare_model

    m = prepare_model(model())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    r, n = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "commlib", dist.get_backend()
    for step in range(STEPS):
        x, y = batch(step)
        loss = ((m(x[r::n]) - y[r::n]) ** 2).mean()
        opt.zero_grad()
        try:
            loss.backward()  # DDP's all-reduce: where a survivor meets the death of rank 1
        except Exception as e:
            # Ray Train may stop the group on the dead worker's account before this error reaches
            # it, so the survivor keeps its own record for the driver to print.
            with open(os.path.join(config["dir"], f"survivor.{r}"), "w") as f:
                f.write(f"survivor {r}: {type(e).__name__}: {e}")
            raise
        opt.step()
        crash_mark = os.path.join(config["dir"], "crashed")
        if config["crash"] and r == 1 and step == STEPS // 2 and not os.path.exists(crash_mark):
            open(crash_mark, "w").close()
            os._exit(1)  # the worker process dies mid-training
    torch.save(weights(m), os.path.join(config["dir"], f"weights.{r}.pt"))
    ray.train.report({"rank": r})


def solo_weights():
    """The weights of one process training on the whole batches."""
    solo = model()
    opt = torch.optim.SGD(solo.parameters(), lr=0.1)
    for step in range(STEPS):
        x, y = batch(step)
        loss = ((solo(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return weights(solo)


def run(spec, n, crash, temp_dir, want):
    """One trainer of n workers; returns the survivors' lines (with crash: one per survivor of rank 1's death)."""
    name = "train-" + spec.replace(":", "-")
    out = os.path.join(temp_dir, name)
    os.makedirs(out)
    trainer = TorchTrainer(train_loop, train_loop_config={"dir": out, "crash": crash},
                           scaling_config=ScalingConfig(num_workers=n),
                           torch_config=TorchConfig(backend="commlib", timeout_s=60),
                           run_config=RunConfig(name=name, storage_path=os.path.join(temp_dir, "results"),
                                                failure_config=FailureConfig(max_failures=1 if crash else 0)))
    trainer.fit()
    for r in range(n):
        got = torch.load(os.path.join(out, f"weights.{r}.pt"))
        assert torch.allclose(got, want, atol=1e-5), (r, (got - want).abs().max())
    assert os.path.exists(os.path.join(out, "crashed")) == crash
    lines = []
    for name in sorted(os.listdir(out)):
        if name.startswith("survivor."):
            with open(os.path.join(out, name)) as f:
                lines.append(f.read().replace("\n", " "))
    return lines


if __name__ == "__main__":
    temp_dir, todo = specs()
    for spec, _, what in todo:
        if what not in ("", "crash"):
            sys.exit(f"ray_train.py: spec {spec!r}: expected N or N:crash")
    start(max(n for _, n, _ in todo) + 1, temp_dir)  # the workers of the largest trainer and Ray Train's controller
    want = solo_weights()
    failed = []
    for spec, n, what in todo:
        t0 = time.monotonic()
        try:
            survivors = run(spec, n, what == "crash", temp_dir, want)
        except Exception:
            failed.append(spec)
            print(f"ray train failed: {spec}\n{tagged(spec, traceback.format_exc())}", flush=True)
            continue
        for line in survivors:
            print(tagged(spec, line), flush=True)
        print(f"ray train ok: {n} workers, backend commlib" + (", after a worker died" if what else "")
              + f" ({time.monotonic() - t0:.1f} s)", flush=True)
    ray.shutdown()
    if failed:
        sys.exit(f"ray train: {len(failed)} of {len(todo)} failed: {' '.join(failed)}")
