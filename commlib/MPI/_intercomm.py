"""Intercommunicators: `Intercomm`, made by `Intracomm.Create_intercomm` or `Intercomm.Create_from_groups`.

An intercommunicator joins two disjoint groups, the local one and the remote one: the ranks
that point-to-point calls take and report, and the roots of collectives, are ranks of the
remote group. Its state holds two commlib groups, each made by its members alone
(`Group.subgroup`: no traffic), so that both sides arrive at the same contexts:

- `union`: both groups one after the other (first the one holding the lower world rank), a
  sub-group of the world. Remote rank j is union rank `ro + j`, local rank i union rank
  `lo + i`. Point-to-point runs over its matching context through `_RemoteRanks`, which
  shifts the ranks going into the engine and the sources coming out, so `Comm`'s
  point-to-point methods (buffers, objects, requests, probes, persistent) run unchanged.
- `local`: the local group in a context of its own, for the local half of collectives.

Both sides derive the keys of these groups from what both know: the member lists, the two
local communicators' group ids and the tag (the leaders swap lists and ids over peer_comm, and
each leader broadcasts the other side's to its group), and how many intercommunicators of that
pair and key this process has made before: every member of both groups takes part in each, in
the same order. Communicators made from an intercommunicator (Dup, Split, Merge) count on
its state instead, which every member advances in the same order too.

Collectives have MPI-3.1's intercommunicator semantics (section 5.2.2): the root's group passes
MPI.ROOT (the root) or MPI.PROC_NULL (the others), the other group the root's rank; the `all`
forms give each group the other group's data. Each runs as one body on the union group's
ordered stream, so blocking, `I` and persistent forms keep program order on both groups, built
from the local group's collectives and point-to-point over the union with tags below zero,
which no user receive matches. A rooted collective goes straight between the root and each
remote rank (a Reduce first reduces in the remote group); Allreduce, Reduce_scatter(_block) and
Allgather reduce or gather in the local group, the two leaders (local rank 0) swap the results,
and each leader broadcasts what it got to its group; Allgatherv and the Alltoall family go
straight between each pair; Barrier is the union's. Scan and Exscan are not defined on
intercommunicators: as in mpi4py, an Intercomm has no such attribute.
"""
import socket

import numpy as np

from .. import _api
from .._api import collectives as _coll
from .._api import within as _within
from .._engine import wait_all as _wait_all
from ._bufspec import blocks, parse_recv, parse_send, parse_vector, parse_vectorw
from ._collectives import _p2p_recv, _p2p_send, fold, reduce_body
from ._comm import (_NULL, COMM_NULL_HANDLE, Comm, _as_op, _dest, _group, _match, _root_decides, _same_type, _State,
                    _stag, provide)
from ._constants import (ERR_ARG, ERR_BUFFER, ERR_COMM, ERR_GROUP, ERR_RANK, ERR_ROOT, IN_PLACE, PROC_NULL, ROOT,
                         UNDEFINED, MPIException)
from ._groups import Group
from ._ops import SUM
from ._p2p import done_empty, dumps, exchange, loads, recv_obj
from ._requests import Request

# Tags of the collectives' messages over the union (negative: never a user's; each collective
# runs in stream order, so one tag per kind of message is enough).
TAG_BCAST, TAG_ROOTED, TAG_EXCHANGE, TAG_LEADERS, TAG_OBJ = range(-201, -206, -1)
TAG_CREATE = -(1 << 40)  # Create_intercomm's leaders on peer_comm use TAG_CREATE - tag (the wire's tags are 64-bit)

_MADE = {}  # (first members, second members, key) -> intercommunicators of them made so far by this process


class _Shifted:
    """An engine message as the intercommunicator reports it: its source a remote rank."""

    __slots__ = ("source", "tag", "nbytes", "orig")

    def __init__(self, msg, off):
        self.source, self.tag, self.nbytes, self.orig = msg.source - off, msg.tag, msg.nbytes, msg


class _RemoteRanks:
    """The union group as `Comm`'s point-to-point code sees it (`_p2p.py`, `_message.py`): size() is
    the remote group's, rank() this process's local rank, and it is its own engine, whose calls
    shift ranks between the remote group and the union. `world` lists (side, world rank) pairs,
    local side 0 then remote side 1, so that `Comm.Compare` tells intercommunicators apart by both
    groups, and never finds one congruent with an intracommunicator."""

    __slots__ = ("engine", "p2p", "world", "_e", "_off", "_rank", "_size")

    def __init__(self, union, off, rank, local_world, remote_world):
        self.engine, self.p2p, self._e, self._off = self, union.p2p, union.engine, off
        self._rank, self._size = rank, len(remote_world)
        self.world = tuple((0, w) for w in local_world) + tuple((1, w) for w in remote_world)

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def send(self, ctx, dst, parts, **kwargs):
        return self._e.send(ctx, dst + self._off, parts, **kwargs)

    def recv(self, ctx, src, tag, into, finish, **kwargs):
        return self._e.recv(ctx, self._src(src), tag, into, self._finish(finish), **kwargs)

    def mrecv(self, ctx, msg, into, finish, **kwargs):
        return self._e.mrecv(ctx, msg.orig, into, self._finish(finish), **kwargs)

    def probe(self, ctx, src, tag, block):
        return self._shift(self._e.probe(ctx, self._src(src), tag, block))

    def mprobe(self, ctx, src, tag, block):
        return self._shift(self._e.mprobe(ctx, self._src(src), tag, block))

    def _src(self, src):
        return src if src < 0 else src + self._off  # ANY_SOURCE stays

    def _shift(self, msg):
        return None if msg is None else _Shifted(msg, self._off)

    def _finish(self, finish):
        off = self._off
        return lambda msg, payload: finish(_Shifted(msg, off), payload)


class _Inter(_State):
    """An intercommunicator's state: `g` is the point-to-point view, `local` and `union` the groups,
    `remote` the remote group's world ranks, `made` the communicators derived from it so far."""

    __slots__ = ("local", "union", "lo", "ro", "remote", "made")
    handle_class = None  # Intercomm (set below): what Comm(handle) and Comm.fromhandle give

    def __init__(self, local, union, lo, ro, remote):
        _State.__init__(self, _RemoteRanks(union, ro, local.rank(), local.world, remote))
        self.local, self.union, self.lo, self.ro, self.remote, self.made = local, union, lo, ro, tuple(remote), 0

    def derive(self, what):
        """The key of the next communicator made from this one (every member counts the same)."""
        self.made += 1
        return ("MPI.Intercomm", what, self.made)


def _join(mine, remote, key, what):
    """The state of the intercommunicator of world ranks `mine` (this process among them, in local
    rank order) and `remote`, which the other side makes with the same `key`: no traffic."""
    mine, remote = tuple(mine), tuple(remote)
    world = _api.init()
    me = world.rank()
    if set(mine) & set(remote):
        raise MPIException(ERR_COMM, f"rank {mine.index(me)}: {what}: the local and remote groups share the "
                                     f"processes {sorted(set(mine) & set(remote))} (they must be disjoint)")
    first = min(mine) < min(remote)
    pair = (mine, remote) if first else (remote, mine)
    n = _MADE[pair + (key,)] = _MADE.get(pair + (key,), 0) + 1
    union = world.subgroup(list(pair[0] + pair[1]), ("MPI.Intercomm", key, n))
    local = world.subgroup(list(mine), ("MPI.Intercomm.local", pair, key, n))
    lo, ro = (0, len(mine)) if first else (len(remote), 0)
    return _Inter(local, union, lo, ro, remote)


def create_intercomm(comm, local_leader, peer_comm, remote_leader, tag):
    """Intracomm.Create_intercomm: the leaders swap their groups over peer_comm, then each
    broadcasts the other's to its group (an error at a leader is raised on its whole group)."""
    g = _group(comm)
    leader = _dest(g, local_leader, "Create_intercomm (local_leader)")
    tag = _stag(g, tag, "Create_intercomm")
    info = _root_decides(g, leader, "Create_intercomm", lambda: _swap(g, peer_comm, remote_leader, tag),
                         "local leader")
    remote, remote_gid = info
    gids = (g.gid, remote_gid) if min(g.world) < min(remote) else (remote_gid, g.gid)
    return Intercomm._of(_join(g.world, remote, ("Create_intercomm", gids, tag), "Create_intercomm"))


def _swap(g, peer_comm, remote_leader, tag):
    """The leader's part: (remote group's world ranks, its communicator's id), from the remote leader."""
    if not isinstance(peer_comm, Comm) or isinstance(peer_comm._c, _Inter):
        raise MPIException(ERR_COMM, f"rank {g.rank()}: Create_intercomm: peer_comm must be an intracommunicator "
                                     f"holding both leaders, got {peer_comm!r}")
    pg = _group(peer_comm)
    peer = _dest(pg, remote_leader, "Create_intercomm (remote_leader)")
    if pg.world[peer] in g.world:
        raise MPIException(ERR_RANK, f"rank {g.rank()}: Create_intercomm: remote_leader {remote_leader} of "
                                     f"peer_comm is a process of the local group")
    t = TAG_CREATE - tag
    got = recv_obj(pg, peer, t, False, "Create_intercomm")
    _wait_all([_p2p_send(pg, dumps((tuple(g.world), g.gid)), peer, t, block=False), got])
    return loads(got.wait()[1])


# ------------------------------------------------------------------ collective bodies (on the union's stream)
def _leader(c):
    return c.g.rank() == 0


def _swap_leaders(c, mine, theirs):
    """Local rank 0 sends `mine` to the remote group's rank 0 and receives that one's into `theirs`."""
    req = _p2p_recv(c.union, theirs, c.ro, TAG_LEADERS, block=False)
    _p2p_send(c.union, mine, c.ro, TAG_LEADERS)
    _wait_all([req])


def _local_bcast(c, arr):
    """The leader's arr to the local group, in place. The local group's own stream is idle here: only
    bodies on the union's stream use that group, one at a time (so its public functions run inline)."""
    _coll.broadcast(arr, 0, group=c.local)


def _local_reduce(c, s, op, dt):
    """The local group's reduction of s, on the leader (None elsewhere)."""
    acc = np.empty_like(s) if _leader(c) else None
    reduce_body(c.local, s, acc, op, dt, 0)
    return acc


def _barrier(c):
    _within.barrier(c.union)


def _bcast(c, arr, root):
    if root == ROOT:
        _p2p_send(c.union, arr, c.ro, TAG_BCAST)
    elif root != PROC_NULL:
        if _leader(c):
            _p2p_recv(c.union, arr, c.ro + root, TAG_BCAST)
        _local_bcast(c, arr)


def _gather(c, s, recv_block, root):
    """Gather(v): the root receives each remote rank's block."""
    if root == ROOT:
        _wait_all([_p2p_recv(c.union, recv_block(i), c.ro + i, TAG_ROOTED, block=False)
                   for i in range(len(c.remote))])
    elif root != PROC_NULL:
        _p2p_send(c.union, s, c.ro + root, TAG_ROOTED)


def _scatter(c, send_block, r, root):
    """Scatter(v): the root sends each remote rank its block."""
    if root == ROOT:
        reqs = [_p2p_send(c.union, send_block(j), c.ro + j, TAG_ROOTED, block=False) for j in range(len(c.remote))]
        _wait_all([q for q in reqs if q is not None])
    elif root != PROC_NULL:
        _p2p_recv(c.union, r, c.ro + root, TAG_ROOTED)


def _exchange(c, send_block, recv_block):
    """Alltoall(v/w), Allgatherv: send_block(j) to each remote rank j, recv_block(i) from each remote rank i."""
    n = len(c.remote)
    exchange(c.union, [(c.ro + i, TAG_EXCHANGE, recv_block(i).view(np.uint8)) for i in range(n)],
             [(c.ro + j, TAG_EXCHANGE, send_block(j).view(np.uint8)) for j in range(n)], "collective")


def _allgather(c, s, out):
    mine = np.empty(c.local.size() * s.size, s.dtype) if _leader(c) else None
    _within.gather(c.local, s, 0, mine)
    if _leader(c):
        _swap_leaders(c, mine, out)
    _local_bcast(c, out)


def _reduce(c, s, out, op, dt, root):
    if root == ROOT:
        _p2p_recv(c.union, out, c.ro, TAG_ROOTED)  # the remote group's reduction, from its leader
    elif root != PROC_NULL:
        acc = _local_reduce(c, s, op, dt)
        if acc is not None:
            _p2p_send(c.union, acc, c.ro + root, TAG_ROOTED)


def _allreduce(c, s, out, op, dt):
    acc = _local_reduce(c, s, op, dt)
    if acc is not None:
        _swap_leaders(c, acc, out)
    _local_bcast(c, out)


def _reduce_scatter(c, s, out, op, dt, lo, total):
    """The remote group's reduction (`total` elements) lands on the leader, then each rank keeps its part."""
    acc = _local_reduce(c, s, op, dt)
    full = np.empty(total, out.dtype)
    if acc is not None:
        _swap_leaders(c, acc, full)
    _local_bcast(c, full)
    out[...] = full[lo:lo + out.size]


def _recv_one(c, i, block=True):
    got = recv_obj(c.union, c.ro + i, TAG_OBJ, block, "collective")
    return loads(got[1]) if block else got


def _send_one(c, obj, j, block=True, data=None):
    return _p2p_send(c.union, dumps(obj) if data is None else data, c.ro + j, TAG_OBJ, block=block)


def _bcast_obj(c, obj, root):
    if root == ROOT:
        _send_one(c, obj, 0)
    elif root != PROC_NULL:
        return _api.broadcast_obj(_recv_one(c, root) if _leader(c) else None, 0, group=c.local)
    return None


def _gather_obj(c, obj, root):
    if root == ROOT:
        reqs = [_recv_one(c, i, False) for i in range(len(c.remote))]
        return [loads(q.wait()[1]) for q in reqs]
    if root != PROC_NULL:
        _send_one(c, obj, root)
    return None


def _scatter_obj(c, objs, root):
    if root == ROOT:
        _wait_all([q for q in (_send_one(c, o, j, False) for j, o in enumerate(objs)) if q is not None])
    elif root != PROC_NULL:
        return _recv_one(c, root)
    return None


def _exchange_obj(c, objs, same):
    """objs[j] to remote rank j (`same`: one object, pickled once, to every one); the list of what
    each remote rank sent here."""
    reqs = [_recv_one(c, i, False) for i in range(len(c.remote))]
    data = dumps(objs[0]) if same and objs else None
    _wait_all([q for q in (_send_one(c, o, j, False, data) for j, o in enumerate(objs)) if q is not None])
    return [loads(q.wait()[1]) for q in reqs]


def _reduce_obj(c, obj, op, root):
    if root == ROOT:
        return _recv_one(c, 0)
    if root != PROC_NULL:
        values = _api.gather_obj(obj, 0, group=c.local)
        if values is not None:
            _send_one(c, fold(values, op), root)
    return None


def _allreduce_obj(c, obj, op):
    values = _api.gather_obj(obj, 0, group=c.local)
    result = None
    if values is not None:
        req = _recv_one(c, 0, False)
        _send_one(c, fold(values, op), 0)
        result = loads(req.wait()[1])
    return _api.broadcast_obj(result, 0, group=c.local)


# ------------------------------------------------------------------ the handle
class _Absent:
    """A method of intracommunicators only: as in mpi4py, an Intercomm has no such attribute."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, cls=None):
        raise AttributeError(f"'{(cls or type(obj)).__name__}' object has no attribute '{self.name}' "
                             f"(not defined on an intercommunicator)")


def _in_place(buf, what, me):
    if buf is IN_PLACE:
        raise MPIException(ERR_BUFFER, f"rank {me}: {what}: MPI.IN_PLACE is not allowed on an intercommunicator")


class Intercomm(Comm):
    """An intercommunicator: ranks given to point-to-point calls and roots name remote processes."""

    __slots__ = ()

    def __new__(cls, comm=None):
        if isinstance(comm, Comm) and comm._c is not _NULL and not isinstance(comm._c, _Inter):
            raise TypeError("expecting an intercommunicator")
        return super().__new__(cls, comm)

    @classmethod
    def Create_from_groups(cls, local_group, local_leader, remote_group, remote_leader, stringtag="org.mpi4py",
                           info=None, errhandler=None):
        """The intercommunicator of two disjoint groups, made by their processes alone (no parent
        communicator); both sides pass the same stringtag."""
        world = _api.init()
        mine, remote = list(local_group._r()), list(remote_group._r())
        if world.rank() not in mine:
            raise MPIException(ERR_GROUP, f"rank {world.rank()}: Intercomm.Create_from_groups called by a "
                                          f"process outside local_group")
        for leader, group, which in ((local_leader, mine, "local"), (remote_leader, remote, "remote")):
            if not (isinstance(leader, (int, np.integer)) and 0 <= leader < len(group)):
                raise MPIException(ERR_RANK, f"rank {mine.index(world.rank())}: Create_from_groups: {which}_leader "
                                             f"{leader!r} is not a rank of the {which} group (size {len(group)})")
        new = cls._of(_join(mine, remote, ("Create_from_groups", str(stringtag)), "Create_from_groups"))
        if errhandler is not None:
            new.Set_errhandler(errhandler)
        return new

    def _state(self):
        _group(self)  # MPI.Exception for COMM_NULL
        return self._c

    # ---------------------------------------------------------------- groups
    def Get_size(self):
        return self._state().local.size()

    def Get_group(self):
        c = self._state()
        return Group._of(c.local.world, c.local.world[c.local.rank()])

    def Get_remote_size(self):
        return len(self._state().remote)

    def Get_remote_group(self):
        c = self._state()
        return Group._of(c.remote, c.local.world[c.local.rank()])

    size = property(Get_size)
    group = property(Get_group)
    remote_size = property(Get_remote_size)
    remote_group = property(Get_remote_group)

    # ---------------------------------------------------------------- new communicators
    def Dup(self, info=None):
        """A new intercommunicator of the same groups and class with its own contexts (no traffic:
        both sides derive the same keys)."""
        c = self._state()
        key = c.derive("Dup")
        return self._dup_attrs(type(self)._of(_Inter(c.local.subgroup(list(range(c.local.size())), key),
                                                     c.union.subgroup(list(range(c.union.size())), key), c.lo,
                                                     c.ro, c.remote)))

    Clone = Dup
    Dup_with_info = Dup

    def Split(self, color=0, key=0):
        """Each side's ranks of one color form an intercommunicator with the other side's of that
        color (COMM_NULL where either side has none)."""
        c = self._state()
        if color == UNDEFINED:
            color = -1
        elif not (isinstance(color, (int, np.integer)) and not isinstance(color, bool) and color >= 0):
            raise MPIException(ERR_ARG, f"rank {c.g.rank()}: Split: color must be >= 0 or MPI.UNDEFINED, "
                                        f"got {color!r}")
        table = _api.all_gather(np.array([color, key], np.int64), group=c.union).reshape(-1, 2)
        made = c.derive(("Split", int(color)))
        if color < 0:
            return COMM_NULL_HANDLE()

        def members(start, n):  # union ranks of one side with this color, by (key, rank)
            return [u for _, u in sorted((int(table[u, 1]), u) for u in range(start, start + n)
                                         if table[u, 0] == color)]
        mine, theirs = members(c.lo, c.local.size()), members(c.ro, len(c.remote))
        if not theirs:
            return COMM_NULL_HANDLE()
        first = c.lo < c.ro
        union = c.union.subgroup(mine + theirs if first else theirs + mine, made)
        local = c.local.subgroup([u - c.lo for u in mine], made)
        lo, ro = (0, len(mine)) if first else (len(theirs), 0)
        return Intercomm._of(_Inter(local, union, lo, ro, [c.remote[u - c.ro] for u in theirs]))

    def Create(self, group):
        """The intercommunicator of `group` (a subgroup of the local group) and the group the remote
        side passes; COMM_NULL outside them."""
        c = self._state()
        members = list(group._r())
        if not set(members) <= set(c.local.world):
            raise MPIException(ERR_GROUP, f"rank {c.g.rank()}: Create: the group's processes "
                                          f"{sorted(set(members) - set(c.local.world))} are not in the local group")
        me = c.local.world[c.local.rank()]
        return self.Split(0, members.index(me)) if me in members else self.Split(UNDEFINED)

    def Split_type(self, split_type, key=0, info=None):
        """COMM_TYPE_SHARED (or any type but UNDEFINED): the ranks of each side on one host."""
        c = self._state()
        hosts = _api.all_gather_obj(None if split_type == UNDEFINED else socket.gethostname(), group=c.union)
        mine = hosts[c.lo + c.g.rank()]
        return self.Split(UNDEFINED if mine is None else sorted({h for h in hosts if h is not None}).index(mine), key)

    def Merge(self, high=False):
        """The intracommunicator of both groups: the group that passed high=False first (if both
        passed the same, the one holding the lower world rank)."""
        c = self._state()
        flags = _api.all_gather(np.array([bool(high)], np.int64), group=c.union)
        mine_first = (flags[c.lo], c.lo) < (flags[c.ro], c.ro)
        sides = [range(c.lo, c.lo + c.local.size()), range(c.ro, c.ro + len(c.remote))]
        order = list(sides[0]) + list(sides[1]) if mine_first else list(sides[1]) + list(sides[0])
        return self._derive(c.union.subgroup(order, c.derive("Merge")))

    # ---------------------------------------------------------------- collectives
    def _root(self, root, what):
        c = self._state()
        if root == ROOT or root == PROC_NULL:
            return root
        if isinstance(root, (int, np.integer)) and not isinstance(root, bool) and 0 <= root < len(c.remote):
            return int(root)
        raise MPIException(ERR_ROOT, f"rank {c.g.rank()}: {what}: root={root!r} is neither MPI.ROOT, MPI.PROC_NULL "
                                     f"nor a rank of the remote group (size {len(c.remote)})")

    def _run(self, body, *args):
        c = self._state()
        return c.union.stream.run(body, c, *args)

    def _start(self, what, body, *args):
        c = self._state()
        return Request._wrap(c.union.stream.submit(what, body, c, *args), done_empty)

    def Barrier(self):
        self._run(_barrier)

    barrier = Barrier

    def Ibarrier(self):
        return self._start("Ibarrier", _barrier)

    def _bcast_args(self, buf, root, what):
        root = self._root(root, what)
        if root == PROC_NULL:
            return None, root
        return (parse_send(buf) if root == ROOT else parse_recv(buf)).array, root

    def Bcast(self, buf, root=0):
        self._run(_bcast, *self._bcast_args(buf, root, "Bcast"))

    def Ibcast(self, buf, root=0):
        return self._start("Ibcast", _bcast, *self._bcast_args(buf, root, "Ibcast"))

    def _gather_args(self, sendbuf, recvbuf, root, what, vector=False):
        root, n = self._root(root, what), len(self._c.remote)
        if root == ROOT:
            if vector:
                return None, parse_vector(recvbuf, n, True).block, root
            out, per = blocks(parse_recv(recvbuf), n, what)
            return None, lambda i: out[i * per:(i + 1) * per], root
        return (None if root == PROC_NULL else parse_send(sendbuf).array), None, root

    def Gather(self, sendbuf, recvbuf, root=0):
        self._run(_gather, *self._gather_args(sendbuf, recvbuf, root, "Gather"))

    def Igather(self, sendbuf, recvbuf, root=0):
        return self._start("Igather", _gather, *self._gather_args(sendbuf, recvbuf, root, "Igather"))

    def Gatherv(self, sendbuf, recvbuf, root=0):
        self._run(_gather, *self._gather_args(sendbuf, recvbuf, root, "Gatherv", True))

    def Igatherv(self, sendbuf, recvbuf, root=0):
        return self._start("Igatherv", _gather, *self._gather_args(sendbuf, recvbuf, root, "Igatherv", True))

    def _scatter_args(self, sendbuf, recvbuf, root, what, vector=False):
        root, n = self._root(root, what), len(self._c.remote)
        if root == ROOT:
            if vector:
                return parse_vector(sendbuf, n, False).block, None, root
            src, per = blocks(parse_send(sendbuf), n, what)
            return lambda j: src[j * per:(j + 1) * per], None, root
        return None, (None if root == PROC_NULL else parse_recv(recvbuf).array), root

    def Scatter(self, sendbuf, recvbuf, root=0):
        self._run(_scatter, *self._scatter_args(sendbuf, recvbuf, root, "Scatter"))

    def Iscatter(self, sendbuf, recvbuf, root=0):
        return self._start("Iscatter", _scatter, *self._scatter_args(sendbuf, recvbuf, root, "Iscatter"))

    def Scatterv(self, sendbuf, recvbuf, root=0):
        self._run(_scatter, *self._scatter_args(sendbuf, recvbuf, root, "Scatterv", True))

    def Iscatterv(self, sendbuf, recvbuf, root=0):
        return self._start("Iscatterv", _scatter, *self._scatter_args(sendbuf, recvbuf, root, "Iscatterv", True))

    def _allgather_args(self, sendbuf, recvbuf, what):
        c = self._state()
        _in_place(sendbuf, what, c.g.rank())
        out, _ = blocks(parse_recv(recvbuf), len(c.remote), what)
        return parse_send(sendbuf).array, out

    def Allgather(self, sendbuf, recvbuf):
        self._run(_allgather, *self._allgather_args(sendbuf, recvbuf, "Allgather"))

    def Iallgather(self, sendbuf, recvbuf):
        return self._start("Iallgather", _allgather, *self._allgather_args(sendbuf, recvbuf, "Iallgather"))

    def _allgatherv_args(self, sendbuf, recvbuf, what):
        c = self._state()
        _in_place(sendbuf, what, c.g.rank())
        s = parse_send(sendbuf).array
        return lambda j: s, parse_vector(recvbuf, len(c.remote), True).block

    def Allgatherv(self, sendbuf, recvbuf):
        self._run(_exchange, *self._allgatherv_args(sendbuf, recvbuf, "Allgatherv"))

    def Iallgatherv(self, sendbuf, recvbuf):
        return self._start("Iallgatherv", _exchange, *self._allgatherv_args(sendbuf, recvbuf, "Iallgatherv"))

    def _alltoall_args(self, sendbuf, recvbuf, what):
        c = self._state()
        _in_place(sendbuf, what, c.g.rank())
        n = len(c.remote)
        s, r = parse_send(sendbuf), parse_recv(recvbuf)
        _same_type(s, r, what)
        (src, sper), (out, per) = blocks(s, n, what), blocks(r, n, what)
        return lambda j: src[j * sper:(j + 1) * sper], lambda i: out[i * per:(i + 1) * per]

    def Alltoall(self, sendbuf, recvbuf):
        self._run(_exchange, *self._alltoall_args(sendbuf, recvbuf, "Alltoall"))

    def Ialltoall(self, sendbuf, recvbuf):
        return self._start("Ialltoall", _exchange, *self._alltoall_args(sendbuf, recvbuf, "Ialltoall"))

    def _alltoallv_args(self, sendbuf, recvbuf, what):
        c = self._state()
        _in_place(sendbuf, what, c.g.rank())
        n = len(c.remote)
        return parse_vector(sendbuf, n, False).block, parse_vector(recvbuf, n, True).block

    def Alltoallv(self, sendbuf, recvbuf):
        self._run(_exchange, *self._alltoallv_args(sendbuf, recvbuf, "Alltoallv"))

    def Ialltoallv(self, sendbuf, recvbuf):
        return self._start("Ialltoallv", _exchange, *self._alltoallv_args(sendbuf, recvbuf, "Ialltoallv"))

    def _alltoallw_args(self, sendbuf, recvbuf, what):
        c = self._state()
        _in_place(sendbuf, what, c.g.rank())
        n = len(c.remote)
        return parse_vectorw(sendbuf, n, False, what).__getitem__, parse_vectorw(recvbuf, n, True, what).__getitem__

    def Alltoallw(self, sendbuf, recvbuf):
        self._run(_exchange, *self._alltoallw_args(sendbuf, recvbuf, "Alltoallw"))

    def Ialltoallw(self, sendbuf, recvbuf):
        return self._start("Ialltoallw", _exchange, *self._alltoallw_args(sendbuf, recvbuf, "Ialltoallw"))

    # reductions
    def _reduce_args(self, sendbuf, recvbuf, op, root, what):
        root = self._root(root, what)
        if root == PROC_NULL:
            return None, None, None, None, root
        if root == ROOT:
            r = parse_recv(recvbuf)
            return None, r.array, _as_op(op, r.datatype), r.datatype, root
        s = parse_send(sendbuf)
        return s.array, None, _as_op(op, s.datatype), s.datatype, root

    def Reduce(self, sendbuf, recvbuf, op=SUM, root=0):
        self._run(_reduce, *self._reduce_args(sendbuf, recvbuf, op, root, "Reduce"))

    def Ireduce(self, sendbuf, recvbuf, op=SUM, root=0):
        return self._start("Ireduce", _reduce, *self._reduce_args(sendbuf, recvbuf, op, root, "Ireduce"))

    def _allreduce_args(self, sendbuf, recvbuf, op, what):
        _in_place(sendbuf, what, self._state().g.rank())
        s, r = parse_send(sendbuf), parse_recv(recvbuf)
        return s.array, _match(s, r, s.array.size, what), _as_op(op, s.datatype), s.datatype

    def Allreduce(self, sendbuf, recvbuf, op=SUM):
        self._run(_allreduce, *self._allreduce_args(sendbuf, recvbuf, op, "Allreduce"))

    def Iallreduce(self, sendbuf, recvbuf, op=SUM):
        return self._start("Iallreduce", _allreduce, *self._allreduce_args(sendbuf, recvbuf, op, "Iallreduce"))

    def _rs_args(self, sendbuf, recvbuf, counts, op, what):
        """(send array, receive array, op, datatype, this rank's offset in the remote group's reduction,
        its length): counts "block" means the receive buffer's count on every local rank."""
        c = self._state()
        me, n = c.g.rank(), c.local.size()
        _in_place(sendbuf, what, me)
        s, r = parse_send(sendbuf), parse_recv(recvbuf)
        _same_type(s, r, what)
        mult = r.datatype._mult
        if counts is None:  # an intracommunicator gathers them; here the remote group sends the total
            raise ValueError(f"{what}: an intercommunicator needs recvcounts (one per local rank)")
        if isinstance(counts, str):
            counts = [r.count] * n
        else:
            counts = [int(x) for x in (counts.tolist() if isinstance(counts, np.ndarray) else counts)]
        if len(counts) != n or sum(counts) * mult != s.array.size or counts[me] * mult != r.array.size:
            raise ValueError(f"{what}: recvcounts {counts} do not match the {s.count} elements of sendbuf and the "
                             f"{r.count} of recvbuf over a local group of {n}")
        return s.array, r.array, _as_op(op, s.datatype), s.datatype, sum(counts[:me]) * mult, s.array.size

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
        self._run(_reduce_scatter, *self._rs_args(sendbuf, recvbuf, "block", op, "Reduce_scatter_block"))

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=SUM):
        return self._start("Ireduce_scatter_block", _reduce_scatter,
                           *self._rs_args(sendbuf, recvbuf, "block", op, "Ireduce_scatter_block"))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM):
        self._run(_reduce_scatter, *self._rs_args(sendbuf, recvbuf, recvcounts, op, "Reduce_scatter"))

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=SUM):
        return self._start("Ireduce_scatter", _reduce_scatter,
                           *self._rs_args(sendbuf, recvbuf, recvcounts, op, "Ireduce_scatter"))

    # object collectives
    def bcast(self, obj=None, root=0):
        return self._run(_bcast_obj, obj, self._root(root, "bcast"))

    def gather(self, sendobj, root=0):
        return self._run(_gather_obj, sendobj, self._root(root, "gather"))

    def scatter(self, sendobj, root=0):
        root, n = self._root(root, "scatter"), len(self._c.remote)
        objs = None
        if root == ROOT:  # as mpi4py: None scatters None to every remote rank; any iterable is taken
            objs = [None] * n if sendobj is None else list(sendobj)
            if len(objs) != n:
                raise ValueError(f"scatter: root needs a sequence of {n} objects (the remote group), got {len(objs)}")
        return self._run(_scatter_obj, objs, root)

    def allgather(self, sendobj):
        return self._run(_exchange_obj, [sendobj] * len(self._state().remote), True)

    def alltoall(self, sendobj):
        n = len(self._state().remote)
        objs = [None] * n if sendobj is None else list(sendobj)
        if len(objs) != n:
            raise ValueError(f"alltoall: needs a sequence of {n} objects (the remote group), got {len(objs)}")
        return self._run(_exchange_obj, objs, False)

    def reduce(self, sendobj, op=SUM, root=0):
        return self._run(_reduce_obj, sendobj, op, self._root(root, "reduce"))

    def allreduce(self, sendobj, op=SUM):
        return self._run(_allreduce_obj, sendobj, op)


for _name in ("Scan", "Iscan", "Scan_init", "scan", "Exscan", "Iexscan", "Exscan_init", "exscan", "Create_group",
              "Create_cart", "Cart_map"):
    setattr(Intercomm, _name, _Absent(_name))
_Inter.handle_class = Intercomm
provide(Intercomm=Intercomm, create_intercomm=create_intercomm)  # what Comm.Get_parent and Create_intercomm make
