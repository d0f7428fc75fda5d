"""Bad arguments raise ValueError/TypeError on every rank before anything is sent,
and the group keeps working: after each error the next collective succeeds.

usage: bad_inputs.py SEED
"""
import numpy as np

import commlib as cl
from _common import Checker

c = Checker("bad_inputs")
n, me = c.size, c.rank
counter = [0]


def still_works(label):
    """A collective right after the error must succeed with the right answer."""
    counter[0] += 1
    k = counter[0]
    got = cl.all_reduce(np.array([me + k, 1], np.int64))
    c.equal(got, np.array([n * k + n * (n - 1) // 2, n], np.int64), f"group works after {label}")


def bad(exc, label, fn, *args, **kwargs):
    c.raises(exc, label, fn, *args, **kwargs)
    still_works(label)


f32 = np.ones(8, np.float32)
# Ops.
bad(ValueError, "unknown op name", cl.all_reduce, f32, "avg")
bad(ValueError, "op=None", cl.all_reduce, f32, None)
bad(ValueError, "unknown op in reduce_scatter", cl.reduce_scatter, np.ones(n * 2), "mean")
for dt in (np.float16, np.float32, np.float64, np.complex64, np.complex128):
    for op in ("band", "bor", "bxor"):
        bad(ValueError, f"{op} on {np.dtype(dt).name}", cl.all_reduce, np.ones(4, dt), op)
bad(ValueError, "bitwise op on float in reduce_scatter", cl.reduce_scatter, np.ones(n * 2, np.float32), "bxor")
for op in ("min", "max"):
    bad(ValueError, f"{op} on complex", cl.all_reduce, np.ones(4, np.complex64), op)
try:
    import ml_dtypes

    bad(ValueError, "band on bfloat16", cl.all_reduce, np.ones(4, ml_dtypes.bfloat16), "band")
except ImportError:
    pass
# Shapes.
if n > 1:
    bad(ValueError, "reduce_scatter not divisible", cl.reduce_scatter, np.ones(n + 1, np.float32))
    bad(ValueError, "reduce_scatter not divisible (2-D)", cl.reduce_scatter, np.ones((2 * n - 1, 3), np.int32))
bad(ValueError, "reduce_scatter of a 0-d array", cl.reduce_scatter, np.int32(3))
bad(ValueError, "out= of the wrong shape", cl.all_reduce, f32, out=np.ones(9, np.float32))
bad(ValueError, "out= of the wrong dtype", cl.all_reduce, f32, out=np.ones(8, np.float64))
ro = np.ones(8, np.float32)
ro.setflags(write=False)
bad(ValueError, "read-only out=", cl.all_reduce, f32, out=ro)
# Roots and ranks.
for root in (n, -1, n + 5):
    bad(ValueError, f"broadcast root={root}", cl.broadcast, np.ones(3), root)
bad(ValueError, "broadcast root='0'", cl.broadcast, np.ones(3), "0")
bad(ValueError, "send to dst=size", cl.send, f32, n)
bad(ValueError, "send to dst=-1", cl.send, f32, -1)
bad(ValueError, "send with a negative tag", cl.send, f32, 0, -3)
bad(ValueError, "recv from src=size", cl.recv, (8,), np.float32, n)
bad(ValueError, "sendrecv to dst=size", cl.sendrecv, f32, n, 0)
# Unsupported dtypes.
unsupported = {
    "object array": np.array([object(), None], dtype=object),
    "str array": np.array(["ab", "c"]),
    "bytes array": np.array([b"ab"]),
    "datetime64": np.array(["2020-01-01"], dtype="datetime64[D]"),
    "structured": np.zeros(3, dtype=[("a", np.int32), ("b", np.float64)]),
    "byte-swapped float32": np.ones(4, dtype=">f4") if np.little_endian else np.ones(4, dtype="<f4"),
    "longdouble": np.ones(2, dtype=np.longdouble),
}
for name, x in unsupported.items():
    bad(TypeError, f"all_reduce of {name}", cl.all_reduce, x)
    bad(TypeError, f"all_gather of {name}", cl.all_gather, x)
    bad(TypeError, f"broadcast of {name}", cl.broadcast, x.copy())
    bad(TypeError, f"reduce_scatter of {name}", cl.reduce_scatter, np.concatenate([x] * n).astype(x.dtype))
bad(TypeError, "send of an object array", cl.send, unsupported["object array"], 0)
bad(TypeError, "all_reduce of a list of str", cl.all_reduce, ["a", "b"])
# Argument errors that are the same on every rank leave no trace: a long run of them, then real work.
for i in range(50):
    try:
        cl.all_reduce(f32, "bxor")
    except ValueError:
        pass
x = np.arange(1000, dtype=np.float64) * (me + 1)
c.equal(cl.all_sum(x), np.arange(1000, dtype=np.float64) * (n * (n + 1) // 2), "all_sum after 50 errors")
c.finish()
