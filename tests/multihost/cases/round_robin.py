"""Ranks placed round-robin on hosts (a:1,b:1 and more ranks than slots): the ring all-gathers
and the broadcast and reduce chains run host by host (`Group.ring_order`), and every result
still matches NumPy in rank order.
Prints `rank R: K checks ok (host H)`."""
import os

import numpy as np

import commlib as cl

g = cl.init(strict=True)
r, n = g.rank(), g.size()
ok = 0
here = os.stat("/proc/self/ns/net").st_ino  # (namespace hosts share a hostname, not a network)
hosts = cl.all_gather_obj(here)
order = g.ring_order()
crossings = sum(hosts[k] != hosts[(k + 1) % n] for k in range(n))  # of a ring in rank order
if crossings > len(set(hosts)):  # more than once a host (a, b, a, b): host by host
    want_order = sorted(range(n), key=lambda k: (hosts.index(hosts[k]), k))
    assert order is not None and list(order) == want_order, f"rank {r}: ring order {order}, hosts {hosts}"
else:  # (a, b, a wraps around once a host already)
    assert order is None, f"rank {r}: ring order {order}, hosts {hosts}"
ok += 1
for count in (1, 70_001, 400_000):  # up to 3.2 MB a rank: the ring (all_gather above 256 KiB in all)
    blocks = [((np.arange(count) * 5 + 11 * k) % 17).astype(np.float64) for k in range(n)]
    got = cl.all_gather(blocks[r])
    assert np.array_equal(got, np.concatenate(blocks)), f"rank {r}: all_gather of {count}"
    ok += 1
big = 600_000  # 4.8 MB of float64: broadcast and reduce run as chains (by host too)
for root in (0, n - 1):
    x = ((np.arange(big) * 3 + root) % 7).astype(np.float64)
    got = cl.broadcast(x if r == root else np.zeros(big), root=root)
    assert np.array_equal(got, x), f"rank {r}: broadcast from {root}"
    parts = [((np.arange(big) + 5 * k) % 9).astype(np.float64) for k in range(n)]
    red = cl.reduce(parts[r], root=root)
    if r == root:
        assert np.array_equal(red, np.sum(parts, axis=0)), f"rank {r}: reduce to {root}"
    ok += 1
objs = cl.all_gather_obj({"rank": r, "pad": "x" * (5000 * (r + 1))})  # unequal frames: the packed ring
assert [o["rank"] for o in objs] == list(range(n)) and all(len(o["pad"]) == 5000 * (k + 1) for k, o in enumerate(objs))
ok += 1
sub = g.split(r % 3, key=-r)
members = sorted((k for k in range(n) if k % 3 == r % 3), reverse=True)
assert sub.size() == len(members) and sub.rank() == members.index(r), f"rank {r}: split"
got = cl.all_gather(np.full(40_000, r, np.int64), group=sub)
assert np.array_equal(got, np.repeat(np.array(members, np.int64), 40_000)), f"rank {r}: sub-group all_gather"
ok += 1
print(f"rank {r}: {ok} checks ok (host {here})", flush=True)
cl.finalize()
