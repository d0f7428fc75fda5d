"""Group: ranks, the per-collective context, and the engine's per-group state.

A Group maps its ranks to world ranks, counts collectives (the sequence
number that goes in every header), and owns what its operations need: the
collective channel of the transport (created on first use), the scratch the
algorithms use, its ordered collective stream, and its matching context in
the point-to-point engine. Each collective runs as an `Op`: the header that
describes it, its deadline, and `exchange()`, the one primitive every
algorithm is written against.

Every collective is also folded into the group's digest (a running hash of
the headers) and kept in a short history, which `finalize()` compares
across ranks: a mismatch that moved no bytes (every rank a broadcast root)
is still found.
"""
import collections
import sys
import time
import zlib

import numpy as np

from .._errors import CommError
from .. import _plan
from .._dtypes import BFLOAT16, OP_NAMES, check_op, dtype_code, op_code
from .._transport import env_number, spin_policy
from .._wire import collective_header, shape_hash
from .matching import ANY_SOURCE, ANY_TAG  # noqa: F401  (re-exported for the API)
from .streams import Stream

DEFAULT_CHUNK_BYTES = 256 << 10
HISTORY = 32  # collectives per group remembered for the finalize() comparison
# Recycled result buffers (Group.recycled): from this size a fresh array costs more in page
# faults than the collective's per-call overhead (64 MiB: ~11 ms first-touch on the 2-core VM);
# below it malloc hands back warm memory anyway. At most RECYCLE_KEEP buffers of at most
# RECYCLE_MAX_BYTES in all stay with the group.
RECYCLE_MIN_BYTES = 1 << 20
RECYCLE_MAX_BYTES = 256 << 20
RECYCLE_KEEP = 4


_OP_CODES = {name: i for i, name in enumerate(OP_NAMES)}


def _legal(op, code):
    """Raise ValueError if reduction `op` does not apply to wire dtype `code` (the one-call path's check)."""
    check_op(code, op_code(op))


class Status:
    """What a receive matched: `source` (group rank), `tag`, `nbytes`."""

    __slots__ = ("source", "tag", "nbytes", "count", "dtype")

    def __init__(self, source, tag, nbytes, count=0, dtype=None):
        self.source, self.tag, self.nbytes, self.count, self.dtype = source, tag, nbytes, count, dtype

    def __repr__(self):
        return f"Status(source={self.source}, tag={self.tag}, nbytes={self.nbytes})"


class Op:
    """One collective in flight: its header, deadline and step primitive."""

    __slots__ = ("group", "rank", "size", "hdr", "coll", "seq", "deadline", "dtype", "redop", "dims", "_channel")

    def __init__(self, group, coll, dtype, redop, count, root, shape, dims):
        g = group
        g.seq += 1
        self.group, self.rank, self.size = g, g._rank, g._size
        self.coll, self.seq = coll, g.seq
        self.dtype, self.redop, self.dims = dtype, redop, dims
        if dims is not None:
            shape ^= shape_hash(dims)
        self.hdr = collective_header(coll=coll, group=g.gid, seq=g.seq, dtype=dtype, op=redop, count=count,
                                     root=root, shape=shape)
        g.digest = zlib.crc32(self.hdr, g.digest)  # the group's record for the finalize() comparison
        g.history.append(self.hdr)
        self.deadline = time.monotonic() + g.timeout
        self._channel = g._channel or g.channel
        if g.notices is not None:
            g.notices.last = self  # formatted only if a stall report asks

    @property
    def what(self):
        """`all_reduce #17`: how errors and stall reports name this operation."""
        return f"{self.coll} #{self.seq}"

    __str__ = what.fget

    def run(self, plan, slots, bounds):
        """Run a plan (`commlib._plan`) of this collective: slots are the addresses of its buffers
        (X, RES, SCRATCH, T0, T1; 0 where unused), bounds its units (`_plan.even` or `_plan.bounds`)."""
        self._channel.run(self, plan, slots, bounds)


class Group:
    """A set of ranks that run collectives together (see API.md)."""

    def __init__(self, transport, engine, gid, world, rank, timeout):
        self.transport = transport  # None for the singleton group
        self._ep = transport.ep if transport is not None else None
        self.notices = transport.notices if transport is not None else None
        self.gid = gid
        self.world = world  # group rank -> world rank
        self._rank = rank
        self._size = len(world)
        self.timeout = timeout
        self.seq = 0
        self.splits = 0
        self.chunk = env_number("COMMLIB_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)
        if self.chunk < 64:
            raise CommError(f"COMMLIB_CHUNK_BYTES={self.chunk} is too small (minimum 64)")
        self.chunk -= self.chunk % 16
        self.spin = spin_policy()
        self.peer_check_s = env_number("COMMLIB_PEER_CHECK_S", 1.0, float)
        self._channel = None
        self.fast = None  # the one-call small-message path (`_io.FastPath`), see arm()
        self._hosts = None  # (host numbers, HostLayout or None): see hosts()
        self._ring_order = False  # (not computed yet): see ring_order()
        self._scratch = None
        self._recycle = []  # uint8 buffers behind results handed out, oldest first
        self.stream = Stream(f"group-{gid:x}")
        self.engine = engine
        self.p2p = engine.context(gid, world, rank, timeout)
        # the one-call blocking send/recv (`_io.P2PFast`); None on a group without peers
        self.p2p_fast = engine.one_call(self.p2p) if transport is not None and self._size > 1 else None
        engine.groups[gid] = self
        self.digest = 0  # crc32 chained over every collective header
        self.history = collections.deque(maxlen=HISTORY)

    # ----------------------------------------------------------------- public
    def rank(self):
        """This process's rank in the group."""
        return self._rank

    def size(self):
        """Number of ranks in the group."""
        return self._size

    def local_rank(self):
        """This rank's index among the group's ranks on its host (in group order)."""
        return self._local()[0]

    def local_size(self):
        """How many of the group's ranks run on this rank's host.

        Taken from the address table every rank registered, so it is right under
        launchers that set no LOCAL_* variable (Kubeflow's PyTorchJob, Ray Train).
        """
        return self._local()[1]

    def hosts(self):
        """(numbers, layout): the host of each group rank numbered 0, 1, ... in order of first
        appearance (from the address table), and their `_algorithms.HostLayout` (None where a flat
        schedule is as good: one host, or one rank a host). Computed once."""
        if self._hosts is None:
            from .._algorithms import host_layout

            if self._ep is None:
                ids = [0] * self._size
            else:
                key = self._ep.table.host_key  # (no address fetched: the table knows every rank's host)
                ids = [key(r) for r in self.world]
            self._hosts = host_layout(ids)
        return self._hosts

    def ring_order(self):
        """The group ranks in host order when a ring in rank order would cross between hosts at
        most of its steps (round-robin placement), else None (`_algorithms.ring.host_order`)."""
        if self._ring_order is False:
            from .._algorithms import ring
            self._ring_order = ring.host_order(self.hosts()[0])
        return self._ring_order

    def ring_all_gather(self):
        """This rank's plan of the ring all-gather: by host where ring_order() says so, else in rank
        order. Every ring all-gather of the group (arrays, objects, split, the one-call path) takes it."""
        from .._algorithms import ring
        order = self.ring_order()
        return ring.all_gather_in(order, self._rank) if order is not None else ring.all_gather(self._size, self._rank)

    def _local(self):
        numbers = self.hosts()[0]
        here = [k for k, h in enumerate(numbers) if h == numbers[self._rank]]
        return here.index(self._rank), len(here)

    def __repr__(self):
        return f"<commlib.Group rank {self._rank} of {self._size}>"

    def split(self, color, key=None):
        """MPI_Comm_split: ranks with equal color form a group ordered by (key, rank).

        A negative color leaves this rank out: it gets None.
        """
        from .._algorithms import choose, logstep  # the gather of (color, key), on this group's stream

        color, key = int(color), int(self._rank if key is None else key)
        n = self._size
        table = np.empty((n, 2), dtype=np.int64)
        table[self._rank] = (color, key)

        def gather():
            if n > 1:  # 16 B a rank: the log-step all-gather (ceil(log2 n) steps) where it is chosen
                op = self.op("split", 0, 0, 2 * n)
                logs = choose("all_gather", 16 * n, n) == "bruck"
                plan = logstep.all_gather(n, self._rank) if logs else self.ring_all_gather()
                op.run(plan, _plan.slots(res=table.ctypes.data, scratch=self.scratch(16 * n) if plan.name == "bruck" else 0),
                       _plan.even(n, 16))

        self.stream.run(gather)
        self.splits += 1
        if color < 0:
            return None
        members = sorted((int(k), r) for r, (c, k) in enumerate(table) if c == color)
        return self.subgroup([r for _, r in members], ("split", self.splits, color))

    def subgroup(self, members, key, timeout=None):
        """The group of `members`, made by them alone: no traffic, nothing the other ranks must call.

        Its id (the group field of every header, and its matching context) is a hash of this
        group's id, `key` and `members`, so every member computes the same one on its own, and
        sub-groups that differ in key or members get different ones.

        Args:
            members: ranks of this group, in the order of the new group (members[i] becomes its
                rank i); every member passes the same list.
            key: what tells this sub-group from every other sub-group of this group with the same
                members, equal on every member: ints, strings, bools, None and tuples of them only
                (their repr is the same in every process; a NumPy integer is not an int here).
                A caller that may make the same members' group more than once puts in a count that
                every member advances in the same order: ("split", 3, color), ("torch", name, 2).
            timeout: seconds that bound the new group's blocking waits (default: this group's).

        Returns:
            The new Group, or None if this rank is not one of `members` (nothing is made).

        Raises:
            ValueError: `members` is empty, repeats a rank or names one outside this group.
            TypeError: `key` holds something other than the types above.
            CommError: this process already has a group with the resulting id (the same key used
                twice for the same members, or a hash collision).
        """
        ranks = [self.check_rank(r, "member") for r in members]
        if not ranks or len(set(ranks)) != len(ranks):
            raise ValueError(f"rank {self._rank}: subgroup members must be distinct ranks, got {list(members)}")
        Group._check_key(key)
        if self._rank not in ranks:
            return None
        gid = zlib.crc32(repr((self.gid, key, ranks)).encode()) | 1  # odd: never the world's 0
        if gid in self.engine.groups:
            raise CommError(f"rank {self._rank}: subgroup {key!r} of ranks {ranks} would reuse group id {gid:#x}: "
                            f"make each sub-group with a key of its own")
        return Group(self.transport, self.engine, gid, [self.world[r] for r in ranks], ranks.index(self._rank),
                     self.timeout if timeout is None else timeout)

    @staticmethod
    def _check_key(key):
        """A subgroup key is made of values whose repr is the same in every process."""
        if type(key) is tuple:
            for k in key:
                Group._check_key(k)
        elif type(key) not in (int, str, bool, type(None)):
            raise TypeError(f"a subgroup key holds ints, strings, bools, None and tuples, not "
                            f"{type(key).__name__} ({key!r})")

    # ----------------------------------------------------------------- helpers
    @property
    def channel(self):
        """The transport's collective channel for this group (created on first use)."""
        if self._channel is None:
            self._channel = self.transport.collective_channel(self.gid, self.world, self.chunk, self.spin,
                                                              self.peer_check_s)
        return self._channel

    def scratch(self, nbytes):
        """Address of a reusable scratch buffer of at least nbytes."""
        if self._scratch is None or self._scratch.nbytes < nbytes:
            self._scratch = np.empty(max(nbytes, 4096), dtype=np.uint8)
            self._scratch_addr = self._scratch.ctypes.data
        return self._scratch_addr

    def recycled(self, shape, dtype):
        """An uninitialised array for a result, on the memory of an earlier result nobody holds.

        A buffer is reused only when this pool's list holds its sole reference
        (CPython's reference count): any array, view, memoryview or tensor the
        caller kept of an earlier result references it, so a result handed out
        is never overwritten. A loop `y = all_gather(x)` alternates two buffers.
        """
        dtype = np.dtype(dtype)
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        if nbytes < RECYCLE_MIN_BYTES or nbytes > RECYCLE_MAX_BYTES:
            return np.empty(shape, dtype)
        pool = self._recycle
        for i in range(len(pool)):
            if pool[i].nbytes == nbytes and sys.getrefcount(pool[i]) == 2:  # the list's + the call's
                buf = pool.pop(i)
                break
        else:
            buf = np.empty(nbytes, np.uint8)
        pool.append(buf)
        total = sum(b.nbytes for b in pool)
        while len(pool) > RECYCLE_KEEP or total > RECYCLE_MAX_BYTES:
            total -= pool.pop(0).nbytes  # the oldest: a holder keeps its own reference
        return buf.view(dtype).reshape(shape)

    def arm(self, plans, limits):
        """Give this group its one-call path (`fast`): blocking collectives up to `limits` bytes run
        `plans` (see `_io.FastPath`) in one call. Nothing happens before the group's collective
        channel exists (its first collective opens it) or on a group without peers."""
        if self._size < 2 or self.transport is None or self._channel is None:
            return
        self.fast = self._channel.fast_path(self, self.stream, plans, limits, _OP_CODES, _legal, dtype_code,
                                            BFLOAT16)

    def op(self, coll, dtype, redop, count, root=0, shape=0, dims=None):
        """Start a collective. `dims`: the shape all ranks must agree on; `shape`: more bits to agree on."""
        ep = self._ep
        if ep is not None and ep.failure is not None:
            ep.raise_if_failed()
        return Op(self, coll, dtype, redop, count, root, shape, dims)

    def summary(self):
        """This group's collective digest, for the finalize() comparison."""
        return {"n": self.seq, "digest": self.digest, "recent": [h.hex() for h in self.history]}

    def check_rank(self, r, what):
        if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or not 0 <= r < self._size:
            raise ValueError(f"{what}={r!r} is not a rank of this group (size {self._size})")
        return int(r)
