"""commrun --trace: the job's timeline, from real ranks, however the job ends."""
import json
import os

import pytest

pytestmark = pytest.mark.timeout(120)

SLOW_RANK = """
    import time
    import numpy as np
    import commlib as cl
    g = cl.init()
    r, n = g.rank(), g.size()
    x = np.ones(1000)
    for i in range(3):
        if r == 1:
            time.sleep(0.3)  # everyone waits for rank 1 (well beyond a loaded machine's scheduling delays)
        cl.all_sum(x)
    if r == 0:
        cl.send(x, 1)
    elif r == 1:
        cl.recv_like(x, 0)
    cl.barrier()
    cl.all_sum(np.ones(1 << 18))  # 2 MiB: the ring, chosen on the call
"""


def load(path):
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    return ev, [e for e in ev if e["ph"] == "X"]


def calls(slices, rank, name):
    return [e for e in slices if e["pid"] == rank and e["name"] == name]


@pytest.mark.parametrize("commrun", ["exec", "fork"], indirect=True)
def test_the_slow_rank_is_the_one_everyone_waited_for(commrun, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = commrun.script("slow.py", SLOW_RANK)
    r = commrun.run("-n", 3, "--trace", "t.json", script, env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert "trace of 3 rank(s)" in r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    assert {e["pid"] for e in slices} == {0, 1, 2}
    for rank in (0, 2):
        sums = calls(slices, rank, "all_sum")[:3]
        assert [e["args"]["seq"] for e in sums] == [1, 2, 3]
        for e in sums:
            assert e["args"]["last_rank"] == 1 and e["args"]["wait_us"] > 50_000, e
            assert e["dur"] > 50_000 and e["args"]["bytes"] == 8000
    waited = min(e["dur"] for rank in (0, 2) for e in calls(slices, rank, "all_sum")[:3])
    for e in calls(slices, 1, "all_sum")[:3]:  # the last to come waits for nobody: shorter than any other's
        assert e["args"]["wait_us"] == 0 and e["dur"] < waited, (e, waited)
    send, = calls(slices, 0, "send")
    recv, = calls(slices, 1, "recv_like")
    assert send["args"]["peer"] == 1 and recv["args"]["peer"] == 0
    assert len(calls(slices, 2, "barrier")) == 1
    assert calls(slices, 2, "all_sum")[-1]["args"]["algorithm"] == "ring"
    assert sum(1 for e in ev if e["ph"] == "s") == sum(1 for e in ev if e["ph"] == "f") >= 6
    assert os.listdir(tmp) == []  # the ranks' files are gone once merged


def test_a_killed_rank_keeps_its_calls(commrun):
    script = commrun.script("killed.py", """
        import os, signal
        import numpy as np
        import commlib as cl
        g = cl.init()
        x = np.ones(10)
        for i in range(4):
            cl.all_sum(x)
        if g.rank() == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # no exit handler, no flush: what was written must stay
        cl.all_sum(x)
    """)
    r = commrun.run("-n", 3, "--trace", "t.json", script)
    assert r.returncode != 0
    ev, slices = load(commrun.cwd / "t.json")
    assert len(calls(slices, 2, "all_sum")) == 4
    for rank in (0, 1):
        sums = calls(slices, rank, "all_sum")
        assert len(sums) == 5 and sums[-1]["args"].get("error") is True  # the survivors' failed call


def test_timeout_still_writes_the_trace(commrun):
    script = commrun.script("hang.py", """
        import time
        import commlib as cl
        g = cl.init()
        for i in range(3):
            cl.barrier()
        if g.rank() == 0:
            time.sleep(60)  # stuck: --timeout is what ends the job
        cl.barrier()
    """)
    r = commrun.run("--timeout", 5, "-n", 2, "--trace", "t.json", script, timeout=90)
    assert r.returncode == 124, r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    assert len(calls(slices, 0, "barrier")) == 3
    assert len(calls(slices, 1, "barrier")) >= 3


# a remote shell to "other hosts" that runs the command here (127.0.0.2 is not this host's name, so
# commrun starts its ranks, and fetches their records, through it)
HERE = "sh -c 'exec \"$@\"' {host}"


def test_ranks_on_other_hosts_are_fetched_and_merged(commrun, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = commrun.script("slow.py", SLOW_RANK)
    r = commrun.run("--hosts", "localhost:1,127.0.0.2:2", "--rsh", HERE, "--coordinator-host", "127.0.0.1",
                    "--trace", "t.json", "--stats", script, env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert "trace of 3 rank(s)" in r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    assert {e["pid"] for e in slices} == {0, 1, 2}
    assert all(e["args"]["last_rank"] == 1 for e in calls(slices, 2, "all_sum")[:3])
    table = r.stderr[r.stderr.index("(--stats):"):].splitlines()[1:]
    row, = [line for line in table if line.startswith("all_sum") and "≤ 64 KiB" in line]
    assert "rank 1 (3×)" in row and " 9 " in row
    assert os.listdir(tmp) == []  # commrun's directory, the other host's inside it: all gone


def test_a_host_whose_records_cannot_be_fetched_is_named(commrun):
    script = commrun.script("two.py", """
        import numpy as np
        import commlib as cl
        cl.init()
        cl.all_sum(np.ones(4))
    """)
    # refuses the fetch only (the template travels in the ranks' COMMLIB_RSH: it must not match itself)
    refuse = "sh -c 'p=--pa; case \"$*\" in *\"$p\"ck*) echo no way in >&2; exit 3;; esac; exec \"$@\"' {host}"
    r = commrun.run("--hosts", "localhost:1,127.0.0.2:1", "--rsh", refuse, "--coordinator-host", "127.0.0.1",
                    "--trace", "t.json", script)
    assert r.returncode == 0, r.stderr
    assert "the records of the ranks on 127.0.0.2 are missing: no way in" in r.stderr, r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    assert 0 in {e["pid"] for e in slices}  # what could be read is merged (here rank 1's files too: one filesystem)


def test_stats_table_names_the_slow_rank(commrun):
    script = commrun.script("slow.py", SLOW_RANK)
    r = commrun.run("-n", 3, "--stats", "--trace", "t.json", script)
    assert r.returncode == 0, r.stderr
    assert "trace of 3 rank(s)" in r.stderr
    table = r.stderr[r.stderr.index("(--stats):"):].splitlines()[1:]
    assert table[0].split()[:2] == ["op", "size"]
    row, = [line for line in table if line.startswith("all_sum") and "≤ 64 KiB" in line]
    assert "rank 1 (3×)" in row and " 9 " in row  # 3 calls on each of 3 ranks (the 2 MiB one is another size)
    assert any(line.startswith("barrier") for line in table)


def test_mpi_calls_carry_their_mpi_names(commrun):
    script = commrun.script("mpi_prog.py", """
        import time
        import numpy as np
        from commlib import MPI
        comm = MPI.COMM_WORLD
        r = comm.Get_rank()
        x, y = np.ones(100), np.empty(100)
        for i in range(2):
            if r == 1:
                time.sleep(0.3)  # well beyond a loaded machine's scheduling delays
            comm.Allreduce(x, y, op=MPI.SUM)
        comm.allreduce(r)
        if r == 0:
            comm.Send(x, dest=1, tag=3)
        elif r == 1:
            comm.Recv(y, source=0, tag=3)
        comm.Barrier()
    """)
    r = commrun.run("-n", 2, "--trace", "t.json", script)
    assert r.returncode == 0, r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    allreduce = calls(slices, 0, "MPI.Allreduce")
    assert len(allreduce) == 2 and all(e["args"]["last_rank"] == 1 and e["args"]["wait_us"] > 20_000
                                       for e in allreduce)
    assert len(calls(slices, 0, "MPI.allreduce")) == 1 and len(calls(slices, 1, "MPI.Barrier")) == 1
    assert calls(slices, 0, "MPI.Send")[0]["args"]["peer"] == 1
    assert calls(slices, 1, "MPI.Recv")[0]["args"]["peer"] == 0
    assert not calls(slices, 0, "all_reduce")  # the MPI call is the one recorded, not what it calls


STATS_PROGRAM = """
    import time
    import numpy as np
    import commlib as cl
    g = cl.init()
    r = g.rank()
    others, word = [k for k in range(g.size()) if k != 1], np.zeros(1)
    for i in range(4):
        if r == 1:  # the last to come, every time: it hears from the others just before they call
            for k in others:
                cl.recv_like(word, k)
            time.sleep(0.03)  # late on purpose: the others wait in all_sum meanwhile
        else:
            cl.send(word, 1)
        cl.all_sum(np.ones(1000))
    mine = cl.stats()
    every = cl.stats(all_ranks=True)
    row, = [x for x in mine if x["op"] == "all_sum"]
    assert row["calls"] == 4 and row["bytes"] == 32000 and row["slowest_rank"] is None, row
    row, = [x for x in every if x["op"] == "all_sum"]
    assert row["calls"] == 4 * g.size() and row["slowest_rank"] == 1 and row["slowest_count"] == 4, row
    assert row["wait_seconds"] > 0.03 * (g.size() - 1) * 3, row
    print("ok", flush=True)
"""


def test_commlib_stats_and_the_table_at_finalize(commrun, tmp_path):
    script = commrun.script("stats.py", STATS_PROGRAM)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = commrun.run("-n", 3, script, env={"COMMLIB_STATS": "1", "TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ok") == 3
    head = "commlib: communication by call and size (COMMLIB_STATS=1):"
    assert r.stderr.count(head) == 1  # rank 0 prints it, once
    table = [line.partition("] ")[2] for line in r.stderr[r.stderr.index(head):].splitlines()[1:]]  # untagged
    row, = [line for line in table if line.startswith("all_sum")]
    assert "rank 1 (4×)" in row
    assert os.listdir(tmp) == []  # each rank's private records are gone
    assert "a record was lost" not in r.stderr  # ... after finalize's last records, not before them


def test_commlib_stats_says_when_nothing_is_recorded(commrun):
    script = commrun.script("nostats.py", """
        import commlib as cl
        cl.init()
        try:
            cl.stats()
        except cl.CommError as e:
            print("refused:", e)
    """)
    r = commrun.run("-n", 2, script, env={"COMMLIB_STATS": "", "COMMLIB_TRACE": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("refused: commlib.stats() counts only calls that are recorded") == 2


def test_ranks_measure_their_clock_against_the_coordinator(commrun, tmp_path):
    script = commrun.script("slow.py", SLOW_RANK)
    trace_dir = tmp_path / "records"
    r = commrun.run("-n", 3, script, env={"COMMLIB_TRACE": str(trace_dir)})
    assert r.returncode == 0, r.stderr
    metas = [json.loads(p.read_text()) for p in trace_dir.glob("trace-*.json")]
    assert sorted(m["rank"] for m in metas) == [0, 1, 2]
    for m in metas:  # one host: one monotonic clock, so the measured offsets are zero within their error
        for when in ("coord_", "coord_end_"):  # when the world assembled, and again at finalize
            assert 0 < m[when + "error_ns"] < 50_000_000
            assert abs(m[when + "offset_ns"]) <= m[when + "error_ns"] + 100_000, m
        assert m["coord_at_ns"] < m["coord_end_at_ns"]


@pytest.mark.parametrize("mode,route", [("auto", "shared memory"), ("socket", "unix socket"), ("tcp", "tcp")])
def test_records_name_the_algorithm_and_the_transport(commrun, mode, route):
    # the first 8 B all_sum runs on the Python path (choose() names it), the later ones on the
    # one-call path (its plan names it): both must say "doubling"
    script = commrun.script("how.py", """
        import numpy as np
        import commlib as cl
        g = cl.init()
        for i in range(3):
            cl.all_sum(np.ones(1))
            cl.barrier()
            cl.broadcast(np.ones(4), root=0)
        cl.all_sum(np.ones(1 << 18))
        if g.rank() == 0:
            cl.send(np.ones(3), 2)
        elif g.rank() == 2:
            cl.recv_like(np.ones(3), 0)
        alone = g.split(g.rank())
        cl.all_sum(np.ones(2), group=alone)
    """)
    r = commrun.run("-n", 3, "--trace", "t.json", "--stats", script, env={"COMMLIB_TRANSPORT": mode})
    assert r.returncode == 0, r.stderr
    ev, slices = load(commrun.cwd / "t.json")
    for rank in range(3):
        sums = calls(slices, rank, "all_sum")
        assert [e["args"].get("algorithm") for e in sums] == ["doubling"] * 3 + ["ring", None], sums
        assert [e["args"]["transport"] for e in sums] == [route] * 4 + ["self"]
        for name, algo in (("barrier", "doubling"), ("broadcast", "linear")):
            assert [e["args"].get("algorithm") for e in calls(slices, rank, name)] == [algo] * 3
            assert {e["args"]["transport"] for e in calls(slices, rank, name)} == {route}
    assert calls(slices, 0, "send")[0]["args"]["transport"] == route
    assert calls(slices, 2, "recv_like")[0]["args"]["transport"] == route
    table = r.stderr[r.stderr.index("(--stats):"):].splitlines()[1:]
    row, = [line for line in table if line.startswith("all_sum") and "≤ 8 B" in line]
    assert row.endswith(f"doubling / {route}"), row
