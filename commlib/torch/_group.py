"""ProcessGroupCommlib: torch.distributed's ProcessGroup interface over a commlib Group.

Each torch group is a commlib Group of its own (its own ordered stream of
collectives, its own timeout), over the members' world ranks. A blocking
call (`async_op=False`) runs inline on commlib's fast path and returns a
completed Work; an asynchronous one (async_op=True, and every call DDP and
FSDP make from C++) is queued on the group's stream, whose worker runs the
queue in order and completes the Work and its future. Tensors are used in
place through numpy views of their memory; a copy is made only where the
layout requires one (a non-contiguous output, a list of separate tensors).
"""
import collections
import datetime
import time

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (AllgatherOptions, AllreduceCoalescedOptions, AllreduceOptions,
                                        AllToAllOptions, BarrierOptions, BroadcastOptions, GatherOptions,
                                        ReduceOptions, ReduceScatterOptions, ScatterOptions)

from .._api import collectives as _c
from .._api import lifecycle
from .._dtypes import dtype_code
from .._engine import ANY_SOURCE, EAGER_BYTES
from .._errors import CommError, MismatchError
from .._kernels import address as _addr
from . import _store, _threads
from ._profile import first, nothing, profiled, second, second_one
from ._tensors import SIMPLE, array, average, contiguous_target, premultiply, reduce_op, same_dtype
from ._work import Deferred, Pending, done

TAG_ALLTOALLV, TAG_ALLTOALL_LIST = -201, -202  # internal point-to-point tags (users' tags are >= 0)
TAG_MONITORED = -1000  # monitored_barrier: -1000 ... -1999, one a call
_U8 = dtype_code(np.uint8)
_SERIAL = collections.Counter()  # (group name, members) -> how many such groups this process made


def create_process_group(dist_opts, backend_opts=None):
    """The creator torch calls (extended API) for every group whose backend is "commlib"."""
    rank, size = int(dist_opts.group_rank), int(dist_opts.group_size)
    timeout = _store.timeout_seconds(dist_opts.timeout)
    members = [int(r) for r in dist_opts.global_ranks_in_group]
    if not members:  # the default group: torch's world
        world = _store.world(dist_opts.store, rank, size, timeout)
        members = list(range(size))
        _threads.share_cores(world.local_rank(), world.local_size())
    else:
        world = lifecycle.current()
        if world is None or world.transport is None and size > 1:
            raise CommError("commlib backend: a sub-group needs the default group on commlib as well "
                            "(dist.init_process_group('commlib')) or commlib.init() called first")
        if len(members) != size or members[rank] != world.rank():
            raise CommError(f"commlib backend: torch's group {dist_opts.group_id} says this is rank {rank} of "
                            f"world ranks {members}, but this process is world rank {world.rank()}")
    name = str(dist_opts.group_id)
    _SERIAL[name, tuple(members)] += 1
    # members are world ranks, which are the world group's ranks
    return ProcessGroupCommlib(world.subgroup(members, ("torch", name, _SERIAL[name, tuple(members)]), timeout))


def _options(opts, cls):
    """torch passes an options object; direct callers may pass a ReduceOp or nothing."""
    if isinstance(opts, cls):
        return opts
    o = cls()
    if opts is not None:
        o.reduceOp = opts if isinstance(opts, dist.ReduceOp) else dist.ReduceOp(opts)
    return o


def _one(tensors, what):
    if len(tensors) != 1 or not isinstance(tensors, (list, tuple)):
        raise ValueError(f"commlib backend: {what} takes exactly one tensor per process, got {len(tensors)}")
    return tensors[0]


def _overlap(a, b):
    pa, pb = _addr(a), _addr(b)
    return a.nbytes and b.nbytes and pa < pb + b.nbytes and pb < pa + a.nbytes


def _flat_view(tensors):
    """A 1-d tensor over the memory of `tensors` when they lie back to back in one storage, else None."""
    first = tensors[0]
    if not all(t.is_contiguous() and t.dtype == first.dtype for t in tensors):
        return None
    step = first.numel() * first.element_size()
    base = first.data_ptr()
    for i, t in enumerate(tensors):
        if t.numel() != first.numel() or t.data_ptr() != base + i * step or t.untyped_storage().data_ptr() != \
                first.untyped_storage().data_ptr():
            return None
    flat = torch.empty(0, dtype=first.dtype)
    flat.set_(first.untyped_storage(), first.storage_offset(), (first.numel() * len(tensors),))
    return flat


class ProcessGroupCommlib(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run on commlib."""

    def __init__(self, group):
        super().__init__(group.rank(), group.size())
        self._g = group
        self._n = group.size()
        self._monitored = 0  # monitored_barrier calls so far
        self._deferred = None  # the last receive made and not posted yet (a Deferred), or None
        self._collectives = 0  # collectives called so far (torch's sequence number)

    # torch keeps a group's name and description on its C++ backends, which a
    # Python ProcessGroup has none of: keep them here (DeviceMesh and FSDP2 read them).
    _name = ""
    _desc = ""

    def getGroupName(self):
        return self._name

    def setGroupName(self, name):
        self._name = name

    def getGroupDesc(self):
        return self._desc

    def setGroupDesc(self, desc):
        self._desc = desc

    def _set_sequence_number_for_group(self):
        """torch has every rank of a new group agree on a first sequence number (with
        TORCH_DISTRIBUTED_DEBUG set): commlib's groups number their collectives from 0 on every rank."""
        return None

    def _get_sequence_number_for_group(self):
        """How many collectives have been called on this group (commlib checks each one's header on
        every rank, so a mismatched collective is a MismatchError at any debug level)."""
        return self._collectives

    def getBackendName(self):
        return "commlib"

    def name(self):
        return "commlib"

    @property
    def commlib_group(self):
        """The commlib Group behind this process group (for commlib's own API: group=...)."""
        return self._g

    def __repr__(self):
        return f"<ProcessGroupCommlib rank {self._g.rank()} of {self._n}>"

    # ------------------------------------------------------------ helpers
    def _go(self, opts, what, result, fn, *args):
        """Run fn(*args) on the group's stream: inline (blocking) or queued (async_op)."""
        g = self._g
        if not getattr(opts, "asyncOp", True):
            g.stream.run(fn, *args)
            return done(result)
        return Pending(g.stream.submit(what, fn, *args), result, what)

    def _now(self, opts, what, result, fn, *args):
        """Like _go, for an fn whose collectives are all commlib's public functions: each keeps the
        group's order itself, so a blocking call runs fn at once and each collective may take the
        one-call path; queued (async_op), they run inline on the stream's worker."""
        if not getattr(opts, "asyncOp", True):
            fn(*args)
            return done(result)
        return Pending(self._g.stream.submit(what, fn, *args), result, what)

    def _check_list(self, tensors, like, what):
        if len(tensors) != self._n:
            raise ValueError(f"commlib backend: {what} needs a list of {self._n} tensors (the group size), "
                             f"got {len(tensors)}")
        for t in tensors:
            if t.numel() != like.numel() or t.dtype != like.dtype:
                raise ValueError(f"commlib backend: {what}: every tensor must have {like.numel()} elements of "
                                 f"{like.dtype} like the input, got {t.numel()} of {t.dtype}")

    # -------------------------------------------------------- reductions
    def allreduce(self, tensors, opts=None):
        if type(opts) is not AllreduceOptions:
            opts = _options(opts, AllreduceOptions)
        t = _one(tensors, "allreduce")
        op = opts.reduceOp
        if t.layout == torch.sparse_coo:
            if op.op != dist.ReduceOp.SUM:
                raise ValueError(f"commlib backend: a sparse all_reduce sums (ReduceOp.SUM), got {op.op}")
            return self._now(opts, "allreduce", tensors, self._sparse_sum, t)
        name = SIMPLE[op.op.value]
        if name is not None:  # the fast path: one in-place all_reduce
            x = array(t)
            g = self._g
            if not opts.asyncOp:
                _c.all_reduce(x, name, out=x, group=g)
                return done(tensors)
            return Pending(_c.iall_reduce(x, name, out=x, group=g), tensors, "allreduce")
        name, scale = reduce_op(op)
        return self._now(opts, "allreduce", tensors, self._allreduce, [t], name, scale)

    def _sparse_sum(self, t):
        """A sparse COO tensor summed over the group (as gloo does it): every rank's indices and values
        gathered (padded to the largest count), added up, coalesced, written back into t."""
        g, n = self._g, self._n
        idx, val = t._indices(), t._values()
        counts = np.zeros(n, np.int64)
        _c.all_gather(np.array([idx.shape[1]], np.int64), out=counts, group=g)
        most = int(counts.max())
        pad_idx = torch.zeros((idx.shape[0], most), dtype=idx.dtype)
        pad_idx[:, :idx.shape[1]] = idx
        pad_val = torch.zeros((most,) + tuple(val.shape[1:]), dtype=val.dtype)
        pad_val[:val.shape[0]] = val
        all_idx = torch.empty((n,) + tuple(pad_idx.shape), dtype=idx.dtype)
        all_val = torch.empty((n,) + tuple(pad_val.shape), dtype=val.dtype)
        _c.all_gather(array(pad_idx.contiguous()).reshape(-1), out=array(all_idx).reshape(-1), group=g)
        _c.all_gather(array(pad_val.contiguous()).reshape(-1), out=array(all_val).reshape(-1), group=g)
        indices = torch.cat([all_idx[r, :, :int(counts[r])] for r in range(n)], dim=1)
        values = torch.cat([all_val[r, :int(counts[r])] for r in range(n)])
        t.copy_(torch.sparse_coo_tensor(indices, values, t.shape).coalesce())

    def allreduce_coalesced(self, tensors, opts=None):
        opts = _options(opts, AllreduceCoalescedOptions)
        name, scale = reduce_op(opts.reduceOp)
        for t in tensors:
            array(t)  # every tensor checked before anything is queued
        return self._now(opts, "allreduce_coalesced", tensors, self._allreduce, list(tensors), name, scale)

    def _allreduce(self, tensors, name, scale):
        g = self._g
        if scale is not None and scale != "avg":
            for t in tensors:
                premultiply(t, scale)
        if len(tensors) == 1 or len({t.dtype for t in tensors}) > 1:
            for t in tensors:
                x = array(t)
                _c.all_reduce(x, name, out=x, group=g)
        else:  # one message for many small tensors
            flat = torch.cat([t.reshape(-1) for t in tensors])
            x = array(flat)
            _c.all_reduce(x, name, out=x, group=g)
            _split_into(flat, tensors)
        if scale == "avg":
            for t in tensors:
                average(t, self._n)

    def reduce(self, tensors, opts=None):
        opts = _options(opts, ReduceOptions)
        t = _one(tensors, "reduce")
        root = self._g.check_rank(opts.rootRank, "root")
        name, scale = reduce_op(opts.reduceOp)
        array(t)
        return self._now(opts, "reduce", tensors, self._reduce, t, root, name, scale)

    def _reduce(self, t, root, name, scale):
        g = self._g
        if scale is not None and scale != "avg":
            premultiply(t, scale)
        x = array(t)
        if g.rank() != root:
            _c.reduce(x, name, root, group=g)
            return
        out, back = contiguous_target(t, "reduce's tensor")
        _c.reduce(x, name, root, out=out.reshape(-1), group=g)
        if back is not None:
            t.copy_(back)
        if scale == "avg":
            average(t, self._n)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = _options(opts, ReduceScatterOptions)
        out = _one(outputs, "reduce_scatter")
        ins = _one(input_lists, "reduce_scatter")
        self._check_list(ins, out, "reduce_scatter's input list")
        name, scale = reduce_op(opts.reduceOp)
        return self._now(opts, "reduce_scatter", outputs, self._reduce_scatter_list, out, list(ins), name, scale)

    def _reduce_scatter_list(self, out, ins, name, scale):
        flat = _flat_view(ins)
        if flat is None or scale is not None:
            flat = torch.cat([t.reshape(-1) for t in ins])
        self._reduce_scatter(out, flat, name, scale)

    def reduce_scatter_single(self, output, input, opts=None):
        if type(opts) is not ReduceScatterOptions:
            opts = _options(opts, ReduceScatterOptions)
        if input.numel() != self._n * output.numel() or input.dtype != output.dtype:
            raise ValueError(f"commlib backend: reduce_scatter_tensor: the input must have {self._n} x "
                             f"{output.numel()} elements of {output.dtype} (the output's), got {input.numel()} of "
                             f"{input.dtype}")
        op = opts.reduceOp
        name = SIMPLE[op.op.value]
        y, x = array(output), array(input)
        if name is not None and y.flags.c_contiguous and y.flags.writeable:  # the fast path: straight into
            y = y.reshape(-1)                                                  # the output
            x = x.reshape(-1)
            if not _overlap(x, y):
                if not opts.asyncOp:
                    _c.reduce_scatter(x, name, out=y, group=self._g)
                    return done([output])
                return Pending(_c.ireduce_scatter(x, name, out=y, group=self._g), [output], "reduce_scatter_tensor")
        name, scale = reduce_op(op)
        return self._now(opts, "reduce_scatter_tensor", [output], self._reduce_scatter, output, input, name, scale)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = _options(opts, ReduceScatterOptions)
        if len(outputs) != len(inputs):
            raise ValueError("commlib backend: reduce_scatter_tensor_coalesced needs as many outputs as inputs")
        name, scale = reduce_op(opts.reduceOp)
        for o, i in zip(outputs, inputs):
            if i.numel() != self._n * o.numel() or i.dtype != o.dtype:
                raise ValueError(f"commlib backend: reduce_scatter_tensor_coalesced: an input of {i.numel()} "
                                 f"{i.dtype} for an output of {o.numel()} {o.dtype}")
        return self._now(opts, "reduce_scatter_tensor_coalesced", list(outputs), self._reduce_scatter_many,
                        list(outputs), list(inputs), name, scale)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _reduce_scatter_many(self, outputs, inputs, name, scale):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter(o, i, name, scale)

    def _reduce_scatter(self, out, inp, name, scale):
        if scale is not None and scale != "avg":
            inp = inp * scale  # the input is not the caller's to scale in place
        x = array(inp).reshape(-1)
        y, back = contiguous_target(out, "reduce_scatter's output")
        y = y.reshape(-1)
        if _overlap(x, y):
            back = torch.empty(out.shape, dtype=out.dtype)
            y = array(back).reshape(-1)
        _c.reduce_scatter(x, name, out=y, group=self._g)
        if back is not None:
            out.copy_(back)
        if scale == "avg":
            average(out, self._n)

    # ---------------------------------------------------------- movement
    def broadcast(self, tensors, opts=None):
        opts = _options(opts, BroadcastOptions)
        root = self._g.check_rank(opts.rootRank, "root")
        arrays = [array(t) for t in tensors]  # every tensor checked before anything is queued
        return self._now(opts, "broadcast", tensors, self._broadcast, arrays, root)

    def _broadcast(self, arrays, root):
        for a in arrays:
            _c.broadcast(a, root, group=self._g)

    def allgather(self, output_lists, inputs, opts=None):
        opts = _options(opts, AllgatherOptions)
        t = _one(inputs, "allgather")
        outs = _one(output_lists, "allgather")
        self._check_list(outs, t, "allgather's output list")
        return self._now(opts, "allgather", output_lists, self._allgather_list, list(outs), t)

    def _allgather_list(self, outs, t):
        flat = _flat_view(outs)
        if flat is not None:
            _c.all_gather(array(t).reshape(-1), out=array(flat), group=self._g)
            return
        buf = torch.empty(t.numel() * self._n, dtype=t.dtype)
        _c.all_gather(array(t).reshape(-1), out=array(buf), group=self._g)
        _split_into(buf, outs)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """torch's shape: output_lists[r][i] receives rank r's inputs[i]. Every rank's inputs travel
        together, packed into one all_gather."""
        opts = _options(opts, AllgatherOptions)
        inputs = list(inputs)
        if len(output_lists) != self._n:
            raise ValueError(f"commlib backend: allgather_coalesced needs one output list per rank ({self._n}), "
                             f"got {len(output_lists)}")
        for r, outs in enumerate(output_lists):
            if len(outs) != len(inputs):
                raise ValueError(f"commlib backend: allgather_coalesced: output list {r} has {len(outs)} tensors "
                                 f"for {len(inputs)} inputs")
            for o, t in zip(outs, inputs):
                if o.numel() != t.numel() or o.dtype != t.dtype:
                    raise ValueError(f"commlib backend: allgather_coalesced: an output for rank {r} has "
                                     f"{o.numel()} elements of {o.dtype}, its input {t.numel()} of {t.dtype}")
        if inputs:
            same_dtype(inputs, "allgather_coalesced")
        return self._now(opts, "allgather_coalesced", output_lists, self._allgather_lists, output_lists, inputs)

    def _allgather_lists(self, output_lists, inputs):
        if not inputs:
            return
        packed = torch.cat([t.reshape(-1) for t in inputs])
        out = torch.empty(packed.numel() * self._n, dtype=packed.dtype)
        _c.all_gather(array(packed), out=array(out), group=self._g)
        flat = out.view(self._n, -1)
        for r, outs in enumerate(output_lists):
            pos = 0
            for o in outs:
                o.copy_(flat[r, pos:pos + o.numel()].view(o.shape))
                pos += o.numel()

    def all_gather_single(self, output, input, opts=None):
        if type(opts) is not AllgatherOptions:
            opts = _options(opts, AllgatherOptions)
        self._check_gather_tensor(output, input, "all_gather_into_tensor")
        y, back = contiguous_target(output, "all_gather's output")  # the output itself when it can be
        if back is None and not opts.asyncOp:  # the fast path: straight into the output
            _c.all_gather(array(input).reshape(-1), out=y.reshape(-1), group=self._g)
            return done([output])
        return self._now(opts, "all_gather_into_tensor", [output], self._allgather_into, output, y, back,
                         array(input))

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = _options(opts, AllgatherOptions)
        if len(outputs) != len(inputs):
            raise ValueError("commlib backend: allgather_into_tensor_coalesced needs as many outputs as inputs")
        for o, i in zip(outputs, inputs):
            self._check_gather_tensor(o, i, "allgather_into_tensor_coalesced")
            array(o), array(i)
        return self._now(opts, "allgather_into_tensor_coalesced", list(outputs), self._allgather_many,
                         list(outputs), list(inputs))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def _allgather_many(self, outputs, inputs):
        for o, i in zip(outputs, inputs):
            self._allgather(o, i)

    def _check_gather_tensor(self, output, input, what):
        if output.numel() != self._n * input.numel() or output.dtype != input.dtype:
            raise ValueError(f"commlib backend: {what}: the output must have {self._n} x {input.numel()} elements "
                             f"of {input.dtype} (the input's), got {output.numel()} of {output.dtype}")

    def _allgather(self, output, input):
        y, back = contiguous_target(output, "all_gather's output")
        self._allgather_into(output, y, back, array(input))

    def _allgather_into(self, output, y, back, x):
        """all_gather of x into y, a C-contiguous array over output's memory or over `back`'s."""
        _c.all_gather(x.reshape(-1), out=y.reshape(-1), group=self._g)
        if back is not None:
            output.copy_(back)

    def gather(self, output_lists, inputs, opts=None):
        opts = _options(opts, GatherOptions)
        root = self._g.check_rank(opts.rootRank, "root")
        t = _one(inputs, "gather")
        outs = self._root_list(output_lists, t, root, "gather", "output")
        return self._now(opts, "gather", output_lists, self._gather, outs, t, root)

    def _root_list(self, lists, like, root, what, kind):
        """The root's list of one tensor per rank, checked against `like`; None on the other ranks."""
        me = self._g.rank()
        if me == root:
            tensors = _one(lists, what)
            self._check_list(tensors, like, f"{what}'s {kind} list")
            return list(tensors)
        if lists and any(len(x) for x in lists):
            raise ValueError(f"commlib backend: {what}: rank {me} is not the root ({root}) and must pass no "
                             f"{kind} list")
        return None

    def _gather(self, outs, t, root):
        if outs is None:
            _c.gather(array(t), root, group=self._g)
            return
        flat = _flat_view(outs)
        buf = flat if flat is not None else torch.empty(t.numel() * self._n, dtype=t.dtype)
        _c.gather(array(t), root, out=array(buf), group=self._g)
        if flat is None:
            _split_into(buf, outs)

    def scatter(self, outputs, input_lists, opts=None):
        opts = _options(opts, ScatterOptions)
        root = self._g.check_rank(opts.rootRank, "root")
        out = _one(outputs, "scatter")
        ins = self._root_list(input_lists, out, root, "scatter", "input")
        array(out)
        return self._now(opts, "scatter", outputs, self._scatter, out, ins, root)

    def _scatter(self, out, ins, root):
        x = None
        if ins is not None:
            flat = _flat_view(ins)
            x = array(flat if flat is not None else torch.cat([t.reshape(-1) for t in ins]))
        y, back = contiguous_target(out, "scatter's output")
        if x is not None and _overlap(x, y):
            back = torch.empty(out.shape, dtype=out.dtype)
            y = array(back)
        _c.scatter(x, root, out=y.reshape(-1), group=self._g)
        if back is not None:
            out.copy_(back)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = _options(opts, AllToAllOptions)
        n = self._n
        if output.dtype != input.dtype:
            raise TypeError(f"commlib backend: all_to_all_single: output is {output.dtype}, input {input.dtype}")
        out_rows, in_rows = self._splits(output, output_split_sizes, "output"), self._splits(input, input_split_sizes,
                                                                                             "input")
        row_out = output.numel() // output.shape[0] if output.dim() and output.shape[0] else 0
        row_in = input.numel() // input.shape[0] if input.dim() and input.shape[0] else 0
        if row_out and row_in and row_out != row_in:
            raise ValueError(f"commlib backend: all_to_all_single: input rows have {row_in} elements, output rows "
                             f"{row_out}")
        array(output), array(input)
        send = [r * row_in for r in in_rows]
        recv = [r * row_out for r in out_rows]
        if not output_split_sizes and not input_split_sizes and input.shape == output.shape and n > 1:
            return self._now(opts, "all_to_all_single", [output], self._alltoall_equal, output, input)
        return self._go(opts, "all_to_all_single", [output], self._alltoallv, output, input, send, recv)

    alltoall_base = all_to_all_single

    def _splits(self, t, sizes, what):
        n = self._n
        rows = t.shape[0] if t.dim() else 1
        if not sizes:
            if rows % n:
                raise ValueError(f"commlib backend: all_to_all_single: the {what}'s first dimension ({rows}) must "
                                 f"be divisible by the group size {n} when no split sizes are given")
            return [rows // n] * n
        sizes = [int(s) for s in sizes]
        if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
            raise ValueError(f"commlib backend: all_to_all_single: {what}_split_sizes {sizes} must be {n} "
                             f"non-negative sizes adding up to the {what}'s first dimension {rows}")
        return sizes

    def _alltoall_equal(self, output, input):
        res = _c.all_to_all(array(input), 0, 0, group=self._g)
        y = array(output)
        y[...] = res.reshape(y.shape)

    def _alltoallv(self, output, input, send, recv):
        src = input.contiguous().reshape(-1)
        dst, back = contiguous_target(output, "all_to_all's output")
        dst = dst.reshape(-1)
        x = array(src)
        if _overlap(x, dst):
            x = x.copy()
        so = np.cumsum([0] + send)
        ro = np.cumsum([0] + recv)
        n = self._n
        self._exchange([x[so[j]:so[j + 1]] for j in range(n)], [dst[ro[j]:ro[j + 1]] for j in range(n)],
                       TAG_ALLTOALLV, "all_to_all_single")
        if back is not None:
            output.copy_(back)

    def alltoall(self, outputs, inputs, opts=None):
        opts = _options(opts, AllToAllOptions)
        n = self._n
        if len(outputs) != n or len(inputs) != n:
            raise ValueError(f"commlib backend: all_to_all needs {n} input and {n} output tensors, got "
                             f"{len(inputs)} and {len(outputs)}")
        same_dtype(list(outputs) + list(inputs), "all_to_all")
        for t in list(outputs) + list(inputs):
            array(t)
        return self._go(opts, "all_to_all", outputs, self._alltoall_list, list(outputs), list(inputs))

    def _alltoall_list(self, outputs, inputs):
        sends = [array(t.contiguous()).reshape(-1) for t in inputs]
        targets = [contiguous_target(t, "all_to_all's output") for t in outputs]
        self._exchange(sends, [y.reshape(-1) for y, _ in targets], TAG_ALLTOALL_LIST, "all_to_all")
        for t, (_, back) in zip(outputs, targets):
            if back is not None:
                t.copy_(back)

    def _exchange(self, sends, recvs, tag, what):
        """Rank j gets sends[j] into its recvs[me]: every receive posted first, then the sends; then wait."""
        g = self._g
        me, n = g.rank(), self._n
        eng, ctx = g.engine, g.p2p
        if recvs[me].size:
            recvs[me][...] = sends[me]
        reqs = []
        self._post_deferred()
        for j in range(n):
            if j != me:
                u8 = recvs[j].view(np.uint8)
                reqs.append(eng.recv(ctx, j, tag, u8, _exact(u8, g, j, what), what=what, check=(_U8, u8.nbytes)))
        for k in range(1, n):
            j = (me + k) % n
            u8 = np.ascontiguousarray(sends[j]).view(np.uint8)
            reqs.append(eng.send(ctx, j, [u8], tag=tag, dtype=_U8, count=u8.size, what=what))
        for r in reqs:
            r.wait()

    # ------------------------------------------------------ synchronisation
    def barrier(self, opts=None):
        opts = _options(opts, BarrierOptions)
        if not getattr(opts, "asyncOp", True):
            _c.barrier(group=self._g)
            return done([])
        return Pending(_c.ibarrier(group=self._g), [], "barrier")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored barrier: every other rank reports to rank 0 within `timeout` (default:
        the group's), then rank 0 releases them. Rank 0 names the rank that did not come (the first
        in rank order, or all of them with wait_all_ranks); the others, when rank 0 does not release
        them in time, say so. A failure here is an error of this call only: the group goes on."""
        g, me, n = self._g, self._g.rank(), self._n
        secs = g.timeout if timeout is None else (
            timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout))
        ms = int(secs * 1000)
        deadline = time.monotonic() + max(secs, 0.0)
        self._monitored += 1
        tag = TAG_MONITORED - self._monitored % 1000  # a late rank's token never meets a later call
        if n == 1:
            return
        if me != 0:
            _token(g, 0, tag).wait()
            self._post_deferred()
            if not _bounded_recv(g, 0, tag, deadline):
                raise RuntimeError(f"Rank {me} successfully reached monitoredBarrier, but received errors while "
                                   f"waiting for send/recv from rank 0 (within {ms} ms). Please check rank 0's "
                                   f"logs for the faulty rank.")
            return
        failed = []
        self._post_deferred()
        reqs = {r: _token(g, r, tag, receive=True) for r in range(1, n)}
        for r, req in reqs.items():
            if not wait_all_ranks and time.monotonic() >= deadline:
                came = [str(k) for k, q in reqs.items() if q.test()]
                _cancel(reqs)
                raise RuntimeError(f"Rank 0 timed out in monitoredBarrier after {ms} ms (ranks that came: "
                                   f"{', '.join(came) or 'none'})")
            g.engine.wait(req, deadline, any_of=[req])
            if not req.test():
                failed.append(r)
                if not wait_all_ranks:
                    break
        if failed:
            _cancel(reqs)
            which = f"Rank {failed[0]}" if len(failed) == 1 and not wait_all_ranks else \
                f"Ranks {', '.join(map(str, failed))}"
            raise RuntimeError(f"{which} failed to pass monitoredBarrier in {ms} ms (commlib group of {n} ranks)")
        for r in range(1, n):
            _token(g, r, tag).wait()

    # ------------------------------------------------------ point to point
    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        g = self._g
        a = array(t)
        fast = g.p2p_fast
        if fast is not None:  # a plain rank and tag, a contiguous tensor of at most the eager size
            req = fast.isend(a, dst, tag)
            if req is not NotImplemented:
                return done(tensors) if req.test() else Pending(req, tensors, "send")
        dst, tag = g.check_rank(dst, "dst"), _tag(tag)
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        u8 = a.reshape(-1).view(np.uint8)
        req = g.engine.send(g.p2p, dst, [u8], tag=tag, dtype=dtype_code(a.dtype), count=a.size,
                            what=f"send(tag={tag})")
        return Pending(req, tensors, "send")

    def recv(self, tensors, src, tag=0):
        src = self._g.check_rank(src, "src")
        if src == self._g.rank():  # torch refuses a send to oneself, so this receive could never match
            raise ValueError(f"commlib backend: rank {src} cannot receive from itself (torch.distributed has no "
                             "send to oneself)")
        return self._recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._recv(tensors, ANY_SOURCE, tag)

    def _recv(self, tensors, src, tag):
        t = _one(tensors, "recv")
        g = self._g
        tag = _tag(tag)
        y, back = contiguous_target(t, "recv's tensor")
        u8 = y.reshape(-1).view(np.uint8)
        code = dtype_code(y.dtype)
        what = f"recv(tag={tag})"
        self._post_deferred()
        source = [src]

        def finish(msg, payload):
            if msg.nbytes != u8.nbytes:
                raise MismatchError(f"recv into {tuple(t.shape)} {t.dtype} ({u8.nbytes} bytes) but rank "
                                    f"{msg.source} of the group sent {msg.nbytes} bytes (tag {msg.tag})",
                                    rank=g.world[msg.source])
            if back is not None:
                t.copy_(back)
            source[0] = msg.source

        def post():
            return g.engine.recv(g.p2p, src, tag, u8, finish, what=what, check=(code, u8.nbytes))

        fast = g.p2p_fast
        if src != ANY_SOURCE and u8.nbytes <= EAGER_BYTES and fast is not None:
            def receive():  # in one call where nothing else is in the way, else as the engine serves it
                if fast.recv_bytes(u8, _addr(u8), u8.nbytes, src, tag, code, what) is NotImplemented:
                    g.engine.recv(g.p2p, src, tag, u8, finish, what=what, block=True, check=(code, u8.nbytes))
                elif back is not None:
                    t.copy_(back)

            work = self._deferred = Deferred(receive, post, tensors, "recv", src)
            return work
        work = Pending(post(), tensors, "recv")
        work._source_box = source
        return work

    def _post_deferred(self):
        """Post the receive made last and not posted yet, before anything else receives in this group:
        receives match in the order they were made."""
        work, self._deferred = self._deferred, None
        if work is not None:
            work.post()

    # ------------------------------------------------------------ lifetime
    def abort(self):
        """Nothing to abort locally: commlib's operations are bounded by the group's timeout."""
        return None

    def shutdown(self):
        """The group's connections belong to commlib's world, which closes at finalize()."""
        return None


# what torch.profiler records for each operation (as gloo's `gloo:<op>` events): title, input tensors
_PROFILED = {
    "allreduce": ("all_reduce", first), "allreduce_coalesced": ("all_reduce", first), "reduce": ("reduce", first),
    "broadcast": ("broadcast", first), "allgather": ("all_gather", second),
    "allgather_coalesced": ("all_gather", second), "all_gather_single": ("all_gather_into_tensor", second_one),
    "_allgather_base": ("all_gather_into_tensor", second_one),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", second),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor_coalesced", second),
    "gather": ("gather", second), "scatter": ("scatter", first), "reduce_scatter": ("reduce_scatter", first),
    "reduce_scatter_single": ("reduce_scatter_tensor", second_one),
    "_reduce_scatter_base": ("reduce_scatter_tensor", second_one),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced", second),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced", second),
    "all_to_all_single": ("all_to_all", second_one), "alltoall_base": ("all_to_all", second_one),
    "alltoall": ("all_to_all", second), "barrier": ("barrier", nothing), "send": ("send", first),
    "recv": ("recv", first), "recv_anysource": ("recvAnySource", first),
}
for _method, (_title, _inputs) in _PROFILED.items():
    setattr(ProcessGroupCommlib, _method, profiled(_title, _inputs, _title not in ("send", "recv", "recvAnySource"))(
        getattr(ProcessGroupCommlib, _method)))


def _token(g, peer, tag, receive=False):
    """monitored_barrier's 1-byte token to (or, with receive, from) group rank peer: its request."""
    if receive:
        return g.engine.recv(g.p2p, peer, tag, np.zeros(1, np.uint8), _ignore, what="monitored_barrier",
                             check=(_U8, 1))
    return g.engine.send(g.p2p, peer, [np.zeros(1, np.uint8)], tag=tag, dtype=_U8, count=1,
                         what="monitored_barrier")


def _bounded_recv(g, src, tag, deadline):
    """Receive the token from src by deadline: True, or False with the receive cancelled (the
    group's engine is left as it was: no timeout failure)."""
    req = _token(g, src, tag, receive=True)
    g.engine.wait(req, deadline, any_of=[req])
    if req.test():
        req.wait()
        return True
    _cancel({src: req})
    return False


def _ignore(msg, payload):
    return None


def _cancel(reqs):
    for req in reqs.values():
        if not req.test():
            req.cancel()


def _split_into(flat, tensors):
    """Copy consecutive pieces of the 1-d tensor `flat` into `tensors`."""
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view(t.shape))
        offset += t.numel()


def _tag(tag):
    if isinstance(tag, bool) or not isinstance(tag, int) or tag < 0:
        raise ValueError(f"commlib backend: tag must be a non-negative int, got {tag!r}")
    return tag


def _exact(u8, g, src, what):
    def finish(msg, payload):
        if msg.nbytes != u8.nbytes:
            raise MismatchError(f"{what}: expected {u8.nbytes} bytes from rank {g.world[src]} but it sent "
                                f"{msg.nbytes}: the ranks' split sizes disagree", rank=g.world[src])
    return finish
