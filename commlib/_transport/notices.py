"""The job's control channel as this rank sees it: coordinator notices, stall queries, digests.

The coordinator (`_rendezvous`) pushes notices to every rank: a peer died,
left (after finalize()), lost its connection, or aborted the job with an
error; a peer asks what this rank is doing (a stall query, answered with the
operation it is blocked in and that operation's header); peers that are
finishing (in finalize(), their sends flushed); the coordinator's verdict on
the collective digests at finalize(), which it compares itself (each rank's
digest goes to the coordinator only: no rank receives n of them). `Notices.on_notice` runs on the coordinator listener
thread and only records facts or calls `Endpoint.fail`: it never blocks on
the data path.
"""
import collections
import contextlib
import logging
import queue
import threading
import time

from .._errors import CommError, CommTimeout, MismatchError, PeerLost
from .._control import census_wait_s, clock_offset, unpack_peers, unpack_ranks

log = logging.getLogger("commlib")
LOST_GRACE_S = 0.5  # how long a "lost" peer waits for the launcher's "died" notice (exit status)
EXIT_GRACE_S = 2.0  # how long a peer whose program ended waits for that process's exit status
STALL_EACH = 16  # up to this many other ranks, a stall report gives each its own line
_SILENT = "no answer (stopped, or holding the GIL?)"
_ERRORS = {"MismatchError": MismatchError, "CommTimeout": CommTimeout, "PeerLost": PeerLost}


class Notices:
    """Facts about the other ranks, learned over the coordinator."""

    def __init__(self, ep):
        self.ep = ep
        self.rank = ep.rank
        self.send = None  # callable(dict): a message to the coordinator (set once registered)
        self.exits = {}  # world rank -> "exited with code 3" / "it called finalize()"
        self.current = None  # (what, peer world rank, header bytes or None) while blocked
        self.last = None  # the last operation this rank entered (formatted only when asked)
        self.finished = {}  # world rank in finalize() -> {"at_exit": bool, "exit_code": int or None}
        self.verdict = None  # finalize(): the coordinator's {world rank: digest} to compare ours with ({}: all agree)
        self.reports = {}  # topic -> {world rank: "report" message}
        self._statuses = {}
        self._census = None  # the coordinator's last "stall" census
        self._died = set()  # world ranks the launcher reported as exited
        self._cond = threading.Condition()
        self._spread = False
        self.coordinator_rank = None  # the rank whose process hosts the coordinator (None: the launcher does)
        self._clock = queue.Queue()  # the coordinator's "clock" replies (a trace's alignment at the end)
        self.on_close_asked = None  # callable(world rank): the point-to-point engine's, once it exists

    # ------------------------------------------------------------ incoming
    def clock_offset(self):
        """The coordinator's clock against ours ((offset, error, when) ns, or None), while the
        listener runs (commlib._trace at finalize)."""

        def receive(left):
            try:
                return self._clock.get(timeout=max(left, 0.001)) if left > 0 else None
            except queue.Empty:
                return None
        return clock_offset(self.send, receive)

    def _limit(self):
        """One past the highest world rank a notice can name."""
        table = getattr(self.ep, "table", None)  # (None until the table arrives)
        return len(table) if table else 1 << 24

    def _ranks(self, msg, peer):
        """The ranks a coalesced notice names (_control.pack_ranks), or [peer]; junk reads as [peer]."""
        try:
            return unpack_ranks(msg["ranks"], self._limit()) if "ranks" in msg else [peer]
        except ValueError:
            log.warning("commlib rank %s: malformed %r notice from the coordinator", self.rank, msg.get("kind"))
            return [peer]

    def on_notice(self, msg):
        """Coordinator push (listener thread)."""
        kind, peer = msg.get("kind"), msg.get("rank")
        ep = self.ep
        if kind == "died":
            with self._cond:
                self.exits[peer] = msg.get("message") or f"exited with code {msg.get('code')}"
                self._died.add(peer)
                self._cond.notify_all()
            if msg.get("code") != 0 and not ep.closed:
                ep.fail(PeerLost(f"rank {self.rank}: lost rank {peer} ({self.exits[peer]})", rank=peer), remote=True)
        elif kind == "lost":
            message = msg.get("message") or "lost its coordinator connection"
            if self.coordinator_rank is not None:
                # No launcher reports exits (torchrun, Ray, srun: a rank hosts the coordinator),
                # so no better cause will come: fail now. Waiting, the survivors of a Ray Train
                # worker group were torn down before they could say why.
                self._lost(peer, message)
                return
            # The coordinator sees the connection drop before the launcher has
            # reaped the process: give its "died" notice (with the exit status)
            # a moment, then fail with what is known. Until then the peer is not
            # "gone" (gone() would fail point-to-point requests with the lesser text).
            timer = threading.Timer(LOST_GRACE_S, self._lost, args=(peer, message))
            timer.daemon = True
            timer.start()
        elif kind == "clock":
            self._clock.put(msg)
        elif kind == "close_asked":  # a receiver over its incoming limit: close our idle connection to it
            origin, handler = msg.get("from"), self.on_close_asked
            if handler is not None and type(origin) is int and 0 <= origin < self._limit():
                handler(origin)
        elif kind == "link_silent":  # from this host's agent: its link to the coordinator (commrun/proxy.py)
            since = msg.get("since")
            ep.coordinator_silent = (float(since), str(msg.get("coordinator"))) if isinstance(since, (int, float)) \
                else None
        elif kind == "finishing":  # ranks in finalize() (coalesced), how their programs ended where they did
            ranks = self._ranks(msg, peer)
            ends = {}  # rank -> (at_exit, exit code), for those whose program ended
            for end in msg.get("ends") or []:
                with contextlib.suppress(ValueError, TypeError):
                    at_exit, code, which = end
                    for r in unpack_ranks(which, self._limit()):
                        ends[r] = (bool(at_exit), code if type(code) is int else None)
            with self._cond:
                for r in ranks:
                    at_exit, code = ends.get(r, (False, None))
                    self.finished[r] = {"at_exit": at_exit, "exit_code": code}
                self._cond.notify_all()
        elif kind == "verdict":  # finalize(): the digests ours differs from (none when every rank agrees)
            with self._cond:
                self.verdict = {int(r): d for r, d in (msg.get("peers") or {}).items()}
                self._cond.notify_all()
        elif kind == "left":  # one rank's goodbye, or several coalesced ("ranks")
            ranks = self._ranks(msg, peer)
            with self._cond:
                for r in ranks:
                    self.exits.setdefault(r, self._finished_text(r))
                self._cond.notify_all()
        elif kind == "abort":
            error, origin = msg.get("error"), msg.get("from", peer)
            cls = _ERRORS.get(error, PeerLost)
            text = msg.get("message", "")
            if error == "abort":  # MPI_Abort / commlib's abort(): the message says why
                text = f"rank {self.rank}: rank {origin} aborted the job: {text}"
            elif error not in ("MismatchError", "CommTimeout", "PeerLost", "CommError", "AuthError"):
                text = f"rank {self.rank}: rank {origin} failed: {text}"
            elif error != "MismatchError":  # the text is rank origin's view: say so
                text = f"rank {self.rank}: rank {origin} reported: {text}"
            ep.fail(cls(text, rank=origin), remote=True)
        elif kind == "status_query" and self.send is not None:
            current = self.current
            hdr = current[2].hex() if current is not None and current[2] is not None else None
            # If the coordinator is gone the asker learns that from its own connection.
            with contextlib.suppress(CommError):
                if "census" in msg:  # the coordinator's, for a stall report: answered to it, in parts
                    state, waiting_on = self._state()
                    self.send({"kind": "status", "census": msg["census"], "rank": self.rank, "state": state,
                               "peer": waiting_on})
                else:
                    self.send({"kind": "status", "to": [msg.get("from")], "rank": self.rank,
                               "state": self.describe(), "hdr": hdr})
        elif kind == "stall":  # the coordinator's census of the job, for this rank's stall report
            with self._cond:
                self._census = msg
                self._cond.notify_all()
        elif kind == "status":
            with self._cond:
                self._statuses[msg.get("from", peer)] = msg
                self._cond.notify_all()
        elif kind == "report":  # a front-end's message relayed between ranks (commlib.doctor)
            with self._cond:
                self.reports.setdefault(msg.get("topic"), {})[msg.get("from", peer)] = msg
                self._cond.notify_all()
        elif kind == "coordinator_lost" and not ep.closed:
            host = self.coordinator_rank
            if host is None or host == self.rank:
                ep.fail(PeerLost(f"rank {self.rank}: lost the job's coordinator ({msg.get('message', '')})"),
                        remote=True)
            else:  # its host rank died or left: name it, as for any other lost rank
                ep.fail(PeerLost(f"rank {self.rank}: lost rank {host}, which hosted the job's coordinator "
                                 f"({msg.get('message', '')})", rank=host), remote=True)

    def finishing(self, peer):
        """World rank `peer` is in finalize(), every send flushed (the coordinator has its digest)."""
        return peer in self.finished

    def gone(self, peer):
        """Why world rank `peer` will send nothing more (it left, died, or is finishing), or None."""
        why = self.exits.get(peer)
        if why is None and self.finishing(peer):
            why = self._finished_text(peer)
        return why

    def _finished_text(self, peer):
        ended = self.finished.get(peer) or {}
        if ended.get("exit_code") is not None:  # it called sys.exit(code)
            return f"exited with code {ended['exit_code']}"
        return "its program ended without calling finalize()" if ended.get("at_exit") else "it called finalize()"

    def departure(self, peer):
        """Why world rank `peer`, which finished (finalize()) while this rank waits on it, is gone.

        A program that ends with sys.exit(7) finalizes at exit, and its finalize() waits for the
        coordinator's verdict on every rank's digest: tell the coordinator not to wait for ours
        ("release"), so that rank can exit. Where a launcher
        reports exits (commrun: "died" notices), then wait for that report a bounded moment
        (EXIT_GRACE_S), so this rank says "exited with code 7" rather than "its program ended".
        May block: call it without holding locks the listener needs."""
        if self.send is None:
            return self._finished_text(peer)
        with contextlib.suppress(OSError, CommError):
            self.send({"kind": "release", "rank": self.rank})
        ended = self.finished.get(peer) or {}
        if self.coordinator_rank is None and ended.get("at_exit") and ended.get("exit_code") is None:
            deadline = time.monotonic() + EXIT_GRACE_S
            with self._cond:
                while peer not in self._died and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
        with self._cond:
            return self.exits[peer] if peer in self._died else self._finished_text(peer)

    def _lost(self, peer, message):
        with self._cond:
            self.exits.setdefault(peer, message)
            self._cond.notify_all()
        if not self.ep.closed:
            self.ep.fail(PeerLost(f"rank {self.rank}: lost rank {peer} ({self.exits[peer]})", rank=peer), remote=True)

    # ------------------------------------------------------------ outgoing
    def spread(self, exc):
        """Tell every other rank about a failure first seen here, before this rank can exit.

        The abort notice and this rank's later goodbye travel on one ordered
        connection, so no peer can take our exit for a plain departure.
        """
        if self._spread or self.ep.failure_remote or self.send is None:
            return
        self._spread = True
        try:
            self.send({"kind": "abort", "to": "all", "error": type(exc).__name__, "message": str(exc),
                       "rank": self.rank})
        except (OSError, CommError) as err:
            log.warning("commlib rank %d: could not report the failure to the job: %s", self.rank, err)

    def _state(self):
        """(what this rank is doing, the world rank it waits on or None)."""
        current = self.current
        if current is not None:
            what, peer, _ = current
            return f"in {what}", peer
        return f"not in a commlib call (last: {self.last or 'none'})", None

    def describe(self):
        """What this rank is doing, for another rank's stall report."""
        state, peer = self._state()
        return state + (f", waiting on rank {peer}" if peer is not None else "")

    def ask(self, ranks, wait_s):
        """Status replies ({rank: message}) of `ranks` to a query over the coordinator."""
        with self._cond:
            self._statuses.clear()
        self.send({"kind": "status_query", "to": ranks})
        deadline = time.monotonic() + wait_s
        with self._cond:
            while len(self._statuses) < len(ranks) and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return dict(self._statuses)

    def census(self, wait_s):
        """The coordinator's census of what every rank is doing ({"groups": [[state, ranks, peers]],
        "omitted": ranks}), or None without an answer in wait_s. One census serves every rank
        that asks while it is taken or soon after: a stall of n ranks costs n queries, not n²."""
        with self._cond:
            self._census = None
        self.send({"kind": "stall", "rank": self.rank})
        deadline = time.monotonic() + wait_s
        with self._cond:
            while self._census is None and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return self._census

    def stall_report(self, size, wait_s=None):
        """What every other rank is doing, from the coordinator's census; lines for a CommTimeout
        message. Up to STALL_EACH other ranks get a line each; beyond, ranks in the same state share one."""
        if self.send is None or size is None:
            return ""
        if wait_s is None:  # the coordinator's wait for answers, and a margin
            wait_s = census_wait_s(size) + 0.5
        try:
            census = self.census(wait_s)
        except (OSError, CommError):
            return "\n  stall report: the coordinator is unreachable"
        answered, omitted = {}, set()
        try:
            for state, ranks, peers in (census or {}).get("groups", []):
                ranks = unpack_ranks(ranks, size)
                peers = unpack_peers(ranks, peers, size) if isinstance(peers, list) else [peers] * len(ranks)
                answered.update(zip(ranks, ((state, p) for p in peers)))
            omitted.update(unpack_ranks((census or {}).get("omitted", []), size))
        except ValueError as e:  # a malformed census: report what was read, and that
            log.warning("commlib rank %s: malformed census from the coordinator (%s)", self.rank, e)
        others = [r for r in range(size) if r != self.rank]
        each = len(others) <= STALL_EACH
        groups = {}  # key -> [(rank, the rank it waits on)], in rank order
        for r in others:
            if r in answered:
                state, peer = answered[r]
                key = (r,) if each else ("state", state)
            elif r in omitted:
                state, peer, key = "in a state left out (too many different ones)", None, ("omitted",)
            elif r in self.exits:
                state, peer = f"gone: {self.exits[r]}", None
                key = (r,) if each else ("gone", state)
            else:
                link = self.ep.link_note(r)
                state, peer = (f"no answer; unreachable? {link}", None) if link else (_SILENT, None)
                key = (r,) if each or link else ("silent",)
            groups.setdefault(key, [state, []])[1].append((r, peer))
        head = "\n  stall report:"
        note = None if answered else self.ep.coordinator_note()  # no answer at all: is our query itself stuck?
        if note:
            head += f" {note}"
        lines = [_stall_line(state, members) for state, members in sorted(groups.values(), key=lambda g: g[1][0][0])]
        return head + "\n" + "\n".join(lines)

    def peer_header(self, peer, wait_s=0.5):
        """The header of the collective `peer` is blocked in (bytes), or None."""
        if self.send is None or peer is None:
            return None
        try:
            got = self.ask([peer], wait_s).get(peer)
        except (OSError, CommError):
            return None
        if not got or not got.get("hdr"):
            return None
        try:
            return bytes.fromhex(got["hdr"])
        except ValueError:
            return None

    def gather_reports(self, topic, ranks, deadline):
        """{rank: message} of the "report"s on `topic` from `ranks`, waiting until all of them
        have sent one or are gone, or until deadline."""
        with self._cond:
            while True:
                got = self.reports.get(topic, {})
                if all(r in got or r in self.exits for r in ranks) or time.monotonic() >= deadline:
                    return {r: got[r] for r in ranks if r in got}
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    # ------------------------------------------------------------ finalize
    def exchange_digests(self, mine, deadline):
        """Send this rank's digest to the coordinator, then wait (until deadline) for its verdict:
        once every rank has sent its digest or is gone, the coordinator compares them and answers
        each rank with the digest of the first rank whose collectives differ from its own, if any.

        Returns {rank: digest message}: ours, and the one to compare it with where one differs.
        """
        if self.send is None:
            return {}
        with contextlib.suppress(OSError, CommError):
            self.send(dict(mine, kind="digest", rank=self.rank))
        self.current = ("finalize() (waiting for every rank to finish)", None, None)
        with self._cond:
            while self.verdict is None and self.ep.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            got = dict(self.verdict or {})
        self.current = None
        got[self.rank] = mine
        return got


def rank_ranges(ranks):
    """'0-3, 5, 7-9' for sorted world ranks."""
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(parts)


def _stall_line(state, members):
    """One line of a stall report: `members` ([(rank, the rank it waits on or None)]) share `state`."""
    ranks = [r for r, _ in members]
    peers = collections.Counter(p for _, p in members if p is not None)
    if len(ranks) == 1:
        who = f"rank {ranks[0]}"
    else:
        who = f"ranks {rank_ranges(ranks)} ({len(ranks):,})"
    if not peers:
        return f"    {who}: {state}"
    if len(peers) == 1 and sum(peers.values()) == len(ranks):
        return f"    {who}: {state}, waiting on rank {next(iter(peers))}"
    (top, count), = peers.most_common(1)
    return f"    {who}: {state}, waiting on {len(peers):,} different ranks (rank {top}: {count:,} of them)"
