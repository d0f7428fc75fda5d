"""Every collective (and point-to-point) across hosts, each checked against NumPy.

Inputs are a pure function of (rank, size, count), so each rank computes the
expected result itself. Sizes cross the small-message / ring / chunk
boundaries. Prints `rank R: K checks ok (host H)`; any wrong result raises.
"""
import socket

import numpy as np

import commlib as cl

g = cl.init(strict=True)
r, n = g.rank(), g.size()
ok = 0


def x_of(k, count, dtype=np.float64):
    return ((np.arange(count) * 7 + 3 * k) % 101).astype(dtype)


def check(got, want, what):
    global ok
    assert got is not None and np.array_equal(np.asarray(got), want), f"rank {r}: {what}: {got!r} != {want!r}"
    ok += 1


for count in (1, 1000, 300_000):
    xs = [x_of(k, count) for k in range(n)]
    check(cl.all_reduce(xs[r]), np.sum(xs, axis=0), f"all_reduce sum {count}")
    check(cl.all_reduce(xs[r], op="max"), np.max(xs, axis=0), f"all_reduce max {count}")
    ints = [x.astype(np.int32) for x in xs]
    check(cl.all_reduce(ints[r], op="bxor"), np.bitwise_xor.reduce(ints), f"all_reduce bxor {count}")
    check(cl.all_gather(xs[r]), np.concatenate(xs), f"all_gather {count}")
    check(cl.broadcast(xs[r].copy(), root=n - 1), xs[n - 1], f"broadcast {count}")
    red = cl.reduce(xs[r], op="sum", root=1)
    if r == 1:
        check(red, np.sum(xs, axis=0), f"reduce {count}")
    else:
        assert red is None
    got = cl.gather(xs[r], root=2)
    if r == 2:
        check(got, np.concatenate(xs), f"gather {count}")
    blocks = [x_of(k, count * n, np.float32) for k in range(n)]
    check(cl.reduce_scatter(blocks[r]), np.sum(blocks, axis=0).reshape(n, count)[r], f"reduce_scatter {count}")
    check(cl.scatter(blocks[0] if r == 0 else None, root=0), blocks[0].reshape(n, count)[r], f"scatter {count}")
    a2a = [b.reshape(n, count) for b in blocks]
    check(cl.all_to_all(a2a[r]), np.stack([a2a[k][r] for k in range(n)]), f"all_to_all {count}")
    perm = [(k, (k + 3) % n) for k in range(n)]  # 3 ranks ahead: always another host at 2 ranks per host
    check(cl.ppermute(xs[r], perm), xs[(r - 3) % n], f"ppermute {count}")
    check(cl.sendrecv(xs[r], dst=(r + 2) % n, src=(r - 2) % n), xs[(r - 2) % n], f"sendrecv {count}")
    reqs = [cl.iall_reduce(xs[r]), cl.iall_gather(xs[r]), cl.ibroadcast(xs[r].copy(), root=0)]
    res = cl.wait_all(reqs)
    check(res[0], np.sum(xs, axis=0), f"iall_reduce {count}")
    check(res[1], np.concatenate(xs), f"iall_gather {count}")
    check(res[2], xs[0], f"ibroadcast {count}")
cl.barrier()
objs = cl.all_gather_obj({"rank": r, "host": socket.gethostname()})
assert [o["rank"] for o in objs] == list(range(n)), objs
ok += 1
print(f"rank {r}: {ok} checks ok")
