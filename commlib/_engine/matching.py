"""Message matching for point-to-point, as MPI defines it: pure data structures, no I/O.

Per group context two queues: receives posted and not yet matched, and
messages that arrived (wholly or in part) before any receive wanted them.
A message is matched against the posted receives in the order they were
posted; a receive is matched against the unexpected messages in the order
they arrived. Messages from one sender arrive in the order sent (one
connection per sender), so two messages of one (sender, tag) can never
overtake each other. Probes look without taking; a matched probe (MPI's
Mprobe) takes without receiving: the message leaves matching for good and only
a receive of that very message (`Receives.mrecv`) gets it.

The progress engine (`p2p.py`) feeds `arrive()` and `post()`; the unit tests
drive them directly.
"""
import collections

ANY_SOURCE = -1
ANY_TAG = -1


def matches(source, tag, msg_source, msg_tag):
    """ANY_TAG matches the user's tags (>= 0) only: negative tags are reserved for layers above
    (commlib.MPI's collectives over point-to-point), so a wildcard receive never takes them."""
    return (source == ANY_SOURCE or source == msg_source) and (tag == msg_tag or (tag == ANY_TAG and msg_tag >= 0))


class Message:
    """A message that has arrived, or is arriving: header facts plus its payload buffer."""

    __slots__ = ("source", "tag", "nbytes", "dtype", "count", "flags", "seq", "data", "complete", "taker",
                 "local_sender")

    def __init__(self, source, tag, nbytes, dtype=0, count=0, flags=0, seq=0, data=None, complete=False):
        self.source, self.tag, self.nbytes, self.dtype, self.count = source, tag, nbytes, dtype, count
        self.flags, self.seq, self.data, self.complete = flags, seq, data, complete
        self.taker = None  # the Posted receive that took it while its payload was still arriving
        self.local_sender = None  # a send to self: the issend Request that completes when it is matched

    def __repr__(self):
        return (f"Message(source={self.source}, tag={self.tag}, nbytes={self.nbytes}, "
                f"{'complete' if self.complete else 'arriving'})")


class Posted:
    """A receive (or probe) waiting for a message of (source, tag)."""

    __slots__ = ("source", "tag", "probe", "claim", "into", "req", "extra")

    def __init__(self, source, tag, *, probe=False, claim=False, into=None, req=None, extra=None):
        self.source, self.tag, self.probe, self.into, self.req, self.extra = source, tag, probe, into, req, extra
        self.claim = claim  # a matched probe: the message it finds leaves matching

    def __repr__(self):
        kind = "matched probe" if self.claim else "probe" if self.probe else "recv"
        return f"Posted({kind} source={self.source}, tag={self.tag})"


class Matcher:
    """The posted-receive and unexpected-message queues of one group."""

    def __init__(self):
        self.posted = collections.deque()
        self.unexpected = collections.deque()

    def arrive(self, msg):
        """A message's header arrived. Returns (receive that takes it or None, probes it satisfies).

        Without a taker the message joins the unexpected queue (its payload may
        still be arriving) unless a matched probe took it; satisfied probes leave
        the posted queue.
        """
        probes, taker, claimed = [], None, False
        for p in list(self.posted):
            if not matches(p.source, p.tag, msg.source, msg.tag):
                continue
            self.posted.remove(p)
            if p.probe:
                probes.append(p)
                if p.claim:
                    claimed = True
                    break
                continue
            taker = p
            break
        if taker is None and not claimed:
            self.unexpected.append(msg)
        return taker, probes

    def post(self, posted):
        """Post a receive or probe. Returns the message it matches now (a receive takes it out of
        the unexpected queue; a probe leaves it there), or None when it was queued to wait."""
        for msg in self.unexpected:
            if matches(posted.source, posted.tag, msg.source, msg.tag):
                if not posted.probe or posted.claim:
                    self.unexpected.remove(msg)
                return msg
        self.posted.append(posted)
        return None

    def find(self, source, tag):
        """The oldest unexpected message matching (source, tag), left in place; or None."""
        for msg in self.unexpected:
            if matches(source, tag, msg.source, msg.tag):
                return msg
        return None

    def claim(self, source, tag):
        """The oldest unexpected message matching (source, tag), taken out of matching; or None."""
        msg = self.find(source, tag)
        if msg is not None:
            self.unexpected.remove(msg)
        return msg

    def cancel(self, posted):
        """Withdraw a receive that has not matched; False when it already has."""
        try:
            self.posted.remove(posted)
        except ValueError:
            return False
        return True

    def drop_posted(self):
        """Every posted receive and probe, removed (finalize, or the job failed)."""
        out = list(self.posted)
        self.posted.clear()
        return out
