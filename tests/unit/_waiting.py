"""Waiting in the unit tests on what is to happen, not for a fixed time: `wait_for` polls a condition
until it holds, and fails naming what never came once its deadline passes.

The deadline only bounds a failure (a condition that holds ends the wait at once), and it scales
with COMMLIB_TEST_TIMEOUT_SCALE, the suite's one setting for slow or busy machines (tests/conftest.py).
"""
import os
import time

SCALE = float(os.environ.get("COMMLIB_TEST_TIMEOUT_SCALE") or 1)


def wait_for(condition, timeout=5.0, what="the condition", interval=0.005):
    """condition()'s first true value, asked every `interval` s; AssertionError naming `what` when it
    is still false after `timeout` s (times SCALE)."""
    limit = timeout * SCALE
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {limit:g} s")
        time.sleep(interval)  # (a poll's interval: the condition is what is waited for)
