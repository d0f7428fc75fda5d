"""Soak: thousands of mixed operations across 8 ranks on a small, busy machine, every result verified.

Inputs are a pure function of (rank, step), so each rank computes every
expected result with numpy by itself. The mix covers all_reduce (small and
large, several dtypes and ops, bitwise ops), all_gather, reduce_scatter,
broadcast/reduce/gather/scatter from varying roots, barrier, a sendrecv ring
with varying shifts, ppermute, all_to_all, point-to-point send/recv, collectives on
`g.split(rank % 2)` sub-groups, and iall_reduce overlapped with numpy work.
Checks are counted rather than raised, so one wrong result does not
desynchronise the schedule; the exit code is the verdict.
"""
import pytest

from faultlib import record_figure, stressed

N_RANKS = 8
STEPS = stressed(2000, 6000)  # 2,000 steps: every kind of operation about 125 times per rank

SOAK = """
steps = int(sys.argv[1])
g = cl.init(); r = g.rank(); n = g.size()
sub = g.split(r % 2)
peers = [k for k in range(n) if k % 2 == r % 2]          # world ranks of my sub-group, in sub-rank order
assert sub.size() == len(peers) and sub.rank() == peers.index(r)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8, np.int16, np.complex64]
OPS = ["sum", "max", "min", "prod"]
bad = []
counts = {}

def data(rank, i, count, dt, kind="any"):
    base = (np.arange(count, dtype=np.int64) * 7 + rank * 13 + i) % 11
    if kind == "prod":
        base = base % 3 + 1
    elif np.dtype(dt).kind not in "uc":
        base = base - 3
    return base.astype(dt)

def stack(i, count, dt, ranks=None, kind="any"):
    return np.stack([data(k, i, count, dt, kind) for k in (range(n) if ranks is None else ranks)])

def reduce_np(arrs, op, dt):
    ufunc = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
             "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
    return ufunc.reduce(arrs, axis=0, dtype=dt) if op in ("sum", "prod") else ufunc.reduce(arrs, axis=0)

def check(name, i, got, expect):
    counts[name] = counts.get(name, 0) + 1
    if got is None or expect is None:
        ok = got is None and expect is None
    else:
        got, expect = np.asarray(got), np.asarray(expect)
        ok = got.shape == expect.shape and got.dtype == expect.dtype and np.array_equal(got, expect)
    if not ok and len(bad) < 20:
        bad.append(f"step {i} {name}: got {got!r:.200} expected {expect!r:.200}")
    elif not ok:
        bad.append(name)

t0 = time.monotonic()
for i in range(steps):
    k = i % 16
    root = (i // 16) % n
    if k == 0:                                                  # small all_reduce, dtypes x ops
        dt = DTYPES[(i // 16) % len(DTYPES)]
        op = OPS[(i // 16 // len(DTYPES)) % len(OPS)]
        if np.dtype(dt).kind == "c" and op in ("max", "min"):
            op = "sum"
        kind = "prod" if op == "prod" else "any"
        count = 1 + (i * 37) % 700
        check("all_reduce", i, cl.all_reduce(data(r, i, count, dt, kind), op), reduce_np(stack(i, count, dt, kind=kind), op, dt))
    elif k == 1:                                                # large all_reduce (ring), now and then
        count = (1 << 18) + 3 if i % 64 == 1 else 4099
        dt = np.float32 if i % 128 < 64 else np.int64
        check("all_reduce large", i, cl.all_reduce(data(r, i, count, dt)), reduce_np(stack(i, count, dt), "sum", dt))
    elif k == 2:
        count = 1 + i % 50
        check("all_gather", i, cl.all_gather(data(r, i, count, np.int64)), stack(i, count, np.int64).reshape(-1))
    elif k == 3:
        count = n * (1 + i % 40)
        full = reduce_np(stack(i, count, np.float64), "sum", np.float64)
        check("reduce_scatter", i, cl.reduce_scatter(data(r, i, count, np.float64)), np.split(full, n)[r])
    elif k == 4:
        x = data(root, i, 1 + i % 100, np.int32)
        check("broadcast", i, cl.broadcast(x if r == root else np.zeros_like(x), root=root), x)
    elif k == 5:
        cl.barrier()
        counts["barrier"] = counts.get("barrier", 0) + 1
    elif k == 6:
        shift = 1 + (i // 16) % (n - 1)
        got = cl.sendrecv(data(r, i, 33, np.float64), (r + shift) % n, (r - shift) % n)
        check("sendrecv", i, got, data((r - shift) % n, i, 33, np.float64))
    elif k == 7:
        perm = [(s, (s * 3 + 1 + i) % n) for s in range(n)]
        src = next(s for s, d in perm if d == r)
        check("ppermute", i, cl.ppermute(data(r, i, 17, np.int64), perm), data(src, i, 17, np.int64))
    elif k == 8:
        m = 1 + i % 5
        got = cl.all_to_all(data(r, i, n * m, np.int32))
        check("all_to_all", i, got, np.concatenate([data(s, i, n * m, np.int32)[r * m:(r + 1) * m] for s in range(n)]))
    elif k == 9:
        expect = reduce_np(stack(i, 64, np.float32), "max", np.float32) if r == root else None
        check("reduce", i, cl.reduce(data(r, i, 64, np.float32), "max", root=root), expect)
    elif k == 10:
        expect = stack(i, 9, np.int16).reshape(-1) if r == root else None
        check("gather", i, cl.gather(data(r, i, 9, np.int16), root=root), expect)
    elif k == 11:
        full = data(root, i, n * 6, np.float64)
        got = cl.scatter(full if r == root else None, root=root)
        check("scatter", i, got, np.split(full, n)[r])
    elif k == 12:                                               # sub-group collectives
        count = 1 + i % 200
        check("sub all_reduce", i, cl.all_reduce(data(r, i, count, np.int64), group=sub),
              reduce_np(stack(i, count, np.int64, peers), "sum", np.int64))
    elif k == 13:                                               # overlap with numpy work
        x = data(r, i, 5000, np.float64)
        req = cl.iall_reduce(x)
        a = np.linspace(0, 1, 10000).reshape(100, 100)
        busy = float((a @ a).sum())
        check("iall_reduce", i, req.wait(), reduce_np(stack(i, 5000, np.float64), "sum", np.float64))
    elif k == 14:                                               # bitwise ops on integers
        op = ("band", "bor", "bxor")[(i // 16) % 3]
        raw = lambda k_: ((np.arange(40, dtype=np.int64) * 2654435761 + k_ * 40503 + i) % (1 << 31)).astype(np.int32)
        check("all_reduce " + op, i, cl.all_reduce(raw(r), op), reduce_np(np.stack([raw(s) for s in range(n)]), op, np.int32))
    else:                                                       # sub-group broadcast and p2p
        sroot = (i // 16) % len(peers)
        x = data(peers[sroot], i, 12, np.float32)
        check("sub broadcast", i, cl.broadcast(x if sub.rank() == sroot else np.zeros_like(x), root=sroot, group=sub), x)
        if r % 2 == 0:
            cl.send(data(r, i, 5, np.int64), r + 1, tag=i % 100)
        else:
            check("send/recv", i, cl.recv((5,), np.int64, r - 1, tag=i % 100), data(r - 1, i, 5, np.int64))
seconds = time.monotonic() - t0
total_bad = int(cl.all_reduce(np.array([len(bad)], np.int64))[0])
emit(steps=steps, seconds=seconds, bad=bad, total_bad=total_bad, counts=counts)
sys.exit(1 if total_bad else 0)
"""


@pytest.mark.timeout(180)
def test_soak_8_ranks_mixed_operations(jobs):
    """Over 20 s with COMMLIB_STRESS_RUNS (6,000 steps; 2,000 otherwise, about 8 s): a soak of 8 ranks on
    2 cores, every operation mixed for STEPS steps."""
    job = jobs(SOAK, N_RANKS, env={"COMMLIB_TIMEOUT": "120"}, args=[STEPS]).start()
    rc = job.wait(170)
    reports = job.by_rank("steps")
    assert set(reports) == set(range(N_RANKS)), job.output()
    for r, rec in reports.items():
        assert not rec["bad"], f"rank {r}: {len(rec['bad'])} wrong results, e.g. {rec['bad'][:5]}"
    assert rc == 0, job.output()
    slowest = max(rec["seconds"] for rec in reports.values())
    checks = sum(sum(rec["counts"].values()) for rec in reports.values())
    record_figure("soak (8 ranks, 2 cores)", f"{STEPS} operations per rank ({STEPS * N_RANKS} rank-operations, "
                                               f"{checks} verified results) in {slowest:.1f} s = {STEPS / slowest:.0f} "
                                               f"collective steps/s; rank 0 per kind: {reports[0]['counts']}")
    job.assert_no_leftovers()
