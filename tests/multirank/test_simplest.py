"""The simplest programs through the real launcher, at n = 2, 4 and 8, over every same-host transport."""
import re

import pytest


@pytest.mark.timeout(150)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_hello_and_a_ring_of_irecv_before_isend(n, assert_ranks_ok, run):
    result = run(n, "simplest.py", timeout=120)
    assert_ranks_ok(result, n, "hello and an irecv-first ring")
    assert sorted(re.findall(r"hello (\d+) of (\d+)", result[1])) == sorted((str(r), str(n)) for r in range(n))
