"""Schedules as data: the plan format every algorithm writes and the one executor runs.

What: a plan is a table of rows, one per step of a collective as seen by one
rank. A STEP row sends a region to one group rank while it receives into a
region from another (either side may be absent), optionally reducing what
arrives into the region (and copying an `init` region there first), swapping
the operands, or relaying bytes as they arrive / are reduced. A COPY row moves
a region inside this rank (a snapshot, a block put in place).

Goals: an algorithm is written once (`_algorithms/`), as a function of
(group size, rank, root) that returns a `Plan`; the plan is cached, so a
collective costs one dictionary look-up for its schedule; the executor
(`_transport/_io.pyx`) runs every row with the GIL released once; the
in-memory fake of the unit tests runs the very same rows.

Plan: a region is (slot, lo, hi): units lo..hi-1 of a buffer. Slots name the
buffers of a call (X the input, RES the result, SCRATCH, and T0/T1, two
blocks of scratch); the caller gives their addresses. Units are `parts`
near-equal pieces of the payload (`bounds()`: the ring's blocks; one unit
is the whole buffer: `even()`, computed by the executor), or any boundaries
the caller passes (`bounds()`, `explicit_bounds()`: the variable-size blocks
of an object all-gather). A LOCAL region holds just its units at the
start of its slot (a one-block buffer), so its address does not move with lo.
A plan's sizes come from the bounds given at run time, so one plan serves
every message size of its algorithm.

The field order below is the executor's C struct (`_io.pyx` checks it at import).
"""
import functools

import numpy as np

FIELDS = ("kind", "dst", "src", "send_slot", "send_lo", "send_hi", "recv_slot", "recv_lo", "recv_hi",
          "init_slot", "flags")

STEP, COPY = 0, 1  # row kinds
X, RES, SCRATCH, T0, T1 = 0, 1, 2, 3, 4  # slots
NSLOTS = 5
SLOT_NAMES = ("x", "result", "scratch", "tmp0", "tmp1")
NONE = -1  # no peer / no region
LOCAL = "local"  # a region's 4th element: (slot, lo, hi, LOCAL) sits at the start of its slot

# flags
REDUCE = 1  # reduce what arrives into the receive region (through the step loop's scratch ring)
SWAP = 2  # reduce as op(received, mine): both partners of an exchange compute the same bits
RELAY_RECEIVED = 4  # send only bytes that have arrived (send region == receive region)
RELAY_REDUCED = 8  # send only bytes that have been reduced (send region == receive region)
SEND_LOCAL = 16  # the send region sits at the start of its slot
RECV_LOCAL = 32  # ... the receive (or reduce) region
INIT_LOCAL = 64  # ... the init region
FROM_RELAY = 128  # the sender of what this row receives relays it (its message may wait on its own input)


class Plan:
    """One rank's schedule of one algorithm: `rows` (int32, one row per step), `parts` units.

    `slots`: the slots the rows touch (a caller need not allocate the others).
    """

    __slots__ = ("name", "parts", "rows", "slots", "peers")

    def __init__(self, name, parts, rows):
        self.name, self.parts = name, parts
        self.rows = np.array(rows, dtype=np.int32).reshape(len(rows), len(FIELDS))
        self.rows.flags.writeable = False
        used = set()
        for row in rows:
            for slot in (row[3], row[6], row[9]):
                if slot >= 0:
                    used.add(slot)
        self.slots = frozenset(used)
        self.peers = frozenset(p for row in rows for p in (row[1], row[2]) if p >= 0)

    def __len__(self):
        return len(self.rows)

    def steps(self):
        """How many rows exchange with a peer (copies excluded)."""
        return int(np.count_nonzero(self.rows[:, 0] == STEP)) if len(self.rows) else 0

    def __repr__(self):
        return f"<Plan {self.name}: {len(self.rows)} rows, {self.parts} parts>"


class Builder:
    """Collects rows; regions are (slot, lo, hi) or (slot, lo, hi, LOCAL) tuples, None for no region."""

    def __init__(self, name, parts):
        self.name, self.parts, self.rows = name, parts, []

    def whole(self, slot):
        return (slot, 0, self.parts)

    def step(self, dst=None, send=None, src=None, recv=None, *, reduce=False, init=None, swap=False, relay=None,
             from_relay=False):
        """from_relay: src's row that sends this relays it (both relay ends use the group's own lane,
        CollectiveChannel: a message that waits on its sender's input must not hold a shared connection)."""
        flags = (REDUCE if reduce else 0) | (SWAP if swap else 0) | (FROM_RELAY if from_relay else 0)
        flags |= {None: 0, "received": RELAY_RECEIVED, "reduced": RELAY_REDUCED}[relay]
        if relay is not None and send[:3] != recv[:3]:
            raise ValueError("a relay sends the region it receives")
        s, sl = _region(send, SEND_LOCAL)
        r, rl = _region(recv, RECV_LOCAL)
        i, il = _region(init, INIT_LOCAL)
        if init is not None and init[1:3] != recv[1:3]:
            raise ValueError("init covers the units it initialises")
        self.rows.append((STEP, NONE if dst is None else dst, NONE if src is None else src, *s, *r, i[0],
                          flags | sl | rl | il))

    def copy(self, to, frm):
        """Copy region `frm` into region `to` (the same length; skipped where they coincide)."""
        s, sl = _region(frm, SEND_LOCAL)
        r, rl = _region(to, RECV_LOCAL)
        self.rows.append((COPY, NONE, NONE, *s, *r, NONE, sl | rl))

    def plan(self):
        return Plan(self.name, self.parts, self.rows)


def _region(region, local_flag):
    if region is None:
        return (NONE, 0, 0), 0
    if len(region) == 4:
        return tuple(region[:3]), local_flag
    return tuple(region), 0


def slots(x=0, res=0, scratch=0, t0=0, t1=0):
    """The slot addresses of one call, in slot order (0: a slot the plan does not use)."""
    return [x, res, scratch, t0, t1]


def even(count, item):
    """The units of a plan as near-equal blocks of `count` elements of `item` bytes (the plan says how many),
    computed by the executor itself: what every collective but the object all-gather passes."""
    return (count, item)


def bounds(count, item, parts):
    """Byte boundaries (int64, parts + 1) of `parts` near-equal blocks of `count` elements of `item` bytes:
    the first count % parts blocks one element longer (ring.blocks)."""
    base, extra = divmod(count, parts)
    i = np.arange(parts + 1, dtype=np.int64)
    return (i * base + np.minimum(i, extra)) * item


def explicit_bounds(lengths):
    """Byte boundaries of consecutive blocks of the given byte lengths."""
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


@functools.lru_cache(maxsize=256)
def single(dst, src):
    """One step: send slot X to dst and/or receive slot RES from src (one unit: the whole buffer each)."""
    b = Builder("single", 1)
    b.step(dst, b.whole(X) if dst is not None else None, src, b.whole(RES) if src is not None else None)
    return b.plan()
