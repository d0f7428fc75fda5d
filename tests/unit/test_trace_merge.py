"""The timeline's records and their merge into a Chrome / Perfetto trace, in-process (no ranks)."""
import json
import os
import subprocess
import sys

import pytest

from commlib import _trace, _tracecall

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_process(directory, pid, rank, ops, records, mono_ns=10**12, wall_ns=2 * 10**18, host="h", **clock):
    """A traced process's two files, as a Recorder leaves them (a chunk padded with zeros); clock:
    the meta's coord_* fields."""
    meta = {"pid": pid, "host": host, "rank": rank, "mono_ns": mono_ns, "wall_ns": wall_ns, "ops": ops, **clock}
    with open(os.path.join(directory, f"trace-{pid}.json"), "w") as f:
        json.dump(meta, f)
    data = b"".join(_trace.RECORD.pack(*r) for r in records) + bytes(_trace.RECORD.size * 3)
    with open(os.path.join(directory, f"trace-{pid}.bin"), "wb") as f:
        f.write(data)


def rec(t0_us, t1_us, seq, op=0, nbytes=8, gid=0, peer=-1, flags=0):
    return (t0_us * 1000, t1_us * 1000, nbytes, seq, op, gid, peer, flags)


def test_merge_names_the_last_arrival_and_the_waits(tmp_path):
    # three ranks, two all_reduces: rank 2 arrives last at the first, rank 0 at the second
    write_process(tmp_path, 101, 0, ["all_reduce"], [rec(100, 400, 1), rec(500, 520, 2)])
    write_process(tmp_path, 102, 1, ["all_reduce"], [rec(150, 400, 1), rec(450, 520, 2)])
    write_process(tmp_path, 103, 2, ["all_reduce", "send"], [rec(390, 400, 1), rec(440, 520, 2),
                                                             rec(600, 610, 2, op=1, peer=0)])
    out = tmp_path / "t.json"
    assert _trace.merge(str(tmp_path), str(out)) == (3, 7)
    doc = json.loads(out.read_text())
    ev = doc["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X"]
    assert len(slices) == 7
    for e in slices:  # the fields the trace-event format requires of a complete event
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)
        assert isinstance(e["ts"], float) and e["dur"] >= 0
    first = {e["pid"]: e["args"] for e in slices if e["name"] == "all_reduce" and e["args"]["seq"] == 1}
    assert {r: a["last_rank"] for r, a in first.items()} == {0: 2, 1: 2, 2: 2}
    assert first[0]["wait_us"] == pytest.approx(290) and first[1]["wait_us"] == pytest.approx(240)
    assert first[2]["wait_us"] == 0
    second = {e["pid"]: e["args"]["last_rank"] for e in slices if e["name"] == "all_reduce" and e["args"]["seq"] == 2}
    assert second == {0: 0, 1: 0, 2: 0}
    assert "algorithm" not in first[0]  # none noted in these records
    send = [e for e in slices if e["name"] == "send"]
    assert send[0]["args"]["peer"] == 0 and "wait_us" not in send[0]["args"]
    # one flow per waiting rank and collective, from the last arrival's track to the waiter's
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert set(starts) == set(ends) and len(starts) == 4
    for i, s in starts.items():
        assert s["pid"] != ends[i]["pid"] and ends[i]["bp"] == "e"
    assert min(e["ts"] for e in slices) == 0.0  # times relative to the first call
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[1].startswith("rank 1")


def test_a_process_killed_mid_chunk_keeps_what_it_wrote(tmp_path):
    write_process(tmp_path, 7, 0, ["barrier"], [rec(1, 2, 1), rec(3, 4, 2)])
    with open(tmp_path / "trace-8.json", "w") as f:
        f.write("{not json")  # a meta file cut short: that process is left out, the rest merged
    (meta, recs), = _trace.read(str(tmp_path))
    assert meta["rank"] == 0 and [r[3] for r in recs] == [1, 2]


def test_hosts_are_placed_by_their_wall_clocks(tmp_path):
    # rank 1's monotonic clock reads 5 s less than rank 0's at the same wall-clock instant
    x, wall = 10**13, 2 * 10**18
    write_process(tmp_path, 1, 0, ["barrier"], [(x + 100_000, x + 200_000, 0, 1, 0, 0, -1, 0)], mono_ns=x, wall_ns=wall)
    y = x - 5 * 10**9
    write_process(tmp_path, 2, 1, ["barrier"], [(y + 150_000, y + 200_000, 0, 1, 0, 0, -1, 0)], mono_ns=y, wall_ns=wall)
    ev = [e for e in _trace.events(_trace.read(str(tmp_path))) if e["ph"] == "X"]
    by_rank = {e["pid"]: e for e in ev}
    assert by_rank[1]["ts"] - by_rank[0]["ts"] == pytest.approx(50)
    assert by_rank[0]["args"]["last_rank"] == 1 and by_rank[0]["args"]["wait_us"] == pytest.approx(50)


def test_recorder_writes_records_a_reader_sees(tmp_path):
    op = _trace.op_id("all_gather")
    assert _trace.op_id("all_gather") == op
    r = _trace.Recorder(str(tmp_path))
    for i in range(_trace.CHUNK + 5):  # into a second chunk
        r.add(1000 + i, 2000 + i, 16, i + 1, op, 3, -1, 0)
    (meta, recs), = _trace.read(str(tmp_path))
    assert meta["ops"][op] == "all_gather" and len(recs) == _trace.CHUNK + 5
    assert recs[-1] == (1000 + _trace.CHUNK + 4, 2000 + _trace.CHUNK + 4, 16, _trace.CHUNK + 5, op, 3, -1, 0)


@pytest.mark.timeout(60)
def test_tracing_off_replaces_nothing():
    code = ("import commlib, commlib._api.collectives as c; "
            "print(hasattr(commlib.all_sum, '__wrapped__'), hasattr(c.all_reduce, '__wrapped__'))")
    env = {k: v for k, v in os.environ.items() if k != "COMMLIB_TRACE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert off.stdout.split() == ["False", "False"], off.stderr
    on = subprocess.run([sys.executable, "-c", code], env={**env, "COMMLIB_TRACE": "/nonexistent-never-written"},
                        capture_output=True, text=True, timeout=60)
    assert on.stdout.split() == ["True", "True"], on.stderr


def test_stats_name_the_rank_everyone_waited_for(tmp_path):
    # two ranks, three 8 B all_reduces: rank 1 arrives 100 µs after rank 0 every time
    write_process(tmp_path, 1, 0, ["all_reduce", "send"],
                  [rec(1000 * k, 1000 * k + 110, k + 1) for k in range(3)] + [rec(5000, 5002, 4, op=1, nbytes=4096,
                                                                                   peer=1)])
    write_process(tmp_path, 2, 1, ["all_reduce"], [rec(1000 * k + 100, 1000 * k + 110, k + 1) for k in range(3)])
    rows = {(r["op"], r["size"]): r for r in _trace.summarize(_trace.read(str(tmp_path)))}
    ar = rows[("all_reduce", "≤ 8 B")]
    assert ar["calls"] == 6 and ar["bytes"] == 48
    assert ar["seconds"] == pytest.approx(3 * 110e-6 + 3 * 10e-6)
    assert ar["wait_seconds"] == pytest.approx(3 * 100e-6)
    assert ar["slowest_rank"] == 1 and ar["slowest_count"] == 3
    mean = (3 * 110e-6 + 3 * 10e-6) / 6
    assert ar["busbw_gbs"] == pytest.approx(8 / mean / 1e9 * 2 * (2 - 1) / 2)  # nccl-tests' all_reduce factor
    send = rows[("send", "≤ 64 KiB")]
    assert send["calls"] == 1 and send["busbw_gbs"] is None and send["slowest_rank"] is None
    table = _trace.stats_table(list(rows.values()))
    assert "rank 1 (3×)" in table and "all_reduce" in table and "4.0 KiB" in table
    assert [line.split()[0] for line in table.splitlines()[1:]] == ["all_reduce", "send"]  # most time first


def test_size_classes():
    assert [_trace.size_class(b) for b in (0, 8, 9, 1024, 65536, 65537, 1 << 20, 16 << 20, (16 << 20) + 1)] == [
        "≤ 8 B", "≤ 8 B", "≤ 1 KiB", "≤ 1 KiB", "≤ 64 KiB", "≤ 1 MiB", "≤ 1 MiB", "≤ 16 MiB", "> 16 MiB"]


def test_command_line_merges_and_prints_stats(tmp_path, capsys):
    write_process(tmp_path, 1, 0, ["barrier"], [rec(1, 5, 1)])
    write_process(tmp_path, 2, 1, ["barrier"], [rec(3, 5, 1)])
    out = tmp_path / "t.json"
    assert _trace.main([str(tmp_path), str(out), "--stats"]) == 0
    text = capsys.readouterr().out
    assert "trace of 2 process(es), 2 calls" in text and "rank 1 (1×)" in text
    assert json.loads(out.read_text())["traceEvents"]
    with pytest.raises(SystemExit):
        _trace.main([str(tmp_path)])


def test_the_algorithm_noted_in_a_record_is_named(tmp_path):
    ring = 1 + _tracecall.ALGORITHMS.index("ring")
    write_process(tmp_path, 1, 0, ["all_reduce"], [rec(1, 5, 1, flags=ring << _tracecall.ALGO_SHIFT),
                                                   rec(6, 9, 2, flags=_trace.F_ERROR)])
    ev = [e for e in _trace.events(_trace.read(str(tmp_path))) if e["ph"] == "X"]
    assert ev[0]["args"]["algorithm"] == "ring" and "error" not in ev[0]["args"]
    assert ev[1]["args"]["error"] is True and "algorithm" not in ev[1]["args"]


def test_ranks_are_placed_on_the_coordinators_clock(tmp_path):
    # the wall clocks disagree by 3 s; the offsets measured against the coordinator place rank 1's call
    # 40 µs after rank 0's
    x = 10**13
    for pid, rank, mono, wall, offset, start in ((1, 0, x, 10**18, 5_000, x + 100_000),
                                                (2, 1, x - 7 * 10**9, 10**18 + 3 * 10**9, 5_000 + 7 * 10**9,
                                                 x - 7 * 10**9 + 140_000)):
        write_process(tmp_path, pid, rank, ["barrier"], [(start, start + 200_000, 0, 1, 0, 0, -1, 0)], mono, wall,
                      f"h{rank}", coord_offset_ns=offset, coord_error_ns=1_000)
    ev = {e["pid"]: e for e in _trace.events(_trace.read(str(tmp_path))) if e["ph"] == "X"}
    assert ev[1]["ts"] - ev[0]["ts"] == pytest.approx(40)
    assert ev[0]["args"]["wait_us"] == pytest.approx(40) and ev[0]["args"]["last_rank"] == 1


def test_a_clock_drifting_between_start_and_finalize_is_corrected(tmp_path):
    # rank 1's offset to the coordinator grows from 0 to 1 ms over 1 s: a call at the middle is
    # placed 0.5 ms later than its own clock says; rank 0's clock is the coordinator's
    x = 10**13
    start = x + 500_000_000
    for pid, rank, end in ((1, 0, {}), (2, 1, {"coord_end_offset_ns": 1_000_000, "coord_end_error_ns": 1_000,
                                              "coord_end_at_ns": x + 10**9})):
        write_process(tmp_path, pid, rank, ["barrier"], [(start, start + 10_000, 0, 1, 0, 0, -1, 0)], x, 10**18,
                      coord_offset_ns=0, coord_error_ns=1_000, coord_at_ns=x, **end)
    ev = {e["pid"]: e for e in _trace.events(_trace.read(str(tmp_path))) if e["ph"] == "X"}
    assert ev[1]["ts"] - ev[0]["ts"] == pytest.approx(500)


def test_transport_comes_from_the_meta_of_the_records_process(tmp_path):
    groups = {"0": {"world": [0, 1, 2], "transport": "shared memory + tcp"}, "7": {"world": [2], "transport": "self"}}
    routes = {"1": "shared memory", "2": "tcp"}
    meta = {"groups": groups, "routes": routes}
    assert _trace.transport(meta, 0) == "shared memory + tcp"
    assert _trace.transport(meta, 0, peer=2) == "tcp" and _trace.transport(meta, 0, peer=1) == "shared memory"
    assert _trace.transport(meta, 0, peer=9) is None  # a rank outside the group: not guessed
    assert _trace.transport(meta, 5) is None and _trace.transport({}, 0) is None and _trace.transport(meta, -1) is None
    ring = 1 + _tracecall.ALGORITHMS.index("ring")
    write_process(tmp_path, 1, 0, ["all_reduce", "send"], [rec(1, 5, 1, flags=ring << _tracecall.ALGO_SHIFT),
                                                           rec(6, 9, 1, op=1, peer=2), rec(10, 11, 0, gid=7)],
                  groups=groups, routes=routes)
    ev = [e for e in _trace.events(_trace.read(str(tmp_path))) if e["ph"] == "X"]
    assert [e["args"].get("transport") for e in ev] == ["shared memory + tcp", "tcp", "self"]
    stats = {r["op"]: r for r in _trace.summarize(_trace.read(str(tmp_path)))}
    assert stats["all_reduce"]["algorithm"] == "ring" and stats["send"]["algorithm"] is None
    assert stats["send"]["transport"] == "tcp"
    assert stats["all_reduce"]["transport"] == "shared memory + tcp"  # a group of one moves nothing: not named
    table = _trace.stats_table(list(stats.values())).splitlines()
    assert table[0].split()[-1] == "how"
    assert [line for line in table if line.startswith("send")][0].endswith("tcp")


def test_pack_streams_a_hosts_records_and_removes_them(tmp_path):
    import io
    import tarfile
    parent = tmp_path / "commlib-trace-x"
    there = parent / "host-0"
    there.mkdir(parents=True)
    write_process(there, 11, 2, ["all_sum"], [rec(1, 2, 1)])
    (there / "notes.txt").write_text("not a trace file")
    buf = io.BytesIO()
    _trace.pack(str(there), buf)
    assert not parent.exists()  # the host's directory and its emptied parent are gone
    buf.seek(0)
    assert _trace.unpack(buf, str(tmp_path / "here" / "from-0")) == 2
    assert sorted(os.listdir(tmp_path / "here" / "from-0")) == ["trace-11.bin", "trace-11.json"]
    (meta, recs), = _trace.read(str(tmp_path / "here"))  # read() looks into the fetched subdirectory
    assert meta["rank"] == 2 and recs == [rec(1, 2, 1)]
    # a stream naming paths outside the directory, or links, lands nothing there
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        for name in ("../trace-1.json", "/etc/trace-2.json", "sub/trace-3.json"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
        link = tarfile.TarInfo("trace-4.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    evil.seek(0)
    assert _trace.unpack(evil, str(tmp_path / "evil")) == 0 and os.listdir(tmp_path / "evil") == []
    assert not (tmp_path / "trace-1.json").exists()
    buf = io.BytesIO()
    _trace.pack(str(tmp_path / "never-made"), buf)  # a host whose ranks recorded nothing: an empty stream
    buf.seek(0)
    assert _trace.unpack(buf, str(tmp_path / "none")) == 0
