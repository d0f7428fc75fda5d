"""torch's compute threads where a launcher left every rank of a shared host at one a core.

commrun sizes the thread pools before a rank starts (OMP_NUM_THREADS = cores // ranks of the
host), and torchrun sets OMP_NUM_THREADS=1; srun, Ray and a hand-written launch set nothing, so
each rank keeps torch's default of a thread a core and the host's ranks run ranks x cores compute
threads, which spin for each other's cores (a DDP step 3-8x slower on two cores). The backend can
see the layout once the world has met: the same rule, through torch.set_num_threads.
"""
import os
import sys

import psutil
import torch

USER_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the user (or the launcher) chose


def cores():
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def share_cores(local_rank, local_size, environ=None, ncores=None):
    """Set torch's threads to the host's cores divided by its ranks (at least one) where more than
    one rank runs here, no thread variable is set, torch is at its default (a thread a core) and
    the ranks' threads would outnumber the cores; the host's first rank says so. Returns the number
    set, or None where nothing changed."""
    environ = os.environ if environ is None else environ
    ncores = ncores or cores()
    threads = torch.get_num_threads()
    if local_size <= 1 or local_size * threads <= ncores:
        return None
    if any(v in environ for v in USER_VARS):  # the user's threads: kept; spinning for cores is said
        if threads > 1 and "OMP_WAIT_POLICY" not in environ and local_rank == 0:
            print(f"commlib: {local_size} ranks of {threads} torch threads on {ncores} cores: OpenMP threads spin "
                  f"for cores the other ranks' threads need (a DDP step several times slower); export "
                  f"OMP_WAIT_POLICY=PASSIVE, as commrun does, or fewer OMP_NUM_THREADS", file=sys.stderr, flush=True)
        return None
    if threads < min(ncores, psutil.cpu_count(logical=False) or ncores):  # below torch's default: the program's
        return None
    n = max(1, ncores // local_size)
    torch.set_num_threads(n)
    if local_rank == 0:
        print(f"commlib: {local_size} ranks on {ncores} cores: torch.set_num_threads({n}) in each (torch's default "
              f"of a thread a core would run {local_size * threads} compute threads here; export OMP_NUM_THREADS "
              f"to choose)", file=sys.stderr, flush=True)
    return n
