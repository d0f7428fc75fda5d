"""Algorithm choice: the only place that holds size thresholds.

Each algorithm is a plain function over an `Op` (see `_engine.group.Op`): it calls
`op.exchange(dst, send_ptr, send_len, src, recv_ptr, recv_len, ...)`, one
full-duplex step, and nothing else, so a schedule is easy to read and runs
unchanged on any transport.

Thresholds were measured on the project's 2-core machine (benchmarks/RESULTS.md,
"Algorithm crossover"); each can be overridden for benchmarking with
COMMLIB_ALGO_<KIND>=<name> (e.g. COMMLIB_ALGO_ALL_REDUCE=ring).
"""
import os

# At or below these payload sizes the latency-bound algorithm wins
# (benchmarks/crossover.py; 2 cores, so n=4 is oversubscribed, which favours
# fewer steps: the ring's 2(n-1) steps each cost a wake-up).
ALL_REDUCE_SMALL_BYTES_PAIR = 32 << 10  # n=2: doubling 17 us vs ring 24 at 32 KiB; ring wins from 64 KiB
ALL_REDUCE_SMALL_BYTES = 256 << 10  # n>=3: doubling 340 vs ring 349 us at 256 KiB; ring wins from 512 KiB
BROADCAST_SMALL_BYTES = 8 << 10  # n=4: chain wins from 16 KiB (1.7x at 4 MiB); below, within noise
REDUCE_SMALL_BYTES = 256 << 10  # n=4: chain wins from 512 KiB; below, within noise

CHOICES = {
    "all_reduce": ("doubling", "ring"),
    "broadcast": ("tree", "chain"),
    "reduce": ("tree", "chain"),
}


_forced = {}  # kind -> COMMLIB_ALGO_<KIND> value, read once per process


def choose(kind, nbytes, size):
    """Name of the algorithm for a collective of `kind` moving `nbytes` on `size` ranks."""
    forced = _forced.get(kind)
    if forced is None:
        forced = _forced[kind] = os.environ.get(f"COMMLIB_ALGO_{kind.upper()}", "")
    if forced:
        if forced not in CHOICES[kind]:
            raise ValueError(f"COMMLIB_ALGO_{kind.upper()}={forced!r}: expected one of {', '.join(CHOICES[kind])}")
        return forced
    if kind == "all_reduce":
        small = ALL_REDUCE_SMALL_BYTES_PAIR if size <= 2 else ALL_REDUCE_SMALL_BYTES
        return "doubling" if nbytes <= small or nbytes < 64 * size else "ring"
    if kind == "broadcast":
        return "tree" if nbytes <= BROADCAST_SMALL_BYTES or size <= 2 else "chain"
    if kind == "reduce":
        return "tree" if nbytes <= REDUCE_SMALL_BYTES or size <= 2 else "chain"
    raise ValueError(f"no algorithm choice for {kind!r}")
