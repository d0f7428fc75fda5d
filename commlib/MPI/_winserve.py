"""The target side of one-sided communication: a window's memory, its locks, and its service.

What: every rank of a window (of more than one rank) keeps a receive posted for the requests other
ranks send to its memory, and serves each one where it completes: on whichever of the rank's threads
is making progress at that moment (the engine's progress thread while the program computes and
never calls MPI, or the program's own thread waiting in any call), under the engine's lock. A
request goes from arrival to reply without a hand-off between threads, and a window costs no thread.
The requests travel on the window's own communication context (a split of the creating
communicator's group), so they never meet a user message.

Protocol (one message per request, to tag TAG_REQ; `_win.py` is the other end):
    message  = 4-byte little-endian header length, pickled header tuple, payload bytes
    header   = (kind, reply tag, disp, target datatype descriptor, target count, op name)
    reply    = one status byte (0: done; else an MPI error class and the text), then the data
Requests from one origin are served in the order they were sent (the engine keeps each pair's
messages in order), so an acknowledgement (FLUSH, UNLOCK, COMPLETE) proves that everything the
origin sent before it has been applied. PUT and ACC have no reply: the origin counts them and a
fence compares the counts (`applied`). Every access to the memory while serving, and every
access a rank makes to its own window through RMA calls, holds the window's condition `cv`:
accumulates are atomic per operation, as MPI requires. Lock order: the engine's lock, then cv
(nothing holding cv calls into the engine).

Plan: `Target` holds the memory and the lock table; `_arrived()` serves what the posted receive
got; `apply()` does one operation on the memory and is also what an origin calls for its own rank.
"""
import collections
import pickle
import struct
import threading

import numpy as np

from .._dtypes import DT_BYTES
from .._errors import CommError
from .._kernels import typemap_copy
from . import _ops
from ._constants import ANY_SOURCE, ERR_OP, ERR_OTHER, ERR_RMA_ATTACH, ERR_RMA_RANGE, MPIException

TAG_REQ, TAG_POST = 1, 2
FIRST_REPLY_TAG = 16
PUT, ACC, GET, GACC, CAS, LOCK, UNLOCK, FLUSH, COMPLETE = range(9)
LOCK_EXCLUSIVE, LOCK_SHARED = 301, 302  # the MPI-5 ABI values
POLL_S = 0.05  # how often a waiting origin looks for a lost peer
_UNBOUNDED = 1 << 62
_LEN = struct.Struct("<I")
_OK = np.zeros(1, np.uint8)


def encode(header):
    """The header part of a request message (uint8 array)."""
    h = pickle.dumps(header, protocol=pickle.HIGHEST_PROTOCOL)
    return np.frombuffer(_LEN.pack(len(h)) + h, np.uint8)


def decode(payload):
    """(header tuple, payload bytes after it) of a request message."""
    n = _LEN.unpack_from(payload, 0)[0]
    return pickle.loads(payload[4:4 + n].tobytes()), payload[4 + n:]


def describe(dt):
    """A datatype as the target needs it, small and picklable: (base dtype, elements per item,
    bytes per item, runs or None when contiguous, extent, true lb, true ub, name)."""
    return (dt._base.str, dt._mult, dt._bytes, None if dt._simple else dt._runs, dt._ub - dt._lb, dt._tlb, dt._tub,
            dt.Get_name())


def span(desc, count):
    """(lowest, highest) byte offsets that count items of desc touch, from the first item's origin."""
    _, _, nbytes, runs, ext, tlb, tub, _ = desc
    if count == 0 or nbytes == 0:
        return 0, 0
    if runs is None:
        return 0, count * nbytes
    reach = (count - 1) * ext
    return tlb + min(0, reach), tub + max(0, reach)


def read(mem, origin, desc, count):
    """A copy of count items of desc at byte `origin` of mem, packed, as a flat array of the base dtype."""
    base, _, nbytes, runs, ext, _, _, _ = desc
    if runs is None:
        return mem[origin:origin + count * nbytes].view(base).copy()
    packed = np.empty(count * nbytes, np.uint8)
    typemap_copy(mem, packed, runs, count, ext, origin, True)
    return packed.view(base)


def write(mem, origin, desc, count, packed):
    """Store the packed items (any array of count * nbytes bytes) at byte `origin` of mem."""
    _, _, nbytes, runs, ext, _, _, _ = desc
    u8 = packed.view(np.uint8) if packed.size else np.empty(0, np.uint8)
    if runs is None:
        mem[origin:origin + count * nbytes] = u8
    else:
        typemap_copy(mem, np.ascontiguousarray(u8), runs, count, ext, origin, False)


class Target:
    """This rank's side of a window: memory (or attached regions), locks, PSCW and fence counts."""

    def __init__(self, g, mem, disp_unit, dynamic):
        self.g, self.mem, self.disp_unit, self.dynamic = g, mem, disp_unit, dynamic
        self.regions = {}  # a dynamic window's attached memory: address -> uint8 array
        self.cv = threading.Condition()  # guards the memory, the counters and the lock table
        self.applied = 0  # PUT and ACC requests applied from other ranks (a fence waits for its share)
        self.completes = collections.Counter()  # PSCW: Complete() calls received, by origin rank
        self.excl, self.shared, self.queue = None, 0, collections.deque()
        self.failed = {}  # origin rank -> the error of a request it gets no reply to (reported at its next ack)
        self.held = {}  # origin rank -> its requests that came after its lock request, until the lock is granted
        self.blocked = set()  # origin ranks whose lock request (not waited for) is not granted yet
        self.draining = set()  # origin ranks whose held requests a thread is serving (_release)
        self.req, self.stopping = None, False  # the posted receive of the next request; Free was called
        self.inbox, self.serving = collections.deque(), False  # requests received, not yet served; _arrived runs
        self.deferred, self.deferred_lock, self.deferred_worker = collections.deque(), threading.Lock(), None

    # ------------------------------------------------------------ memory
    def locate(self, disp, desc, count):
        """(memory, byte origin) of count items of desc at target displacement disp; raises when
        they fall outside the window (or outside every attached region of a dynamic window)."""
        lo, hi = span(desc, count)
        if not self.dynamic:
            origin = disp * self.disp_unit
            if hi > lo and (origin + lo < 0 or origin + hi > self.mem.nbytes):
                raise MPIException(ERR_RMA_RANGE, f"rank {self.g.rank()}: RMA target: {count} x {desc[7]} at "
                                                  f"displacement {disp} reach bytes [{origin + lo}, {origin + hi}) of "
                                                  f"a {self.mem.nbytes}-byte window")
            return self.mem, origin
        if hi == lo:
            return self.mem, 0
        for base, region in self.regions.items():
            if base <= disp + lo and disp + hi <= base + region.nbytes:
                return region, disp - base
        raise MPIException(ERR_RMA_ATTACH, f"rank {self.g.rank()}: RMA target: bytes [{disp + lo:#x}, {disp + hi:#x}) "
                                           f"are not inside memory attached to this dynamic window")

    def apply(self, kind, disp, desc, count, opname, data):
        """One operation on this rank's memory (the window lock held by the caller): the packed
        bytes it returns (GET, GACC, CAS), or None."""
        mem, origin = self.locate(disp, desc, count)
        if kind == PUT:
            write(mem, origin, desc, count, data)
            return None
        old = read(mem, origin, desc, count)
        if kind == GET:
            return old
        if kind == CAS:  # data: the new value, then the compare value
            item = data.nbytes // 2
            new, cmp = data[:item].view(old.dtype), data[item:].view(old.dtype)
            if np.array_equal(old, cmp):
                write(mem, origin, desc, count, new)
            return old
        if opname == "NO_OP":  # the origin sent no data: the target stays as it is
            return old if kind == GACC else None
        op = getattr(_ops, opname)
        acc = np.array(data.view(old.dtype)) if data.size else np.empty(0, old.dtype)
        if acc.size != old.size:
            raise MPIException(ERR_OP, f"rank {self.g.rank()}: accumulate: {acc.size} origin elements for "
                                       f"{old.size} target elements")
        op.combine(old, acc, None)  # acc = old op acc: REPLACE keeps the origin's, NO_OP the target's
        write(mem, origin, desc, count, acc)
        return old if kind == GACC else None

    # ------------------------------------------------------------ locks
    def lock(self, src, lock_type, grant):
        """Queue src's lock request; grant() is called (now or at a later release) once it holds it."""
        with self.cv:
            self.queue.append((src, lock_type, grant))
            granted = self._grant()
        self._granted(granted)

    def unlock(self, src):
        with self.cv:
            if self.excl == src:
                self.excl = None
            elif self.shared:
                self.shared -= 1
            granted = self._grant()
        self._granted(granted)

    def _grant(self):
        """(cv held) Grant queued requests in arrival order while they are compatible (fair: no
        overtaking). Returns their grant callbacks, which the caller runs once cv is released: one
        that replies to another rank takes the engine's lock, and the engine's lock is taken
        before cv where requests are served."""
        granted = []
        while self.queue and self.excl is None:
            src, lock_type, grant = self.queue[0]
            if lock_type == LOCK_EXCLUSIVE:
                if self.shared:
                    break
                self.excl = src
            else:
                self.shared += 1
            self.queue.popleft()
            granted.append(grant)
        return granted

    def _granted(self, granted):
        if not granted:
            return
        for grant in granted:
            grant()
        with self.cv:
            self.cv.notify_all()  # a grant to this rank's own main thread is an Event it waits for under cv

    # ------------------------------------------------------------ serving, where requests arrive
    def start(self):
        """Serve other ranks' requests from now on. Each is served by whichever thread of this rank
        receives it (the progress thread, or a thread waiting in any call that drives progress),
        as it completes, under the engine's lock: no thread of the window's own, and no hand-off
        between threads on a request's way to its reply."""
        with self.g.engine.lock:
            self._post()

    def _post(self):
        g = self.g
        self.req = g.engine.recv(g.p2p, ANY_SOURCE, TAG_REQ, None, self._arrived, what="RMA service", block=False,
                                 check=(DT_BYTES, _UNBOUNDED), raw=True)

    def _arrived(self, msg, payload):
        """A request arrived (the engine's lock held, as for every receive's completion): serve it
        and every one that arrives meanwhile, then post the receive of the next. Posting may find
        the next already there and complete at once, calling this again: that call only queues
        (no receive is posted while one is served, so nothing else arrives here meanwhile)."""
        self.inbox.append((msg.source, payload))
        if self.serving:
            return None
        self.serving = True
        try:
            while self.inbox:
                while self.inbox:
                    src, request = self.inbox.popleft()
                    self.handle(src, request)
                if not self.stopping:
                    self._post()  # (may complete at once: the inbox has one more, and one more turn)
        finally:
            self.serving = False
        return None

    def stop(self):
        """Stop serving (every other rank has stopped sending: Win.Free synchronised first)."""
        with self.g.engine.lock:
            self.stopping = True
            req, self.req = self.req, None
            if req is not None:
                req.cancel()
        worker = self.deferred_worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    def handle(self, src, payload):
        """One request from rank src: served now, or held while src waits for a lock it asked for
        without waiting itself (its requests then run in order once the lock is granted)."""
        with self.cv:
            held = self.held.get(src)
            if held is not None:
                held.append(payload)
                return
        self._serve(src, payload)

    def _release(self, src):
        """src's lock is granted: its held requests, in order (more may arrive meanwhile, a next
        Lock among them). One thread serves them; a Lock of src's served on the way that cannot be
        granted at once stops it, and that lock's grant serves the rest."""
        with self.cv:
            self.blocked.discard(src)
            if src in self.draining:  # granted while its requests are served: that thread goes on
                return
            self.draining.add(src)
        try:
            while True:
                with self.cv:
                    held = self.held.get(src)
                    if src in self.blocked or not held:
                        self.draining.discard(src)
                        if src not in self.blocked:
                            self.held.pop(src, None)
                        return
                    payload = held.popleft()
                self._serve(src, payload)
        except BaseException:
            with self.cv:
                self.draining.discard(src)
            raise

    def _serve(self, src, payload):
        try:
            (kind, tag, disp, desc, count, opname), data = decode(payload)
        except Exception as exc:  # not a request of this module's: nobody to answer, nothing to apply
            self.failed.setdefault(src, _as_mpi(exc))
            return
        if kind in (PUT, ACC):
            with self.cv:
                try:
                    self.apply(kind, disp, desc, count, opname, data)
                except Exception as exc:  # reported to the origin at its next acknowledgement
                    self.failed.setdefault(src, _as_mpi(exc))
                self.applied += 1
                self.cv.notify_all()
            return
        if kind == LOCK:
            if tag:  # the origin waits for the grant
                self.lock(src, disp, lambda: self.reply(src, tag, None))
            else:  # it went on: what it sends next waits here for the grant instead (behind what
                with self.cv:  # is held already, where this Lock came while those were served)
                    self.held.setdefault(src, collections.deque())
                    self.blocked.add(src)
                self.lock(src, disp, lambda: self._release(src))
            return
        if kind == UNLOCK:
            self.unlock(src)
            if not tag:  # nothing to acknowledge: the origin's operations all had their replies
                return
        elif kind == COMPLETE:
            with self.cv:
                self.completes[src] += 1
                self.cv.notify_all()
        elif kind in (GET, GACC, CAS):
            with self.cv:
                try:
                    out = self.apply(kind, disp, desc, count, opname, data)
                except Exception as exc:
                    out, err = None, _as_mpi(exc)
                else:
                    err = None
            self.reply(src, tag, err, out)
            return
        with self.cv:  # UNLOCK, FLUSH, COMPLETE: acknowledged, with the error of an earlier PUT or ACC
            exc = self.failed.pop(src, None)
        self.reply(src, tag, exc)

    def reply(self, dst, tag, exc, data=None):
        if exc is not None:
            text = str(exc).encode()
            parts = [np.frombuffer(bytes([exc.Get_error_class() & 0xFF]) + text, np.uint8)]
        else:
            parts = [_OK] if data is None or not data.size else [_OK, data.view(np.uint8)]
        with self.deferred_lock:
            if self.deferred or not self.g.engine.connected(self.g.p2p, dst):
                # The first reply to a rank may have to open a connection, which can wait: never
                # here, where the engine's lock is held, but on a thread of its own (and the
                # replies behind it to keep their order).
                self.deferred.append((dst, tag, parts))
                if self.deferred_worker is None:
                    self.deferred_worker = threading.Thread(target=self._send_deferred, daemon=True,
                                                            name=f"commlib-rma-connect-{self.g.gid}")
                    self.deferred_worker.start()
                return
        self._send(dst, tag, parts)

    def _send(self, dst, tag, parts):
        try:  # never blocks: the origin posted its receive before it sent the request
            self.g.engine.send(self.g.p2p, dst, parts, tag=tag, dtype=DT_BYTES, count=sum(p.nbytes for p in parts),
                               what="RMA reply", block=False)
        except CommError:  # the origin is gone: nobody waits for this reply
            return

    def _send_deferred(self):
        while True:
            with self.deferred_lock:
                if not self.deferred:
                    self.deferred_worker = None
                    return
                dst, tag, parts = self.deferred[0]
            self._send(dst, tag, parts)
            with self.deferred_lock:
                self.deferred.popleft()  # (only now: a reply queued meanwhile waits behind this one)


def _as_mpi(exc):
    """An error of an operation as the MPI error its origin gets (a bug here still reaches the origin)."""
    return exc if isinstance(exc, MPIException) else MPIException(ERR_OTHER, f"RMA target: {type(exc).__name__}: {exc}")


def _keep(msg, payload):
    return msg, payload


def reply_data(payload, what):
    """The data of a reply (raising the target's error, if it sent one)."""
    status = int(payload[0]) if payload.size else 0
    if status:
        raise MPIException(status, payload[1:].tobytes().decode(errors="replace"))
    return payload[1:]
