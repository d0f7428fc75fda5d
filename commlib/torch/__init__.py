"""commlib as a torch.distributed backend: ``dist.init_process_group("commlib")``.

Importing this module registers the backend "commlib" for CPU tensors.
Every collective torch.distributed, DDP, FSDP and ZeRO call runs on commlib's
engine, on the tensors' own memory (no copies where the layout allows), and
blocking calls take commlib's inline fast path. Failures surface as
RuntimeErrors carrying commlib's message (a CommError is one).

How the ranks find each other:
- under ``commrun`` (or after ``commlib.init()``), torch's default group is
  commlib's world;
- under torchrun, Kubeflow's PyTorchJob, Ray Train, or any ``env://`` /
  ``tcp://`` start, through the store torch already made: rank 0 starts
  commlib's coordinator on a free port and publishes its address (and a
  fresh secret, unless COMMLIB_SECRET is exported) in the store, so no
  second well-known port is needed.
"""
try:
    import torch  # noqa: F401
    import torch.distributed as dist
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("commlib.torch needs PyTorch: pip install 'commlib[torch]' "
                      "(for the CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)") from exc

from ._group import ProcessGroupCommlib, create_process_group

BACKEND = "commlib"



def register():
    """Register the backend "commlib" with torch.distributed; importing this module already has.

    For launchers that import nothing of yours before they call init_process_group
    (Ray Train: runtime_env={"worker_process_setup_hook": "commlib.torch.register"}).
    """
    if BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(BACKEND, create_process_group, extended_api=True, devices=["cpu"])
    _open_monitored_barrier()


def _open_monitored_barrier():
    """torch's dist.monitored_barrier refuses every backend but gloo by name before it calls the
    group's own method; let it through for commlib's groups (every other call is torch's, as it was)."""
    import datetime
    import functools

    from torch.distributed import distributed_c10d as c10d

    original = c10d.monitored_barrier
    if getattr(original, "_commlib", False):
        return

    @functools.wraps(original)
    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        pg = c10d._get_default_group() if group is None and dist.is_initialized() else group
        if pg is None or c10d._rank_not_in_group(group) or c10d.get_backend(pg) != BACKEND:
            return original(group, timeout, wait_all_ranks)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            timeout = datetime.timedelta(seconds=timeout)
        return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier._commlib = True
    c10d.monitored_barrier = dist.monitored_barrier = monitored_barrier


register()

__all__ = ["BACKEND", "ProcessGroupCommlib", "create_process_group", "register"]
