"""`MPI.Win`: one-sided communication (RMA) windows, as mpi4py 4.1's, over commlib's point-to-point.

A window is a group of its own (a split of the creating communicator's, so that its messages
never meet a user's) and, on each rank, a `_winserve.Target`: the rank's memory and the service
that applies what other ranks send to it, as it arrives. This module is the origin side: it parses
mpi4py's arguments, applies operations on its own rank directly, sends the others to their
targets, and synchronises:

- Put and Accumulate are one message each, with no reply; the origin counts them per target.
  Get, Get_accumulate, Fetch_and_op and Compare_and_swap post a receive for their reply (a tag
  of their own) before they send, and complete at the next synchronisation (or at their
  request's Wait). The origin never waits for a round trip per element or per operation.
- Fence: the ranks all-reduce their counts, then each waits until its service has applied
  as many as were sent to it. Lock / Unlock, Flush, Complete: a request the target acknowledges
  after everything the origin sent before it (messages of a pair stay in order). Post sends a
  message that Start receives; Complete's acknowledged request is what Wait and Test count.
- Allocate_shared: one mapping of a memfd made by the group's first rank, which the others open
  through /proc, so the segment never has a name to leave behind; where that cannot be (no memfd,
  no /proc), a file in /dev/shm unlinked as soon as every rank has mapped it. Each rank's part
  follows the previous rank's.

A wait that depends on another rank gives up with PeerLost when that rank is gone.
"""
import collections
import itertools
import mmap
import os
import secrets
import socket
import threading
import time

import numpy as np

from .. import _api
from .._api import collectives as _coll
from .._dtypes import DT_BYTES
from .._errors import PeerLost
from .._kernels import typemap_copy
from ._attributes import _NONE, _RETURN_H, Attributes, ErrorHandling
from ._bufspec import DMsg, parse_recv, parse_send
from ._buffer import buffer
from ._constants import (ERR_DISP, ERR_GROUP, ERR_LOCKTYPE, ERR_OP, ERR_RANK, ERR_RMA_ATTACH, ERR_RMA_FLAVOR,
                         ERR_RMA_RANGE, ERR_RMA_SHARED, ERR_RMA_SYNC, ERR_SIZE, ERR_TYPE, ERR_WIN, PROC_NULL,
                         MPIException)
from ._datatypes import _flat, as_datatype
from ._groups import Group
from ._handles import install
from ._ops import SUM, Op
from ._requests import Request
from . import _winserve as ws
from ._winserve import (ACC, CAS, COMPLETE, FLUSH, GACC, GET, LOCK, LOCK_EXCLUSIVE, LOCK_SHARED, POLL_S, PUT, TAG_POST,
                        TAG_REQ, UNLOCK, Target, describe, encode, reply_data, span)

# the MPI-5 standard ABI's values, as every constant of commlib.MPI
WIN_BASE, WIN_DISP_UNIT, WIN_SIZE, WIN_CREATE_FLAVOR, WIN_MODEL = 601, 602, 603, 604, 605
WIN_FLAVOR_CREATE, WIN_FLAVOR_ALLOCATE, WIN_FLAVOR_DYNAMIC, WIN_FLAVOR_SHARED = 311, 312, 313, 314
WIN_UNIFIED, WIN_SEPARATE = 321, 322
MODE_NOCHECK, MODE_NOPRECEDE, MODE_NOPUT, MODE_NOSTORE, MODE_NOSUCCEED = 1024, 2048, 4096, 8192, 16384
CONSTANTS = {k: v for k, v in globals().items() if k.isupper() and k.startswith(("WIN_", "MODE_", "LOCK_"))}

_UNBOUNDED = 1 << 62
_EMPTY = np.empty(0, np.uint8)


class _State:
    """One window, shared by every handle of it (`MPI.Win(win)`)."""

    def __init__(self, g, target, flavor, memory, base, size, disp_unit, peers):
        self.g, self.target, self.flavor, self.memory = g, target, flavor, memory
        self.base, self.size, self.disp_unit = base, size, disp_unit
        self.peers = peers  # per rank: (size, disp_unit), for range checks at the origin; None: dynamic
        self.name, self.errh, self.attrs = "", _RETURN_H, {}  # the error handler; user attributes by keyval
        self.keep = {}  # memory the window refers to (a dynamic window's attached buffers, by address)
        self.shared = None  # Allocate_shared: (memoryview of the mapping, offsets, sizes, disp_units)
        self.sent = np.zeros(g.size() if g is not None else 0, np.int64)  # PUT/ACC sent, per target
        self.dirty = set()  # targets sent a PUT/ACC since their last acknowledgement
        self.pending = collections.defaultdict(list)  # target -> reply receives not yet waited for
        self.tags = itertools.count(ws.FIRST_REPLY_TAG)
        self.locks = {}  # target -> lock type held
        self.start_group = self.post_group = None
        self.self_posts = 0
        self.freed = False


_NULL = _State(None, None, WIN_FLAVOR_CREATE, None, 0, 0, 1, None)
_NULL.name = "MPI_WIN_NULL"


def _keep(msg, payload):
    return msg, payload


class Win(Attributes, ErrorHandling):
    """An MPI window for one-sided communication (`Win()` is MPI.WIN_NULL)."""

    __slots__ = ("_w", "__weakref__")
    _kind, _null_error = "Win", ERR_WIN

    def __new__(cls, win=None):
        if win is not None and not isinstance(win, Win):
            raise TypeError(f"expected an MPI.Win, got {type(win).__name__}")
        self = object.__new__(cls)
        self._w = _NULL if win is None else win._w
        return self

    def __eq__(self, other):
        if not isinstance(other, Win):
            return NotImplemented
        return self._w is other._w

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # unhashable, as mpi4py's: equal handles can be freed apart

    def __bool__(self):
        return self._w is not _NULL

    def __reduce__(self):
        if self._w is _NULL:
            from ._handles import null_reduce
            return null_reduce(self, "WIN_NULL", True)
        raise ValueError(f"cannot pickle {self!r}: a window belongs to the processes that made it")

    def __repr__(self):
        return f"<MPI.Win {self._w.name or hex(id(self._w))}>"

    def _state(self, what):
        w = self._w
        if w is _NULL or w.freed:
            raise MPIException(ERR_WIN, f"Win.{what}: operation on MPI.WIN_NULL (a freed or null window)")
        return w

    # ------------------------------------------------------------ creation
    @classmethod
    def Create(cls, memory, disp_unit=1, info=None, comm=None):
        """A window over `memory` (a writable buffer; None or MPI.BOTTOM: no memory), collective over comm."""
        if memory is None or (type(memory) is int and memory == 0):
            mem, base, keep = _EMPTY, 0, buffer.fromaddress(0, 0)
        else:
            flat, _ = _flat(memory, True)
            mem = flat.view(np.uint8) if flat.size else _EMPTY
            base, keep = (mem.__array_interface__["data"][0] if mem.size else 0), buffer.frombuffer(memory)
        return cls._make(comm, WIN_FLAVOR_CREATE, mem, base, keep, disp_unit, "Create")

    @classmethod
    def Allocate(cls, size, disp_unit=1, info=None, comm=None):
        """A window over `size` new bytes on this rank, collective over comm."""
        size = _size(size, "Allocate")
        keep = buffer.allocate(size, True)
        mem = np.frombuffer(keep, np.uint8) if size else _EMPTY
        return cls._make(comm, WIN_FLAVOR_ALLOCATE, mem, keep.address if size else 0, keep, disp_unit, "Allocate")

    @classmethod
    def Allocate_shared(cls, size, disp_unit=1, info=None, comm=None):
        """A window over `size` new bytes per rank, all in one shared mapping that every rank of
        comm (all on one host) can read and write directly (see Shared_query)."""
        size = _size(size, "Allocate_shared")
        return cls._make(comm, WIN_FLAVOR_SHARED, size, None, None, disp_unit, "Allocate_shared")

    @classmethod
    def Create_dynamic(cls, info=None, comm=None):
        """A window with no memory yet: Attach adds regions, targeted by their address (MPI.Get_address)."""
        return cls._make(comm, WIN_FLAVOR_DYNAMIC, _EMPTY, 0, buffer.fromaddress(0, 0), 1, "Create_dynamic")

    @classmethod
    def _make(cls, comm, flavor, mem, base, keep, disp_unit, what):
        from ._comm import _group
        if comm is None:
            from . import COMM_SELF as comm
        cg = _group(comm)
        if not isinstance(disp_unit, (int, np.integer)) or isinstance(disp_unit, bool) or disp_unit <= 0:
            raise MPIException(ERR_DISP, f"rank {cg.rank()}: Win.{what}: disp_unit must be a positive int, "
                                         f"got {disp_unit!r}")
        g = cg.split(0, cg.rank())  # the window's own context
        nbytes = mem if flavor == WIN_FLAVOR_SHARED else mem.nbytes
        host = socket.gethostname() if flavor == WIN_FLAVOR_SHARED else None
        peers = _api.all_gather_obj((nbytes, int(disp_unit), host), group=g) if g.size() > 1 else \
            [(nbytes, int(disp_unit), host)]
        shared = None
        if flavor == WIN_FLAVOR_SHARED:
            shared = _shared_segment(g, peers, what)
            mv, offsets = shared[0], shared[1]
            part = mv[offsets[g.rank()]:offsets[g.rank()] + nbytes]
            keep = buffer.frombuffer(part)
            mem = np.frombuffer(part, np.uint8) if nbytes else _EMPTY
            base = keep.address if nbytes else 0
        target = Target(g, mem, int(disp_unit), flavor == WIN_FLAVOR_DYNAMIC)
        w = _State(g, target, flavor, keep, base, mem.nbytes, int(disp_unit),
                   None if flavor == WIN_FLAVOR_DYNAMIC else [(s, d) for s, d, _ in peers])
        w.shared = shared
        if g.size() > 1:
            target.start()
        self = object.__new__(cls)
        self._w = w
        return self

    def Free(self):
        """Free the window (collective): every operation on it completes first."""
        w = self._state("Free")
        self._fence(w, "Free")
        try:
            self._delete_attrs()
        finally:
            w.target.stop()
        w.freed = True
        w.memory = w.keep = w.shared = None
        self._w = _NULL

    def free(self):
        """Free the window if it is not null."""
        if self._w is not _NULL and not self._w.freed:
            self.Free()

    # ------------------------------------------------------------ memory
    def Attach(self, memory):
        """Attach a writable buffer to a dynamic window; others target it at MPI.Get_address(memory)."""
        w = self._state("Attach")
        if w.flavor != WIN_FLAVOR_DYNAMIC:
            raise MPIException(ERR_RMA_FLAVOR, f"rank {w.g.rank()}: Win.Attach: the window is not dynamic")
        flat, _ = _flat(memory, True)
        mem = flat.view(np.uint8) if flat.size else _EMPTY
        base = mem.__array_interface__["data"][0] if mem.size else 0
        with w.target.cv:
            w.target.regions[base] = mem
        w.keep[base] = memory

    def Detach(self, memory):
        w = self._state("Detach")
        flat, _ = _flat(memory, False)
        base = flat.__array_interface__["data"][0] if flat.size else 0
        with w.target.cv:
            if w.target.regions.pop(base, None) is None:
                raise MPIException(ERR_RMA_ATTACH, f"rank {w.g.rank()}: Win.Detach: no memory attached at {base:#x}")
        w.keep.pop(base, None)

    def tomemory(self):
        """This rank's window memory as an MPI.buffer."""
        w = self._state("tomemory")
        return w.memory if w.flavor != WIN_FLAVOR_DYNAMIC else buffer.fromaddress(0, 0)

    def Shared_query(self, rank):
        """(buffer, disp_unit) of rank's memory in a shared window, mapped in this process
        (MPI.PROC_NULL: the first rank with memory). On a window of another flavor (MPI-4), only this
        process's own memory is reachable: another rank's is an empty buffer."""
        w = self._state("Shared_query")
        if w.shared is None:
            if w.peers is None:
                raise MPIException(ERR_RMA_FLAVOR, f"rank {w.g.rank()}: Win.Shared_query: a dynamic window has no "
                                                   f"memory of its own")
            me = w.g.rank()
            if rank == PROC_NULL:
                rank = next((r for r, (size, _u) in enumerate(w.peers) if size), me)
            r = _rank(w, rank, "Shared_query")
            if r == me and w.size:
                return self.tomemory(), w.disp_unit
            return buffer.fromaddress(0, 0), w.peers[r][1]
        mv, offsets, sizes, units = w.shared
        if rank == PROC_NULL:
            rank = next((r for r, s in enumerate(sizes) if s), 0)
        r = _rank(w, rank, "Shared_query")
        return buffer.frombuffer(mv[offsets[r]:offsets[r] + sizes[r]]) if sizes[r] else buffer.fromaddress(0, 0), \
            units[r]

    # ------------------------------------------------------------ queries
    def Get_group(self):
        g = self._state("Get_group").g
        return Group._of(g.world, g.world[g.rank()])

    group = property(Get_group)
    group_size = property(lambda self: self._state("group_size").g.size())
    group_rank = property(lambda self: self._state("group_rank").g.rank())

    # attributes and error handlers (_attributes.py), kept with the window
    def _attrs(self):
        w = self._w
        return None if w is _NULL or w.freed else w.attrs

    def _builtin_attr(self, keyval):
        w = self._state("Get_attr")
        predefined = {WIN_BASE: w.base, WIN_SIZE: w.size, WIN_DISP_UNIT: w.disp_unit, WIN_CREATE_FLAVOR: w.flavor,
                      WIN_MODEL: WIN_UNIFIED}
        return predefined.get(keyval, _NONE)

    def _errh_get(self):
        return self._state("Get_errhandler").errh

    def _errh_set(self, h):
        self._state("Set_errhandler").errh = h

    @property
    def attrs(self):
        w = self._state("attrs")
        return (w.base, w.size, w.disp_unit)

    flavor = property(lambda self: self._state("flavor").flavor)
    model = property(lambda self: (self._state("model"), WIN_UNIFIED)[1])

    def Get_name(self):
        return self._w.name

    def Set_name(self, name):
        self._state("Set_name").name = str(name)

    name = property(Get_name, Set_name)

    def Set_info(self, info):
        self._state("Set_info")

    def Get_info(self):
        from . import Info
        self._state("Get_info")
        return Info.Create()

    info = property(Get_info, Set_info)

    # ------------------------------------------------------------ communication
    def Put(self, origin, target_rank, target=None):
        """Write origin into target_rank's window at target ((disp, count, datatype), disp or None)."""
        self._put(origin, target_rank, target, PUT, None, "Put")

    def Rput(self, origin, target_rank, target=None):
        self._put(origin, target_rank, target, PUT, None, "Rput")
        return Request._completed()  # the origin buffer is free once the call returns

    def Accumulate(self, origin, target_rank, target=None, op=SUM):
        """target = target op origin, elementwise and atomically (op: a predefined op, REPLACE, NO_OP)."""
        self._put(origin, target_rank, target, ACC, op, "Accumulate")

    def Raccumulate(self, origin, target_rank, target=None, op=SUM):
        self._put(origin, target_rank, target, ACC, op, "Raccumulate")
        return Request._completed()

    def Get(self, origin, target_rank, target=None):
        """Read target_rank's window into origin (complete at the next synchronisation)."""
        self._get(origin, target_rank, target, "Get")

    def Rget(self, origin, target_rank, target=None):
        return self._get(origin, target_rank, target, "Rget")

    def Get_accumulate(self, origin, result, target_rank, target=None, op=SUM):
        """result = target; target = target op origin (atomically)."""
        self._get_acc(origin, result, target_rank, target, op, "Get_accumulate")

    def Rget_accumulate(self, origin, result, target_rank, target=None, op=SUM):
        return self._get_acc(origin, result, target_rank, target, op, "Rget_accumulate")

    def Fetch_and_op(self, origin, result, target_rank, target_disp=0, op=SUM):
        """Get_accumulate of one element at target_disp."""
        w = self._state("Fetch_and_op")
        if target_rank == PROC_NULL:
            return
        o, r = parse_send(origin), parse_recv(result)
        _single(o, "origin"), _single(r, "result")
        if o.datatype != r.datatype:
            raise ValueError("mismatch in origin and result MPI datatypes")
        self._issue(w, target_rank, GACC, _disp(target_disp), o.datatype, 1, _opname(w, op, "Fetch_and_op"),
                    o.u8, r, "Fetch_and_op")

    def Compare_and_swap(self, origin, compare, result, target_rank, target_disp=0):
        """result = target; target = origin if target == compare (atomically; one element)."""
        w = self._state("Compare_and_swap")
        if target_rank == PROC_NULL:
            return
        o, c, r = parse_send(origin), parse_send(compare), parse_recv(result)
        _single(o, "origin"), _single(c, "compare"), _single(r, "result")
        if o.datatype != c.datatype:
            raise ValueError("mismatch in origin and compare MPI datatypes")
        if o.datatype != r.datatype:
            raise ValueError("mismatch in origin and result MPI datatypes")
        data = np.concatenate([o.u8, c.u8])
        self._issue(w, target_rank, CAS, _disp(target_disp), o.datatype, 1, None, data, r, "Compare_and_swap")

    def _put(self, origin, target_rank, target, kind, op, what):
        w = self._state(what)
        if target_rank == PROC_NULL:
            return
        o = parse_send(origin)
        disp, count, dt = _target(target, o)
        opname = None if op is None else _opname(w, op, what)
        _agree(w, o.nbytes, count, dt, what, o.datatype if kind == ACC else None)
        self._issue(w, target_rank, kind, disp, dt, count, opname, o.u8, None, what)

    def _get(self, origin, target_rank, target, what):
        w = self._state(what)
        if target_rank == PROC_NULL:
            return Request._completed()
        r = parse_recv(origin)
        disp, count, dt = _target(target, r)
        _agree(w, r.nbytes, count, dt, what)
        return self._issue(w, target_rank, GET, disp, dt, count, None, None, r, what)

    def _get_acc(self, origin, result, target_rank, target, op, what):
        w = self._state(what)
        if target_rank == PROC_NULL:
            return Request._completed()
        o, r = parse_send(origin), parse_recv(result)
        disp, count, dt = _target(target, o)
        opname = _opname(w, op, what)
        if opname != "NO_OP":
            _agree(w, o.nbytes, count, dt, what, o.datatype)
        _agree(w, r.nbytes, count, dt, what, r.datatype)
        return self._issue(w, target_rank, GACC, disp, dt, count, opname, o.u8 if opname != "NO_OP" else _EMPTY, r,
                           what)

    def _issue(self, w, target_rank, kind, disp, dt, count, opname, data, result, what):
        """Run one operation on rank target_rank's memory: here for this rank, else a message to its
        service (with a receive posted first for the reply). A Request for its reply."""
        g = w.g
        r = _rank(w, target_rank, what)
        desc = describe(dt)
        if w.peers is not None:
            size, unit = w.peers[r]
            lo, hi = span(desc, count)
            if hi > lo and (disp * unit + lo < 0 or disp * unit + hi > size):
                raise MPIException(ERR_RMA_RANGE, f"rank {g.rank()}: Win.{what}: {count} x {dt.Get_name()} at "
                                                  f"displacement {disp} reach outside rank {r}'s {size}-byte window")
        if r == g.rank():
            t = w.target
            with t.cv:
                out = t.apply(kind, disp, desc, count, opname, data)
            if result is not None:
                _sink(result)(out.view(np.uint8) if out.size else _EMPTY)
            return Request._completed()
        req = None
        if result is not None:
            req = self._expect(w, r, _sink(result), what)
            tag = req.tag
        else:
            tag = 0
            w.sent[r] += 1
            w.dirty.add(r)
        parts = [encode((kind, tag, disp, desc, count, opname))]
        if data is not None and data.nbytes:
            parts.append(data)
        g.engine.send(g.p2p, r, parts, tag=TAG_REQ, dtype=DT_BYTES, count=sum(p.nbytes for p in parts),
                      what=f"Win.{what}", block=True)
        return Request._completed() if req is None else Request._wrap(req.req, _done_none)

    def _expect(self, w, r, sink, what):
        """Post the receive of a reply from rank r (its data stored by sink); a _Reply."""
        tag = next(w.tags)
        g = w.g

        def finish(msg, payload):
            data = reply_data(payload, what)
            if sink is not None:
                sink(data)
            return None
        req = g.engine.recv(g.p2p, r, tag, None, finish, what=f"Win.{what}", block=False,
                            check=(DT_BYTES, _UNBOUNDED), raw=True)
        w.pending[r].append(req)
        return _Reply(req, tag)

    def _ack(self, w, ranks, kind, what, arg=0):
        """Send `kind` to each rank of ranks (none of them this one) and wait for their acknowledgements."""
        replies = []
        for r in ranks:
            rep = self._expect(w, r, None, what)
            _send_header(w.g, r, (kind, rep.tag, arg, None, 0, None), what)
            replies.append(rep)
        for rep in replies:
            rep.req.wait()
        for r in ranks:
            w.dirty.discard(r)

    def _settle(self, w, ranks=None):
        """Wait for the replies still expected from ranks (None: from every rank)."""
        for r in list(w.pending) if ranks is None else ranks:
            reqs = w.pending.pop(r, None)
            for req in reqs or ():
                req.wait()

    # ------------------------------------------------------------ synchronisation
    def Fence(self, assertion=0):
        """End one fence epoch and start the next (collective)."""
        self._fence(self._state("Fence"), "Fence")

    def _fence(self, w, what):
        self._settle(w)
        g = w.g
        if g.size() == 1:
            return
        total = np.empty_like(w.sent)
        _coll.all_reduce(w.sent, "sum", out=total, group=g)
        w.dirty.clear()
        expected = int(total[g.rank()])
        t = w.target
        self._await(w, lambda: t.applied >= expected, what)

    def _await(self, w, ready, what):
        """Wait until ready() (what this rank's service does for the others: it serves them
        meanwhile, driving progress itself unless another thread does, then sleeping on the
        target's condition); PeerLost if a rank of the window leaves."""
        t, g = w.target, w.g
        while True:
            with t.cv:
                if ready():
                    return
            if not g.engine.progress_until(ready, time.monotonic() + POLL_S):
                with t.cv:
                    if not ready():
                        t.cv.wait(POLL_S)
            if not ready():
                _check_peers(g, what)

    def Start(self, group, assertion=0):
        """Begin an access epoch to the ranks of group (waits for their Post)."""
        w = self._state("Start")
        ranks = _ranks_of(w, group, "Start")
        g = w.g
        for r in ranks:
            if r == g.rank():
                if not w.self_posts:
                    raise MPIException(ERR_RMA_SYNC, f"rank {r}: Win.Start: this rank is in the group but has not "
                                                     f"called Post for it")
                w.self_posts -= 1
            else:
                g.engine.recv(g.p2p, r, TAG_POST, None, _keep, what="Win.Start", block=True,
                              check=(DT_BYTES, _UNBOUNDED), raw=True)
        w.start_group = ranks

    def Complete(self):
        """End the access epoch begun by Start: the targets have everything sent to them."""
        w = self._state("Complete")
        if w.start_group is None:
            raise MPIException(ERR_RMA_SYNC, f"rank {w.g.rank()}: Win.Complete without Win.Start")
        ranks, w.start_group = w.start_group, None
        me = w.g.rank()
        self._ack(w, [r for r in ranks if r != me], COMPLETE, "Complete")
        self._settle(w, ranks)
        if me in ranks:
            with w.target.cv:
                w.target.completes[me] += 1
                w.target.cv.notify_all()

    def Post(self, group, assertion=0):
        """Begin an exposure epoch for the ranks of group."""
        w = self._state("Post")
        ranks = _ranks_of(w, group, "Post")
        g = w.g
        w.post_group = ranks
        for r in ranks:
            if r == g.rank():
                w.self_posts += 1
            else:
                g.engine.send(g.p2p, r, [ws._OK], tag=TAG_POST, dtype=DT_BYTES, count=1, what="Win.Post", block=True)

    def Wait(self):
        """End the exposure epoch begun by Post, once every rank of its group has called Complete."""
        w = self._state("Wait")
        if w.post_group is None:
            raise MPIException(ERR_RMA_SYNC, f"rank {w.g.rank()}: Win.Wait without Win.Post")
        t = w.target
        self._await(w, lambda: all(t.completes[r] for r in w.post_group), "Wait")
        self._end_exposure(w)
        return True

    def Test(self):
        """Wait's test: True (and the exposure epoch ended) once every origin has called Complete."""
        w = self._state("Test")
        if w.post_group is None:
            raise MPIException(ERR_RMA_SYNC, f"rank {w.g.rank()}: Win.Test without Win.Post")
        t = w.target
        with t.cv:
            if not all(t.completes[r] for r in w.post_group):
                return False
        self._end_exposure(w)
        return True

    def _end_exposure(self, w):
        with w.target.cv:
            for r in w.post_group:
                w.target.completes[r] -= 1
        w.post_group = None

    def Lock(self, rank, lock_type=LOCK_EXCLUSIVE, assertion=0):
        """Begin a passive-target access epoch to rank (waits until the lock is granted)."""
        w = self._state("Lock")
        if lock_type not in (LOCK_EXCLUSIVE, LOCK_SHARED):
            raise MPIException(ERR_LOCKTYPE, f"rank {w.g.rank()}: Win.Lock: lock_type must be MPI.LOCK_EXCLUSIVE "
                                             f"or MPI.LOCK_SHARED, got {lock_type!r}")
        if rank == PROC_NULL:
            return
        self._lock(w, [_rank(w, rank, "Lock")], lock_type, "Lock")

    def Lock_all(self, assertion=0):
        """A shared lock on every rank of the window."""
        w = self._state("Lock_all")
        self._lock(w, list(range(w.g.size())), LOCK_SHARED, "Lock_all")

    def _lock(self, w, ranks, lock_type, what):
        me = w.g.rank()
        for r in ranks:
            if r in w.locks:
                raise MPIException(ERR_RMA_SYNC, f"rank {me}: Win.{what}: rank {r} is already locked by this rank")
        granted = threading.Event()
        if me in ranks:
            w.target.lock(me, lock_type, granted.set)
        # Another rank's lock is asked for and not waited for (MPI lets Lock return before the lock
        # is held): its service holds this rank's later requests until it grants it, and the
        # replies they need come after. A Lock/Get/Unlock epoch is then one round trip, not three.
        for r in ranks:
            if r != me:
                _send_header(w.g, r, (LOCK, 0, lock_type, None, 0, None), what)
        if me in ranks:
            self._await(w, granted.is_set, what)
        for r in ranks:
            w.locks[r] = lock_type

    def Unlock(self, rank):
        """End the passive-target epoch at rank: everything sent to it is complete there."""
        w = self._state("Unlock")
        if rank == PROC_NULL:
            return
        self._unlock(w, [_rank(w, rank, "Unlock")], "Unlock")

    def Unlock_all(self):
        w = self._state("Unlock_all")
        self._unlock(w, list(range(w.g.size())), "Unlock_all")

    def _unlock(self, w, ranks, what):
        me = w.g.rank()
        missing = [r for r in ranks if r not in w.locks]
        if missing:
            raise MPIException(ERR_RMA_SYNC, f"rank {me}: Win.{what}: rank {missing[0]} is not locked by this rank")
        # Acknowledged where a Put or Accumulate (which have no reply) was sent since the last
        # acknowledgement; else the replies of its operations prove them done: the release is sent
        # and not waited for (the target serves this rank's requests in order).
        acked = [r for r in ranks if r != me and r in w.dirty]
        for r in ranks:
            if r != me and r not in acked:
                _send_header(w.g, r, (UNLOCK, 0, 0, None, 0, None), what)
        self._ack(w, acked, UNLOCK, what)
        self._settle(w, ranks)
        for r in ranks:
            del w.locks[r]
        if me in ranks:
            w.target.unlock(me)

    def Flush(self, rank):
        """Everything this rank sent to rank is complete there."""
        w = self._state("Flush")
        if rank != PROC_NULL:
            self._flush(w, [_rank(w, rank, "Flush")], "Flush")

    def Flush_all(self):
        w = self._state("Flush_all")
        self._flush(w, sorted(w.dirty | set(w.pending)), "Flush_all")

    def _flush(self, w, ranks, what):
        self._ack(w, [r for r in ranks if r in w.dirty], FLUSH, what)
        self._settle(w, ranks)

    def Flush_local(self, rank):
        """This rank's buffers given to operations on rank are free again (replies included)."""
        w = self._state("Flush_local")
        if rank != PROC_NULL:
            self._settle(w, [_rank(w, rank, "Flush_local")])

    def Flush_local_all(self):
        self._settle(self._state("Flush_local_all"))

    def Sync(self):
        """Synchronise the public and private copies: one copy here (the unified model); as MPICH,
        only inside a passive-target epoch."""
        w = self._state("Sync")
        if not w.locks:
            raise MPIException(ERR_RMA_SYNC, f"rank {w.g.rank()}: Win.Sync outside a Lock/Lock_all epoch")


class _Reply:
    __slots__ = ("req", "tag")

    def __init__(self, req, tag):
        self.req, self.tag = req, tag


def _done_none(result, status):
    if status is not None:
        status._fill(-1, -2, 0)
    return None


def _send_header(g, r, header, what):
    part = encode(header)
    g.engine.send(g.p2p, r, [part], tag=TAG_REQ, dtype=DT_BYTES, count=part.nbytes, what=f"Win.{what}", block=True)


# ------------------------------------------------------------------ argument checks
def _size(size, what):
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size >= 0:
        return int(size)
    raise MPIException(ERR_SIZE, f"Win.{what}: size must be an int >= 0, got {size!r}")


def _rank(w, rank, what):
    g = w.g
    if isinstance(rank, (int, np.integer)) and not isinstance(rank, bool) and 0 <= rank < g.size():
        return int(rank)
    raise MPIException(ERR_RANK, f"rank {g.rank()}: Win.{what}: {rank!r} is not a rank of the window (size "
                                 f"{g.size()}) nor MPI.PROC_NULL")


def _ranks_of(w, group, what):
    """The window ranks of an MPI.Group's processes."""
    g = w.g
    if not isinstance(group, Group) or group._ranks is None:
        raise MPIException(ERR_GROUP, f"rank {g.rank()}: Win.{what}: expected an MPI.Group, got {group!r}")
    index = {wr: i for i, wr in enumerate(g.world)}
    out = [index.get(wr) for wr in group._ranks]
    if None in out:
        raise MPIException(ERR_GROUP, f"rank {g.rank()}: Win.{what}: the group has processes outside the window")
    return out


def _disp(disp):
    if isinstance(disp, (int, np.integer)) and not isinstance(disp, bool):
        return int(disp)
    return int(disp.__index__())


def _target(target, o):
    """(disp, count, datatype) of a target spec, as mpi4py reads it: None, disp or (disp, count, datatype)."""
    disp, count, dt = 0, o.count, o.datatype
    if target is None:
        pass
    elif isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        disp = int(target)
    elif isinstance(target, (list, tuple)):
        if len(target) >= 4:
            raise ValueError("target: expecting 3 items at most")
        if len(target) >= 1:
            disp = _disp(target[0])
        if len(target) >= 2:
            count = _disp(target[1])
        if len(target) >= 3:
            dt = as_datatype(target[2])
    else:
        raise ValueError("target: expecting integral or list/tuple")
    if count < 0:
        raise MPIException(2, f"target: count must be >= 0, got {count}")
    return disp, count, dt


def _agree(w, nbytes, count, dt, what, same_base=None):
    """The origin's bytes match the target's count items of dt (and, for accumulates, their basic type)."""
    if nbytes != count * dt._bytes:
        raise MPIException(ERR_TYPE, f"rank {w.g.rank()}: Win.{what}: the origin has {nbytes} bytes, the target "
                                     f"{count} x {dt.Get_name()} = {count * dt._bytes}")
    if same_base is not None and count and same_base._base != dt._base:
        raise MPIException(ERR_TYPE, f"rank {w.g.rank()}: Win.{what}: origin {same_base.Get_name()} and target "
                                     f"{dt.Get_name()} are not of the same basic type")


def _single(m, what):
    if m.count != 1:
        raise ValueError(f"{what}: expecting a single element, got {m.count}")


def _opname(w, op, what):
    if not isinstance(op, Op):
        raise TypeError(f"Win.{what}: op must be an MPI.Op, got {type(op).__name__}")
    if not op._predefined or op._buf is None:
        raise MPIException(ERR_OP, f"rank {w.g.rank()}: Win.{what}: {op.Get_name()} cannot be used in RMA (only "
                                   f"predefined element-wise ops, REPLACE and NO_OP)")
    return op._name[4:]


def _sink(m):
    """A function that stores packed bytes into the parsed receive message m (derived types unpacked)."""
    if isinstance(m, DMsg):
        dt = m.datatype

        def store(data):
            typemap_copy(m._mem, np.ascontiguousarray(data), dt._runs, m.count, dt._ub - dt._lb, m._origin, False)
        return store
    u8 = m.u8

    def copy(data):
        u8[:] = data
    return copy


def _check_peers(g, what):
    p2p = g.engine.p2p
    if p2p is None:
        return
    me = g.world[g.rank()]
    for r, wr in enumerate(g.world):
        why = p2p.gone(wr) if wr != me else None
        if why is not None:
            raise PeerLost(f"rank {me}: Win.{what} lost rank {wr} ({why})", rank=wr, op=f"Win.{what}")


# ------------------------------------------------------------------ shared memory
def _shared_segment(g, peers, what):
    """(memoryview of one mapping of every rank's part, offsets, sizes, disp_units) for Allocate_shared."""
    sizes = [s for s, _, _ in peers]
    units = [d for _, d, _ in peers]
    hosts = {h for _, _, h in peers}
    if len(hosts) > 1:
        raise MPIException(ERR_RMA_SHARED, f"rank {g.rank()}: Win.{what}: the communicator spans several hosts "
                                           f"({', '.join(sorted(hosts))}); shared memory needs one")
    offsets = [int(x) for x in np.cumsum([0] + sizes[:-1])]
    total = max(1, sum(sizes))
    if g.size() == 1:
        return memoryview(mmap.mmap(-1, total)), offsets, sizes, units
    mm = _map_memfd(g, total) if hasattr(os, "memfd_create") else None
    if mm is None:
        mm = _map_named(g, total)
    return memoryview(mm), offsets, sizes, units


def _map_memfd(g, total):
    """The segment as a memfd of the first rank that the others open through /proc: it never has a
    name, so nothing can be left behind whenever a rank dies. None on every rank when one of them
    cannot open it (no /proc, a stricter kernel): the caller then uses a named segment."""
    mm = fd = None
    if g.rank() == 0:
        fd = os.memfd_create("commlib-win", os.MFD_CLOEXEC)
    try:
        if fd is not None:
            os.ftruncate(fd, total)
        pid, theirs = _api.broadcast_obj((os.getpid(), fd), 0, group=g)
        try:
            if fd is None:
                fd = os.open(f"/proc/{pid}/fd/{theirs}", os.O_RDWR | os.O_CLOEXEC)
            mm = mmap.mmap(fd, total)
        except OSError:
            mm = None
        # every rank has it mapped (or says it cannot): the first rank's descriptor can go
        if not all(_api.all_gather_obj(mm is not None, group=g)):
            mm = None
    finally:
        if fd is not None:
            os.close(fd)
    return mm


def _map_named(g, total):
    """The segment as a file in /dev/shm made by the first rank and unlinked as soon as every rank
    has mapped it."""
    path = fd = None
    if g.rank() == 0:
        path = f"/dev/shm/commlib-win-{os.getpid()}-{secrets.token_hex(6)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if fd is not None:
            os.ftruncate(fd, total)
        path = _api.broadcast_obj(path, 0, group=g)
        if fd is None:
            fd = os.open(path, os.O_RDWR)
        mm = mmap.mmap(fd, total)
        _coll.barrier(group=g)  # every rank has it mapped: the name can go
    finally:
        if fd is not None:
            os.close(fd)
        if g.rank() == 0:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return mm


install(Win, lambda w: None if w._w is _NULL else w._w, lambda cls, o: cls(o))
WIN_NULL = Win()
