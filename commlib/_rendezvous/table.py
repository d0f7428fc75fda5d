"""The job's address table without n² bytes: every rank learns where every rank lives (which host),
and the addresses of only the ranks it will talk to.

Pushing the whole table to every rank cost n rows a rank, n² for the job (7.6 GB at 10,000 ranks).
Now, once every rank has registered, the coordinator (`Book`) sends each rank one "assembled"
message: the hosts of all ranks as runs (block placement, whatever the size: one run), and the rows
of its likely peers -- its ring and binomial-tree neighbours in the world and on its host, and, for a
host's first rank, the first ranks of the neighbouring hosts (`neighbours`): O(log n) rows. A rank
needing any other row (a split's peer, an all_to_all's) asks for the block of ROWS_BLOCK rows that
holds it ("rows"), once. The rank's `Table` is indexed like the list it replaces.

Wire (JSON, framing.py's frames):
  coordinator -> rank  {"kind": "assembled", "size", "hosts": [[first_host, ranks_each, hosts], ...],
                        "keys": [...], "rows": [[rank, host, value...], ...], "names": {host: host_id},
                        "loopback": [bad, other, address] (only when the table mixes hosts and loopback)}
  rank -> coordinator  {"kind": "rows", "first", "last"}
  coordinator -> rank  {"kind": "rows", "keys", "rows", "names"} (several messages for a long range)
A rank's row is its registration info less "host_id" (the host's name: "names"); a rank without a
"host_id" is a host of its own (host number -1 in the runs).
"""
import json
import threading
import time
from collections.abc import Sequence

from .._errors import CommError, CommTimeout
from .._hosts import is_loopback

ROWS_BLOCK = 64  # rows a rank asks for at once (its all_to_all asks n / ROWS_BLOCK times, not n)
ROWS_MESSAGE_BYTES = 256 << 10  # the most row text a "rows" message carries
MAX_INFO_BYTES = 4 << 10  # a rank's registration info, as JSON (~150 B; ~90 rows stay far under a frame)


# ------------------------------------------------------------------ hosts as runs
def pack_hosts(host_of):
    """Each rank's host number (-1: a host of its own) as runs [first_host, ranks_each, hosts]: `hosts`
    consecutive hosts from `first_host` with `ranks_each` ranks each, in rank order (block placement
    of any size is one run, or two when the last host has fewer ranks)."""
    runs, i, n = [], 0, len(host_of)
    while i < n:
        h, j = host_of[i], i
        while j + 1 < n and host_of[j + 1] == h:
            j += 1
        each = j - i + 1
        if h < 0:  # ranks without a host: one run each of them (each a host of its own)
            runs.append([-1, each, 1])
            i = j + 1
            continue
        hosts, k = 1, j + 1  # more hosts after it, h + 1, h + 2, ..., with `each` ranks each
        while k + each <= n and all(host_of[k + t] == h + hosts for t in range(each)) and \
                (k + each == n or host_of[k + each] != h + hosts):
            hosts += 1
            k += each
        if runs and runs[-1][0] >= 0 and runs[-1][1] == each and runs[-1][0] + runs[-1][2] == h:
            runs[-1][2] += hosts  # (a host of the same size right after the last run's)
        else:
            runs.append([h, each, hosts])
        i = k
    return runs


def unpack_hosts(runs, size):
    """The host numbers pack_hosts packed, for `size` ranks; ValueError for anything else."""
    out = []
    if not isinstance(runs, list):
        raise ValueError("malformed host runs")
    for run in runs:
        if not (isinstance(run, list) and len(run) == 3 and all(type(v) is int for v in run)
                and run[0] >= -1 and run[1] > 0 and run[2] > 0 and len(out) + run[1] * run[2] <= size
                and (run[0] >= 0 or run[2] == 1)):
            raise ValueError(f"malformed host run {run!r}")
        first, each, hosts = run
        for h in range(first, first + hosts):
            out.extend([h] * each)
    if len(out) != size:
        raise ValueError(f"host runs for {len(out)} ranks in a job of {size}")
    return out


def neighbours(rank, size, host_of, local, position, leaders):
    """The ranks `rank` most likely talks to: its ring and binomial neighbours (r ± 2^k, r xor 2^k)
    among all ranks and among its host's ranks (`local`: host -> its ranks in order; `position`: a
    rank's index there), among its rail (the ranks at its index on hosts h ± 2^k and h xor 2^k: the
    rings and exchanges of the schedules by rails), and, for a host's first rank, the first ranks
    (`leaders`) of the same hosts (the host leaders' stage)."""
    out = set()

    def around(i, m, pick):
        step = 1
        while step < m:
            for j in ((i + step) % m, (i - step) % m, i ^ step):
                if j < m:
                    out.add(pick(j))
            step <<= 1

    around(rank, size, int)
    h = host_of[rank]
    if h >= 0:
        mates, i = local[h], position[rank]
        around(i, len(mates), mates.__getitem__)
        out.add(mates[0])
        if i == 0:
            around(h, len(leaders), leaders.__getitem__)
        else:
            around(h, len(local), lambda j: local[j][i] if i < len(local[j]) else None)
    out.discard(rank)
    out.discard(None)
    return sorted(out)


# --------------------------------------------------------------- the coordinator's side
class Book:
    """The coordinator's copy of the complete table: encodes each rank's "assembled" message and the
    "rows" a rank asks for, row text encoded once for the job."""

    def __init__(self, infos):
        self.size = len(infos)
        self.keys = sorted({k for info in infos for k in info if k != "host_id"})
        number, self.host_ids = {}, []
        self.host_of = []
        for info in infos:
            hid = info.get("host_id")
            if isinstance(hid, str):
                if hid not in number:
                    number[hid] = len(self.host_ids)
                    self.host_ids.append(hid)
                self.host_of.append(number[hid])
            else:
                self.host_of.append(-1)
        self.local, self.position = [[] for _ in self.host_ids], [0] * self.size
        for r, h in enumerate(self.host_of):
            if h >= 0:
                self.position[r] = len(self.local[h])
                self.local[h].append(r)
        self.leaders = [ranks[0] for ranks in self.local]
        self._rows = [json.dumps([r, self.host_of[r]] + [info.get(k) for k in self.keys], separators=(",", ":"))
                      for r, info in enumerate(infos)]
        self._keys = json.dumps(self.keys, separators=(",", ":"))
        self._hosts = json.dumps(pack_hosts(self.host_of), separators=(",", ":"))
        self._loopback = _loopback_conflicts(infos)

    def _names(self, ranks):
        return json.dumps({str(h): self.host_ids[h] for h in sorted({self.host_of[r] for r in ranks} - {-1})},
                          separators=(",", ":"))

    def assembled(self, rank):
        """Rank `rank`'s "assembled" message, encoded (framing's length and JSON)."""
        ranks = neighbours(rank, self.size, self.host_of, self.local, self.position, self.leaders) + [rank]
        body = (f'{{"kind":"assembled","size":{self.size},"hosts":{self._hosts},"keys":{self._keys},'
                f'"rows":[{",".join(self._rows[r] for r in ranks)}],"names":{self._names(ranks)}')
        conflict = self._loopback(rank) if self._loopback is not None else None
        if conflict is not None:
            body += f',"loopback":{json.dumps(conflict)}'
        return _frame(body + "}")

    def rows(self, first, last):
        """The "rows" messages (encoded) for ranks first..last (clamped to the job)."""
        first, last = max(0, first), min(self.size - 1, last)
        out, at = [], first
        while at <= last:
            end, size = at, 0
            while end <= last and (end == at or size + len(self._rows[end]) < ROWS_MESSAGE_BYTES):
                size += len(self._rows[end]) + 1
                end += 1
            ranks = range(at, end)
            out.append(_frame(f'{{"kind":"rows","keys":{self._keys},"rows":[{",".join(self._rows[r] for r in ranks)}],'
                              f'"names":{self._names(ranks)}}}'))
            at = end
        return out

    def table(self, rank, timeout=5.0):
        """The Table rank `rank` would hold, its fetches answered from this book in this process."""
        held = []

        def request(first, last):
            for part in self.rows(first, last):
                held[0].add(json.loads(part[4:]))

        held.append(Table(json.loads(self.assembled(rank)[4:]), request, None, timeout))
        return held[0]


def _frame(text):
    body = text.encode()
    return len(body).to_bytes(4, "big") + body


def _loopback_conflicts(infos):
    """None when no rank listens on a loopback address that a rank on another host would need, else
    a function: rank -> [bad, other, address] or None: `other` is the lowest rank on another host than
    the rank where one of them listens on a loopback address, `bad` the one that does (`other` where
    both do), as a scan of the whole table would find."""
    def stack(info):
        hid = info.get("host_id")
        return hid.split("/", 1)[-1] if isinstance(hid, str) else None

    def tcp_host(info):
        tcp = info.get("tcp")
        return tcp[0] if isinstance(tcp, list) and tcp else None

    stacks = [stack(info) for info in infos]
    if len(set(stacks)) < 2:
        return None
    loop = [r for r, info in enumerate(infos) if is_loopback(tcp_host(info))]
    if not loop:
        return None
    first_of = {}  # stack -> its lowest rank, and its lowest rank listening on loopback
    loop_of = {}
    for r, s in enumerate(stacks):
        first_of.setdefault(s, r)
    for r in loop:
        loop_of.setdefault(stacks[r], r)

    def conflict(rank):  # the first rank on another host it cannot reach, or that cannot reach it
        mine = stacks[rank]
        pool = first_of if is_loopback(tcp_host(infos[rank])) else loop_of
        others = [r for s, r in pool.items() if s != mine]
        if not others:
            return None
        other = min(others)
        bad = other if is_loopback(tcp_host(infos[other])) else rank
        return [bad, other, tcp_host(infos[bad])]

    return conflict


# ------------------------------------------------------------------ a rank's side
class Table(Sequence):
    """The job's table as one rank holds it: `table[r]` is rank r's registration info (its row
    fetched from the coordinator the first time it is needed); `host_key(r)` tells ranks' hosts
    apart without a fetch."""

    def __init__(self, msg, request, pump=None, timeout=60.0):
        """`msg`: the "assembled" message; `request(first, last)` asks the coordinator for rows;
        `pump(seconds)` reads and dispatches one message when nothing else reads the connection
        (None: a listener thread calls `add`)."""
        size = msg.get("size")
        if type(size) is not int or size < 1:
            raise ValueError(f"bad size {size!r}")
        self._size = size
        self.host_of = unpack_hosts(msg.get("hosts"), size)
        self._names, self._rows = {}, {}
        self._cond = threading.Condition()
        self._asked = set()  # (first, last) ranges asked for
        self._request, self.pump, self.timeout = request, pump, timeout
        self._failure = None
        self.loopback = msg.get("loopback")  # [bad, other, address]: see _loopback_conflicts
        if self.loopback is not None and not (isinstance(self.loopback, list) and len(self.loopback) == 3
                                              and all(type(v) is int and 0 <= v < size for v in self.loopback[:2])):
            raise ValueError(f"bad loopback conflict {self.loopback!r}")
        self.add(msg)

    def __len__(self):
        return self._size

    def host_key(self, r):
        """A value equal for ranks on one host (no fetch)."""
        h = self.host_of[r]
        return h if h >= 0 else ("rank", r)

    def known(self, r):
        return r in self._rows

    def add(self, msg):
        """Take the rows of an "assembled" or "rows" message (ValueError if malformed)."""
        keys, rows, names = msg.get("keys"), msg.get("rows"), msg.get("names", {})
        if not (isinstance(keys, list) and isinstance(rows, list) and isinstance(names, dict)):
            raise ValueError("malformed rows")
        got = {}
        for row in rows:
            if not (isinstance(row, list) and len(row) == len(keys) + 2 and type(row[0]) is int
                    and 0 <= row[0] < self._size and row[1] == self.host_of[row[0]]):
                raise ValueError(f"malformed row {str(row)[:80]}")
            if row[1] >= 0 and row[1] not in self._names and str(row[1]) not in names:
                raise ValueError(f"row of rank {row[0]} on host {row[1]}, whose name did not come")
            info = {k: v for k, v in zip(keys, row[2:]) if v is not None}
            got[row[0]] = (info, row[1])
        named = {int(h): name for h, name in names.items()}  # (ValueError for a key that is no number)
        with self._cond:
            self._names.update(named)
            for r, (info, h) in got.items():
                if h >= 0:
                    info["host_id"] = self._names[h]
                self._rows[r] = info
            self._cond.notify_all()

    def fail(self, error):
        """The coordinator is gone: a fetch waiting now, or asked later, raises `error` (a CommError)."""
        with self._cond:
            self._failure = error
            self._cond.notify_all()

    def __getitem__(self, r):
        if isinstance(r, slice):
            return [self[i] for i in range(*r.indices(self._size))]
        if r < 0:
            r += self._size
        if not 0 <= r < self._size:
            raise IndexError(f"rank {r} is out of range for {self._size} ranks")
        row = self._rows.get(r)
        if row is None:
            first = r - r % ROWS_BLOCK
            self._fetch(first, min(self._size, first + ROWS_BLOCK) - 1, [r])
            row = self._rows[r]
        return row

    def __iter__(self):
        missing = [r for r in range(self._size) if r not in self._rows]
        if missing:
            self._fetch(missing[0], missing[-1], missing)
        return (self._rows[r] for r in range(self._size))

    def _fetch(self, first, last, want):
        deadline = time.monotonic() + self.timeout
        with self._cond:
            if (first, last) not in self._asked and self._failure is None:
                self._asked.add((first, last))
                ask = True
            else:
                ask = False
        if ask:
            try:
                self._request(first, last)
            except CommError as e:
                self.fail(e)
        with self._cond:
            while True:
                if all(r in self._rows for r in want):
                    return
                if self._failure is not None:
                    raise self._failure
                left = deadline - time.monotonic()
                if left <= 0:
                    self._asked.discard((first, last))  # (a later fetch asks again)
                    raise CommTimeout(f"the coordinator did not send the addresses of ranks {first}..{last} "
                                      f"within {self.timeout:g} s", op="connect")
                if self.pump is None:
                    self._cond.wait(min(left, 1.0))
                    continue
                self._cond.release()  # (reading: add() takes the lock)
                try:
                    self.pump(min(left, 1.0))
                finally:
                    self._cond.acquire()
