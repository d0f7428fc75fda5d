"""`python -m commlib.MPI [--version | --path]`: what this mpi4py-compatible layer provides; with
--path, the directory that makes `import mpi4py` load commlib's stand-in (put it first on PYTHONPATH;
`commrun --mpi4py` does it for you)."""
import os
import sys

from . import Get_library_version, Get_version, get_vendor

_COVERED = """\
covered (mpi4py 4.1 semantics):
  COMM_WORLD / COMM_SELF / COMM_NULL; every point-to-point call and BufSpec form (buffer and object,
  blocking, non-blocking, persistent, synchronous, buffered, ready, partitioned), matched probes and
  Message; Status; Request Wait*/Test*/Cancel/Free, generalized requests (Grequest); every collective
  (v/w forms, scans, reductions, Barrier) with its I and _init forms and the object forms; IN_PLACE;
  Op (predefined, Op.Create, Reduce_local); derived datatypes (vector ... struct, subarray, darray,
  resized), Pack/Unpack; Split/Dup/Create/Compare/Free; Cartesian, graph and distributed-graph
  topologies with the neighbourhood collectives; intercommunicators (Create_intercomm, Merge, the
  collectives' intercommunicator semantics); Spawn / Spawn_multiple / Get_parent; one-sided RMA (Win:
  Create, Allocate, Allocate_shared, Create_dynamic; Put, Get, Accumulate, Get_accumulate,
  Fetch_and_op, Compare_and_swap; Fence, PSCW, Lock/Unlock, Flush); attributes and keyvals; error
  handlers; error classes and codes; Info; Abort; mpi4py.futures; mpi4py.util (pkl5, dtlib, pool, sync).
not provided (NotImplementedError): MPI-IO (File), sessions (Session), ports (Open_port, Accept,
  Connect, Join), fault tolerance (ULFM); long double."""


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
