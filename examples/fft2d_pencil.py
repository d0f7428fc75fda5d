"""A 2-D FFT of an array split by rows: transform the rows, re-shard by columns, transform the columns.

    commrun -n 4 examples/fft2d_pencil.py

The "pencil" method of distributed FFT libraries: a rank holds whole rows, so
it can transform along them locally; one all_to_all (here `reshard` from
("x", None) to (None, "x")) hands every rank whole columns for the second
transform. Nothing else moves. Rank 0 checks the result against np.fft.fft2 on
one process.
"""
import numpy as np

import commlib as cl
from commlib.mesh import Mesh, ShardedArray, reshard, shard

SHAPE = (24, 36)  # divisible by 1, 2, 3, 4 and 6 ranks both ways


def signal():
    rng = np.random.default_rng(0)
    return rng.standard_normal(SHAPE) + 1j * rng.standard_normal(SHAPE)


def fft2(mesh, x):
    rows = shard(x, mesh, ("x", None))                 # each rank: SHAPE[0] / n whole rows
    rows = ShardedArray.from_local(np.fft.fft(rows.local, axis=1), mesh, ("x", None))
    cols = reshard(rows, mesh, (None, "x"))            # one all_to_all: now whole columns
    return ShardedArray.from_local(np.fft.fft(cols.local, axis=0), mesh, (None, "x"))


def main():
    world = cl.init()
    mesh = Mesh((world.size(),), ("x",))
    x = signal()
    spectrum = fft2(mesh, x)
    full = spectrum.full()                             # every rank gets the whole spectrum
    err = float(np.abs(full - np.fft.fft2(x)).max())
    if world.rank() == 0:
        print(f"{world.size()} ranks: local block {spectrum.local.shape} of {spectrum.shape}, spec {spectrum.spec}")
        print(f"RESULT max_abs_error {err:.3e}")


if __name__ == "__main__":
    main()
