"""Ray Train's TorchTrainer on the commlib backend: DistributedDataParallel on CPU workers.

    python examples/ray/train_ddp.py [N_WORKERS]

TorchConfig(backend="commlib") is all Ray Train needs; the set-up hook registers the backend in
every worker process. Each worker trains on its slice of every batch and prints its final loss.
"""
import sys
import tempfile

import ray
import ray.train
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer, prepare_model


def train_loop(config):
    import torch.distributed as dist

    torch.manual_seed(0)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    r, n = dist.get_rank(), dist.get_world_size()
    for step in range(config["steps"]):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(64, 8, generator=g)
        y = x.sum(1, keepdim=True).sin()
        loss = ((model(x[r::n]) - y[r::n]) ** 2).mean()
        opt.zero_grad()
        loss.backward()                               # DDP all-reduces the gradients over commlib
        opt.step()
    print(f"worker {r} of {n} ({dist.get_backend()}): final loss {loss.item():.4f}")
    ray.train.report({"loss": loss.item()})


def main(n=2):
    ray.init(runtime_env={"worker_process_setup_hook": "commlib.ray.setup_worker"})
    trainer = TorchTrainer(train_loop, train_loop_config={"steps": 30},
                           scaling_config=ScalingConfig(num_workers=n),
                           torch_config=TorchConfig(backend="commlib"),
                           run_config=RunConfig(storage_path=tempfile.mkdtemp(prefix="ray-results-")))
    trainer.fit()
    ray.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
