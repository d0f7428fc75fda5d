"""What a rank's transport and the coordinator both read of the coordinator's messages: sets of
ranks (and a census's peers) packed compactly, how long a stall census waits, and the clock round
trips that place a rank's trace on the coordinator's clock. Pure functions of their arguments: the
coordinator's side (`_rendezvous`) and the ranks' listener (`_transport.notices`) both stand on them."""
import base64
import time


def census_wait_s(size):
    """How long a stall census waits for the ranks' answers in a job of `size` ranks: 1 s, longer
    from 2,000 ranks (8,000 fake ranks answered 6,151 of 7,999 queries within 1 s), at most 5 s.
    A rank asking for one waits half a second more."""
    return min(5.0, max(1.0, size / 2000))


# ---------------------------------------------------- sets of ranks, compactly
# Notices that name many ranks ("left", "finishing", a census) go to every rank: listed one by one
# they cost n² rank numbers for a job (392 MB of "finishing" at 8,000 fake ranks). A set travels
# as runs (`[3, [5, 9]]`: 3 and 5 to 9) or, where that is longer, as a bitmap in base64; a census's
# peers as runs of one peer or of one offset from each rank. Both read back exactly.
def pack_ranks(ranks):
    """Sorted distinct ranks as runs (an int, or [first, last] for three or more), or a base64 bitmap
    where that is shorter."""
    runs, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append([ranks[i], ranks[j]])
        else:  # one or two ranks: as they are (a pair as a run would be longer)
            runs.extend(ranks[i:j + 1])
        i = j + 1
    if len(runs) > 8 and ranks:
        bits = bytearray((ranks[-1] >> 3) + 1)
        for r in ranks:
            bits[r >> 3] |= 1 << (r & 7)
        text = base64.b64encode(bytes(bits)).decode()
        if len(text) < 4 * len(runs):  # a run costs at least 4 characters in JSON ("123,")
            return text
    return runs


def unpack_ranks(packed, limit):
    """The ranks pack_ranks packed, each below `limit`; ValueError for anything else."""
    if isinstance(packed, str):
        try:
            bits = base64.b64decode(packed, validate=True)
        except ValueError:
            raise ValueError("malformed rank bitmap") from None
        if len(bits) > (limit >> 3) + 1:
            raise ValueError(f"rank bitmap of {len(bits)} bytes for {limit} ranks")
        out = [(i << 3) + b for i, byte in enumerate(bits) if byte for b in range(8) if byte >> b & 1]
    elif isinstance(packed, list):
        out = []
        for run in packed:
            first, last = (run, run) if type(run) is int else (run if isinstance(run, list) and len(run) == 2 else
                                                                (None, None))
            if not (type(first) is int and type(last) is int and 0 <= first <= last < limit):
                raise ValueError(f"malformed rank run {run!r}")
            out.extend(range(first, last + 1))
    else:
        raise ValueError(f"malformed rank set {type(packed).__name__}")
    if any(r >= limit for r in out[-1:]):
        raise ValueError(f"rank {out[-1]} out of range for {limit} ranks")
    return out


def pack_peers(ranks, peers):
    """peers[i] (a rank or None) of ranks[i], as runs [mode, value, count]: mode "=" the same peer
    (value), "+" the peer is the rank plus value (a ring's neighbours)."""
    runs, i, n = [], 0, len(ranks)
    while i < n:
        j = i  # ranks[i..j] wait on the same peer
        while j + 1 < n and peers[j + 1] == peers[i]:
            j += 1
        k = i  # ranks[i..k] wait on the peer at the same offset from themselves
        if j == i and peers[i] is not None:
            d = peers[i] - ranks[i]
            while k + 1 < n and peers[k + 1] is not None and peers[k + 1] - ranks[k + 1] == d:
                k += 1
        if k > j:
            runs.append(["+", peers[i] - ranks[i], k - i + 1])
            i = k + 1
        else:
            runs.append(["=", peers[i], j - i + 1])
            i = j + 1
    return runs


def unpack_peers(ranks, runs, limit):
    """The peers pack_peers packed for `ranks` (each None or below `limit`); ValueError for anything else."""
    if not isinstance(runs, list):
        raise ValueError("malformed peer runs")
    out = []
    for run in runs:
        if not (isinstance(run, list) and len(run) == 3 and run[0] in ("=", "+") and type(run[2]) is int
                and run[2] > 0 and len(out) + run[2] <= len(ranks)):
            raise ValueError(f"malformed peer run {run!r}")
        mode, value, count = run
        if mode == "=" and (value is None or type(value) is int and 0 <= value < limit):
            out.extend([value] * count)
        elif mode == "+" and type(value) is int and all(0 <= r + value < limit for r in ranks[len(out):len(out) + count]):
            out.extend(r + value for r in ranks[len(out):len(out) + count])
        else:
            raise ValueError(f"malformed peer run {run!r}")
    if len(out) != len(ranks):
        raise ValueError(f"{len(out)} peers for {len(ranks)} ranks")
    return out


def clock_offset(send, receive, tries=5, timeout=1.0):
    """(offset, error, when) in ns: the coordinator's CLOCK_MONOTONIC minus this process's, from
    `tries` "clock" round trips (the shortest one's midpoint; error: half of it; when: our clock
    then). send(msg) sends; receive(seconds) returns the next "clock" reply or None. None when the
    coordinator does not answer within `timeout` seconds."""
    best = None
    deadline = time.monotonic() + timeout
    for i in range(tries):
        t0 = time.monotonic_ns()
        send({"kind": "clock", "echo": i})
        while True:
            msg = receive(deadline - time.monotonic())
            if msg is None:
                return best
            if msg.get("echo") == i:
                break
        t1 = time.monotonic_ns()
        if best is None or t1 - t0 < 2 * best[1]:
            best = (msg["t"] - (t0 + t1) // 2, (t1 - t0) // 2, (t0 + t1) // 2)
    return best
