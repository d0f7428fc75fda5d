"""DDP and FSDP training on torch.distributed, checked against a single-process reference.

The backend is TORCH_TEST_BACKEND: "commlib" (the default; `import commlib.torch` registers it)
or "gloo" (to validate the case itself). Every rank trains on its own shard of one deterministic
batch; every rank also trains the same model on the whole batch on its own, without any
communication, and the distributed result (per-step losses, final gradients and parameters)
must match that reference to float32 tolerance. Parameters must also be bit-identical across
ranks. Output follows the multi-rank suite: `FAIL rank R/N [torch_train] label: message` per
failed check and `rank R: K checks ok [torch_train ...] in T s` at the end; the exit code is
the verdict. An exception inside a part is a failure (with its traceback) and ends the rank at
once, since the collective schedule is lost.

usage: torch_train.py SEED PART...
  mlp    DDP on an MLP: plain; gradient_as_bucket_view=True with a tiny bucket_cap_mb (several
         buckets); gradient accumulation with no_sync()
  cnn    DDP on a small CNN (Conv2d, cross-entropy loss), plain and with tiny buckets
  hooks  DDP comm hooks: default_hooks.allreduce_hook (all_reduce(async_op=True).get_future()
         .then), a custom hook chaining two .then (dividing by the world size),
         fp16_compress_hook; with gradient_as_bucket_view=True and tiny buckets; PowerSGD
         (bf16_compress_hook is not tried: torch refuses it without CUDA and NCCL)
  uneven DDP with uneven inputs under torch.distributed.algorithms.Join
  graph  DDP static_graph=True, find_unused_parameters=True (a layer forward never uses)
  fsdp2  torch.distributed.fsdp.fully_shard (all_gather_into_tensor / reduce_scatter_tensor)
  fsdp1  FullyShardedDataParallel(device_id=cpu), each Linear wrapped
  shard  hand-written sharded SGD: dist.all_gather_into_tensor and dist.reduce_scatter_tensor
  dcp    torch.distributed.checkpoint save and load of an FSDP2 model and its optimizer
  ddp = mlp cnn hooks uneven graph;  fsdp = fsdp2 fsdp1 shard dcp
"""
import datetime
import hashlib
import os
import sys
import time
import traceback
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from _batch import parts
from _common import Checks

BACKEND = os.environ.get("TORCH_TEST_BACKEND", "commlib")
if BACKEND == "commlib":
    import commlib.torch  # noqa: F401  (registers the "commlib" backend)

STEPS = 5
BATCH = 24  # divisible by 1, 2, 3 and 4: every rank gets an equal shard
RTOL, ATOL = 1e-4, 1e-5
FP16_RTOL, FP16_ATOL = 2e-2, 2e-3  # fp16_compress_hook rounds every gradient bucket to float16


class TorchChecker(Checks):
    def __init__(self, name):
        self.name = name
        self.t0 = time.monotonic()
        dist.init_process_group(BACKEND, timeout=datetime.timedelta(seconds=60))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        self.checks, self.failures, self.digests = 0, [], []

    def close(self, actual, expected, label, rtol=RTOL, atol=ATOL, record=True):
        """actual ~ expected (tensors); with record, actual's bytes must also agree across ranks."""
        self.checks += 1
        actual = actual.detach()
        expected = expected.detach()
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            self.fail(label, f"got {actual.dtype}{tuple(actual.shape)}, "
                             f"expected {expected.dtype}{tuple(expected.shape)}")
        elif not torch.allclose(actual.double(), expected.double(), rtol=rtol, atol=atol):
            err = (actual.double() - expected.double()).abs()
            i = int(err.flatten().argmax())
            self.fail(label, f"max abs error {float(err.max()):.3g} at flat index {i}: got "
                             f"{float(actual.flatten()[i])!r}, expected {float(expected.flatten()[i])!r} "
                             f"(rtol {rtol}, atol {atol})")
        if record:
            self.digests.append((label, digest(actual)))

    def finish(self):
        """Cross-rank comparison of the recorded results, summary line, exit code."""
        if self.size > 1:
            count = torch.tensor([len(self.digests)], dtype=torch.int64)
            counts = [torch.zeros(1, dtype=torch.int64) for _ in range(self.size)]
            dist.all_gather(counts, count)
            counts = [int(c) for c in counts]
            if self.ok(len(set(counts)) == 1, "digest count", f"ranks recorded {counts} results"):
                mine = torch.tensor([d for _, d in self.digests], dtype=torch.int64)
                every = [torch.zeros_like(mine) for _ in range(self.size)]
                dist.all_gather(every, mine)
                for i, (label, _) in enumerate(self.digests):
                    differ = [r for r in range(self.size) if int(every[r][i]) != int(mine[i])]
                    self.ok(not differ, label + " (same bytes on every rank)",
                            f"result bytes differ across ranks (this rank differs from ranks {differ})")
        took = time.monotonic() - self.t0
        dist.barrier()
        dist.destroy_process_group()
        if self.failures:
            print(f"rank {self.rank}: {len(self.failures)} of {self.checks} checks FAILED [{self.name}] "
                  f"in {took:.1f} s", flush=True)
            exit_process(1)
        print(f"rank {self.rank}: {self.checks} checks ok [{self.name}] in {took:.1f} s", flush=True)
        exit_process(0)

    def crashed(self, part, err):
        self.fail(f"part {part}", f"raised {type(err).__name__}: {err}\n" + "".join(traceback.format_exception(err)))
        print(f"rank {self.rank}: {len(self.failures)} of {self.checks} checks FAILED [{self.name}] "
              f"(part {part} raised)", flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # the collective schedule is lost: do not wait for the others


def exit_process(code):
    """Exit; with gloo, skip the interpreter's finalization. torch 2.13's ProcessGroupGloo worker
    threads can still be dropping a finished AsyncWork (which holds a Python object) while the
    interpreter finalizes: the thread dies taking the GIL and the process aborts with
    "terminate called without an active exception" (SIGABRT; about one run in five with 4 ranks
    here; pytorch/pytorch#179291). The backend under test, commlib, exits normally."""
    if BACKEND == "gloo":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def digest(t):
    t = t.detach().cpu().clone().contiguous()  # a copy: .numpy() of FSDP's unsharded storage would pin it
    h = hashlib.blake2b(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"", digest_size=8)
    h.update(repr((str(t.dtype), tuple(t.shape))).encode())
    return int.from_bytes(h.digest(), "little", signed=True)


def gen(seed, *label):
    g = torch.Generator()
    g.manual_seed((seed * 1000003 + zlib.crc32(repr(label).encode())) % (1 << 62))
    return g


# ------------------------------------------------------------------ models and data
def make_mlp(init_seed):
    torch.manual_seed(init_seed)
    # 14 and 6 rows are not divisible by 4: FSDP pads its shards
    return nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 14), nn.Tanh(), nn.Linear(14, 6))


def make_cnn(init_seed):
    torch.manual_seed(init_seed)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 3, stride=2, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))


def mlp_data(seed, label):
    g = gen(seed, "mlp data", label)
    return torch.randn(BATCH, 10, generator=g), torch.randn(BATCH, 6, generator=g)


def cnn_data(seed, label):
    g = gen(seed, "cnn data", label)
    return torch.randn(BATCH, 3, 8, 8, generator=g), torch.randint(0, 5, (BATCH,), generator=g)


def mse(out, y):
    return F.mse_loss(out, y)


def xent(out, y):
    return F.cross_entropy(out, y)


def shard(t, rank, size):
    k = t.shape[0] // size
    return t[rank * k:(rank + 1) * k]


def make_opt(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def reference(model, x, y, loss_fn, rank, size, micro=1):
    """Single-process training on the whole batch. Returns (per-step losses on this rank's shard
    before each step, final grads, final params). With micro > 1 every rank's shard is split in
    `micro` micro-batches and micro-batch m of the whole batch is the union of every rank's m-th."""
    opt = make_opt(model.parameters())
    shard_losses = []
    k = x.shape[0] // size
    for _ in range(STEPS):
        with torch.no_grad():
            shard_losses.append(loss_fn(model(shard(x, rank, size)), shard(y, rank, size)).detach())
        opt.zero_grad()
        if micro == 1:
            loss_fn(model(x), y).backward()
        else:
            km = k // micro
            for m in range(micro):
                idx = torch.cat([torch.arange(r * k + m * km, r * k + (m + 1) * km) for r in range(size)])
                loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    return (torch.stack(shard_losses), [p.grad.detach().clone() for p in model.parameters()],
            [p.detach().clone() for p in model.parameters()])


# ------------------------------------------------------------------ DDP
def ddp_run(c, label, make, data, loss_fn, *, ddp_kwargs=None, hook=None, micro=1, rtol=RTOL, atol=ATOL,
            min_hook_calls=0):
    """DDP training vs the reference. Every rank starts from *different* weights (seed + rank): DDP
    must broadcast rank 0's at construction. Returns the DDP module."""
    me, n = c.rank, c.size
    x, y = data(c.seed, label)
    ref_losses, ref_grads, ref_params = reference(make(c.seed * 100 + 0), x, y, loss_fn, me, n, micro)
    model = make(c.seed * 100 + me)
    ddp = nn.parallel.DistributedDataParallel(model, **(ddp_kwargs or {}))
    if hook is not None:
        state, fn = hook
        ddp.register_comm_hook(state, fn)
    opt = make_opt(ddp.parameters())
    xs, ys = shard(x, me, n), shard(y, me, n)
    losses = []
    calls = []
    for step in range(STEPS):
        opt.zero_grad()
        before = hook_calls(hook)
        if micro == 1:
            loss = loss_fn(ddp(xs), ys)
            loss.backward()
        else:
            km = xs.shape[0] // micro
            with ddp.no_sync():
                for m in range(micro - 1):
                    loss_fn(ddp(xs[m * km:(m + 1) * km]), ys[m * km:(m + 1) * km]).backward()
            m = micro - 1
            loss_fn(ddp(xs[m * km:]), ys[m * km:]).backward()
            with torch.no_grad():
                loss = loss_fn(model(xs), ys)
        calls.append(hook_calls(hook) - before)
        losses.append(loss.detach())
        opt.step()
    c.close(torch.stack(losses), ref_losses, f"{label}: per-step loss on rank {me}'s shard", rtol, atol, record=False)
    names = [name for name, _ in model.named_parameters()]
    for name, p, g, rp in zip(names, model.parameters(), ref_grads, ref_params):
        c.close(p.grad, g, f"{label}: last gradient of {name}", rtol, atol)
        c.close(p, rp, f"{label}: parameter {name} after {STEPS} steps", rtol, atol)
    if min_hook_calls:  # the first step runs with DDP's initial buckets; it rebuilds them after that step
        c.ok(all(k >= min_hook_calls for k in calls[1:]), f"{label}: comm hook calls per step",
             f"the hook ran {calls} times per step; expected >= {min_hook_calls} from step 2 (one per bucket)")
    return ddp


def hook_calls(hook):
    return hook[0]["calls"] if hook is not None and isinstance(hook[0], dict) else 0


TINY = dict(bucket_cap_mb=0.0001)  # ~100 B buckets: three buckets for either model (from step 2)


def part_mlp(c):
    ddp_run(c, "mlp", make_mlp, mlp_data, mse)
    ddp_run(c, "mlp bucket view", make_mlp, mlp_data, mse, ddp_kwargs=dict(gradient_as_bucket_view=True, **TINY))
    ddp_run(c, "mlp no_sync x2", make_mlp, mlp_data, mse, micro=2)
    ddp_run(c, "mlp no_sync x2 bucket view", make_mlp, mlp_data, mse, micro=2,
            ddp_kwargs=dict(gradient_as_bucket_view=True, **TINY))


def part_cnn(c):
    ddp_run(c, "cnn", make_cnn, cnn_data, xent)
    ddp_run(c, "cnn tiny buckets", make_cnn, cnn_data, xent, ddp_kwargs=dict(gradient_as_bucket_view=True, **TINY))


def part_hooks(c):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    n = c.size
    kwargs = dict(gradient_as_bucket_view=True, **TINY)

    def counted(inner):
        def hook(state, bucket):
            state["calls"] += 1
            return inner(None, bucket)
        return hook

    ddp_run(c, "allreduce_hook", make_mlp, mlp_data, mse, ddp_kwargs=kwargs,
            hook=({"calls": 0}, counted(default_hooks.allreduce_hook)), min_hook_calls=3)
    ddp_run(c, "allreduce_hook cnn", make_cnn, cnn_data, xent, ddp_kwargs=kwargs,
            hook=({"calls": 0}, counted(default_hooks.allreduce_hook)), min_hook_calls=3)

    values = []  # what fut.value() held in the first .then: the torch contract is [tensor]

    def then_hook(state, bucket):
        state["calls"] += 1
        buf = bucket.buffer()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def average(f):
            v = f.value()
            values.append((type(v).__name__, len(v) if isinstance(v, (list, tuple)) else None,
                           type(v[0]).__name__ if isinstance(v, (list, tuple)) and v else None,
                           isinstance(v, (list, tuple)) and len(v) == 1 and v[0] is buf))
            return v[0].div_(n)

        def check_shape(f):
            t = f.value()
            if not isinstance(t, torch.Tensor) or t.shape != buf.shape:
                raise RuntimeError(f"the chained future holds {t!r}, not the bucket's tensor")
            return t

        return fut.then(average).then(check_shape)

    ddp_run(c, "custom .then hook", make_mlp, mlp_data, mse, ddp_kwargs=kwargs, hook=({"calls": 0}, then_hook),
            min_hook_calls=3)
    c.ok(values and all(v[:3] == ("list", 1, "Tensor") for v in values), "custom .then hook: future value",
         f"all_reduce(async_op=True).get_future().value() was {values[:1]}, expected a list of one Tensor")
    c.ok(values and all(v[3] for v in values), "custom .then hook: future value is the input tensor",
         "the future's tensor is not the tensor passed to all_reduce (in-place result expected)")
    ddp_run(c, "fp16_compress_hook", make_mlp, mlp_data, mse, ddp_kwargs=kwargs,
            hook=({"calls": 0}, counted(default_hooks.fp16_compress_hook)), rtol=FP16_RTOL, atol=FP16_ATOL,
            min_hook_calls=3)
    power_sgd(c)


def power_sgd(c):
    """PowerSGD (its hook waits, inside a future's callback, on an all_reduce it starts): the first
    step is plain all_reduce (exact), the next ones compressed; the ranks must stay bit-identical."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    me, n = c.rank, c.size
    x, y = mlp_data(c.seed, "powerSGD")
    model = make_mlp(c.seed * 100 + me)
    # several buckets: their hooks' all_reduces interleave with the callbacks' (gloo times out there,
    # torch 2.13; commlib orders a callback's collective right after the one that completed)
    buckets = {} if BACKEND == "gloo" else TINY
    if BACKEND == "gloo" and me == 0:
        print("NOTE powerSGD runs with DDP's default buckets for gloo: with several it times out", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model, **buckets)
    ddp.register_comm_hook(psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                              start_powerSGD_iter=2, min_compression_rate=0.5), psgd.powerSGD_hook)
    opt = make_opt(ddp.parameters())
    losses = []
    for _ in range(STEPS + 3):
        opt.zero_grad()
        loss = mse(ddp(shard(x, me, n)), shard(y, me, n))
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(float(total) / n)
    c.ok(all(v == v for v in losses) and losses[-1] < losses[0], "powerSGD: the loss goes down",
         f"losses {losses}")
    for name, p in model.named_parameters():  # recorded: bit-identical on every rank
        c.close(p, p, f"powerSGD: parameter {name} after {STEPS + 3} steps")


def part_uneven(c):
    """DDP with uneven inputs under Join: rank r runs 2 + r steps; the ranks that are done shadow
    the others' all_reduces with zeros. Against one process: step i sums the gradients of the ranks
    still running, over n; at the end of Join every rank has the model of the one that ran longest."""
    from torch.distributed.algorithms.join import Join
    me, n = c.rank, c.size
    iters = [2 + r for r in range(n)]
    x, y = mlp_data(c.seed, "uneven")
    ref = make_mlp(c.seed * 100 + 7)
    opt = make_opt(ref.parameters())
    for i in range(max(iters)):
        opt.zero_grad()
        (sum(mse(ref(shard(x, r, n)), shard(y, r, n)) for r in range(n) if iters[r] > i) / n).backward()
        opt.step()
    model = make_mlp(c.seed * 100 + 7)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = make_opt(ddp.parameters())
    with Join([ddp]):
        for _ in range(iters[me]):
            opt.zero_grad()
            mse(ddp(shard(x, me, n)), shard(y, me, n)).backward()
            opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        c.close(p, q, f"uneven inputs under Join: parameter {name}")


class Unused(nn.Module):
    """An MLP with a layer that forward never uses (DDP must know: find_unused_parameters)."""

    def __init__(self, seed):
        super().__init__()
        self.mlp, self.spare = make_mlp(seed), nn.Linear(6, 6)

    def forward(self, x):
        return self.mlp(x)


def part_graph(c):
    """DDP static_graph=True and find_unused_parameters=True (with a layer forward never uses)
    against one process: the used layers' gradients and parameters; the unused one has no gradient."""
    me, n = c.rank, c.size
    x, y = mlp_data(c.seed, "graph")
    for label, kwargs in (("static_graph", dict(static_graph=True)),
                          ("find_unused_parameters", dict(find_unused_parameters=True)),
                          ("static_graph + find_unused_parameters", dict(static_graph=True,
                                                                         find_unused_parameters=True))):
        ref_losses, ref_grads, ref_params = reference(make_mlp(c.seed * 100 + 5), x, y, mse, me, n)
        model = Unused(c.seed * 100 + 5)
        ddp = nn.parallel.DistributedDataParallel(model, **kwargs)
        opt = make_opt(ddp.parameters())
        for _ in range(STEPS):
            opt.zero_grad()
            mse(ddp(shard(x, me, n)), shard(y, me, n)).backward()
            opt.step()
        for (name, p), g, rp in zip(model.mlp.named_parameters(), ref_grads, ref_params):
            c.close(p.grad, g, f"{label}: last gradient of {name}")
            c.close(p, rp, f"{label}: parameter {name} after {STEPS} steps")
        c.ok(all(p.grad is None for p in model.spare.parameters()), f"{label}: the unused layer has no gradient")


def part_dcp(c):
    """torch.distributed.checkpoint: an FSDP2-sharded model and its optimizer saved by every rank into
    one directory, then loaded into a fresh sharded model (other weights): same parameters and the
    same next step as the model that was saved."""
    import tempfile

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard
    me, n = c.rank, c.size
    where = [tempfile.mkdtemp(prefix="commlib-dcp-") if me == 0 else None]
    dist.broadcast_object_list(where, src=0)
    x, y = mlp_data(c.seed, "dcp")

    def sharded(seed):
        m = make_mlp(seed)
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(m)
        return m, make_opt(m.parameters())

    def step(m, opt):
        opt.zero_grad()
        mse(m(shard(x, me, n)), shard(y, me, n)).backward()
        opt.step()

    saved, opt = sharded(c.seed * 100 + 9)
    step(saved, opt)
    msd, osd = get_state_dict(saved, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=where[0])
    loaded, opt2 = sharded(c.seed * 100 + 10)
    msd2, osd2 = get_state_dict(loaded, opt2)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=where[0])
    set_state_dict(loaded, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for (name, p), q in zip(loaded.named_parameters(), saved.parameters()):
        c.close(p.full_tensor(), q.full_tensor(), f"dcp: loaded parameter {name}")
    step(saved, opt)
    step(loaded, opt2)  # momentum came back too: the next step is the same
    for (name, p), q in zip(loaded.named_parameters(), saved.parameters()):
        c.close(p.full_tensor(), q.full_tensor(), f"dcp: parameter {name} one step after loading")
    dist.barrier()
    if me == 0:
        import shutil
        shutil.rmtree(where[0], ignore_errors=True)


# ------------------------------------------------------------------ FSDP
def part_fsdp2(c):
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    me, n = c.rank, c.size
    for label, make, data, loss_fn in (("fsdp2 mlp", make_mlp, mlp_data, mse), ("fsdp2 cnn", make_cnn, cnn_data, xent)):
        x, y = data(c.seed, label)
        init = c.seed * 100 + 7  # the same weights everywhere: fully_shard keeps each rank's own shard of them
        ref_losses, ref_grads, ref_params = reference(make(init), x, y, loss_fn, me, n)
        model = make(init)
        for layer in model:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        fully_shard(model)
        opt = make_opt(model.parameters())
        xs, ys = shard(x, me, n), shard(y, me, n)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = loss_fn(model(xs), ys)
            loss.backward()
            losses.append(loss.detach())
            opt.step()
        c.close(torch.stack(losses), ref_losses, f"{label}: per-step loss on rank {me}'s shard", record=False)
        for (name, p), g, rp in zip(model.named_parameters(), ref_grads, ref_params):
            c.ok(isinstance(p, DTensor), f"{label}: {name} is sharded", f"{type(p).__name__}, not a DTensor")
            c.close(p.grad.full_tensor(), g, f"{label}: last gradient of {name}")
            c.close(p.full_tensor(), rp, f"{label}: parameter {name} after {STEPS} steps")


def part_fsdp1(c):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    me, n = c.rank, c.size
    for label, make, data, loss_fn, wrap in (("fsdp1 mlp", make_mlp, mlp_data, mse, {nn.Linear}),
                                             ("fsdp1 cnn", make_cnn, cnn_data, xent, {nn.Conv2d, nn.Linear})):
        x, y = data(c.seed, label)
        ref_losses, ref_grads, ref_params = reference(make(c.seed * 100), x, y, loss_fn, me, n)
        # (sync_module_states=True would need a GPU: every rank builds the same weights instead)
        model = FSDP(make(c.seed * 100), device_id=torch.device("cpu"), auto_wrap_policy=ModuleWrapPolicy(wrap),
                     use_orig_params=True)
        opt = make_opt(model.parameters())
        xs, ys = shard(x, me, n), shard(y, me, n)
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = loss_fn(model(xs), ys)
            loss.backward()
            losses.append(loss.detach())
            opt.step()
        c.close(torch.stack(losses), ref_losses, f"{label}: per-step loss on rank {me}'s shard", record=False)
        with FSDP.summon_full_params(model, with_grads=True):
            for (name, p), g, rp in zip(model.named_parameters(), ref_grads, ref_params):
                c.close(p.grad, g, f"{label}: last gradient of {name}")
                c.close(p, rp, f"{label}: parameter {name} after {STEPS} steps")


def part_shard(c):
    """Sharded SGD by hand: the flat parameter vector is split in n equal shards (padded); each step
    all-gathers the parameters, back-propagates on this rank's data and reduce-scatters the summed
    gradient, of which each rank applies its own block (divided by n) with SGD + momentum."""
    me, n = c.rank, c.size
    for label, make, data, loss_fn in (("shard mlp", make_mlp, mlp_data, mse), ("shard cnn", make_cnn, cnn_data, xent)):
        x, y = data(c.seed, label)
        init = c.seed * 100 + 3
        ref_losses, ref_grads, ref_params = reference(make(init), x, y, loss_fn, me, n)
        model = make(init)
        params = list(model.parameters())
        flat = nn.utils.parameters_to_vector(params).detach()
        total = flat.numel()
        k = -(-total // n)
        padded = torch.zeros(k * n)
        padded[:total] = flat
        mine = padded[me * k:(me + 1) * k].clone()
        velocity = torch.zeros(k)
        xs, ys = shard(x, me, n), shard(y, me, n)
        losses = []
        for step in range(STEPS):
            full = torch.empty(k * n)
            dist.all_gather_into_tensor(full, mine)
            with torch.no_grad():
                nn.utils.vector_to_parameters(full[:total], params)
            model.zero_grad()
            loss = loss_fn(model(xs), ys)
            loss.backward()
            losses.append(loss.detach())
            grad = torch.zeros(k * n)
            grad[:total] = nn.utils.parameters_to_vector([p.grad for p in params])
            g = torch.empty(k)
            dist.reduce_scatter_tensor(g, grad, op=dist.ReduceOp.SUM)
            g /= n
            velocity = velocity * 0.9 + g  # torch.optim.SGD's momentum (dampening 0)
            mine = mine - 0.05 * velocity
        c.close(torch.stack(losses), ref_losses, f"{label}: per-step loss on rank {me}'s shard", record=False)
        gathered = torch.empty(k * n)
        dist.all_gather_into_tensor(gathered, mine)
        c.close(gathered[me * k:(me + 1) * k], mine, f"{label}: own block of the gather", record=False)
        # the reduced gradient of the last step, gathered, against the reference's
        gsum = torch.empty(k * n)
        dist.all_gather_into_tensor(gsum, g)
        c.close(gsum[:total], nn.utils.parameters_to_vector(ref_grads), f"{label}: last reduced gradient")
        c.close(gathered[:total], nn.utils.parameters_to_vector(ref_params), f"{label}: parameters after {STEPS} steps")


PARTS = {"mlp": part_mlp, "cnn": part_cnn, "hooks": part_hooks, "uneven": part_uneven, "graph": part_graph,
         "fsdp2": part_fsdp2, "fsdp1": part_fsdp1, "shard": part_shard, "dcp": part_dcp}
GROUPS = {"ddp": ["mlp", "cnn", "hooks", "uneven", "graph"], "fsdp": ["fsdp2", "fsdp1", "shard", "dcp"]}


def run_parts(case, parts, groups, default):
    """The parts named on the command line (or `default`), each against its reference, then the
    cross-rank comparison and the verdict (torch_mesh.py runs its parts through this too)."""
    torch.set_num_threads(1)  # a shared 2-core machine
    wanted = []
    for arg in sys.argv[2:] or default:
        wanted += groups.get(arg, [arg])
    unknown = [p for p in wanted if p not in parts]
    if unknown:
        sys.exit(f"unknown part(s) {unknown}; known: {sorted(parts)} and {sorted(groups)}")
    c = TorchChecker(f"{case} {BACKEND} {' '.join(wanted)}")
    for part in wanted:
        try:
            parts[part](c)
        except Exception as err:
            c.crashed(part, err)
    c.finish()


def main():
    run_parts("torch_train", PARTS, GROUPS, ["ddp", "fsdp"])


def _batched_checker():
    torch.set_num_threads(1)  # a shared 2-core machine
    return TorchChecker("torch_train batched")


WHERE = {"mlp": [1, 2, 4], "cnn": [1, 2, 4], "hooks": [1, 2, 4], "fsdp2": [2, 4], "fsdp1": [2, 4], "shard": [2, 4],
         "dcp": [2, 3, 4]}  # the group sizes each part runs at (the others: every size the test asks)

if __name__ == "__main__":
    main()
elif __name__.startswith("_batchcase_"):  # a batched job (_batch.py): each part is a check (not when imported)
    parts(PARTS, _batched_checker, ns=WHERE, timeout=150)
