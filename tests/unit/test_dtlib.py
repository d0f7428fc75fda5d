"""commlib.MPI.util.dtlib: NumPy dtypes and MPI datatypes made from each other, round trips stable."""
import numpy as np
import pytest

from commlib import MPI
from commlib.MPI.util.dtlib import from_numpy_dtype, to_numpy_dtype


@pytest.mark.parametrize("spec", ["i4", "f8", "c16", "(3,4)i", "i4,f8", "(2,)f4,u1,(3,)c8", "u1,f8"])
@pytest.mark.parametrize("align", [False, True])
def test_round_trips_keep_the_dtype_and_its_layout(spec, align):
    dt = np.dtype(spec, align=align) if "," in spec else np.dtype(spec)
    mt = from_numpy_dtype(dt)
    back = to_numpy_dtype(mt)
    assert back == dt and back.itemsize == mt.extent == dt.itemsize
    assert to_numpy_dtype(from_numpy_dtype(back)) == back
    a = np.zeros(3, dt)
    assert mt.size <= dt.itemsize and MPI.COMM_SELF.Sendrecv([a, 3, mt], 0, 0, [np.zeros(3, dt), 3, mt], 0, 0) is None
    mt.Free()


def test_mpi_types_become_numpy_dtypes():
    assert to_numpy_dtype(MPI.DOUBLE) == np.float64
    assert to_numpy_dtype(MPI.INT.Create_contiguous(5)) == np.dtype(("i4", (5,)))
    v = to_numpy_dtype(MPI.DOUBLE.Create_vector(2, 3, 4))  # fields at the blocks, itemsize the extent
    assert v.itemsize == (4 + 3) * 8 and [v.fields[n][1] for n in v.names] == [0, 32]
    f = to_numpy_dtype(MPI.INT.Create_subarray([2, 3], [2, 3], [0, 0], MPI.ORDER_FORTRAN))
    assert f == np.dtype(("i4", (3, 2)))  # Fortran order: the C shape reversed
    assert to_numpy_dtype(MPI.DOUBLE_INT) == np.dtype("f8,i4", align=True)
    for bad in (MPI.INT.Create_resized(0, 32), MPI.INT.Create_subarray([2], [1], [0]), MPI.DATATYPE_NULL):
        with pytest.raises(ValueError):
            to_numpy_dtype(bad)
    for bad in (np.dtype(">i4" if np.dtype("<i4").isnative else "<i4"), np.dtype("O"), np.dtype("V")):
        with pytest.raises(ValueError):
            from_numpy_dtype(bad)
