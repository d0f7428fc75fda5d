"""The mesh rank programs, each run whole as a check of one job (_batch.script):

mesh_axes.py     every mesh shape for n ranks, every collective along every axis and pair of axes,
                 the i-variants waited in reverse, ValueErrors on every rank followed by a psum
                 that still works
mesh_sharded.py  every transition between every pair of placements on 1-D and 2-D meshes, even,
                 uneven and 0-size shapes, block by block against np.array_split; the module
                 functions; from_local's and shard's errors on every rank
mesh_torch.py    the same calls on torch CPU tensors (n <= 4)
mesh_recycle.py  mesh all_gathers over 1 MiB reuse result buffers: never one the program still
                 holds (n = 2, 3)

Each also runs alone: `commrun -n N mesh_sharded.py`.
"""
from _batch import script

script("mesh_axes.py", timeout=180)
script("mesh_sharded.py", timeout=180)
script("mesh_torch.py", max_n=4, timeout=100)
script("mesh_recycle.py", ns=[2, 3], timeout=100)
