"""The transport's channels: `Transport` (an Endpoint plus the channels built on it), the collective
channel, and the spin and peer-check settings they step with. See the package's docstring for the
seam they make; the package re-exports these names, loaded on first use."""
import collections
import contextlib
import os
import threading
import time

import numpy as np

from .. import _plan
from .._errors import CommError, PeerLost
from .._wire import HEADER_NBYTES, KIND_COLL, ProtocolError, decode
from . import _io
from .diagnose import peer_mismatch, status_error
from .p2p import PointToPoint
from .sockets import CH_COLL, CH_LANE, CH_P2P, SHARED_GID

__all__ = ["Transport", "CollectiveChannel", "spin_seconds", "spin_policy", "env_number"]


class Transport:
    """This process's transport: an Endpoint plus the channels built on it."""

    def __init__(self, ep):
        self.ep = ep
        self.rank = ep.rank
        self.notices = ep.notices
        self._p2p = None

    def raise_if_failed(self):
        self.ep.raise_if_failed()

    def collective_channel(self, gid, world, chunk, spin, check_s):
        return CollectiveChannel(self.ep, gid, world, chunk, spin, check_s)

    @property
    def p2p(self):
        if self._p2p is None:
            self._p2p = PointToPoint(self.ep, spin_policy())
        return self._p2p

    def connect_eagerly(self, gid, dst, timeout):
        """Open the collective connection to dst in the background (best effort: never an error).

        init() does not wait for it: the handshake overlaps whatever the caller does next, and a
        collective that needs this connection first waits for it (one connect per key at a time).
        """
        def connect():
            with contextlib.suppress(CommError, OSError):
                self.ep.outgoing(gid, CH_COLL, dst, time.monotonic() + timeout, "init", sticky=False)

        thread = threading.Thread(target=connect, name="commlib-connect", daemon=True)
        thread.start()
        return thread

    def probe(self, gid, dst, timeout):
        """Open (or reuse) the authenticated point-to-point connection to world rank dst, for a check
        of the set-up: (route words, seconds taken, None) or (route words, seconds, error words).
        A failure is this call's only: the process stays usable for its other peers."""
        start = time.monotonic()
        try:
            self.ep.outgoing(gid, CH_P2P, dst, start + timeout, "connection check", sticky=False)
            error = None
        except (CommError, OSError) as exc:
            error = str(exc)
        return self.ep.describe_route(dst, self.ep.out_sock(gid, CH_P2P, dst)), time.monotonic() - start, error

    def routes_text(self):
        """This rank's address and its route to every peer, in one line."""
        return self.ep.routes_text()


class CollectiveChannel:
    """The collective steps of one group: its step loop and the executor of its plans."""

    def __init__(self, ep, gid, world, chunk, spin, check_s):
        """world: group rank -> world rank; spin: (seconds, adaptive, yield) from spin_policy()."""
        self.ep, self.gid, self.world, self.check_s = ep, gid, world, check_s
        self.state = np.zeros(4, dtype=np.int64)
        self.ring = np.empty(4 * chunk, dtype=np.uint8)
        self.stepper = _io.Stepper(self.state, chunk, ep.wake_r, self.ring.ctypes.data, self.ring.nbytes,
                                   spin[0], check_s, spin[1], spin[2], shared=True)
        self.fds = ep.fds
        self._plan_fds = {}  # plan -> (send fds, receive fds) of its rows
        self._parking = None  # (group, world rank, message) another group's message being read
        # one connection each way per peer, shared by every group (sockets.SHARED_GID), then the
        # group's own lanes, for a pipelined chain's relayed messages (_plan.FROM_RELAY)
        self.out_keys = [(SHARED_GID, CH_COLL, w, 1) for w in world] + [(gid, CH_LANE, w, 1) for w in world]
        self.in_keys = [(SHARED_GID, CH_COLL, w, 0) for w in world] + [(gid, CH_LANE, w, 0) for w in world]

    def run(self, op, plan, slots, bounds):
        """Run `plan` (commlib._plan) for collective `op` with the GIL released once.

        slots: the addresses of the plan's slots (a list of _plan.NSLOTS ints, 0 where unused);
        bounds: the units' byte boundaries (int64, plan.parts + 1), or `_plan.even(count, item)`. `op` describes the collective
        (`hdr`, `deadline`, `dims`, `dtype`, `redop`; str(op) names it in errors, formatted only on
        failure). The header is sent and expected on every step; a different one is a MismatchError.
        A peer not connected yet is connected when its first row comes (not before: a connection
        from a peer arrives only once that peer gets there).
        """
        rows, hdr, world = plan.rows, op.hdr, self.world
        fds = self._plan_fds.get(plan)
        if fds is None:  # descriptor arrays per plan, refilled on every call (a peer may reconnect)
            if len(self._plan_fds) >= 256:
                self._plan_fds.clear()
            fds = self._plan_fds[plan] = (np.empty(len(rows), np.int32), np.empty(len(rows), np.int32))
        sfd, rfd = fds
        _io.peer_fds(rows, self.fds, self.out_keys, self.in_keys, sfd, rfd)
        notices = self.ep.notices
        notices.current = (op, None, hdr)
        at, resume, reported = 0, False, False
        try:
            while True:
                rc, at = _io.execute(self.stepper, rows, plan.parts, slots, bounds, sfd, rfd, hdr, op.dtype, op.redop,
                                     op.deadline, at, resume)
                if rc == _io.OK:
                    return
                kind, dst, src, s_slot, s_lo, s_hi, r_slot, r_lo, r_hi = (int(v) for v in rows[at][:9])
                dst, src = (world[dst] if dst >= 0 else None), (world[src] if src >= 0 else None)
                if rc == _io.NEED_PEER:
                    flags = int(rows[at][10])
                    self._connect(op, dst, src, flags & (_plan.RELAY_RECEIVED | _plan.RELAY_REDUCED) != 0,
                                  flags & _plan.FROM_RELAY != 0)
                    _io.peer_fds(rows, self.fds, self.out_keys, self.in_keys, sfd, rfd)
                    resume = False
                    continue
                if type(bounds) is tuple:  # even units: their boundaries, for the error's words
                    bounds = _plan.bounds(bounds[0], bounds[1], plan.parts)
                send_len = int(bounds[s_hi] - bounds[s_lo]) if s_slot >= 0 else 0
                recv_len = int(bounds[r_hi] - bounds[r_lo]) if r_slot >= 0 else 0
                reported = True
                fd = self.stopped(rc, op, hdr, op.dims, dst, send_len, src, recv_len, self.state, self.stepper.rhdr)
                if fd is not None:  # BUSY: this row reads a message parked for this group
                    rfd[at] = fd
                resume = True
        finally:
            notices.current = None
            self.stepper.drop_parked()
            if reported:  # a stall may have widened the peer-check interval (as the fast path does)
                self.stepper.check_reset()

    def _connect(self, op, dst, src, lane_out=False, lane_in=False):
        """Open the connections a row needs (world ranks; the group's lane for a relayed message);
        a member that cannot be reached fails the job."""
        ep, gid, hdr = self.ep, self.gid, op.hdr
        out_ch, in_ch = (CH_LANE if lane_out else CH_COLL), (CH_LANE if lane_in else CH_COLL)
        try:
            if dst is not None and self.fds.get(ep.key(gid, out_ch, dst) + (1,)) is None:
                ep.outgoing(gid, out_ch, dst, op.deadline, op)
            if src is not None and self.fds.get(ep.key(gid, in_ch, src) + (0,)) is None:
                ep.incoming(gid, in_ch, src, op.deadline, op, hdr, lambda: self._check(src, hdr, op.dims),
                            self.check_s)
        except CommError as exc:
            exc.op = str(op)
            self._raise(ep.fail(exc) if ep.failure is None else exc)
        self.ep.notices.current = (op, None, hdr)

    def fast_path(self, group, stream, plans, limits, ops, legal, dtype_code, bf16):
        """The one-call small-message path (`_io.FastPath`) over this channel's sockets and step loop.

        `group` holds the collective count, digest and history it updates; `stream` is the group's
        ordered stream (the path runs only when it is idle); plans and limits: which plan it runs for
        each collective and up to which payload (see FastPath).
        """
        return _io.FastPath(group, stream, self.ep, self.fds, self.out_keys, self.in_keys, self.stopped,
                            self.ep.notices, self.stepper, plans, limits, ops, legal, dtype_code, bf16)

    def stopped(self, rc, what, hdr, dims, dst, send_len, src, recv_len, state, rhdr):
        """A step (world ranks dst/src) stopped with status rc: return to resume it (a descriptor to
        read the row's message from instead, after BUSY: FD_MEM), else raise.

        After SLOW it asks the peer it waits on whether it is in another collective (and says what
        this rank is in, for theirs): two ranks in different collectives can each wait to receive
        from the other, so no header ever reaches a receiver.
        """
        ep, notices = self.ep, self.ep.notices
        if rc == _io.BUSY:
            return self.busy(src)
        if rc == _io.DRAINED:
            return self._parked(state)
        if rc == _io.MISMATCH and src is not None and self._park(src, state, rhdr):
            return None
        if self._parking is not None:  # an error while reading another group's message
            self._parking = None
            self.stepper.drain_into(None)
        if rc == _io.SLOW:
            waiting_on = src if src is not None and state[1] < recv_len + HEADER_NBYTES else dst
            notices.current = (what, waiting_on, hdr)
            exc = self._check(waiting_on, hdr, dims)
            if exc is None:
                self.stepper.check_later(time.monotonic(), PEER_CHECK_MAX_S)
                return
            notices.current = None
            self._raise(exc)
        notices.current = None
        self._raise(status_error(ep, rc, state, what, dst, send_len, src, recv_len, hdr, rhdr, dims))

    # ------------------------------------------------ messages of other groups (shared connections)
    def _park(self, src, state, rhdr):
        """A step read the header of another group's message from world rank src (the connection is
        shared): the row goes on reading that message's payload (its own send going on meanwhile,
        so a peer doing the same with ours is never waited on) and returns DRAINED (`_parked`).
        False when the header is not another group's collective (a real mismatch, or garbage)."""
        try:
            h = decode(bytes(rhdr))
        except ProtocolError:
            return False
        if h.kind != KIND_COLL or h.group == self.gid or int(state[1]) != HEADER_NBYTES:
            return False
        message = np.empty(HEADER_NBYTES + h.nbytes, np.uint8)
        message[:HEADER_NBYTES] = np.frombuffer(rhdr, np.uint8)
        self._parking = (h.group, src, message)
        self.stepper.drain_into(message[HEADER_NBYTES:])
        return True

    def _parked(self, state):
        """The message `_park` began is in: queue it for its group, let the descriptor go, and let
        the row read its own message from the start."""
        group, src, message = self._parking
        self._parking = None
        self.stepper.drain_into(None)
        with self.ep.parked_lock:  # another group's thread may be taking from the same queue
            self.ep.parked.setdefault(group, {}).setdefault(src, collections.deque()).append(message)
            _io.bump_park_gen()  # after queueing, before the descriptor is free: that group's next step looks
        self.stepper.release(send=False)
        state[1] = state[2] = state[3] = 0

    def busy(self, src):
        """The step loop is about to read a new message from world rank src and messages were
        parked since this group last looked: FD_MEM when the oldest one from src is this group's
        (the row reads it), else None (the row reads the connection)."""
        with self.ep.parked_lock:
            gen = _io.park_gen()  # before looking: a message parked after this makes the loop ask again
            mine = self.ep.parked.get(self.gid)
            queue = mine.get(src) if mine else None
            if queue:
                message = queue.popleft()
                if not queue:
                    del mine[src]
                if not mine:
                    del self.ep.parked[self.gid]
                self.stepper.set_clean(-1 if mine else gen)
                return self.stepper.take_parked(message)
            self.stepper.set_clean(-1 if mine else gen, self.fds.get((SHARED_GID, CH_COLL, src, 0), -1), gen)
        return None

    def _check(self, peer, hdr, dims):
        """The error (recorded as the failure) when the peer we wait on is in another collective #seq
        of this group, or has finished (finalize()) and will never take part; else None."""
        notices = self.ep.notices
        if peer is not None and notices.finishing(peer):
            what = decode(hdr).describe() if hdr else "a collective"
            why = notices.departure(peer)  # its exit code, where the launcher reports it in time
            self.ep.fail(PeerLost(f"rank {self.ep.rank}: {what} lost rank {peer} ({why})", rank=peer))
            return self.ep.failure  # a cause that came meanwhile (the launcher's report of that exit) wins
        exc = peer_mismatch(self.ep.rank, hdr, peer, notices.peer_header(peer), dims)
        return self.ep.fail(exc) if exc is not None else None

    def _raise(self, exc):
        self.stepper.release()  # the descriptors this group held mid-message: other groups' steps fail on
        self.ep.spread(exc)
        raise exc


def env_number(name, default, kind=int):
    """The value of environment variable `name` as `kind`, `default` when unset or empty."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return kind(value)
    except ValueError:
        raise CommError(f"{name}={value!r} is not {'an integer' if kind is int else 'a number'}") from None


# A rank stalled on a peer asks about it (PEER_CHECK_S, 1 s) at first, then every quarter of the
# stall so far, up to this: mismatches show within seconds, and 10,000 ranks waiting minutes on one
# slow rank send the coordinator 1,250 queries a second rather than 10,000
PEER_CHECK_MAX_S = 8.0
SPIN_MAX_US = 200  # adaptive: the most a step spins on a prompt peer when every local rank has a core
SPIN_MAX_SHARED_US = 0  # ... and when ranks outnumber cores: the partner usually needs our core, so
# a busy spin delays it (a 20 us cap measured 282 vs 244 us for an 8 B all_reduce at n=4 and up to 4x
# slower small all_gathers at n=8 on 2 cores, benchmarks/RESULTS.md, issue 14)
SPIN_YIELD_US = 50  # ... unless the spin hands the core over: sched_yield() each turn, on steps of at
# most 64 KiB, while local ranks are at most YIELD_RANKS_PER_CORE per core. n=3, 4 on 2 cores: 8 B-64 KiB
# collectives 0.46-0.96x the time of no spin, large sizes within noise, idle-wait CPU unchanged; n=8
# on 2 cores gained nothing (RESULTS.md, "Spinning by yielding the core")
YIELD_RANKS_PER_CORE = 2


def spin_policy():
    """(seconds, adaptive, yield) for the step loop.

    COMMLIB_SPIN_US fixes a busy spin. Otherwise each step spins up to SPIN_MAX_US on a peer whose
    recent waits were short and not at all on one that is usually late (`_io.spin_budget`), so a
    rank waiting on a busy or sleeping peer costs no CPU. When local ranks outnumber cores the spin
    calls sched_yield() each turn, so a rank sharing the core runs meanwhile: SPIN_YIELD_US (or
    COMMLIB_SPIN_YIELD_US; 0 turns it off) up to YIELD_RANKS_PER_CORE ranks per core, none beyond
    unless COMMLIB_SPIN_YIELD_US asks for it.
    """
    spin_us = env_number("COMMLIB_SPIN_US", -1)
    if spin_us >= 0:
        return spin_us * 1e-6, False, False
    local = env_number("COMMLIB_LOCAL_SIZE", 1)
    cores = len(os.sched_getaffinity(0))
    if local <= cores:
        return SPIN_MAX_US * 1e-6, True, False
    default = SPIN_YIELD_US if local <= YIELD_RANKS_PER_CORE * cores else 0
    yield_us = env_number("COMMLIB_SPIN_YIELD_US", default)
    if yield_us > 0:
        return yield_us * 1e-6, True, True
    return SPIN_MAX_SHARED_US * 1e-6, True, False


def spin_seconds():
    """How long the progress engine's poll loop spins before sleeping: COMMLIB_SPIN_US, else 50 us
    when every rank on this host can have a core and 0 when they share (an idle rank must cost nothing)."""
    spin_us = env_number("COMMLIB_SPIN_US", -1)
    if spin_us < 0:
        local = env_number("COMMLIB_LOCAL_SIZE", 1)
        spin_us = 50 if local <= len(os.sched_getaffinity(0)) else 0
    return spin_us * 1e-6
