"""Python's share of a one-call all_reduce (issue 14): what the interpreter costs per call.

    python benchmarks/python_share.py [--calls 200000] [--repeats 7]

The one-call path (commlib/_transport/_fast.pxi) is run on a size-1 group,
where its plan has no step (a copy of x into the result): everything else — the API function, the
argument checks, the stream claim, numbering, header, digest and history, the
deadline, releasing and retaking the GIL once, the result allocation — runs
as it does at n >= 2. Timed by this thread's CPU clock around many calls (no
clock inside the loop, and preemption on a busy machine is not counted);
the cost of an empty loop is subtracted. Prints the median and minimum of
the repeats, in ns per call.
"""
import argparse
import time

import numpy as np

import commlib
from commlib._algorithms import doubling
from commlib._api.collectives import _reduction
from commlib._dtypes import BFLOAT16, OP_NAMES, dtype_code
from commlib._transport import _io


class _Endpoint:
    failure = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    g = commlib.init()  # outside a launcher: the size-1 world, with the real API functions and Group
    ring = np.empty(1 << 20, np.uint8)
    stepper = _io.Stepper(np.zeros(4, np.int64), 1 << 18, -1, ring.ctypes.data, ring.nbytes, 0.0, 1.0)
    g.fast = _io.FastPath(g, g.stream, _Endpoint(), {}, [(g.gid, 1, 0, 1)], [(g.gid, 1, 0, 0)], None, None, stepper,
                          {"all_reduce": doubling.all_reduce(1, 0)}, {"all_reduce": 32768},
                          {name: i for i, name in enumerate(OP_NAMES)}, _reduction, dtype_code, BFLOAT16)
    x = np.ones(2, np.float32)

    def empty(n):
        for _ in range(n):
            pass

    def in_place(n):
        for _ in range(n):
            commlib.all_reduce(x, out=x)

    def fresh(n):
        for _ in range(n):
            commlib.all_reduce(x)

    def per_call(fn):
        out = []
        for _ in range(args.repeats):
            t = time.thread_time_ns()
            fn(args.calls)
            out.append((time.thread_time_ns() - t) / args.calls)
        out.sort()
        return out[len(out) // 2], out[0]

    base = per_call(empty)[0]
    for name, fn in (("all_reduce(x, out=x), 8 B", in_place), ("all_reduce(x), 8 B", fresh)):
        med, low = per_call(fn)
        print(f"{name}: {med - base:.0f} ns of CPU per call (min {low - base:.0f})")
    commlib.finalize()


if __name__ == "__main__":
    main()
