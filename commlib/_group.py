"""Group: ranks, the per-collective context, point-to-point matching, split.

A Group maps its ranks to world ranks, counts collectives (the sequence
number that goes in every header), and owns the scratch the algorithms use.
Each collective runs as an `Op`: the header that describes it, its deadline,
and `exchange()`, the single primitive every algorithm is written against.

Point-to-point messages travel on their own connections (channel P2P), each
framed by a header naming source, tag, dtype and size. A receive reads
headers in arrival order; messages it does not want yet are buffered in an
unexpected-message queue, so messages from one sender with one tag are
received in the order sent, and ANY_SOURCE / ANY_TAG match the oldest.
"""
import contextlib
import os
import select
import time
import zlib

import numpy as np

from . import _io
from ._dtypes import DT_BYTES, dtype_name
from ._errors import CommError, MismatchError
from ._protocol import COLL, FLAG_OBJECT, HEADER_NBYTES, KIND_COLL, KIND_P2P, decode, encode, shape_hash
from ._transport import CH_COLL, CH_P2P, new_state

ANY_SOURCE = -1
ANY_TAG = -1
DEFAULT_CHUNK_BYTES = 256 << 10
PEER_CHECK_S = 1.0  # a collective step stuck this long asks its peer which collective it is in


def _env_int(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise CommError(f"{name}={value!r} is not an integer") from None


class Status:
    """What a receive matched: `source` (group rank), `tag`, `nbytes`."""

    __slots__ = ("source", "tag", "nbytes", "count", "dtype")

    def __init__(self, source, tag, nbytes, count=0, dtype=None):
        self.source, self.tag, self.nbytes, self.count, self.dtype = source, tag, nbytes, count, dtype

    def __repr__(self):
        return f"Status(source={self.source}, tag={self.tag}, nbytes={self.nbytes})"


_RELAY = {None: _io.FORWARD_NONE, "received": _io.FORWARD_RECEIVED, "reduced": _io.FORWARD_REDUCED}


class Op:
    """One collective in flight: its header, deadline and step primitive."""

    __slots__ = ("group", "rank", "size", "hdr", "coll", "seq", "deadline", "dtype", "redop", "dims")

    def __init__(self, group, coll, dtype, redop, count, root, shape, dims):
        g = group
        g.seq += 1
        self.group, self.rank, self.size = g, g._rank, g._size
        self.coll, self.seq = coll, g.seq
        self.dtype, self.redop, self.dims = dtype, redop, dims
        if dims is not None:
            shape ^= shape_hash(dims)
        self.hdr = encode(KIND_COLL, COLL[coll], dtype, redop, 0, g.gid, root, shape, g.seq, 0, count, 0)
        self.deadline = time.monotonic() + g.timeout
        if g.ep is not None:
            g.ep.last = self  # formatted only if a stall report asks

    @property
    def what(self):
        """`all_reduce #17`: how errors and stall reports name this operation."""
        return f"{self.coll} #{self.seq}"

    __str__ = what.fget

    def exchange(self, dst, send_ptr, send_len, src, recv_ptr, recv_len, *, reduce_dst=0, init=0, relay=None,
                 swap=False):
        """Send to dst while receiving from src (group ranks; None: no such side).

        reduce_dst: reduce what arrives into this address (init: copy from here first).
        relay: "received" sends bytes only once they arrived (send_ptr == recv_ptr);
        "reduced" sends them once reduced (send_ptr == reduce_dst).
        swap: reduce as op(received, mine) rather than op(mine, received).
        """
        g = self.group
        ep = g.ep
        sfd = rfd = -1
        if dst is not None:
            sfd = ep.fds.get((g.gid, CH_COLL, g.world[dst], 1))
            if sfd is None:
                sfd = ep.outgoing(g.gid, CH_COLL, g.world[dst], self.deadline, self.what)
        if src is not None:
            rfd = ep.fds.get((g.gid, CH_COLL, g.world[src], 0))
            if rfd is None:
                rfd = ep.incoming(g.gid, CH_COLL, g.world[src], self.deadline, self.what, self.hdr, self.dims,
                                  PEER_CHECK_S)
        stepper = g.stepper
        state = stepper.state
        ep.current = (self, g._wr(src if src is not None else dst), self.hdr)
        rc = stepper.run(sfd, self.hdr, send_ptr, send_len, rfd, recv_ptr, recv_len, reduce_dst, init,
                         self.dtype, self.redop, _RELAY[relay], swap, self.deadline, False)
        while rc == _io.SLOW:
            # Stuck: two ranks in different collectives can each wait to receive
            # from the other, so no header ever reaches a receiver. Ask the peer.
            waiting_on = src if src is not None and state[1] < recv_len + HEADER_NBYTES else dst
            exc = ep.check_peer(g._wr(waiting_on), self.hdr, self.dims)
            if exc is not None:
                ep.current = None
                ep.spread(exc)
                raise exc
            rc = stepper.run(sfd, self.hdr, send_ptr, send_len, rfd, recv_ptr, recv_len, reduce_dst, init,
                             self.dtype, self.redop, _RELAY[relay], swap, self.deadline, True)
        if rc:
            exc = ep.status_error(rc, state, self.what, g._wr(dst), send_len, g._wr(src), recv_len,
                                  self.hdr, stepper.rhdr, self.dims)
            ep.current = None
            ep.spread(exc)
            raise exc
        ep.current = None

    copy = staticmethod(_io.copy)


class Group:
    """A set of ranks that run collectives together (see API.md)."""

    def __init__(self, ep, gid, world, rank, timeout):
        self.ep = ep  # None for the singleton group
        self.gid = gid
        self.world = world  # group rank -> world rank
        self._rank = rank
        self._size = len(world)
        self.timeout = timeout
        self.seq = 0
        self.splits = 0
        self.chunk = _env_int("COMMLIB_CHUNK_BYTES", DEFAULT_CHUNK_BYTES)
        if self.chunk < 64:
            raise CommError(f"COMMLIB_CHUNK_BYTES={self.chunk} is too small (minimum 64)")
        self.chunk -= self.chunk % 16
        spin_us = _env_int("COMMLIB_SPIN_US", -1)
        if spin_us < 0:  # spin briefly only when every rank here can have a core
            local = _env_int("COMMLIB_LOCAL_SIZE", 1)
            spin_us = 50 if local <= len(os.sched_getaffinity(0)) else 0
        self.spin_s = spin_us * 1e-6
        self.ring_len = 4 * self.chunk
        self._ring = None
        self.state = new_state()
        self._queue = []  # unexpected point-to-point messages: (Header, uint8 array)
        self._scratch = None
        self._stepper = None

    # ----------------------------------------------------------------- public
    def rank(self):
        """This process's rank in the group."""
        return self._rank

    def size(self):
        """Number of ranks in the group."""
        return self._size

    def __repr__(self):
        return f"<commlib.Group rank {self._rank} of {self._size}>"

    def split(self, color, key=None):
        """MPI_Comm_split: ranks with equal color form a group ordered by (key, rank).

        A negative color leaves this rank out: it gets None.
        """
        from ._api import all_gather  # the API layer validates and runs the gather

        color, key = int(color), int(self._rank if key is None else key)
        table = all_gather(np.array([color, key], dtype=np.int64), group=self).reshape(self._size, 2)
        self.splits += 1
        if color < 0:
            return None
        members = sorted((int(k), r) for r, (c, k) in enumerate(table) if c == color)
        ranks = [r for _, r in members]
        gid = zlib.crc32(f"{self.gid}/{self.splits}/{color}".encode()) | 1
        return Group(self.ep, gid, [self.world[r] for r in ranks], ranks.index(self._rank), self.timeout)

    # ----------------------------------------------------------------- helpers
    def _wr(self, r):
        return None if r is None else self.world[r]

    @property
    def stepper(self):
        """The collective step loop bound to this group's constants (created on first use)."""
        if self._stepper is None:
            self._stepper = _io.Stepper(self.state, self.chunk, self.ep.wake_r, self.ring_ptr, self.ring_len,
                                        self.spin_s, PEER_CHECK_S)
        return self._stepper

    @property
    def ring_ptr(self):
        if self._ring is None:
            self._ring = np.empty(self.ring_len, dtype=np.uint8)
            self._ring_addr = self._ring.ctypes.data
        return self._ring_addr

    def scratch(self, nbytes):
        """Address of a reusable scratch buffer of at least nbytes."""
        if self._scratch is None or self._scratch.nbytes < nbytes:
            self._scratch = np.empty(max(nbytes, 4096), dtype=np.uint8)
            self._scratch_addr = self._scratch.ctypes.data
        return self._scratch_addr

    def op(self, coll, dtype, redop, count, root=0, shape=0, dims=None):
        """Start a collective. `dims`: the shape all ranks must agree on; `shape`: more bits to agree on."""
        if self.ep is not None:
            self.ep.raise_if_failed()
        return Op(self, coll, dtype, redop, count, root, shape, dims)

    def check_rank(self, r, what):
        if not isinstance(r, (int, np.integer)) or not 0 <= r < self._size:
            raise ValueError(f"{what}={r!r} is not a rank of this group (size {self._size})")
        return int(r)

    # ------------------------------------------------------- point-to-point
    def _step(self, send_fd, hdr, ptr, nbytes, recv_fd, recv_ptr, recv_len, deadline, what, peer):
        """Point-to-point: send (header +) payload and/or receive raw bytes, raising on failure."""
        ep, stepper = self.ep, self.stepper
        ep.current = (what, self.world[peer], None)
        rc = stepper.raw(send_fd, hdr or b"", ptr, nbytes, recv_fd, recv_ptr, recv_len, deadline, False)
        while rc == _io.SLOW:  # a receive may wait long for its sender: that is no error
            rc = stepper.raw(send_fd, hdr or b"", ptr, nbytes, recv_fd, recv_ptr, recv_len, deadline, True)
        if rc:
            w = self.world[peer]
            exc = ep.status_error(rc, stepper.state, what, w if send_fd >= 0 else None, nbytes,
                                  w if recv_fd >= 0 else None, recv_len, b"", b"")
            ep.current = None
            ep.spread(exc)
            raise exc
        ep.current = None

    def send_bytes(self, ptr, nbytes, dtype, count, dst, tag, flags=0, what="send"):
        """Send one framed message of nbytes at address ptr to group rank dst."""
        self.ep.raise_if_failed()
        deadline = time.monotonic() + self.timeout
        hdr = encode(KIND_P2P, 0, dtype, 0, flags, self.gid, self._rank, 0, 0, tag, count, nbytes)
        fd = self.ep.outgoing(self.gid, CH_P2P, self.world[dst], deadline, what)
        self._step(fd, hdr, ptr, nbytes, -1, 0, 0, deadline, what, dst)

    def sendrecv_bytes(self, ptr, nbytes, dtype, count, dst, into, src, tag):
        """Send to dst while receiving the (src, tag) message of the same size into `into`.

        Both directions progress together, so two ranks exchanging large
        arrays cannot block each other. A different message arriving first
        is queued and the exchange resumes where it was.
        """
        ep, what = self.ep, f"sendrecv(tag={tag})"
        ep.raise_if_failed()
        deadline = time.monotonic() + self.timeout
        hdr = encode(KIND_P2P, 0, dtype, 0, 0, self.gid, self._rank, 0, 0, tag, count, nbytes)
        sfd = ep.outgoing(self.gid, CH_P2P, self.world[dst], deadline, what)
        i = self._find(src, tag)
        if i is not None:
            h, payload = self._queue.pop(i)
            check_message(h, dtype, nbytes, what, ep.rank, self.world)
            into[:h.nbytes] = payload
            self._step(sfd, hdr, ptr, nbytes, -1, 0, 0, deadline, what, dst)
            return
        expect = encode(KIND_P2P, 0, dtype, 0, 0, self.gid, src, 0, 0, tag, count, nbytes)
        rfd = ep.incoming(self.gid, CH_P2P, self.world[src], deadline, what)
        stepper = self.stepper
        state, addr, resume = stepper.state, _io.address(into), False
        while True:
            rc = stepper.raw(sfd, hdr, ptr, nbytes, rfd, addr, nbytes, deadline, resume, expect)
            resume = True
            if rc == _io.SLOW:  # waiting for the partner is no error
                continue
            if rc == _io.MISMATCH:
                h = decode(bytes(stepper.rhdr))
                if h.root == src and h.tag == tag or h.group != self.gid or h.kind != KIND_P2P:
                    check_message(h, dtype, nbytes, what, ep.rank, self.world)
                    raise ep.fail(MismatchError(f"rank {ep.rank}: {what} expected {nbytes} bytes of "
                                                f"{dtype_name(dtype)} from rank {self.world[src]}, got {h!r}"))
                # Another message came first: queue it (reading it reuses the stepper's
                # state), then resume the exchange with what was already sent.
                sent = int(state[0])
                payload = np.empty(h.nbytes, dtype=np.uint8)
                if h.nbytes:
                    self._step(-1, None, 0, 0, rfd, _io.address(payload), h.nbytes, deadline, what, src)
                self._queue.append((h, payload))
                state[:] = 0
                state[0] = sent
                continue
            if rc:
                exc = ep.status_error(rc, state, what, self.world[dst], nbytes, self.world[src], nbytes, b"", b"")
                ep.spread(exc)
                raise exc
            return

    def _read_one(self, fd, src, deadline, what, into=None, match=None, header=None):
        """Read one whole message from fd (from group rank src).

        If `match(header)` is true and `into` (uint8 array) can hold it, the
        payload lands in `into` and (header, into) is returned without queueing;
        otherwise it is queued and (header, None) returned. `header`: its bytes,
        when they have been read already.
        """
        if header is None:
            hbuf = bytearray(HEADER_NBYTES)
            self._step(-1, None, 0, 0, fd, _io.address(hbuf), HEADER_NBYTES, deadline, what, src)
            header = bytes(hbuf)
        h = decode(header)
        if h.kind != KIND_P2P or h.group != self.gid or h.root != src:
            raise self.ep.fail(CommError(f"rank {self.ep.rank}: {what}: unexpected frame from rank "
                                         f"{self.world[src]} on the point-to-point channel: {h!r}"))
        direct = into is not None and match is not None and match(h) and h.nbytes <= into.nbytes
        payload = into if direct else np.empty(h.nbytes, dtype=np.uint8)
        if h.nbytes:
            self._step(-1, None, 0, 0, fd, _io.address(payload), h.nbytes, deadline, what, src)
        if direct:
            return h, into
        self._queue.append((h, payload))
        return h, None

    def _find(self, src, tag):
        for i, (h, _) in enumerate(self._queue):
            if (src == ANY_SOURCE or h.root == src) and (tag == ANY_TAG or h.tag == tag):
                return i
        return None

    def _recv_expected(self, fd, src, expect, into, deadline, what):
        """One step for header + payload into `into` if the header is `expect`.

        Returns None when it was, else the header that arrived instead (its
        payload not read yet: a mismatched header stops the step before any
        payload byte lands).
        """
        ep, stepper = self.ep, self.stepper
        ep.current = (what, self.world[src], None)
        addr = _io.address(into)
        rc = stepper.run(-1, expect, 0, 0, fd, addr, into.nbytes, 0, 0, 0, 0, 0, False, deadline, False)
        while rc == _io.SLOW:
            rc = stepper.run(-1, expect, 0, 0, fd, addr, into.nbytes, 0, 0, 0, 0, 0, False, deadline, True)
        ep.current = None
        if rc == 0:
            return None
        if rc == _io.MISMATCH:
            return bytes(stepper.rhdr)
        w = self.world[src]
        exc = ep.status_error(rc, stepper.state, what, None, 0, w, into.nbytes, b"", b"")
        ep.spread(exc)
        raise exc

    def _pull(self, src, tag, deadline, what, block=True, into=None, expect=None):
        """Wait for a matching message. Returns (header, payload, in_into)."""
        i = self._find(src, tag)
        if i is not None:
            h, p = self._queue.pop(i)
            return h, p, False
        ep = self.ep

        def match(h):
            return (src == ANY_SOURCE or h.root == src) and (tag == ANY_TAG or h.tag == tag)

        if src != ANY_SOURCE and block:
            fd = ep.incoming(self.gid, CH_P2P, self.world[src], deadline, what)
            header = None
            if expect is not None:  # the common case: exactly the message posted, straight into `into`
                header = self._recv_expected(fd, src, expect, into, deadline, what)
                if header is None:
                    return decode(expect), into, True
            while True:
                h, p = self._read_one(fd, src, deadline, what, into, match, header)
                header = None
                if p is not None:
                    return h, p, True
                if match(h):
                    return h, self._queue.pop()[1], False
        world_to_group = {w: g for g, w in enumerate(self.world)}
        while True:
            ep.raise_if_failed()
            fds = {fd: world_to_group[w] for fd, w in ep.incoming_fds(self.gid, CH_P2P).items()
                   if src == ANY_SOURCE or w == self.world[src]}
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            poller.register(ep.arrival_r, select.POLLIN)
            poller.register(ep.wake_r, select.POLLIN)
            left = deadline - time.monotonic() if block else 0
            if block and left <= 0:
                exc = _timeout(ep.rank, what, self.timeout, src, self.world)
                raise ep.fail(type(exc)(str(exc) + ep.stall_report(), rank=exc.rank, op=what))
            ep.current = (what, None if src == ANY_SOURCE else self.world[src], None)
            events = poller.poll(max(0, int(left * 1000)) + (1 if block else 0))
            ep.current = None
            if not events and not block:
                return None
            with contextlib.suppress(BlockingIOError):
                os.read(ep.arrival_r, 4096)
            for fd, _ in events:
                if fd in fds:
                    h, p = self._read_one(fd, fds[fd], deadline, what, into, match)
                    if p is not None:
                        return h, p, True
            i = self._find(src, tag)
            if i is not None:
                h, p = self._queue.pop(i)
                return h, p, False
            if not block:
                return None

    def recv_bytes(self, src, tag, what, into=None, expect=None):
        """Receive one message matching (src, tag); (Header, uint8 payload array).

        expect: the exact header the caller hopes for (specific src and tag),
        which lets it arrive in one step straight into `into`.
        """
        if self.ep is None:  # size-1 group: only messages sent to self can match
            i = self._find(src, tag)
            if i is None:
                raise CommError(f"{what} on a group of size 1 with no message sent to self: it would wait forever")
            return self._queue.pop(i)
        self.ep.raise_if_failed()
        deadline = time.monotonic() + self.timeout
        h, payload, _ = self._pull(src, tag, deadline, what, into=into, expect=expect)
        return h, payload

    def probe(self, src, tag, block):
        """Status of the next matching message, leaving it queued (None: nothing, when not blocking)."""
        if self.ep is None:  # size-1 group: only messages sent to self can be waiting
            i = self._find(src, tag)
            if i is None:
                if block:
                    raise CommError("probe on a group of size 1 with no message sent to self: it would wait forever")
                return None
            h = self._queue[i][0]
            return Status(h.root, h.tag, h.nbytes, h.count, h.dtype)
        self.ep.raise_if_failed()
        deadline = time.monotonic() + self.timeout
        i = self._find(src, tag)
        if i is None:
            got = self._pull(src, tag, deadline, "probe", block=block)
            if got is None:
                return None
            h, p, _ = got
            self._queue.insert(0, (h, p))  # back to the front: it is the oldest match
        else:
            h = self._queue[i][0]
        return Status(h.root, h.tag, h.nbytes, h.count, h.dtype)


def _timeout(me, what, timeout, src, world):
    from ._errors import CommTimeout

    who = "any rank" if src == ANY_SOURCE else f"rank {world[src]}"
    return CommTimeout(f"rank {me}: {what} waited {timeout:g} s for a message from {who}",
                       rank=None if src == ANY_SOURCE else world[src], op=what)


def check_message(h, dtype, nbytes, what, me, world, flags=0):
    """Raise MismatchError when a received message does not fit what the receiver posted."""
    if bool(h.flags & FLAG_OBJECT) != bool(flags & FLAG_OBJECT):
        kind = "an object (send_obj)" if h.flags & FLAG_OBJECT else "an array (send)"
        raise MismatchError(f"rank {me}: {what} expected {'an object' if flags else 'an array'} but rank "
                            f"{world[h.root]} sent {kind} with tag {h.tag}", rank=world[h.root])
    if dtype is not None and h.dtype != dtype and h.dtype != DT_BYTES:
        raise MismatchError(f"rank {me}: {what} posted {dtype_name(dtype)} but rank {world[h.root]} sent "
                            f"{dtype_name(h.dtype)} (tag {h.tag})", rank=world[h.root])
    if nbytes is not None and h.nbytes > nbytes:
        raise MismatchError(f"rank {me}: {what} posted {nbytes} bytes but rank {world[h.root]} sent "
                            f"{h.nbytes} (tag {h.tag})", rank=world[h.root])
