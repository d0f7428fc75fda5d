"""Discovery: which job this process belongs to, from the variables its launcher set.

`discover()` reads the environment of commrun, srun, Open MPI's mpirun,
MPICH/Hydra's mpiexec, torchrun (and PyTorchJob, Ray Train), Kubeflow
Trainer and Kubernetes Indexed Jobs into one `JobEnv`: rank, size, local
rank and size, the coordinator's address, the job secret, and whether this
process hosts the coordinator. `explicit()` builds it from
`commlib.init(...)`'s arguments, `via_key_value()` through a store the ranks
already share (torch's c10d store). A launcher that is detected but whose
variables are incomplete is a CommError saying what to set.
"""
import dataclasses
import hashlib
import logging
import os
import re
import secrets
import zlib

from .._errors import CommError
from .._hosts import expand_nodelist, tasks_per_node
from .service import Service
from .framing import fmt_address

_log = logging.getLogger("commlib")


@dataclasses.dataclass
class JobEnv:
    rank: int
    size: int
    local_rank: int
    local_size: int
    coordinator: tuple  # (host, port)
    secret: bytes
    host_coordinator: bool  # True: this process must run the Coordinator itself
    source: str  # "commrun" | "slurm" | "torchrun"
    via: tuple = None  # (host, port) of this host's commrun agent, which carries the coordinator connection


_warned_weak_secret = False


def discover(environ=os.environ):
    """The job this process belongs to, from the launcher's variables; None outside any.

    Order: COMMLIB_* (commrun), Slurm under srun, Open MPI's mpirun (OMPI_COMM_WORLD_*),
    MPICH/Hydra's mpiexec (PMI_*), torchrun-style variables (also PyTorchJob and Ray Train),
    Kubeflow Trainer v2 running plain python (PET_*), a Kubernetes Indexed Job
    (JOB_COMPLETION_INDEX). A launcher that is detected but whose ranks cannot be joined is a
    CommError saying what to set, never a size-1 world.
    Under Slurm and torchrun, COMMLIB_SECRET should be exported to every rank;
    without it the secret is derived from the job's identity (job id, node
    list or master address), which anyone who can see the job can recompute,
    so it only protects against accidents, not against other local users.
    """
    if "COMMLIB_RANK" in environ:
        return _from_commrun(environ)
    if "SLURM_PROCID" in environ and _under_srun(environ):
        return _from_slurm(environ)
    if "OMPI_COMM_WORLD_RANK" in environ:
        return _from_mpirun(environ, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI's mpirun",
                            f"ompi/{environ.get('PMIX_NAMESPACE', environ.get('OMPI_MCA_ess_base_jobid', ''))}")
    if "PMI_RANK" in environ and "PMI_SIZE" in environ:
        return _from_mpirun(environ, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                            "MPICH/Hydra's mpiexec", f"hydra/{os.getppid()}")
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return _from_torchrun(environ)
    if "PET_NNODES" in environ and "PET_NODE_RANK" in environ:
        return _from_trainer(environ)
    if "JOB_COMPLETION_INDEX" in environ:
        return _from_indexed_job(environ)
    return None


def explicit(rank, size, coordinator, secret, environ=os.environ):
    """The job described by commlib.init(rank=, size=, coordinator=, secret=): for any launcher not
    detected automatically. Rank 0 hosts the coordinator at `coordinator` ("host:port" or a
    (host, port) pair); `secret` (bytes or hex) defaults to COMMLIB_SECRET."""
    missing = [name for name, v in (("rank", rank), ("size", size), ("coordinator", coordinator)) if v is None]
    if missing:
        raise CommError(f"commlib.init(): explicit set-up needs rank, size and coordinator; missing "
                        f"{', '.join(missing)}")
    for name, v in (("rank", rank), ("size", size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise CommError(f"commlib.init(): {name} must be an int, got {v!r}")
    if isinstance(coordinator, str):
        try:
            coordinator = parse_address(coordinator)
        except ValueError:
            raise CommError(f"commlib.init(): coordinator must be 'host:port', got {coordinator!r}") from None
    else:
        try:
            host, port = coordinator
        except (TypeError, ValueError):
            raise CommError(f"commlib.init(): coordinator must be 'host:port' or (host, port), got "
                            f"{coordinator!r}") from None
        coordinator = (str(host), int(port))
    if secret is None:
        if "COMMLIB_SECRET" not in environ:
            raise CommError("commlib.init(): pass secret= (the same bytes or hex string on every rank) or export "
                            "COMMLIB_SECRET")
        secret = _var(environ, "COMMLIB_SECRET", bytes.fromhex)
    elif isinstance(secret, str):
        try:
            secret = bytes.fromhex(secret)
        except ValueError:
            raise CommError("commlib.init(): secret must be bytes or a hex string") from None
    if not isinstance(secret, (bytes, bytearray)) or not secret:
        raise CommError("commlib.init(): secret must be non-empty bytes or a hex string")
    env = JobEnv(rank=rank, size=size, local_rank=rank, local_size=size, coordinator=coordinator,
                 secret=bytes(secret), host_coordinator=rank == 0, source="explicit")
    return _checked(env, ("rank", "size", "rank", "size"))


def via_key_value(rank, size, put, get, peer_host, prefix="commlib/", environ=os.environ):
    """(JobEnv, Coordinator or None) for ranks that already share a key-value store (torch's c10d store).

    Rank 0 starts the coordinator on a free port of the interface that reaches
    `peer_host` (the store's host) and publishes its address with put(key, str);
    the others read it with get(key) -> str, which waits. The secret is
    COMMLIB_SECRET when exported, else a fresh one published the same way (so
    it is as private as the store is).
    """
    given = _var(environ, "COMMLIB_SECRET", bytes.fromhex) if "COMMLIB_SECRET" in environ else None
    coordinator = None
    if rank == 0:
        from .._transport import routed_address

        host = routed_address(peer_host)
        secret = given or PublishedSecret(secrets.token_bytes(32))
        coordinator = Service(size, secret, host=host)  # in a process of its own
        if given is None:
            put(prefix + "secret", secret.hex())
        put(prefix + "coordinator", fmt_address(coordinator.address))
        address = coordinator.address[:2]
    else:
        secret = given or PublishedSecret(bytes.fromhex(get(prefix + "secret")))
        address = parse_address(get(prefix + "coordinator"))
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=address, secret=secret,
                 host_coordinator=False, source="store")
    return _checked(env, ("rank", "size", "local rank", "local size")), coordinator


def _given_coordinator(environ):
    """COMMLIB_COORDINATOR, else MASTER_ADDR:MASTER_PORT, else None."""
    if "COMMLIB_COORDINATOR" in environ:
        return _var(environ, "COMMLIB_COORDINATOR", parse_address)
    if "MASTER_ADDR" in environ and "MASTER_PORT" in environ:
        return _var(environ, "MASTER_ADDR", str), _var(environ, "MASTER_PORT")
    return None


def _from_mpirun(environ, rank_var, size_var, lrank_var, lsize_var, launcher, identity):
    """Ranks started by an MPI launcher (commlib does not talk PMI): the rank and size come from its
    variables; the coordinator from COMMLIB_COORDINATOR or MASTER_ADDR/PORT, or, when every rank is
    on this host, a loopback port derived from the job's identity, hosted by rank 0."""
    rank, size = _var(environ, rank_var), _var(environ, size_var)
    local_rank = _var(environ, lrank_var) if lrank_var in environ else rank
    local_size = _var(environ, lsize_var) if lsize_var in environ else size
    coordinator = _given_coordinator(environ)
    if coordinator is None:
        if local_size != size:
            raise CommError(f"commlib was started by {launcher} across hosts ({size} ranks, {local_size} on this "
                            f"host) and cannot find its peers without an address: export "
                            f"COMMLIB_COORDINATOR=<host of rank 0>:<free port> (or MASTER_ADDR and MASTER_PORT) "
                            f"to every rank, e.g. mpirun -x COMMLIB_COORDINATOR=node1:29400 ...")
        coordinator = ("127.0.0.1", derived_port(zlib.crc32(f"{identity}/{size}".encode())))
    env = JobEnv(rank=rank, size=size, local_rank=local_rank, local_size=local_size, coordinator=coordinator,
                 secret=_secret(environ, f"{identity}/{size}/{fmt_address(coordinator)}"), host_coordinator=rank == 0,
                 source="mpirun")
    return _checked(env, (rank_var, size_var, lrank_var, lsize_var))


def _from_trainer(environ):
    """Kubeflow Trainer v2 running plain python: one process per node, PET_* describe the job."""
    nproc = environ.get("PET_NPROC_PER_NODE", "1")
    if nproc not in ("1", "auto", "cpu", ""):
        raise CommError(f"PET_NPROC_PER_NODE={nproc} asks for {nproc} processes per node, but this process was "
                        f"started without torchrun: start the training script with torchrun (it sets RANK and "
                        f"WORLD_SIZE), or set PET_NPROC_PER_NODE=1")
    rank, size = _var(environ, "PET_NODE_RANK"), _var(environ, "PET_NNODES")
    coordinator = _given_coordinator(environ)
    if coordinator is None:
        if "PET_MASTER_ADDR" not in environ or "PET_MASTER_PORT" not in environ:
            raise CommError("Kubeflow Trainer variables (PET_NNODES, PET_NODE_RANK) are set but not "
                            "PET_MASTER_ADDR/PET_MASTER_PORT: set them, or COMMLIB_COORDINATOR=host:port")
        coordinator = (_var(environ, "PET_MASTER_ADDR", str), _var(environ, "PET_MASTER_PORT"))
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=coordinator,
                 secret=_secret(environ, f"trainer/{fmt_address(coordinator)}/{size}"), host_coordinator=rank == 0,
                 source="trainer")
    return _checked(env, ("PET_NODE_RANK", "PET_NNODES", "local rank", "local size"))


def _from_indexed_job(environ):
    """A Kubernetes Indexed Job or JobSet: JOB_COMPLETION_INDEX is the rank; the size and the
    coordinator (rank 0's pod, e.g. its headless-service name) must be given."""
    missing = [v for v in ("COMMLIB_SIZE", "COMMLIB_COORDINATOR") if v not in environ]
    if missing:
        raise CommError(f"JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but not {' and '.join(missing)}: "
                        f"set COMMLIB_SIZE to the job's completions and COMMLIB_COORDINATOR to "
                        f"<rank 0's hostname>:<port> (with a headless service: <job>-0.<service>:29400), "
                        f"and COMMLIB_SECRET from a Kubernetes Secret")
    rank, size = _var(environ, "JOB_COMPLETION_INDEX"), _var(environ, "COMMLIB_SIZE")
    coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    env = JobEnv(rank=rank, size=size, local_rank=0, local_size=1, coordinator=coordinator,
                 secret=_secret(environ, f"indexed/{fmt_address(coordinator)}/{size}"), host_coordinator=rank == 0,
                 source="indexed-job")
    return _checked(env, ("JOB_COMPLETION_INDEX", "COMMLIB_SIZE", "local rank", "local size"))


def _var(environ, name, parse=int, default=None):
    if name not in environ:
        if default is not None:
            return default
        raise CommError(f"{name} is not set (other launcher variables are)")
    value = environ[name]
    try:
        return parse(value)
    except ValueError:
        raise CommError(f"malformed {name}={value!r}") from None


def _checked(env, names):
    rank_var, size_var, lrank_var, lsize_var = names
    if env.size < 1:
        raise CommError(f"malformed {size_var}={env.size}: must be >= 1")
    if not 0 <= env.rank < env.size:
        raise CommError(f"malformed {rank_var}={env.rank}: must be in [0, {env.size})")
    if env.local_size < 1:
        raise CommError(f"malformed {lsize_var}={env.local_size}: must be >= 1")
    if not 0 <= env.local_rank < env.local_size:
        raise CommError(f"malformed {lrank_var}={env.local_rank}: must be in [0, {env.local_size})")
    return env


def parse_address(value):
    """'host:port' or '[v6]:port' -> (host, port)."""
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", value.strip())
    if not m:
        raise ValueError(value)
    host, port = (m[1], m[2]) if m[1] else (m[3], m[4])
    if not 0 < int(port) < 65536:
        raise ValueError(value)
    return host, int(port)


class DerivedSecret(bytes):
    """A secret derived from the job's identity (no COMMLIB_SECRET): warned about when it is used."""


class PublishedSecret(bytes):
    """A fresh secret that rank 0 handed the others through the launcher's key-value store (torch's
    TCPStore, Ray's): as private as that store's traffic, which commlib does not encrypt."""


def weak_secret_words(secret):
    """Why `secret` cannot key encryption (COMMLIB_ENCRYPT), or None when only the job knows it."""
    if isinstance(secret, DerivedSecret):
        return "the job's secret is derived from its identity (anyone who sees the job can recompute it)"
    if isinstance(secret, PublishedSecret):
        return "the job's secret went to the other ranks through the launcher's key-value store, in clear"
    return None


def _secret(environ, identity):
    if "COMMLIB_SECRET" in environ:
        return _var(environ, "COMMLIB_SECRET", bytes.fromhex)
    return DerivedSecret(hashlib.sha256(b"commlib/derived-secret\0" + identity.encode()).digest())


def warn_if_derived(secret):
    """Warn once per process when the job runs on a secret anyone who sees the job can recompute."""
    global _warned_weak_secret
    if isinstance(secret, DerivedSecret) and not _warned_weak_secret:
        _warned_weak_secret = True
        _log.warning(
            "commlib: COMMLIB_SECRET is not set; using a secret derived from the job's identity, "
            "which anyone who can see the job can recompute. Export COMMLIB_SECRET "
            "(e.g. `export COMMLIB_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')`)"
        )


def _from_commrun(environ):
    rank = _var(environ, "COMMLIB_RANK")
    size = _var(environ, "COMMLIB_SIZE")
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "COMMLIB_LOCAL_RANK", default=rank),
        local_size=_var(environ, "COMMLIB_LOCAL_SIZE", default=size),
        coordinator=_var(environ, "COMMLIB_COORDINATOR", parse_address),
        secret=_var(environ, "COMMLIB_SECRET", bytes.fromhex),
        host_coordinator=False,
        source="commrun",
        via=_via(environ),
    )
    return _checked(env, ("COMMLIB_RANK", "COMMLIB_SIZE", "COMMLIB_LOCAL_RANK", "COMMLIB_LOCAL_SIZE"))


def _via(environ):
    """(host, port) of the agent that carries this rank's coordinator connection (commrun's agents
    set COMMLIB_COORDINATOR_VIA="127.0.0.1:PORT for COORDINATOR"), or None; a value left over from
    another job (inherited by a spawned child, or a commrun started by a rank) names another
    coordinator and is not used."""
    value = environ.get("COMMLIB_COORDINATOR_VIA", "").strip()
    if not value:
        return None
    via, sep, coordinator = value.partition(" for ")
    try:
        if not sep or parse_address(coordinator) != parse_address(environ.get("COMMLIB_COORDINATOR", "")):
            return None
        return parse_address(via)
    except ValueError:
        raise CommError(f"malformed COMMLIB_COORDINATOR_VIA={value!r}") from None


# A coordinator port derived from a job's identity (Slurm's job and step, an MPI launcher's job) lies
# below Linux's default ephemeral range (32768-60999): a port the kernel hands out to some other
# outgoing connection on that host at the moment rank 0 binds would fail the job.
DERIVED_PORT_BASE, DERIVED_PORTS = 20000, 12000


def derived_port(number):
    """The coordinator port of a job identified by `number` (DERIVED_PORT_BASE + number % DERIVED_PORTS)."""
    return DERIVED_PORT_BASE + number % DERIVED_PORTS


# Slurm's step ids above this are the batch, extern and interactive pseudo-steps.
_SLURM_MAX_STEP = 0xFFFFFFF0


def _under_srun(environ):
    """True inside a task started by srun; False in an salloc/sbatch shell."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    try:
        return step is not None and 0 <= int(step) < _SLURM_MAX_STEP
    except ValueError:
        raise CommError(f"malformed SLURM_STEP_ID={step!r}") from None


def _from_slurm(environ):
    rank = _var(environ, "SLURM_PROCID")
    size = _var(environ, "SLURM_NTASKS")
    step = _var(environ, "SLURM_STEP_ID" if "SLURM_STEP_ID" in environ else "SLURM_STEPID")
    job = _var(environ, "SLURM_JOB_ID")
    nodelist_var = "SLURM_STEP_NODELIST" if "SLURM_STEP_NODELIST" in environ else "SLURM_NODELIST"
    nodes = _var(environ, nodelist_var, expand_nodelist)
    if not nodes:
        raise CommError(f"malformed {nodelist_var}: empty")
    tpn_var = "SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in environ else "SLURM_TASKS_PER_NODE"
    if tpn_var in environ and "SLURM_NODEID" in environ:
        counts = _var(environ, tpn_var, tasks_per_node)
        node = _var(environ, "SLURM_NODEID")
        if not 0 <= node < len(counts):
            raise CommError(f"malformed SLURM_NODEID={node}: {tpn_var} lists {len(counts)} nodes")
        local_size = counts[node]
    else:
        local_size = max(1, -(-size // len(nodes)))
    if "COMMLIB_COORDINATOR" in environ:
        coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    else:
        # Consecutive steps of one job get different ports; two jobs can still
        # collide, which then fails loudly (AuthError), never silently.
        coordinator = (nodes[0], derived_port(job + step))
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "SLURM_LOCALID"),
        local_size=local_size,
        coordinator=coordinator,
        secret=_secret(environ, f"slurm/{job}/{step}/{environ[nodelist_var]}"),
        host_coordinator=rank == 0,
        source="slurm",
    )
    return _checked(env, ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", tpn_var))


def _from_torchrun(environ):
    rank = _var(environ, "RANK")
    size = _var(environ, "WORLD_SIZE")
    if "COMMLIB_COORDINATOR" in environ:
        coordinator = _var(environ, "COMMLIB_COORDINATOR", parse_address)
    else:
        port = _var(environ, "MASTER_PORT")
        if not 0 < port < 65535:
            raise CommError(f"malformed MASTER_PORT={port}")
        # Under torchrun itself the agent's store already holds MASTER_PORT.
        if environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true"):
            port += 1
        coordinator = (_var(environ, "MASTER_ADDR", str), port)
    identity = f"torchrun/{environ.get('TORCHELASTIC_RUN_ID', '')}/{fmt_address(coordinator)}/{size}"
    env = JobEnv(
        rank=rank,
        size=size,
        local_rank=_var(environ, "LOCAL_RANK", default=rank),
        local_size=_var(environ, "LOCAL_WORLD_SIZE", default=size),
        coordinator=coordinator,
        secret=_secret(environ, identity),
        host_coordinator=rank == 0,
        source="torchrun",
    )
    return _checked(env, ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
