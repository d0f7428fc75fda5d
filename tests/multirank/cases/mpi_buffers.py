"""Every kind of memory mpi4py takes as a message, checked on every rank.

usage: mpi_buffers.py

Sections:
  device    arrays that say they live on a GPU over host memory, as CuPy and Numba hand them to
            mpi4py (the CUDA array interface; DLPack with a CUDA device type): Send/Recv, Sendrecv,
            Allreduce, Allgather, Bcast into them, Fortran order, read-only ones refused for receives
  mpibuf    MPI.buffer from Alloc_mem, frombuffer and fromaddress as messages; a slice as a message;
            Get_address of each matches the memory
  released  a buffer is let go of as soon as the call that took it completes (Recv, Irecv + Wait,
            Isend + Wait, Sendrecv, a receive from self, Iallreduce, a persistent Allreduce), not when the garbage collector next runs:
            with collection off, every buffer's reference count is back where it was (mpi4py's
            own DLPack test arrays assert on exactly that)
  unreached an interface whose memory the host cannot reach (a real GPU's): a BufferError naming it,
            on the rank that passed it, and the job goes on

Each rank sends to `right` and receives from `left`. Run against the real mpi4py with
COMMLIB_TEST_MPI=mpi4py under mpiexec (validated on mpi4py 4.1.2 + the MPICH 5.0.2 wheel, whose MPI
reads the fake device memory as host memory; the `unreached` section is commlib's own).
"""
import gc
import sys

import numpy as np

from _mpicase import MPI, USING_MPI4PY, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()


class CAI:
    """An array offering only the CUDA array interface (no buffer protocol), over NumPy memory."""

    def __init__(self, a, readonly=False, address=None):
        self.a = a
        self.__cuda_array_interface__ = {
            "version": 3, "data": (a.ctypes.data if address is None else address, readonly),
            "typestr": a.dtype.str, "shape": a.shape,
            "strides": None if a.flags.c_contiguous else a.strides}


class FakeCUDA:
    """A DLPack array that says its memory is on CUDA device 0 (it is NumPy's)."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None, copy=None):
        return self.a.__dlpack__(max_version=max_version)


def device():
    for k, (wrap, label) in enumerate(((CAI, "CAI"), (FakeCUDA, "DLPack CUDA"))):
        send, got = np.arange(6, dtype=np.float64) + 10 * me, np.zeros(6)
        r = comm.Isend(wrap(send), right, k)
        comm.Recv(wrap(got), left, k)
        r.Wait()
        c.equal(got, np.arange(6.0) + 10 * left, f"device: {label} Send/Recv")
        got[:] = 0
        comm.Sendrecv(wrap(send), right, 5, wrap(got), left, 5)
        c.equal(got, np.arange(6.0) + 10 * left, f"device: {label} Sendrecv")
        x, out = np.full(4, me + 1, np.int32), np.zeros(4, np.int32)
        comm.Allreduce(wrap(x), wrap(out), op=MPI.SUM)
        c.equal(out, np.full(4, n * (n + 1) // 2, np.int32), f"device: {label} Allreduce")
        gathered = np.zeros((n, 3), np.float32)
        comm.Allgather(wrap(np.full(3, me, np.float32)), wrap(gathered))
        c.equal(gathered, np.repeat(np.arange(n, dtype=np.float32), 3).reshape(n, 3), f"device: {label} Allgather")
        b = np.arange(5, dtype=np.int16) if me == 0 else np.zeros(5, np.int16)
        comm.Bcast(wrap(b), root=0)
        c.equal(b, np.arange(5, dtype=np.int16), f"device: {label} Bcast")
    f = np.zeros((3, 2), order="F")  # Fortran order is contiguous: taken as its memory
    src = np.asfortranarray(np.arange(6.0).reshape(3, 2) + me)
    comm.Sendrecv(CAI(src), right, 6, CAI(f), left, 6)
    c.equal(f, np.arange(6.0).reshape(3, 2) + left, "device: a Fortran-order interface")
    c.raises(BufferError, lambda: comm.Sendrecv(np.zeros(2), right, 7, CAI(np.zeros(2), readonly=True), left, 7),
             "device: a read-only interface is refused for a receive (before anything is sent)")
    comm.Barrier()


def mpibuf():
    mem = MPI.Alloc_mem(32)
    np.frombuffer(mem, np.float64)[:] = [me, me + 0.5, 0, 0]
    got = MPI.Alloc_mem(32)
    comm.Sendrecv(mem, right, 8, got, left, 8)
    c.equal(list(got.cast("d")), [left, left + 0.5, 0.0, 0.0], "mpibuf: Alloc_mem buffers as messages")
    c.equal(MPI.Get_address(mem), mem.address, "mpibuf: Get_address of an MPI.buffer")
    a = np.zeros(8, np.uint8)
    view = MPI.buffer.fromaddress(MPI.Get_address(a), a.nbytes)
    comm.Sendrecv(np.full(4, me + 1, np.uint8), right, 9, view[2:6], left, 9)
    c.equal(a, np.array([0, 0] + [left + 1] * 4 + [0, 0], np.uint8), "mpibuf: a slice of a fromaddress buffer")
    ro = MPI.buffer.frombuffer(bytes(4), readonly=True)
    c.raises(BufferError, lambda: comm.Sendrecv(bytes(4), right, 10, ro, left, 10),
             "mpibuf: a read-only MPI.buffer is refused for a receive")
    MPI.Free_mem(mem)
    MPI.Free_mem(got)
    c.equal((mem.address, mem.nbytes), (0, 0), "mpibuf: Free_mem releases")
    comm.Barrier()


def released():
    send, got = np.arange(4.0) + me, np.zeros(4)
    gc.collect()
    gc.disable()
    try:
        before = sys.getrefcount(send), sys.getrefcount(got)
        comm.Barrier()  # every rank posts its receive before the message leaves: the posted path
        if me % 2:
            comm.Recv(got, left, 12)
            comm.Send(send, right, 12)
        else:
            comm.Send(send, right, 12)
            comm.Recv(got, left, 12)
        r = comm.Irecv(got, left, 13)
        comm.Barrier()
        s = comm.Isend(send, right, 13)
        MPI.Request.Waitall([r, s])
        del r, s
        comm.Sendrecv(send, right, 14, got, left, 14)
        comm.Iallreduce(send, got).Wait()  # a non-blocking collective, run by the group's stream
        r = comm.Allreduce_init(send, got)
        r.Start()
        r.Wait()
        r.Free()
        r = comm.Irecv(got, me, 15)
        comm.Send(send, me, 15)
        r.Wait()
        del r
        c.equal((sys.getrefcount(send), sys.getrefcount(got)), before,
                "released: buffers let go of at completion, not at the next garbage collection")
    finally:
        gc.enable()
    c.equal(got, np.arange(4.0) + me, "released: the last message")


def unreached():
    if USING_MPI4PY:
        return  # mpi4py hands the pointer to MPI; only commlib probes it
    bogus = CAI(np.zeros(4), address=0x1000)  # never mapped: stands for device memory
    c.raises(BufferError, lambda: comm.Send(bogus, right, 11), "unreached: a send from unreachable memory",
             lambda e: c.ok("not readable from the host" in str(e), "unreached: ... says why", str(e)))
    c.raises(BufferError, lambda: comm.Allreduce(np.zeros(4), bogus), "unreached: a receive into it")
    x = np.array([float(me)])
    comm.Allreduce(MPI.IN_PLACE, x)
    c.equal(x, np.array([n * (n - 1) / 2]), "unreached: the job goes on")


for fn in (device, mpibuf, released, unreached):
    c.run([fn])
    comm.Barrier()
c.finish()
