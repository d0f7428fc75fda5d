"""`python -m commlib.MPI [--version | --path]`: what this mpi4py-compatible layer provides; with
--path, the directory that makes `import mpi4py` load commlib's stand-in (put it first on PYTHONPATH;
`commrun --mpi4py` does it for you)."""
import os
import sys

from . import Get_library_version, Get_version, get_vendor

_COVERED = """\
covered (mpi4py 4.1 semantics, intra-communicators):
  COMM_WORLD / COMM_SELF / COMM_NULL; Send/Recv/Isend/Irecv/Ssend/Sendrecv(_replace)/Probe and the
  lower-case object methods; every BufSpec form; PROC_NULL, ANY_SOURCE, ANY_TAG; Status; Request
  Wait*/Test*/Cancel/Free and persistent Send_init/Recv_init; matched probes (Mprobe, Improbe,
  mprobe, improbe, Message); Bcast, Reduce, Allreduce, Gather(v),
  Scatter(v), Allgather(v), Alltoall(v), Scan, Exscan, Reduce_scatter(_block), Barrier and their
  object forms; Ibarrier/Ibcast/Iallreduce/Ireduce/Igather/Iscatter/Iallgather/Ialltoall; IN_PLACE;
  Op (predefined, Op.Create, Reduce_local); Datatype (predefined, typecodes, Create_contiguous);
  Split/Dup/Clone/Create/Free/Compare, Create_cart/Cartcomm, Group; Abort; MPI.Exception.
not provided (NotImplementedError): RMA (Win), MPI-IO (File), dynamic processes (Spawn),
  intercommunicators, graph topologies, derived datatypes beyond contiguous."""


STANDIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_mpi4py")


def main(argv):
    if "--path" in argv:
        print(STANDIN)
        return 0
    vendor, ver = get_vendor()
    print(f"commlib.MPI {'.'.join(map(str, ver))} ({vendor}): MPI {'.'.join(map(str, Get_version()))} "
          f"subset of mpi4py's API; {Get_library_version()}")
    if "--version" not in argv:
        print(_COVERED)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
