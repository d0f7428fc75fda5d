"""A timeline of every rank's communication calls (COMMLIB_TRACE=DIR, `commrun --trace FILE.json`).

With COMMLIB_TRACE (or COMMLIB_STATS) set when commlib is imported, the public calls of the API layer (collectives,
their i-variants, point-to-point, the object calls), Request.wait and commlib.MPI's communication methods
are replaced by recording wrappers; without it nothing is replaced, so tracing off costs nothing at all.
This module knows none of those layers: each registers what it offers for recording (`register`), and
`enable` asks each to install its wrappers (`install`, `install_methods`, `install_wait`). Each call is one
fixed-size record (start, end, bytes, the group's sequence number, op, group, peer) written into a
file-backed map, `DIR/trace-<pid>.bin`, a chunk of CHUNK records at a time: the kernel holds what
was written even if the process is killed the next instant, and memory stays one chunk. Beside it
`DIR/trace-<pid>.json` names the rank, host, pid and the clocks. `merge(DIR, FILE)` turns the
files of a job into one Chrome / Perfetto trace: a track per rank, a collective's events on every
rank linked by flow arrows from the rank that arrived last, and each event's `wait_us`, the time
its rank waited for that last arrival.

Clocks: records are CLOCK_MONOTONIC nanoseconds, one clock for every process of a host. When the
world assembles and again at finalize(), each traced rank measures its clock against the
coordinator's (the shortest of five round trips; the error, half of it, is in the meta file) and
the merge puts every rank on the coordinator's clock, drifting linearly between the two
measurements; a trace without those offsets (ranks that recorded before any world) falls back to
each host's wall clock.
"""
import contextlib
import ctypes
import errno
import json
import mmap
import os
import re
import socket
import struct
import sys
import threading
import time

import commlib._tracecall as _tracecall
from ._debug import env_rank, size_class

RECORD = struct.Struct("<qqqqiiii")  # start ns, end ns, bytes, seq, op, group, peer, flags
CHUNK_BITS = 15
CHUNK = 1 << CHUNK_BITS  # records mapped at a time (1.5 MiB)
F_ERROR = 1  # the call raised
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk or quota: recording stops, the job goes on
GROUPS_AT_ONCE = 64  # groups whose transport is written to the meta file as each first records

_dir = ""
ENABLED = False  # recording (COMMLIB_TRACE, COMMLIB_STATS)
STATS = False  # COMMLIB_STATS: rank 0 prints the table at finalize()


def from_env():
    """(directory, stats) that COMMLIB_TRACE and COMMLIB_STATS ask for ("" : no recording)."""
    stats = os.environ.get("COMMLIB_STATS", "") not in ("", "0")
    return os.environ.get("COMMLIB_TRACE", ""), stats


def configure():
    """Record if COMMLIB_TRACE or COMMLIB_STATS asks (at import; again in a rank forked from commrun)."""
    global STATS
    directory, STATS = from_env()
    if directory or STATS:
        enable(directory)  # "": a directory of this process's own, made at its first record


_recorder = None
_world_of = None  # the API's default group, through the callable it registered (None: no API yet)


class Recorder:
    """This process's trace file: records appended through a map of its current chunk."""

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        base = os.path.join(directory, f"trace-{os.getpid()}")
        self.path = base + ".bin"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.meta_path = base + ".json"
        self.lock = threading.Lock()
        self.chunk = -1
        self.map = self._view = None
        self.full = None  # the OSError that stopped recording (a full disk), once it happened
        _tracecall.restart()
        self._map(0)
        self.meta = {"pid": os.getpid(), "host": socket.gethostname(),
                     "rank": env_rank(), "mono_ns": time.monotonic_ns(), "wall_ns": time.time_ns(),
                     "ops": list(_names), **_clock_fields()}
        self._write_meta()

    def _map(self, chunk):
        size = RECORD.size * CHUNK
        try:
            os.ftruncate(self.fd, size * (chunk + 1))
            # The chunk's blocks now: on a full disk, a store into a sparse map is a SIGBUS.
            os.posix_fallocate(self.fd, size * chunk, size)
        except OSError as exc:
            if exc.errno not in _NO_SPACE:  # a file system without fallocate: the sparse map as before
                raise
            self._stop(exc, chunk)
            return
        self.map = mmap.mmap(self.fd, size, offset=size * chunk)
        self._view = ctypes.c_char.from_buffer(self.map)  # keeps the map open while records go there
        self.chunk = chunk
        _tracecall.set_map(ctypes.addressof(self._view), chunk, CHUNK_BITS, self.move_to)

    def _write_meta(self):
        tmp = self.meta_path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(self.meta, f)
            os.replace(tmp, self.meta_path)
        except OSError as exc:  # the last complete meta file stays; no half-written one is left
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if exc.errno not in _NO_SPACE:
                raise
            self._stop(exc, self.chunk)

    def _stop(self, exc, chunk):
        """Out of disk space: stop recording (the records so far stay readable) and say so once."""
        _tracecall.set_map(0, -1, CHUNK_BITS, self.move_to)  # no map: each later record is dropped
        if self.full is None:
            self.full = exc
            print(f"[commlib rank {env_rank()}] tracing stopped: "
                  f"{os.strerror(exc.errno)} in {os.path.dirname(self.path)} (each {CHUNK} calls take "
                  f"{RECORD.size * CHUNK >> 10} KiB); the trace keeps the {max(chunk, 0) * CHUNK} calls before",
                  file=sys.stderr, flush=True)

    def ops_changed(self):
        self.meta["ops"] = list(_names)
        self._write_meta()

    def add(self, t0, t1, nbytes, seq, op, gid, peer, flags):
        """One record, as a traced call writes it."""
        return _tracecall.append(t0, t1, nbytes, seq, op, gid, peer, flags)

    def move_to(self, chunk):
        """Map chunk `chunk` (records are numbered in order: one thread moves the map on)."""
        with self.lock:
            while chunk > self.chunk and self.full is None:
                self._map(self.chunk + 1)
            if len(self.meta.get("groups", ())) > GROUPS_AT_ONCE:
                self._write_meta()

    def note_clock(self):
        self.meta.update(_clock_fields())
        self._write_meta()

    def note_group(self, g):
        """Group g's members and how this rank reaches each of them (the trace's `transport`); the
        meta file is rewritten for the first GROUPS_AT_ONCE groups, later ones at the next chunk or
        at finalize() (a job that splits groups in a loop rewrites no file per group)."""
        ep = g._ep
        if ep is None:
            return
        from ._transport import CH_COLL, CH_P2P
        routes = self.meta.setdefault("routes", {})
        for w in g.world:
            if w != ep.rank and str(w) not in routes:
                sock = ep.out_sock(g.gid, CH_COLL, w) or ep.out_sock(g.gid, CH_P2P, w)
                route = ep.describe_route(w, sock)  # "shared memory", "unix socket", "tcp HOST:PORT"
                routes[str(w)] = "tcp" if route.startswith("tcp") else route
        kinds = sorted({routes[str(w)] for w in g.world if w != ep.rank})
        groups = self.meta.setdefault("groups", {})
        groups[str(g.gid & 0x7FFFFFFF)] = {"world": list(g.world), "transport": " + ".join(kinds) or "self"}
        if len(groups) <= GROUPS_AT_ONCE:
            self._write_meta()

    def note_rank(self, rank):
        if self.meta.get("rank") != rank:
            self.meta["rank"] = rank
            self._write_meta()


_names = []  # op id -> name, for every recorder of this process
_ids = {}


def op_id(name):
    i = _ids.get(name)
    if i is None:
        i = _ids[name] = len(_names)
        _names.append(name)
        if _recorder is not None:
            _recorder.ops_changed()
    return i


_clock = {}  # the meta file's fields for this process's clock against the coordinator's


def _clock_fields():
    """The meta file's fields for the offsets to the coordinator's clock (none while unknown)."""
    return dict(_clock)


def note_clock(measured, end=False):
    """This process's clock against the coordinator's, measured when the world assembled (or, end:
    at finalize): (offset, error, when) ns, or None (no answer)."""
    if measured is None:
        return
    prefix = "coord_end_" if end else "coord_"
    _clock.update({prefix + "offset_ns": measured[0], prefix + "error_ns": measured[1], prefix + "at_ns": measured[2]})
    if _recorder is not None:
        _recorder.note_clock()


def note_clock_end(world):
    """At finalize: the clock measured again, so that a merge corrects for drift over the job."""
    try:
        note_clock(world.transport.ep.notices.clock_offset(), end=True)
    except Exception as exc:  # a failed job's coordinator may be gone: the start's offset stands
        _warn_once(exc)


_own_dirs = []  # the directories recorder() made for COMMLIB_STATS alone
_own_dirs_cleanup = []


def _remove_own_dirs():
    import shutil
    while _own_dirs:
        shutil.rmtree(_own_dirs.pop(), True)


def recorder():
    global _recorder, _dir
    if _recorder is None:
        if not _dir:  # COMMLIB_STATS alone: the records are this process's business, gone at its exit
            import tempfile
            _dir = tempfile.mkdtemp(prefix="commlib-stats-")
            _own_dirs.append(_dir)
        _recorder = Recorder(_dir)
        world = _world()
        if _recorder.meta["rank"] is None and world is not None:  # no launcher's variable: the world's rank
            _recorder.note_rank(world._rank)
    return _recorder


def _note_group(g):
    recorder().note_group(g)


def wrap(name, fn, peer_at=None, peer_kw=None, group_of=None):
    """fn recording each outermost call as `name` (`_tracecall.Traced`); peer_at/peer_kw: where the
    peer rank is in the arguments (point-to-point); group_of(args, kwargs): the call's group (absent:
    the `group` keyword, else the default group; returning None: no group). The recorder is made at
    the first record: a process that imports commlib and never calls it, like commrun, leaves no file."""
    short = name.rpartition(".")[2]
    blocking_coll = peer_at is None and short != "wait" and short[:1] not in ("i", "I")
    return _tracecall.Traced(fn, op_id(name), _world, recorder, group_of,
                             -1 if peer_at is None else peer_at, peer_kw, blocking_coll)


def _world():
    """The default group (None before init, or where no API registered)."""
    return _world_of() if _world_of is not None else None


def _after_fork():
    """A child forked from a traced process records into its own file, not into its parent's."""
    global _recorder
    _recorder = None
    _tracecall.restart()


_warned = []


def _warn_once(exc):
    if not _warned:
        _warned.append(exc)
        import sys
        print(f"[commlib] tracing: a record was lost ({type(exc).__name__}: {exc})", file=sys.stderr)


_installers = []  # what each layer registered: called with this module when recording starts
_installed = []


os.register_at_fork(after_in_child=_after_fork)


def enable(directory):
    """Record from now on into `directory`: every registered layer's calls wrapped where they are
    looked up. At import with COMMLIB_TRACE set; a rank forked from commrun, which imported commlib
    before it had a trace directory, calls it itself."""
    global _dir, ENABLED
    _dir, ENABLED = directory, True
    if not directory and not _own_dirs_cleanup:
        # Registered now, before init() registers finalize at exit: atexit runs last what it got first, so
        # the directory outlives finalize's last records (removed at the first record's registration, it went
        # before them, and each rank said "a record was lost").
        import atexit
        _own_dirs_cleanup.append(True)
        atexit.register(_remove_own_dirs)
    if _installed:
        return
    _installed.append(True)
    from . import _algorithms
    _algorithms.note = _tracecall.note_algo  # each record names the algorithm its call chose
    from ._transport import _io
    _io.set_trace_slot(_tracecall.slot_address())  # ... on the one-call path too
    _tracecall.set_group_note(_note_group)  # ... and the transport to its peers
    for installer in _installers:
        installer(sys.modules[__name__])


def register(installer, world=None):
    """A layer's calls, offered for recording: installer(this module) installs its wrappers (with
    `install`, `install_methods`, `install_wait`) when recording starts, at once if it has (a layer
    imported after tracing was enabled, or a rank forked from commrun that enabled it itself).
    world(): the default group, for calls that name none (the API's)."""
    global _world_of
    if world is not None:
        _world_of = world
    _installers.append(installer)
    if _installed:
        installer(sys.modules[__name__])


def install(namespaces, names, peers=None):
    """Replace each of `names` in every module/dict of `namespaces` by its recording wrapper.
    peers: {name: (position, keyword)} of the argument naming the peer rank (point-to-point)."""
    done = {}
    for name in names:
        for ns in namespaces:
            d = ns if isinstance(ns, dict) else vars(ns)
            fn = d.get(name)
            if fn is None or not callable(fn):
                continue
            if name not in done:
                peer_at, peer_kw = (peers or {}).get(name, (None, None))
                done[name] = wrap(name, fn, peer_at, peer_kw)
            d[name] = done[name]


def install_methods(cls, names, peers, prefix, group_of):
    """The methods `names` of cls and of every subclass recorded as PREFIX + name; peers as in
    `install` (positions count self); group_of(args, kwargs): the call's group."""
    seen, todo = set(), [cls]
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        todo.extend(c.__subclasses__())
        for name in names:
            fn = c.__dict__.get(name)
            if fn is None or isinstance(fn, _tracecall.Traced) or not callable(fn):
                continue
            peer_at, peer_kw = peers.get(name, (None, None))
            setattr(c, name, wrap(prefix + name, fn, peer_at, peer_kw, group_of=group_of))


def install_wait(request_cls):
    """Request.wait recorded as `wait` (a request belongs to no group: group and seq -1)."""
    request_cls.wait = wrap("wait", request_cls.wait, group_of=lambda args, kw: None)


# ----------------------------------------------------------------------------------- merging
def _trace_files(directory):
    """The meta files under `directory` and its subdirectories (one per host fetched by commrun)."""
    found = []
    for where, dirs, files in os.walk(directory):
        dirs.sort()
        found += [os.path.join(where, f) for f in sorted(files) if f.startswith("trace-") and f.endswith(".json")]
    return found


def read(directory):
    """[(meta, [record tuples])] of every process traced into `directory` (or a subdirectory)."""
    out = []
    for path in _trace_files(directory):
        try:
            with open(path) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        recs = []
        try:
            with open(path[:-5] + ".bin", "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        for off in range(0, len(data) - RECORD.size + 1, RECORD.size):
            r = RECORD.unpack_from(data, off)
            if r[0] == 0 and r[1] == 0:
                break  # the rest of the chunk was never written
            recs.append(r)
        out.append((meta, recs))
    return out


def _placement(meta, coord, base_wall):
    """t -> t on the common clock, for one process: the coordinator's (its offset measured at the
    start and, when measured again at finalize, drifting linearly between the two), else the wall
    clock's."""
    if not coord:
        shift = (meta["wall_ns"] - meta["mono_ns"]) - base_wall
        return lambda t: t + shift
    o0, at0 = meta["coord_offset_ns"], meta.get("coord_at_ns")
    o1, at1 = meta.get("coord_end_offset_ns"), meta.get("coord_end_at_ns")
    if o1 is None or at0 is None or at1 is None or at1 <= at0:
        return lambda t: t + o0
    rate = (o1 - o0) / (at1 - at0)
    return lambda t: t + o0 + round(rate * (t - at0))


def _timeline(traces):
    """(ranked, rows, t_min, by_coll, waits) of read()'s traces: ranked [(rank, meta, records)];
    rows (rank, name, start ns, end ns, bytes, seq, gid, peer, flags) on one clock; by_coll: the rows
    of each collective (group, seq, name) on every rank; waits: (rank, that key) -> (µs the rank
    waited for the last arrival, that rank)."""
    ranked = []
    for i, (meta, recs) in enumerate(traces):
        rank = meta.get("rank")
        ranked.append((rank if isinstance(rank, int) else 100000 + i, meta, recs))
    ranked.sort(key=lambda t: t[0])
    # one clock for all: the coordinator's, when every process measured its offset to it at start;
    # else each host's wall clock (read beside its monotonic one), as good as the hosts' synchronisation
    coord = all("coord_offset_ns" in m for _, m, _ in ranked)
    base_wall = min((m["wall_ns"] - m["mono_ns"] for _, m, _ in ranked), default=0)
    t_min = None
    rows = []
    for rank, meta, recs in ranked:
        place = _placement(meta, coord, base_wall)
        ops = meta.get("ops", [])
        for t0, t1, nbytes, seq, op, gid, peer, flags in recs:
            name = ops[op] if 0 <= op < len(ops) else f"op{op}"
            s, e = place(t0), place(t1)
            rows.append((rank, name, s, e, nbytes, seq, gid, peer, flags))
            t_min = s if t_min is None else min(t_min, s)
    by_coll = {}
    for row in rows:
        rank, name, s, e, nbytes, seq, gid, peer, flags = row
        if peer == -1 and seq > 0 and name != "wait" and not name.rpartition(".")[2][:1] in ("i", "I"):
            by_coll.setdefault((gid, seq, name), []).append(row)
    waits = {}
    for key, group_rows in by_coll.items():
        if len(group_rows) < 2:  # seen on one rank only (the others' records are not here): no wait known
            continue
        last = max(group_rows, key=lambda r: r[2])
        for r in group_rows:
            waits[(r[0], key)] = ((last[2] - r[2]) / 1000.0, last[0])
    return ranked, rows, t_min or 0, by_coll, waits


def algorithm(flags):
    """The algorithm a record's flags name (`_tracecall.ALGO_SHIFT`), or None."""
    code = (flags >> _tracecall.ALGO_SHIFT) & 0xFF
    return _tracecall.ALGORITHMS[code - 1] if 0 < code <= len(_tracecall.ALGORITHMS) else None


def transport(meta, gid, peer=-1):
    """How a record's bytes travelled, from its process's meta: to group `gid`'s members (its
    routes joined by " + " where they differ) or, for a point-to-point call, to group rank `peer`;
    None where that is not known (a request's wait, a trace from before the transports were noted)."""
    group = meta.get("groups", {}).get(str(gid))
    if group is None:
        return None
    if peer >= 0:
        world = group["world"]
        return meta.get("routes", {}).get(str(world[peer])) if peer < len(world) else None
    return group["transport"]


def events(traces):
    """Chrome trace events of read()'s traces."""
    ranked, rows, t_min, by_coll, waits = _timeline(traces)
    ev = []
    for rank, meta, _ in ranked:
        ev.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                   "args": {"name": f"rank {rank}" + (f" ({meta.get('host')}, pid {meta.get('pid')})")}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    flow = 0
    metas = {rank: meta for rank, meta, _ in ranked}
    for row in rows:
        rank, name, s, e, nbytes, seq, gid, peer, flags = row
        args = {"bytes": nbytes, "group": gid, "seq": seq}
        if peer >= 0:
            args["peer"] = peer
        how = transport(metas[rank], gid, peer)
        if how:
            args["transport"] = how
        if flags & F_ERROR:
            args["error"] = True
        algo = algorithm(flags)
        if algo:
            args["algorithm"] = algo
        key = (gid, seq, name)
        w = waits.get((rank, key))
        if w is not None:
            args["wait_us"] = round(w[0], 3)
            args["last_rank"] = w[1]
        ev.append({"ph": "X", "name": name, "cat": "commlib", "pid": rank, "tid": 0,
                   "ts": (s - t_min) / 1000.0, "dur": max(e - s, 0) / 1000.0, "args": args})
    for key, group_rows in by_coll.items():
        if len(group_rows) < 2:
            continue
        last = max(group_rows, key=lambda r: r[2])
        for r in group_rows:
            if r is last:
                continue
            flow += 1
            ev.append({"ph": "s", "id": flow, "name": "waited for", "cat": "commlib", "pid": last[0], "tid": 0,
                       "ts": (last[2] - t_min) / 1000.0})
            ev.append({"ph": "f", "bp": "e", "id": flow, "name": "waited for", "cat": "commlib", "pid": r[0],
                       "tid": 0, "ts": (max(last[2], r[2]) - t_min) / 1000.0})
    return ev


def merge(directory, path, traces=None):
    """Write the Chrome / Perfetto trace of the processes traced into `directory` (or of `traces`,
    read() of it already) to `path`; returns (processes, records)."""
    if traces is None:
        traces = read(directory)
    ev = events(traces)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"traceEvents": ev, "displayTimeUnit": "ns"}, f)
        os.replace(tmp, path)
    except OSError:  # a full disk: no half-written trace is left, at `path` or beside it
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return len(traces), sum(len(r) for _, r in traces)


# ----------------------------------------------------------------------------------- statistics
# nccl-tests' bus bandwidth factors (n ranks): bytes moved per rank for the algorithm bandwidth
_BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_sum": lambda n: 2 * (n - 1) / n,
        "all_prod": lambda n: 2 * (n - 1) / n, "all_min": lambda n: 2 * (n - 1) / n,
        "all_max": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
        "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n}


def summarize(traces):
    """One record per (op, size class) over every rank: calls (summed over ranks), bytes, total and
    mean seconds a call, busbw (GB/s, collectives of the table above), wait (seconds ranks spent
    waiting for the last arrival, summed) and slowest (the rank most often last, with its count)."""
    ranked, rows, t_min, by_coll, waits = _timeline(traces)
    nranks = max(1, len(ranked))
    metas = {rank: meta for rank, meta, _ in ranked}
    acc = {}
    for row in rows:
        rank, name, s, e, nbytes, seq, gid, peer, flags = row
        key = (name, size_class(nbytes))
        a = acc.setdefault(key, {"op": name, "size": key[1], "calls": 0, "bytes": 0, "seconds": 0.0,
                                 "wait_seconds": 0.0, "last": {}, "ranks": set(), "algorithms": set(),
                                 "transports": set()})
        a["calls"] += 1
        algo = algorithm(flags)
        if algo:
            a["algorithms"].add(algo)
        how = transport(metas[rank], gid, peer)
        if how and how != "self":
            a["transports"].add(how)
        a["bytes"] += nbytes
        a["seconds"] += (e - s) / 1e9
        a["ranks"].add(rank)
        w = waits.get((rank, (gid, seq, name)))
        if w is not None:
            a["wait_seconds"] += w[0] / 1e6
            if w[0] == 0:  # this rank was the last to arrive
                a["last"][rank] = a["last"].get(rank, 0) + 1
    out = []
    for (name, _), a in sorted(acc.items(), key=lambda kv: -kv[1]["seconds"]):
        mean = a["seconds"] / a["calls"]
        per_call = a["bytes"] / a["calls"]
        factor = _BUS.get(name)
        n = len(a["ranks"]) or nranks
        busbw = per_call / mean / 1e9 * factor(n) if factor and mean > 0 and n > 1 else None
        slowest = max(a["last"].items(), key=lambda kv: kv[1]) if a["last"] else None
        out.append({"op": name, "size": a["size"], "calls": a["calls"], "bytes": a["bytes"],
                    "seconds": a["seconds"], "mean_seconds": mean, "busbw_gbs": busbw,
                    "wait_seconds": a["wait_seconds"], "slowest_rank": slowest[0] if slowest else None,
                    "slowest_count": slowest[1] if slowest else 0,
                    "algorithm": ", ".join(sorted(a["algorithms"])) or None,
                    "transport": ", ".join(sorted(a["transports"])) or None})
    return out


def stats_table(records):
    """The --stats table of summarize()'s records (text)."""
    head = ("op", "size", "calls (all ranks)", "bytes", "total s", "mean µs", "busbw GB/s", "waiting s", "last to arrive",
            "how")
    lines = []
    for r in records:
        last = f"rank {r['slowest_rank']} ({r['slowest_count']}×)" if r["slowest_rank"] is not None else "–"
        how = " / ".join(x for x in (r.get("algorithm"), r.get("transport")) if x) or "–"
        lines.append((r["op"], r["size"], str(r["calls"]), _bytes(r["bytes"]), f"{r['seconds']:.4f}",
                      f"{r['mean_seconds'] * 1e6:.1f}", "–" if r["busbw_gbs"] is None else f"{r['busbw_gbs']:.3g}",
                      f"{r['wait_seconds']:.4f}", last, how))
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 or i >= 8 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*line).rstrip() for line in [head] + lines)


def _bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------- records of other hosts
_FILE_NAME = re.compile(r"trace-\d+\.(json|bin)")


def pack(directory, out):
    """The trace files of `directory` as an uncompressed tar stream to binary file `out`; then
    `directory` is removed, and its parent commlib-trace-* too if left empty (commrun's fetch of another
    host's records: `python -m commlib._trace --pack DIR`, run there over the remote shell)."""
    import shutil
    import tarfile
    with tarfile.open(fileobj=out, mode="w|") as tar:
        if os.path.isdir(directory):
            for name in sorted(os.listdir(directory)):
                if _FILE_NAME.fullmatch(name):
                    tar.add(os.path.join(directory, name), arcname=name, recursive=False)
    out.flush()
    shutil.rmtree(directory, ignore_errors=True)
    parent = os.path.dirname(os.path.abspath(directory))
    if os.path.basename(parent).startswith("commlib-trace-"):  # commrun's name: nothing else is touched
        try:
            os.rmdir(parent)
        except OSError:  # not empty (other hosts' records, or this host's own ranks'), or gone
            pass


def unpack(stream, directory):
    """pack()'s stream (a binary file) into `directory`: only plain trace files, by their bare names
    (nothing a remote host sends can land outside it); returns how many files."""
    import shutil
    import tarfile
    os.makedirs(directory, exist_ok=True)
    count = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not (member.isfile() and _FILE_NAME.fullmatch(member.name)):
                continue
            with tar.extractfile(member) as src, open(os.path.join(directory, member.name), "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += 1
    return count


def main(argv=None):
    """python -m commlib._trace DIR [FILE.json] [--stats]: merge what ranks recorded under
    COMMLIB_TRACE=DIR (any launcher) into a trace, and/or print the --stats table."""
    import argparse
    import sys
    p = argparse.ArgumentParser(prog="python -m commlib._trace", description=main.__doc__.splitlines()[0])
    p.add_argument("directory")
    p.add_argument("out", nargs="?", help="the Chrome / Perfetto trace to write")
    p.add_argument("--stats", action="store_true", help="print the table of calls by size class")
    p.add_argument("--pack", action="store_true",
                   help="write DIR's trace files to stdout as a tar stream and remove DIR (commrun, on other hosts)")
    args = p.parse_args(argv)
    if args.pack:
        pack(args.directory, sys.stdout.buffer)
        return 0
    if not args.out and not args.stats:
        p.error("give FILE.json, --stats, or both")
    if args.out:
        procs, records = merge(args.directory, args.out)
        print(f"trace of {procs} process(es), {records} calls: {args.out}")
    if args.stats:
        print(stats_table(summarize(read(args.directory))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# ----------------------------------------------------------------------------------- in the program
def own_records():
    """(meta, records) of this process, as recorded so far."""
    rec = _recorder
    if rec is None:
        return {"rank": env_rank(), "mono_ns": time.monotonic_ns(), "wall_ns": time.time_ns(), "ops": []}, []
    count = _tracecall.count()
    data = os.pread(rec.fd, count * RECORD.size, 0)
    meta = dict(rec.meta, ops=list(_names))
    return meta, [RECORD.unpack_from(data, off) for off in range(0, len(data) - RECORD.size + 1, RECORD.size)]
