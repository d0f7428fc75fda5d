"""Waiting in the tests on what is to happen, not for a fixed time (tests/ is on sys.path through its
conftest.py, so every test directory imports this).

`wait_for` polls a condition until it holds and fails naming what never came once its deadline
passes; `settled` polls a finder until it finds nothing and returns what it still finds at its
deadline (for "nothing left behind" asserts that show what was). Deadlines only bound a failure (a
condition that holds ends the wait at once), and they scale with COMMLIB_TEST_TIMEOUT_SCALE, the
suite's one setting for slow or busy machines (tests/conftest.py).
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


def settled(find, within=5.0, interval=0.05):
    """find()'s value once it is empty (falsy), or as it still is after `within` s (times SCALE): what a
    job leaves behind, given a moment to go."""
    deadline = time.monotonic() + within * SCALE
    while True:
        found = find()
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(interval)  # (a poll's interval: what is found is what is waited for)
