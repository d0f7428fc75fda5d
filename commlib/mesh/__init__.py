"""Device meshes: ranks laid out on named axes, and collectives along them (JAX's shapes and semantics).

    import commlib.mesh as cm
    mesh = cm.Mesh((2, 2), ("dp", "tp"))      # over the world, ranks in row-major order
    y = mesh.psum(x, "tp")                     # all_reduce among the ranks that share a "dp" index
    z = mesh.all_gather(x, "dp", axis=0, tiled=True)
"""
from ._mesh import Mesh
from ._sharded import (NamedSharding, ShardedArray, all_gather, all_reduce, all_to_all, distributed_broadcast,
                       ppermute, reduce_scatter, reshard, shard, to_device)

__all__ = ["Mesh", "NamedSharding", "ShardedArray", "all_gather", "all_reduce", "all_to_all",
           "distributed_broadcast", "ppermute", "reduce_scatter", "reshard", "shard", "to_device"]
