"""Rank program for the object variants (send_obj, recv_obj, broadcast_obj, all_gather_obj, gather_obj, scatter_obj).

usage: objects_case.py MODE [ARGS]
  all            - point-to-point, collectives, errors and a 100 MB round trip (any size)
  mismatch       - broadcast_obj on rank 0 against an array broadcast elsewhere (size >= 2; last call)
  big MB [OPS]   - objects of about MB megabytes (OPS: comma list of p2p,inband,bcast,gather,scatter,allgather)

Every rank's objects are a pure function of (rank, label), so each rank rebuilds
what any other rank sent and checks what it received independently. Failures
are collected, not raised, so one wrong result does not desynchronise the
schedule; the program prints a summary and exits non-zero on any failure.
"""
import dataclasses
import sys
import time
import traceback
import zlib

import numpy as np

import commlib as cl
from commlib._api.objects import (OOB_MIN_BYTES, all_gather_obj, broadcast_obj, gather_obj, recv_obj, scatter_obj,
                              send_obj)

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a test dependency
    BF16 = None

g = cl.init()
me, n = g.rank(), g.size()
FAILURES = []
CHECKS = [0]


# ---------------------------------------------------------------- custom classes (pickled by reference to __main__)
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and same(self.x, other.x) and same(self.y, other.y)


@dataclasses.dataclass
class Record:
    name: str
    values: list
    payload: np.ndarray = None


class Reduced:
    """Pickles through __reduce__ with an array argument."""

    def __init__(self, arr, label):
        self.arr, self.label = arr, label

    def __reduce__(self):
        return (Reduced, (self.arr, self.label))

    def __eq__(self, other):
        return type(other) is Reduced and same(self.arr, other.arr) and self.label == other.label


class Unpicklable:
    def __reduce__(self):
        raise TypeError("Unpicklable refuses to be pickled")


# ---------------------------------------------------------------- checking
def same(a, b):
    """Deep equality that also compares numpy dtype, shape and bytes (NaN-safe)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes())
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def check(cond, label):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(label)
        print(f"FAIL rank {me}: {label}", flush=True)


def check_same(got, want, label):
    check(same(got, want), label)


def expect_raises(exc_type, fn, label, contains=None):
    try:
        fn()
    except exc_type as exc:
        check(contains is None or contains in str(exc), f"{label}: message {str(exc)!r} lacks {contains!r}")
        return exc
    except Exception as exc:  # noqa: BLE001 - a wrong exception is a failure, reported
        check(False, f"{label}: raised {type(exc).__name__}: {exc}, expected {exc_type.__name__}")
        return None
    check(False, f"{label}: did not raise {exc_type.__name__}")
    return None


def rng(*label):
    return np.random.default_rng([zlib.crc32(repr(label).encode())])


def arrays_of(r, label):
    """Arrays of several dtypes and layouts, some below and some above the out-of-band threshold."""
    rg = rng("arrays", r, label)
    big = OOB_MIN_BYTES // 8 + 1000 + 37 * r  # float64 elements: out-of-band
    out = {
        "bool": rg.random(17) > 0.5,
        "int8": rg.integers(-128, 127, 33, dtype=np.int8),
        "uint16": rg.integers(0, 65535, (3, 5), dtype=np.uint16),
        "int32": rg.integers(-2**31, 2**31 - 1, 100, dtype=np.int32),
        "int64": np.arange(r * 10, r * 10 + 7, dtype=np.int64),
        "float16": rg.standard_normal(9).astype(np.float16),
        "float32_big": rg.standard_normal(big * 2).astype(np.float32),   # out-of-band
        "float64_big": rg.standard_normal(big),                          # out-of-band
        "complex64": (rg.standard_normal(6) + 1j * rg.standard_normal(6)).astype(np.complex64),
        "complex128_big": rg.standard_normal(2 * big).view(np.complex128),    # out-of-band
        "zero_d": np.array(3.5 + r),
        "empty": np.empty((0, 4), dtype=np.float32),
        "nan": np.array([np.nan, 1.0, -np.inf]),
        "strided": rg.standard_normal((40, 30))[::3, 1::2],               # non-contiguous, in-band
        "strided_big": rg.standard_normal((300, 200))[:, ::2],             # non-contiguous, large: in-band copy
        "transposed_big": rg.standard_normal((150, 120)).T,               # F-contiguous: out-of-band
        "fortran": np.asfortranarray(rg.integers(0, 100, (7, 9))),
        "reversed": np.arange(50, dtype=np.int16)[::-1],
        "structured": np.array([(1, 2.0), (3, 4.0)], dtype=[("a", "i4"), ("b", "f8")]),
    }
    if BF16 is not None:
        out["bfloat16"] = rg.standard_normal(300).astype(BF16)
        out["bfloat16_big"] = rg.standard_normal(OOB_MIN_BYTES).astype(BF16)
    return out


def make(r, label, heavy=True):
    """A nested object that is a pure function of (r, label)."""
    rg = rng("make", r, label)
    shared = np.full(10, r, dtype=np.int32)
    obj = {
        "rank": r,
        "label": label,
        "none": None,
        "text": "ünïcode " * (r + 1),
        "bytes": bytes(rg.integers(0, 256, 50 + r, dtype=np.uint8)),
        "bytearray": bytearray(b"ba" * (r + 3)),
        "nested": [1, (2.5, [None, {"k": -r}]), {"deep": [[[r]]]}],
        "point": Point(r, [r, r + 1]),
        "record": Record(f"rec{r}", [r] * 3, np.arange(5.0) * r),
        "reduced": Reduced(np.arange(r + 2), label),
        "set": frozenset({r, r + 1}),
        "float": float("nan") if r % 2 else 1.5,
        "alias_a": shared,
        "alias_b": shared,
    }
    if heavy:
        obj["arrays"] = arrays_of(r, label)
        if r % 2 == 1:  # ranks differ in how many out-of-band buffers they carry
            obj["extra"] = [rg.standard_normal(OOB_MIN_BYTES // 8 * (i + 1)) for i in range(3)]
    return obj


def check_obj(got, r, label, heavy=True, what=""):
    want = make(r, label, heavy)
    check_same(got, want, f"{what} object of rank {r} ({label})")
    if isinstance(got, dict):
        check(got.get("alias_a") is got.get("alias_b"), f"{what}: shared reference preserved ({label})")
        if heavy and "arrays" in got:
            for k, a in got["arrays"].items():
                check(a.flags.writeable, f"{what}: array {k} writable ({label})")
                check(a.flags.aligned, f"{what}: array {k} aligned ({label})")
            check(got["arrays"]["transposed_big"].flags.f_contiguous, f"{what}: F order kept ({label})")


# ---------------------------------------------------------------- sections
def section_p2p():
    # Star exchange of heavy objects: 0 -> r, then r -> 0 (no deadlock whatever the size).
    if me == 0:
        for r in range(1, n):
            send_obj(make(0, f"to{r}"), r, tag=11)
            check_obj(recv_obj(r, 11), r, "back", what="p2p star")
    else:
        check_obj(recv_obj(0, 11), 0, f"to{me}", what="p2p star")
        send_obj(make(me, "back"), 0, tag=11)

    # Self send: through the transport (size > 1) or the local queue (singleton).
    send_obj(make(me, "self", heavy=False), me, tag=3)
    got, st = recv_obj(me, 3, status=True)
    check_obj(got, me, "self", heavy=False, what="self send")
    check((st.source, st.tag) == (me, 3) and st.nbytes > 0, f"self send status {st}")

    # ANY_SOURCE / ANY_TAG with ordering: every rank sends 3 messages on each of tags 0..2 to rank 0.
    per = 3
    if me != 0 or n == 1:
        for seq in range(per):
            for tag in range(3):
                send_obj(make(me, f"m{tag}.{seq}", heavy=False) | {"seq": seq}, 0, tag=tag)
    if me == 0:
        senders = range(n) if n == 1 else range(1, n)
        seen = {(s, t): 0 for s in senders for t in range(3)}
        # first: tag 2 from any source, then a specific source with any tag, then fully wildcard
        plan = [(cl.ANY_SOURCE, 2)] * len(senders) + [(senders[0], cl.ANY_TAG)] * 2
        plan += [(cl.ANY_SOURCE, cl.ANY_TAG)] * (len(senders) * 3 * per - len(plan))
        for src, tag in plan:
            got, st = recv_obj(src, tag, status=True)
            check(src in (cl.ANY_SOURCE, st.source) and tag in (cl.ANY_TAG, st.tag),
                  f"wildcard recv({src},{tag}) matched {st}")
            key = (st.source, st.tag)
            check(key in seen and got.get("seq") == seen.get(key), f"order on {key}: got seq {got.get('seq')}, "
                                                                   f"expected {seen.get(key)}")
            seen[key] = seen.get(key, 0) + 1
            got.pop("seq", None)
            check_obj(got, st.source, f"m{st.tag}.{seen[key] - 1}", heavy=False, what=f"wildcard {key}")
        check(all(v == per for v in seen.values()), f"wildcard: all messages received {seen}")
        check(all(cl.iprobe(cl.ANY_SOURCE, t) is None for t in range(3)), "wildcard: nothing left over")

    # Arrays and objects interleaved on one tag keep their order; each refuses the other kind.
    peer = (me + 1) % n
    src = (me - 1) % n
    x = np.arange(20, dtype=np.float32) + me
    cl.send(x, peer, tag=7)
    send_obj({"after": me}, peer, tag=7)
    cl.send(x * 2, peer, tag=7)
    send_obj({"wrong kind": me}, peer, tag=8)
    cl.send(x, peer, tag=9)
    check_same(cl.recv((20,), np.float32, src, tag=7), np.arange(20, dtype=np.float32) + src, "array before object")
    check_same(recv_obj(src, 7), {"after": src}, "object between arrays")
    check_same(cl.recv((20,), np.float32, src, tag=7), (np.arange(20, dtype=np.float32) + src) * 2,
               "array after object")
    expect_raises(cl.MismatchError, lambda: cl.recv((20,), np.float32, src, tag=8), "recv of an object",
                  contains="object")
    expect_raises(cl.MismatchError, lambda: recv_obj(src, 9), "recv_obj of an array", contains="array")

    # 100 MB round trip: rank 0 -> last rank -> rank 0 (to itself at size 1), bytes identical both ways.
    big = np.frombuffer(rng("big100").bytes(100 << 20), dtype=np.uint64).reshape(-1, 1024)
    last = n - 1
    if me == 0:
        t = time.perf_counter()
        send_obj({"big": big, "tail": "end"}, last, tag=20)
        if last != 0:
            back = recv_obj(last, 21)
        else:
            back = recv_obj(0, 20)
        check(back["tail"] == "end" and back["big"].shape == big.shape and np.array_equal(back["big"], big),
              "100 MB round trip")
        check(not np.shares_memory(back["big"], big), "100 MB round trip is a copy")
        print(f"rank 0: 100 MB object round trip {time.perf_counter() - t:.3f} s", flush=True)
    elif me == last:
        got = recv_obj(0, 20)
        check(np.array_equal(got["big"], big), "100 MB received")
        send_obj(got, 0, tag=21)


def section_collectives():
    for root in range(n):
        obj = make(root, f"bcast{root}")
        got = broadcast_obj(obj if me == root else None, root=root)
        if me == root:
            check(got is obj, "broadcast_obj returns obj itself on the root")
        else:
            check_obj(got, root, f"bcast{root}", what="broadcast_obj")
        small = broadcast_obj({"r": root} if me == root else "ignored", root)
        check_same(small, {"r": root}, f"small broadcast_obj root {root}")

    lst = all_gather_obj(make(me, "ag"))
    check(isinstance(lst, list) and len(lst) == n, "all_gather_obj gives a list of size entries")
    for r, got in enumerate(lst):
        check_obj(got, r, "ag", what="all_gather_obj")
    mine = make(me, "ag")
    lst[me]["arrays"]["int64"][:] = -1
    check_same(mine["arrays"]["int64"], make(me, "ag")["arrays"]["int64"], "all_gather_obj own entry is a copy")
    check_same(all_gather_obj(None), [None] * n, "all_gather_obj of None")
    check_same(all_gather_obj(me * 10), [r * 10 for r in range(n)], "all_gather_obj of ints")
    # one rank's object too large for its slot, the others' small: every rank takes the second round
    check_same(all_gather_obj("x" * 400 if me == n - 1 else me), [r if r < n - 1 else "x" * 400 for r in range(n)],
               "all_gather_obj of small objects and one large")
    check_same(all_gather_obj(np.arange(3) if me == 0 else {"r": me}), [np.arange(3)] + [{"r": r} for r in range(1, n)],
               "all_gather_obj of an array (a pickle buffer) and small dicts")
    check_same(broadcast_obj({"k": [1, 2.5, "s"]} if me == 0 else None, root=0), {"k": [1, 2.5, "s"]},
               "broadcast_obj of a small dict")

    for root in range(n):
        got = gather_obj(make(me, f"ga{root}"), root=root)
        if me == root:
            check(isinstance(got, list) and len(got) == n, f"gather_obj list on root {root}")
            for r, x in enumerate(got or []):
                check_obj(x, r, f"ga{root}", what=f"gather_obj root {root}")
        else:
            check(got is None, f"gather_obj returns None off the root ({root})")

    for root in range(n):
        objs = [make(r, f"sc{root}") for r in range(n)] if me == root else None
        check_obj(scatter_obj(objs, root=root), me, f"sc{root}", what=f"scatter_obj root {root}")
        tup = tuple(range(100, 100 + n)) if me == root else None
        check(scatter_obj(tup, root) == 100 + me, f"scatter_obj of a tuple, root {root}")

    # A nested, self-referential structure survives.
    cyc = [1, 2]
    cyc.append(cyc)
    got = broadcast_obj(cyc if me == 0 else None)
    check(got[2] is got and got[:2] == [1, 2], "self-referential list")

    # Object collectives on a sub-group (odd and even ranks), concurrently with the parent.
    sub = g.split(me % 2, key=-me)
    members = [r for r in range(n) if r % 2 == me % 2][::-1]
    check_same(all_gather_obj({"w": me}, group=sub), [{"w": r} for r in members], "all_gather_obj on a sub-group")
    check_same(broadcast_obj(me if sub.rank() == 0 else None, group=sub), members[0], "broadcast_obj sub-group")
    check_same(all_gather_obj(me), list(range(n)), "parent after sub-group")


def section_errors():
    for root in range(n):
        bad = [0] * (n + 1) if me == root else None
        expect_raises(ValueError, lambda: scatter_obj(bad, root=root), f"scatter_obj n+1 objects, root {root}",
                      contains=f"{n + 1} objects")
        bad = list(range(n - 1)) if me == root else None
        expect_raises(ValueError, lambda: scatter_obj(bad, root=root), f"scatter_obj n-1 objects, root {root}")
    expect_raises(ValueError, lambda: scatter_obj(42 if me == 0 else None), "scatter_obj of an int",
                  contains="sequence")
    check(scatter_obj(list(range(n)) if me == 0 else None) == me, "scatter_obj works after the errors")

    # An object that cannot be pickled: the root raises the pickling error, everyone else CommError.
    if n > 1:  # (a size-1 broadcast_obj is the identity: nothing is pickled)
        exc = cl.CommError if me != 0 else TypeError
        expect_raises(exc, lambda: broadcast_obj(Unpicklable() if me == 0 else None), "broadcast_obj unpicklable",
                      contains="refuses")
    if me == 0:  # the root's own object fails: it still drains the others, then raises
        expect_raises(TypeError, lambda: gather_obj(Unpicklable(), root=0), "gather_obj unpicklable on the root")
    else:
        check(gather_obj(me, root=0) is None, "gather_obj next to a failing root")
    expect_raises(TypeError, lambda: send_obj(Unpicklable(), me, tag=30), "send_obj unpicklable")
    check(cl.iprobe(me, 30) is None if n > 1 else True, "a failed send_obj sends nothing")
    if n > 1:
        expect_raises(cl.CommError if me != n - 1 else TypeError,
                      lambda: all_gather_obj(Unpicklable() if me == n - 1 else me), "all_gather_obj unpicklable")
    check_same(all_gather_obj(me), list(range(n)), "all_gather_obj works after the errors")

    expect_raises(ValueError, lambda: send_obj(1, n), "send_obj to a rank outside the group")
    expect_raises(ValueError, lambda: send_obj(1, 0, tag=-3), "send_obj with a negative tag")
    expect_raises(ValueError, lambda: broadcast_obj(1, root=n), "broadcast_obj root outside the group")
    expect_raises(ValueError, lambda: recv_obj(n + 2, 0), "recv_obj from a rank outside the group")


def mode_big(mb, ops):
    """Objects of about `mb` MB: out-of-band arrays and (inband) one big bytes object in the stream."""
    nbytes = mb << 20
    count = nbytes // 8

    def mine(r):  # rank r's big array: r, r+1, ... (cheap to rebuild and to check block by block)
        return np.arange(r, r + count, dtype=np.int64)

    def ok(a, r, label):
        good = a.dtype == np.int64 and a.shape == (count,)
        step = 8 << 20
        for lo in range(0, count if good else 0, step):
            hi = min(lo + step, count)
            if not np.array_equal(a[lo:hi], np.arange(r + lo, r + hi, dtype=np.int64)):
                good = False
                break
        check(good, label)

    def timed(what, moved, fn, *args, **kwargs):
        cl.barrier()
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        dt = time.perf_counter() - t
        if me == 0:
            print(f"big {what}: {moved / 2**30:.2f} GiB moved, {dt:.2f} s on rank 0 "
                  f"({moved / 2**30 / dt:.2f} GiB/s)", flush=True)
        return out

    if "p2p" in ops and n > 1:
        if me == 0:
            a = mine(0)
            timed("send_obj 0->1", nbytes, send_obj, {"a": a, "s": "x"}, 1, tag=1)
            del a
        elif me == 1:
            got = timed("send_obj 0->1", nbytes, recv_obj, 0, 1)
            ok(got["a"], 0, "big p2p received")
            del got
    if "inband" in ops and n > 1:
        if me == 0:
            timed("in-band bytes send_obj 0->1", nbytes, send_obj, bytes(nbytes), 1, tag=3)
        elif me == 1:
            got = timed("in-band bytes send_obj 0->1", nbytes, recv_obj, 0, 3)
            check(type(got) is bytes and len(got) == nbytes and got[:8] == got[-8:] == bytes(8), "big in-band bytes")
            del got
    if "bcast" in ops:
        got = timed("broadcast_obj", nbytes * (n - 1), broadcast_obj, {"a": mine(0)} if me == 0 else None)
        ok(got["a"], 0, "big broadcast_obj")
        del got
    if "gather" in ops:
        got = timed("gather_obj", nbytes * (n - 1), gather_obj, mine(me))
        if me == 0:
            for r, a in enumerate(got):
                ok(a, r, f"big gather_obj from {r}")
        del got
    if "scatter" in ops:
        objs = [mine(r) for r in range(n)] if me == 0 else None
        got = timed("scatter_obj", nbytes * (n - 1), scatter_obj, objs)
        del objs
        ok(got, me, "big scatter_obj")
        del got
    if "allgather" in ops:
        lst = timed("all_gather_obj", nbytes * n * (n - 1), all_gather_obj, mine(me))
        for r, a in enumerate(lst):
            ok(a, r, f"big all_gather_obj from {r}")
        del lst


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "all"
    t0 = time.perf_counter()
    try:
        if mode == "all":
            section_p2p()
            cl.barrier()
            section_collectives()
            section_errors()
        elif mode == "mismatch":
            # rank 0: broadcast_obj; others: an array broadcast with the same root. They must not match.
            if me == 0:
                try:
                    broadcast_obj({"x": 1})
                    cl.barrier()  # the failure reaches rank 0 here at the latest
                except cl.CommError:
                    pass
                else:
                    check(False, "rank 0 was never told about the mismatch")
            else:
                expect_raises(cl.MismatchError, lambda: cl.broadcast(np.zeros(3, np.int64)),
                              "array broadcast against broadcast_obj", contains="broadcast_obj")
        elif mode == "big":
            mb = int(sys.argv[2])
            ops = set((sys.argv[3] if len(sys.argv) > 3 else "p2p,inband,bcast,gather,scatter,allgather").split(","))
            mode_big(mb, ops)
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception:  # noqa: BLE001 - report, then fail the rank
        traceback.print_exc()
        FAILURES.append("exception")
    status = "FAILED" if FAILURES else "OK"
    print(f"objects {mode} rank {me}/{n}: {status} {CHECKS[0]} checks, {len(FAILURES)} failures, "
          f"{time.perf_counter() - t0:.2f} s", flush=True)
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
