"""Core binding (commrun --bind-to): a host's cores split evenly among the ranks it runs there.
By default only on hosts of more than one socket (see plan() for why).

Each rank gets a block of whole cores (all their hardware threads): cores // ranks of them, in the
host's order (socket by socket), so every core of the host is used and a rank's compute threads
(commrun sets cores // ranks of them) each have one. Concurrent jobs on one host each split all of
its cores the same way; binding a rank to a single core instead, as mpirun does, would put every
job's rank 0 on the first core and leave the last ones idle (the suite's parallel workers, say).

A rank is bound by setting the launching thread's CPU mask around its start: the child inherits it
with no code of ours running in between (Popen may vfork).
"""
import contextlib
import os

SUPPORTED = hasattr(os, "sched_setaffinity")  # Linux; macOS has no affinity call
CHOICES = ("auto", "core", "socket", "none")
BIND_VAR = "COMMLIB_BIND_TO"  # commrun's --bind-to, for the host agents (each plans with its own cores)
REPORT_VAR = "COMMLIB_REPORT_BINDINGS"  # "1": the agents report their ranks' masks too
SYSFS = "/sys/devices/system/cpu"
HOST_CPUS_VAR = "COMMLIB_HOST_CPUS"  # in a bound rank: the CPUs of the job on its host (what MPI.Spawn's children get)


def allowed_cpus():
    """The CPUs this process may run on (those of its cgroup, taskset, Slurm allocation)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def host_cpus_env():
    """The variable a bound rank gets: the CPUs of the job on its host, for the processes it starts
    (MPI.Spawn's children run there, not on their parent's block)."""
    return {HOST_CPUS_VAR: ",".join(map(str, allowed_cpus()))}


def _read_int(path):
    with open(path) as f:
        return int(f.read().strip())


def topology(cpus, sysfs=SYSFS):
    """The cores among `cpus`: [(socket, (cpu, ...)), ...], socket by socket, each core with its
    hardware threads, in the order of their first CPU. A CPU whose topology cannot be read counts
    as a core of its own on socket 0."""
    cores = {}
    for cpu in sorted(cpus):
        try:
            key = (_read_int(f"{sysfs}/cpu{cpu}/topology/physical_package_id"),
                   _read_int(f"{sysfs}/cpu{cpu}/topology/core_id"))
        except (OSError, ValueError):
            key = (0, ("cpu", cpu))
        cores.setdefault(key, []).append(cpu)
    return sorted(((socket, tuple(members)) for (socket, _), members in cores.items()),
                  key=lambda core: (core[0], core[1][0]))


def plan(local_size, bind_to="auto", threads=None, cores=None):
    """The CPUs each of a host's `local_size` ranks is bound to: ([set of CPUs, or None for
    unbound, per local rank], why -- a line saying why none is bound, or None).

    bind_to: "core" (a block of cores // ranks whole cores each; where ranks outnumber cores, rank i
    on core i mod cores), "socket" (the sockets of that block), "none", or "auto": "core" on a host
    of more than one socket where the ranks do not outnumber the cores and each rank's compute
    threads (`threads`, where the user or commrun chose a number) fit its block, else none.
    cores: topology() of the CPUs to use [default: this process's].

    Why "auto" leaves a one-socket host unbound (Open MPI binds there too): measured on two cores,
    a rank held to one core was 1.4-1.9x slower at collectives of 8 B to 1 MiB and at the 1 MiB
    ping-pong than one the kernel may move, and never faster (benchmarks/RESULTS.md, core binding):
    a rank is more than its compute thread (commlib's progress thread, torch's), and the kernel
    places them better than a fixed block. Across sockets a rank that moves leaves its memory
    behind, which is what binding is for."""
    unbound = [None] * local_size
    if bind_to == "none":
        return unbound, "--bind-to none"
    if not SUPPORTED:
        return unbound, "this system cannot bind processes to cores"
    if cores is None:
        cores = topology(allowed_cpus())
    n = len(cores)
    if bind_to == "auto" and len({socket for socket, _ in cores}) < 2:
        return unbound, "one socket: --bind-to core binds"
    if local_size > n:
        if bind_to == "auto":
            return unbound, f"{local_size} ranks on {n} cores"
        blocks = [[cores[i % n]] for i in range(local_size)]
    else:
        k = n // local_size
        blocks = [cores[i * k:(i + 1) * k] for i in range(local_size)]
        width = min(sum(len(cpus) for _, cpus in block) for block in blocks)
        if bind_to == "auto" and threads is not None and threads > width:
            return unbound, f"{threads} compute threads a rank, {width} CPU{'s' if width > 1 else ''} a rank's block"
    if bind_to == "socket":
        sockets = {}
        for socket, cpus in cores:
            sockets.setdefault(socket, set()).update(cpus)
        return [set().union(*(sockets[s] for s in {socket for socket, _ in block})) for block in blocks], None
    return [{cpu for _, cpus in block for cpu in cpus} for block in blocks], None


def threads_of(environ):
    """The compute threads a rank will run as the environment sets them (OMP_NUM_THREADS, the
    first number of a list), or None where it does not say."""
    value = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def mask(cpus, every):
    """Open MPI's picture of a mask: one character a CPU of the host, B where bound."""
    return "[" + "".join("B" if cpu in cpus else "." for cpu in every) + "]"


def report(rank, cpus, why, every, host=None):
    """The --report-bindings line of one rank."""
    where = f" on {host}" if host else ""
    if cpus is None:
        return f"rank {rank}{where} not bound ({why})"
    listed = ",".join(str(c) for c in sorted(cpus))
    return f"rank {rank}{where} bound to CPU{'s' if len(cpus) > 1 else ''} {listed} {mask(cpus, every)}"


@contextlib.contextmanager
def bound(cpus):
    """This thread runs on `cpus` (None: unchanged) for the block: what it starts inherits them."""
    if cpus is None or not SUPPORTED:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
