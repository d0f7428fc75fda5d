"""Shared helpers for the rank programs in this directory.

A case script is a rank program run by `commrun`. Its inputs are a pure
function of (rank, size, seed, label), so every rank can rebuild every other
rank's input and compute the expected result with numpy on its own. Checks
are collected rather than raised, so one bad result does not desynchronise the
collective schedule; `Checker.finish()` prints a summary line, compares the
digests of every recorded result across ranks (they must be bit-identical) and
exits non-zero when anything failed.
"""
import functools
import hashlib
import inspect
import os
import sys
import threading
import time
import traceback
import zlib

import numpy as np

import _batch
import commlib as cl

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a test dependency
    BF16 = None

INTS = [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")]
FLOATS = [np.dtype("float16")] + ([BF16] if BF16 is not None else []) + [np.dtype("float32"), np.dtype("float64")]
COMPLEX = [np.dtype("complex64"), np.dtype("complex128")]
DTYPES = [np.dtype(bool)] + INTS + FLOATS + COMPLEX
OPS = ["sum", "prod", "min", "max", "land", "lor", "band", "bor", "bxor"]
LOW_PRECISION = {np.dtype("float16")} | ({BF16} if BF16 is not None else set())
MAX_REPORTED = int(os.environ.get("MULTIRANK_MAX_REPORTED", "30"))


def dname(dt):
    return "bfloat16" if BF16 is not None and dt == BF16 else np.dtype(dt).name


def legal(op, dt):
    """API.md: bitwise ops only on integers and bool; min/max are not defined for complex."""
    dt = np.dtype(dt)
    if op in ("band", "bor", "bxor"):
        return dt.kind in "biu"
    if op in ("min", "max"):
        return dt.kind != "c"
    return True


def rng_for(seed, *label):
    """A generator that is a pure function of the seed and a label (rank, check name, ...)."""
    key = zlib.crc32(repr(label).encode())
    return np.random.default_rng([seed, key])


def gen(rng, dt, shape, kind="any"):
    """Input data of dtype dt for an op family (cheap even for millions of elements).

    kind: "any" (full range for ints, fractional floats of either sign), "small"
    (integers in [-8, 8], exact in every float type in any summation order),
    "prod" (factors whose products are exact), "logical" (with many zeros).
    """
    dt = np.dtype(dt)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind in "iu" and kind != "logical":
        return rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)
    parts = 2 if dt.kind == "c" else 1
    raw = rng.integers(0, 1 << 16, parts * n, dtype=np.uint16)
    if kind == "small":
        vals = (raw % 17).astype(np.int16) - 8
    elif kind == "prod":
        vals = np.take(np.array([-2.0, -1.0, 1.0, 2.0, 0.5]), raw % 5)
    elif kind == "logical":
        vals = np.take(np.array([0, 0, 1, 2, -1]), raw % 5)
    else:
        vals = (raw.astype(np.int32) - 32768) / 64.0
    if dt.kind == "b":
        return (raw % 4 != 0 if kind in ("prod", "logical") else raw % 2 == 1).reshape(shape)
    if dt.kind in "iu":
        return vals.astype(dt).reshape(shape)
    if dt.kind == "c":
        if kind == "prod":  # units and 1+1j: products stay exact
            return np.take(np.array([1, -1, 1j, -1j, 1 + 1j], dtype=dt), raw[:n] % 5).reshape(shape)
        if kind == "logical":  # nonzero when either part is: include purely imaginary values
            return (vals[:n] * (raw[n:] % 2) + 1j * vals[n:] * (raw[n:] // 2 % 2)).astype(dt).reshape(shape)
        return (vals[:n] + 1j * vals[n:]).astype(dt).reshape(shape)
    return vals.astype(np.float32 if dt in LOW_PRECISION else dt).astype(dt).reshape(shape)


def every_rank(seed, size, label, dt, shape, kind="any"):
    """Every rank's input for `label` (a list in rank order): one gen() of all of them, rank r's the r-th
    block, so each rank rebuilds the others' inputs in one call instead of one generator a rank."""
    shape = tuple(shape)
    whole = gen(rng_for(seed, "every rank", *label), dt, (size,) + shape, kind)
    return [whole[r, ...] for r in range(size)]


def kind_for(op):
    return {"sum": "small", "prod": "prod", "land": "logical", "lor": "logical"}.get(op, "any")


def expected_reduce(arrays, op):
    """Reduce a list of same-shaped arrays (rank order) with numpy, following API.md semantics."""
    dt = arrays[0].dtype
    if op in ("land", "lor") or dt.kind == "b":
        truth = [np.asarray(a != 0) for a in arrays]
        logical = {"sum": np.logical_or, "max": np.logical_or, "lor": np.logical_or, "bor": np.logical_or,
                   "prod": np.logical_and, "min": np.logical_and, "land": np.logical_and,
                   "band": np.logical_and, "bxor": np.logical_xor}[op]
        acc = truth[0]
        for t in truth[1:]:
            acc = logical(acc, t)
        return acc.astype(dt)
    ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
             "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
    if dt in LOW_PRECISION:  # reduced in float32, rounded once per step
        acc = arrays[0].astype(np.float32)
        for a in arrays[1:]:
            acc = ufunc(acc, a.astype(np.float32)).astype(dt).astype(np.float32)
        return acc.astype(dt)
    acc = arrays[0].copy()
    for a in arrays[1:]:
        acc = ufunc(acc, a)
    return np.asarray(acc, dtype=dt)


def same(actual, expected):
    """Exact equality of dtype, shape and values (NaN equals NaN; 0.0 equals -0.0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype != expected.dtype:
        return f"dtype {dname(actual.dtype)} != expected {dname(expected.dtype)}"
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != expected {expected.shape}"
    dt = actual.dtype
    if dt in LOW_PRECISION:
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    if dt.kind in "fc" or dt in LOW_PRECISION:
        ok = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    else:
        ok = actual == expected
    if np.all(ok):
        return None
    bad = np.argwhere(~np.asarray(ok))
    first = tuple(int(i) for i in bad[0])
    return (f"{len(bad)} of {actual.size} elements differ; first at {first}: "
            f"got {actual[first]!r}, expected {expected[first]!r}")


def digest(a):
    a = np.ascontiguousarray(a)
    h = hashlib.blake2b(a.view(np.uint8).reshape(-1).tobytes() if a.size else b"", digest_size=8)
    h.update(repr((a.dtype.str, a.shape)).encode())
    return int.from_bytes(h.digest(), "little")


class Checks:
    """Counting, comparing and reporting checks; subclasses set name, rank, size, seed, checks, failures
    and digests (the (label, digest) of results that must agree on every rank)."""

    def fail(self, label, message):
        self.failures.append(f"{label}: {message}")
        if len(self.failures) <= MAX_REPORTED:
            print(f"FAIL rank {self.rank}/{self.size} [{self.name}] {label}: {message}", flush=True)

    def ok(self, cond, label, message="check failed"):
        self.checks += 1
        if not cond:
            self.fail(label, message)
        return bool(cond)

    def rng(self, *label):
        return rng_for(self.seed, *label)

    def into(self, check, fn):
        """Run section fn() as the batched check `check` (a Check, see _batch.sections): the failures,
        digests and count of what fn checks through this object are that check's."""
        saved = self.failures, self.digests, self.checks
        self.failures, self.digests, self.checks = check.failures, check.digests, 0
        try:
            fn()
        finally:
            check.checks += self.checks
            self.failures, self.digests, self.checks = saved

    def equal(self, actual, expected, label, record=True):
        """Exact comparison; the result's bytes are also recorded for the cross-rank check."""
        self.checks += 1
        problem = same(actual, expected)
        if problem:
            self.fail(label, problem)
        if record:
            self.digests.append((label, digest(actual)))
        return problem is None

    def close(self, actual, expected, label, rtol, atol):
        self.checks += 1
        actual, expected = np.asarray(actual), np.asarray(expected)
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            self.fail(label, f"got {dname(actual.dtype)}{actual.shape}, expected "
                             f"{dname(expected.dtype)}{expected.shape}")
        else:
            c = np.complex128 if actual.dtype.kind == "c" else np.float64
            a, e = actual.astype(c), expected.astype(c)
            if not np.allclose(a, e, rtol=rtol, atol=atol):
                err = np.abs(a - e)
                i = int(np.argmax(err))
                self.fail(label, f"max abs error {err.max():.3g} at flat index {i}: got {a.flat[i]!r}, "
                                 f"expected {e.flat[i]!r} (rtol {rtol}, atol {atol})")
        self.digests.append((label, digest(actual)))

    def raises(self, exc_type, label, fn, *args, match=None, **kwargs):
        """fn(*args) must raise exc_type (whose message contains `match`); returns the exception."""
        self.checks += 1
        try:
            fn(*args, **kwargs)
        except exc_type as err:
            if match is not None and match not in str(err):
                self.fail(label, f"{type(err).__name__} message {str(err)!r} does not mention {match!r}")
            return err
        except Exception as err:  # the wrong class is a failure, reported with its traceback
            self.fail(label, f"raised {type(err).__name__}: {err} instead of {exc_type.__name__}\n"
                             + "".join(traceback.format_exception(err)))
            return err
        self.fail(label, f"did not raise {exc_type.__name__}")
        return None

    def guard(self, label, fn, *args, **kwargs):
        """Run fn; an unexpected exception is recorded as a failure and re-raised (the schedule is lost)."""
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            self.fail(label, f"raised {type(err).__name__}: {err}")
            raise


class OnGroup:
    """commlib's module functions with `group=` bound to one group: a check's `c.cl`, so a check body
    written against `cl.all_gather(x)` runs on the group its runner made for it."""

    def __init__(self, group):
        self._group = group
        self._bound = {}

    def __getattr__(self, name):
        f = getattr(cl, name)
        if not callable(f) or isinstance(f, type):
            return f
        if name not in self._bound:
            try:
                takes = "group" in inspect.signature(f).parameters
            except (TypeError, ValueError):  # no signature to read: called as it is
                takes = False
            self._bound[name] = functools.partial(f, group=self._group) if takes else f
        return self._bound[name]


class Check(Checks):
    """The state of one check of a batched case file (_batch.py): its group (`g`, and `cl`, commlib's
    functions on it), seed and results."""

    def __init__(self, name, group, seed):
        self.name = name
        self.g = group
        self.cl = OnGroup(group)
        self.rank, self.size = group.rank(), group.size()
        self.seed = seed
        self.checks = 0
        self.failures = []
        self.digests = []


class Checker(Checks):
    """Collects check results for one rank; see the module docstring."""

    def __init__(self, name):
        self.name = name
        self.g = cl.init()
        self.rank, self.size = self.g.rank(), self.g.size()
        self.seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
        self.args = sys.argv[2:]
        self.checks = 0
        self.failures = []
        self.digests = []  # (label, digest) of results that must agree on every rank
        self.t0 = time.monotonic()
        self.sink = _batch.running()  # run whole as a batched check (_batch.script): record there
        if self.sink is not None:
            self.failures, self.digests = self.sink.failures, self.sink.digests

    def finish(self):
        """Cross-rank digest comparison, summary line, exit code (in a batched job: the runner's)."""
        if self.sink is not None:
            self.sink.checks += self.checks
            self.checks = 0
            return
        if self.size > 1:
            counts = cl.all_gather(np.array(len(self.digests), dtype=np.int64))
            if not self.ok(np.all(counts == counts[0]), "digest count", f"ranks recorded {counts.tolist()} results"):
                return self._exit()
            mine = np.array([d for _, d in self.digests], dtype=np.uint64)
            every = cl.all_gather(mine).reshape(self.size, -1) if mine.size else np.empty((self.size, 0), np.uint64)
            for i, (label, _) in enumerate(self.digests):
                self.checks += 1
                if not np.all(every[:, i] == every[0, i]):
                    owners = [r for r in range(self.size) if every[r, i] != every[self.rank, i]]
                    self.fail(label, f"result bytes differ across ranks (this rank differs from ranks {owners})")
        self._exit()

    def _exit(self):
        took = time.monotonic() - self.t0
        if self.failures:
            print(f"rank {self.rank}: {len(self.failures)} of {self.checks} checks FAILED [{self.name}] "
                  f"in {took:.1f} s", flush=True)
            cl.finalize()
            sys.exit(1)
        print(f"rank {self.rank}: {self.checks} checks ok [{self.name}] in {took:.1f} s", flush=True)
        cl.finalize()
        sys.exit(0)


def in_threads(c, label, work, args_list, errors, timeout=120):
    """Run work(*args) in a thread for each of args_list at once; a check that every thread ended
    within `timeout` s and that `errors` (where work records what went wrong) stayed empty."""
    threads = [threading.Thread(target=work, args=args) for args in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    c.ok(not errors and not any(t.is_alive() for t in threads), label, "; ".join(errors) or "a thread hung")
