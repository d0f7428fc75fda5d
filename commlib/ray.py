"""commlib among Ray actors, and under Ray Train.

Ray actors (one process each) form a commlib group the way `ray.util.collective`
forms one, with `backend="commlib"`; inside the actors, commlib's whole API runs on it:

    import ray, commlib as cl, commlib.ray

    ray.init(runtime_env={"worker_process_setup_hook": "commlib.ray.setup_worker"})

    @ray.remote
    class Worker:
        def step(self, x):
            g = commlib.ray.group()              # this actor's group (made on first use)
            return cl.all_reduce(x, group=g)     # or ray.util.collective.allreduce(x)

    actors = [Worker.remote() for _ in range(4)]
    commlib.ray.create_group(actors)           # ray.util.collective.create_collective_group(
                                               #     actors, 4, [0, 1, 2, 3], backend="commlib")
    ray.get([a.step.remote(np.ones(4)) for a in actors])

`setup_worker` (Ray's per-worker set-up hook) registers "commlib" in every
worker process, both as a `ray.util.collective` backend and as a
`torch.distributed` backend, so `ray.util.collective` calls and Ray Train's
`TorchTrainer(..., torch_config=TorchConfig(backend="commlib"))` work unchanged.

Rendezvous: rank 0 of a group starts the coordinator on its node's address and
publishes it, with a fresh secret unless COMMLIB_SECRET is exported to the
workers, in Ray's internal key-value store (GCS), as Ray's own gloo group
publishes its address there; the keys are removed once the group is formed.

One commlib world per process: an actor's first group is its world (which
lives until the actor exits; `destroy_collective_group` forgets the name only),
and a later group over the same actors with the same ranks is a sub-group of it.
An actor killed mid-collective is a `PeerLost` on the others (raised from
`ray.get` as Ray's RayTaskError, which is also a PeerLost); to go on, restart the
actors (Ray's `max_restarts`, `ray.kill(actor, no_restart=False)`) and call
create_group again: a restarted actor is a new process with no world yet.
"""
import collections
import time

import numpy as np

try:
    import ray
    from ray.util import collective as _col
    from ray.util.collective.collective_group.base_collective_group import BaseGroup
    from ray.util.collective.types import ReduceOp as _RayOp
except ImportError as e:
    raise ImportError(f"commlib.ray needs Ray ({e}): pip install 'commlib[ray]'") from e

from . import _rendezvous
from ._api import collectives as _c, lifecycle, p2p as _p2p
from ._errors import CommError

BACKEND = "COMMLIB"
_OPS = {_RayOp.SUM: "sum", _RayOp.PRODUCT: "prod", _RayOp.MIN: "min", _RayOp.MAX: "max"}
_SERIAL = collections.Counter()  # group name -> how many sub-groups of that name this process made


def setup_worker():
    """Ray's worker_process_setup_hook: "commlib" for ray.util.collective and torch.distributed
    in this process. Safe to call more than once."""
    register()
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        return
    import commlib.torch  # noqa: F401  (registers the torch.distributed backend)


def register():
    """Register "commlib" as a ray.util.collective backend in this process (done on import)."""
    from ray.util.collective.backend_registry import _global_registry

    if not _global_registry.is_registered(BACKEND):
        _col.register_collective_backend(BACKEND, CommlibGroup)


def create_group(actors, group_name="default"):
    """Declare `actors` (in this order: ranks 0 … n-1) a commlib group named `group_name`; call in
    the driver. Each actor joins on its first collective call (or `group(group_name)`). A group
    of that name declared before (a failed run's) is replaced."""
    actors = list(actors)
    if not actors:
        raise ValueError("commlib.ray.create_group: no actors given")
    register()
    _forget_declaration(group_name)
    _col.create_collective_group(actors, len(actors), list(range(len(actors))), backend="commlib",
                                 group_name=group_name)


def _forget_declaration(group_name, timeout=30.0):
    """Kill the declaration a previous run of `group_name` left (its Info actor), and wait until its
    name is free: Ray's kill is asynchronous, and a declaration made while the old actor still holds
    the name fails ("Trying to initialize a group twice")."""
    name = "info_" + group_name
    try:
        ray.kill(ray.get_actor(name))
    except ValueError:
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.get_actor(name)
        except ValueError:
            return
        if time.monotonic() > deadline:
            raise CommError(f"commlib.ray.create_group: the previous declaration of group {group_name!r} "
                            f"(Ray actor {name!r}) was still alive {timeout:g} s after it was killed")
        time.sleep(0.05)  # (a poll of Ray's actor table, bounded by the deadline)


def group(group_name="default"):
    """This actor's commlib Group for `group_name`: the one declared by create_group (joined now if
    not yet) or made by init_collective_group; pass it as `group=` to commlib's calls."""
    register()
    return _col.get_group_handle(group_name).commlib_group


def _kv():
    from ray.experimental import internal_kv

    if not internal_kv._internal_kv_initialized():
        raise CommError("commlib.ray: not connected to a Ray cluster (ray.init() first)")
    return internal_kv


def _meet(rank, size, group_name, timeout):
    """commlib's world joined as `rank` of `size` through Ray's key-value store."""
    kv = _kv()
    try:  # a declared group's Info actor is new for every declaration: its id keeps keys apart
        nonce = ray.get_actor("info_" + group_name)._ray_actor_id.hex()
    except ValueError:
        nonce = "init"
    prefix = f"commlib/ray/{group_name}/{nonce}/"

    def put(key, value):
        kv._internal_kv_put(key, value, overwrite=True)

    def get(key):
        deadline = time.monotonic() + timeout
        while True:
            value = kv._internal_kv_get(key)
            if value is not None:
                return value.decode()
            if time.monotonic() > deadline:
                raise CommError(f"commlib.ray: rank {rank} of group {group_name!r} waited {timeout:.0f} s for "
                                f"rank 0 to publish the group's address ({key}); did rank 0 join?")
            time.sleep(0.02)

    env, coordinator = _rendezvous.via_key_value(rank, size, put, get, _node_address(), prefix=prefix)
    world = lifecycle.join(env, timeout, coordinator)
    if rank == 0:  # every rank has registered with the coordinator: the keys have done their work
        for key in ("coordinator", "secret"):
            kv._internal_kv_del(prefix + key)
    return world


def _node_address():
    """The address this worker's node has in the Ray cluster (the raylet's, `ray.init(_node_ip_address=)`
    or `ray start --node-ip-address`), else Ray's guess from the default route."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    address = getattr(getattr(worker, "global_worker", None), "node_ip_address", None)
    return address if isinstance(address, str) and address else ray.util.get_node_ip_address()


class CommlibGroup(BaseGroup):
    """A ray.util.collective group whose calls run on commlib (NumPy arrays, and CPU torch tensors)."""

    def __init__(self, world_size, rank, group_name, timeout_ms=None):
        super().__init__(world_size, rank, group_name)
        timeout = timeout_ms / 1000 if timeout_ms else lifecycle.default_timeout()
        world = lifecycle.current()
        if world is None:
            self.commlib_group = _meet(rank, world_size, group_name, timeout)
            return
        if world.size() == 1 and world_size > 1:
            raise CommError(f"commlib.ray: commlib.init() was called in this actor before group {group_name!r} was "
                            f"made, and outside any launcher it made a world of one; make the group first")
        if (world.rank(), world.size()) != (rank, world_size):
            raise CommError(f"commlib.ray: group {group_name!r} makes this actor rank {rank} of {world_size}, but "
                            f"its first group made it rank {world.rank()} of {world.size()}; commlib gives a "
                            f"process one world (make the other groups sub-groups of it with the same ranks)")
        _SERIAL[group_name] += 1
        self.commlib_group = world.subgroup(list(range(world_size)), ("ray", group_name, _SERIAL[group_name]),
                                            timeout)

    @classmethod
    def backend(cls):
        return BACKEND

    @classmethod
    def check_backend_availability(cls):
        return True

    def destroy_group(self):
        """Forget the name (ray.util.collective.destroy_collective_group); the world stays until exit."""
        self.commlib_group = None

    # -- ray.util.collective passes every tensor wrapped in a list of one --

    def _g(self):
        if self.commlib_group is None:
            raise CommError(f"commlib.ray: group {self.group_name!r} was destroyed")
        return self.commlib_group

    def allreduce(self, tensors, allreduce_options=None):
        a = _array(tensors)
        _c.all_reduce(a, _op(allreduce_options), out=a, group=self._g())

    def barrier(self, barrier_options=None):
        _c.barrier(group=self._g())

    def reduce(self, tensors, reduce_options=None):
        a = _array(tensors)
        root = getattr(reduce_options, "root_rank", 0)
        _c.reduce(a, _op(reduce_options), root, out=a if self.rank == root else None, group=self._g())

    def allgather(self, tensor_lists, tensors, allgather_options=None):
        a = _array(tensors)
        outs = [_writable(t) for t in _one(tensor_lists, "allgather's output list")]
        if len(outs) != self.world_size:
            raise ValueError(f"commlib.ray allgather: {len(outs)} output tensors for a group of {self.world_size}")
        got = _c.all_gather(a[None], group=self._g())
        for out, part in zip(outs, got):
            if out.shape != a.shape:
                raise ValueError(f"commlib.ray allgather: an output tensor has shape {out.shape}, the input "
                                 f"{a.shape}")
            np.copyto(out, part)

    def broadcast(self, tensors, broadcast_options=None):
        a = _array(tensors)
        _c.broadcast(a, getattr(broadcast_options, "root_rank", 0), group=self._g())

    def reducescatter(self, tensors, tensor_lists, reducescatter_options=None):
        out = _array(tensors)
        parts = [_writable(t) for t in _one(tensor_lists, "reducescatter's input list")]
        if len(parts) != self.world_size or any(p.shape != out.shape for p in parts):
            raise ValueError(f"commlib.ray reducescatter: needs {self.world_size} input tensors of the output's "
                             f"shape {out.shape}, got {[p.shape for p in parts]}")
        _c.reduce_scatter(np.stack(parts), _op(reducescatter_options), out=out[None], group=self._g())

    def send(self, tensors, send_options):
        _p2p.send(_array(tensors), send_options.dst_rank, group=self._g())

    def recv(self, tensors, recv_options):
        _p2p.recv_into(_array(tensors), recv_options.src_rank, group=self._g())


def _op(options):
    op = getattr(options, "reduceOp", _RayOp.SUM)
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError(f"commlib.ray: unknown reduce op {op!r}") from None


def _one(items, what):
    if not isinstance(items, (list, tuple)) or len(items) != 1:
        raise ValueError(f"commlib.ray: expected {what} wrapped in a list of one (as ray.util.collective "
                         f"passes it), got {type(items).__name__}")
    return items[0]


def _writable(t):
    """A NumPy view of a NumPy array or a CPU torch tensor, sharing its memory."""
    if isinstance(t, np.ndarray):
        a = t
    elif type(t).__module__.startswith("torch"):
        if t.device.type != "cpu":
            raise ValueError(f"commlib.ray: a tensor on {t.device} (commlib moves host memory; use a CPU tensor)")
        a = t.detach().numpy()
    else:
        raise TypeError(f"commlib.ray: expected a numpy.ndarray or a CPU torch.Tensor, got {type(t).__name__}")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError("commlib.ray: tensors must be C-contiguous and writable: results are written in place (an "
                         "array passed to a Ray task arrives read-only: pass a copy)")
    return a


def _array(tensors):
    return _writable(_one(tensors, "a tensor"))


register()
