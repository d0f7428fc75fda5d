"""ShardedArray layouts through the real launcher: every transition between every pair of placements.

For each mesh the world size allows and each global shape (even, uneven, with a
0-size dimension): every source layout (each dimension replicated or split over
one axis or a pair of axes, plus pending partial sums over the axes left) is
moved by shard() to every target layout; the local block must be exactly the
target's np.array_split block of the global array, and full() the global array.
Then the module functions, from_local's checks and the errors.
"""
import itertools

import numpy as np

import commlib.mesh as cm
from _common import Checker

MESHES = {1: [((1,), ("x",))], 2: [((2,), ("x",)), ((1, 2), ("a", "b"))], 3: [((3,), ("x",))],
          4: [((4,), ("x",)), ((2, 2), ("a", "b"))], 6: [((2, 3), ("a", "b"))], 8: [((2, 4), ("a", "b"))]}
SHAPES = [(4, 6), (5, 3), (0, 4)]


def placements(names, ndim):
    options = [None] + list(names) + [tuple(p) for p in itertools.permutations(names, 2)]
    for spec in itertools.product(options, repeat=ndim):
        used = [a for e in spec if e for a in ((e,) if isinstance(e, str) else e)]
        if len(used) == len(set(used)):
            yield spec


def axes_of(spec):
    return {a for e in spec if e for a in ((e,) if isinstance(e, str) else e)}


def expected_block(mesh, glob, spec):
    idx = []
    for d, e in enumerate(spec):
        if e is None:
            idx.append(slice(None))
            continue
        n, k = mesh.size(e), mesh.axis_index(e)
        base, extra = divmod(glob.shape[d], n)
        start = k * base + min(k, extra)
        idx.append(slice(start, start + base + (k < extra)))
    return glob[tuple(idx)]


def main():
    c = Checker("mesh_sharded")
    n = c.size
    for shape, names in MESHES.get(n, []):
        mesh = cm.Mesh(shape, names)
        for gshape in SHAPES:
            glob = np.arange(int(np.prod(gshape)), dtype=np.int64).reshape(gshape) * 3 + 1
            specs = list(placements(names, len(gshape)))
            for src in specs:
                free = [a for a in names if a not in axes_of(src)]
                for k in range(len(free) + 1):
                    for partial in itertools.combinations(free, k):
                        if partial:
                            weight = mesh.axis_index(partial) + 1
                            total = mesh.size(partial) * (mesh.size(partial) + 1) // 2
                            a = cm.ShardedArray.from_local(expected_block(mesh, glob, src) * weight, mesh, src,
                                                           partial=partial)
                            want_glob = glob * total
                        else:
                            a = cm.shard(glob, mesh, src)
                            want_glob = glob
                        label = f"mesh {shape} {gshape} {src}+{list(partial)}"
                        c.equal(a.local, expected_block(mesh, glob, src) * (weight if partial else 1),
                                f"{label} from_local/shard block", record=False)
                        for dst in specs:
                            b = cm.shard(a, mesh, dst)
                            c.equal(b.local, expected_block(mesh, want_glob, dst), f"{label} -> {dst} block", record=False)
                            c.ok(b.spec == tuple(dst) and not b.partial and b.shape == gshape, f"{label} -> {dst} meta",
                                 f"{b}")
                        c.equal(a.full(), want_glob, f"{label} full")
        # module functions on a 2-D layout
        glob = np.arange(24, dtype=np.float64).reshape(4, 6)
        first = names[0]
        a = cm.shard(glob, mesh, (first, None))
        c.equal(cm.all_gather(a).local, glob, f"mesh {shape} all_gather")
        c.equal(cm.all_gather(a, axis=0).local, glob, f"mesh {shape} all_gather axis 0")
        t = cm.all_to_all(a, 1, 0)
        c.ok(t.spec == (None, first), f"mesh {shape} all_to_all spec", str(t.spec))
        c.equal(t.local, expected_block(mesh, glob, (None, first)), f"mesh {shape} all_to_all block", record=False)
        p = cm.ShardedArray.from_local(glob * (mesh.axis_index(first) + 1), mesh, (None, None), partial=(first,))
        m = mesh.size(first)
        c.equal(cm.all_reduce(p).local, glob * (m * (m + 1) // 2), f"mesh {shape} all_reduce partial")
        rs = cm.reduce_scatter(p, 0)
        c.equal(rs.local, expected_block(mesh, glob * (m * (m + 1) // 2), (first, None)), f"mesh {shape} reduce_scatter", record=False)
        c.equal(cm.reshard(rs, mesh, (None, None)).full(), glob * (m * (m + 1) // 2), f"mesh {shape} reshard full")
        b = cm.distributed_broadcast(glob + c.rank if c.rank == 0 else np.zeros(1), mesh)
        c.equal(b.local, glob, f"mesh {shape} distributed_broadcast")
        c.equal(cm.distributed_broadcast(np.arange(3) * (c.rank + 1)), np.arange(3), f"distributed_broadcast plain")
        sh = cm.NamedSharding(mesh, (first,))
        c.equal(cm.to_device(glob, sharding=sh).local, expected_block(mesh, glob, (first, None)), "to_device", record=False)
        c.ok(cm.to_device(glob) is glob, "to_device without sharding")
        ring = [(r, (r + 1) % n) for r in range(n)]
        moved = cm.ppermute(cm.shard(glob, mesh, (None, None)) if n == 1 else
                            cm.ShardedArray.from_local(np.full(3, c.rank), mesh, (None,)), ring)
        if n > 1:
            c.equal(moved.local, np.full(3, (c.rank - 1) % n), f"mesh {shape} ppermute", record=False)
        # errors: the same on every rank, and the mesh still works after them
        c.raises(ValueError, "unknown axis in spec", cm.shard, glob, mesh, ("nope",))
        c.raises(ValueError, "axis twice in spec", cm.shard, glob, mesh, (first, first))
        c.raises(ValueError, "spec longer than ndim", cm.shard, glob, mesh, (None, None, None))
        if n > 1:
            bad = np.zeros((2 if mesh.axis_index(first) == 0 else 3, 4))
            if mesh.size(first) > 2:
                c.raises(ValueError, "from_local uneven blocks", cm.ShardedArray.from_local, bad, mesh, (first,))
            c.raises(ValueError, "from_local dtype mismatch", cm.ShardedArray.from_local,
                     np.zeros(4, np.float32 if c.rank == 0 else np.float64), mesh, (None,))
        c.equal(cm.shard(glob, mesh, (None, first)).full(), glob, f"mesh {shape} works after errors")
    c.finish()


if __name__ == "__main__":
    main()
