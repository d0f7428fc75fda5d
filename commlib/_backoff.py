"""Jittered exponential back-off for connects that are retried (to the coordinator, to peers).

Thousands of ranks that find the same listener not up yet (rank 0 still importing under srun), or
its backlog full, must not retry in step: each wait is the attempt's step, doubled from `first`
up to `cap`, times a random factor in [0.5, 1.5), so the retries spread out. Imports nothing from
commlib.
"""
import random

_rng = random.Random()  # (its own: a program's random.seed() must not put every rank in step)


def delay(attempt, first=0.02, cap=0.1):
    """Seconds to wait before retry number `attempt` (0 for the first retry)."""
    step = min(cap, first * (2 ** min(attempt, 30)))
    return step * _rng.uniform(0.5, 1.5)


def somaxconn():
    """The kernel's cap on a listen backlog (net.core.somaxconn), or None where it cannot be read."""
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
