"""What tracing (COMMLIB_TRACE, commrun --trace) costs a call: 8 B all_sum with tracing on and off.

usage: bash benchmarks/trace_overhead.sh [ROUNDS]      (runs this file under commrun, see there)
   or: commrun -n N python benchmarks/trace_overhead.py [--calls K] [--label L]

Each rank times K calls of `commlib.all_sum` on 8 B (after 2,000 untimed), five
batches of K, a barrier before each; rank 0 prints one JSON line: the label, n,
whether tracing was on in this run, and the median over batches of the slowest
rank's mean time per call (µs). Off means COMMLIB_TRACE unset: then nothing is
replaced, the same code as a build without tracing. The singleton group
(n = 1) shows the wrapper's own cost, without a peer's noise. With tracing on,
`interleaved_us` also times, in alternating batches of the same process, the
recorded all_sum and the function it wraps: on and off at the same moment.
"""
import argparse
import json
import os
import time

import numpy as np

import commlib as cl


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--label", default="")
    args = p.parse_args()
    g = cl.init()
    x = np.ones(1, np.float64)
    for _ in range(2000):
        cl.all_sum(x)
    batches = []
    for _ in range(5):
        cl.barrier()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            cl.all_sum(x)
        mine = (time.perf_counter() - t0) / args.calls
        batches.append(float(cl.all_max(np.array([mine]))[0]))
    line = {"label": args.label, "n": g.size(), "trace": bool(os.environ.get("COMMLIB_TRACE")),
            "us_per_call": round(float(np.median(batches)) * 1e6, 3),
            "traced_wrapper": hasattr(cl.all_sum, "__wrapped__")}
    if line["traced_wrapper"]:
        # the same process, the same moment: batches of the recorded call and of the very function it
        # wraps (all_sum's code without the recording), alternating; the noise of this shared
        # machine hits both alike
        pair = {"on": cl.all_sum, "off": cl.all_sum.__wrapped__}
        alt = {"on": [], "off": []}
        for i in range(22):
            label = ("on", "off")[(i + i // 2) % 2]  # on off off on on off ...
            cl.barrier()
            t0 = time.perf_counter()
            fn = pair[label]
            for _ in range(args.calls):
                fn(x)
            alt[label].append(float(cl.all_max(np.array([(time.perf_counter() - t0) / args.calls]))[0]))
        line["interleaved_us"] = {k: round(float(np.median(v)) * 1e6, 3) for k, v in alt.items()}
    if g.rank() == 0:
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
