"""discover() under the launchers commlib does not start itself: Open MPI's mpirun, MPICH/Hydra's
mpiexec, Kubeflow Trainer v2 (PET_*) and Kubernetes Indexed Jobs. Each either joins its ranks or
raises a CommError that says what to set: never a silent size-1 world."""
import pytest

from commlib import _rendezvous as rv
from commlib._errors import CommError

SECRET = "ab" * 32


def ompi(**over):
    env = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "PMIX_NAMESPACE": "1894055937", "COMMLIB_SECRET": SECRET}
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def test_open_mpi_on_one_host_derives_a_loopback_coordinator_hosted_by_rank_0():
    env = rv.discover(ompi())
    assert (env.rank, env.size, env.local_rank, env.local_size, env.source) == (2, 4, 2, 4, "mpirun")
    host, port = env.coordinator
    assert host == "127.0.0.1" and 20000 <= port < 32000 and not env.host_coordinator
    zero = rv.discover(ompi(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_LOCAL_RANK="0"))
    assert zero.coordinator == env.coordinator and zero.host_coordinator  # every rank agrees
    other_job = rv.discover(ompi(PMIX_NAMESPACE="77"))
    assert other_job.coordinator != env.coordinator


def test_open_mpi_across_hosts_needs_an_address():
    with pytest.raises(CommError, match="COMMLIB_COORDINATOR=.*MASTER_ADDR"):
        rv.discover(ompi(OMPI_COMM_WORLD_LOCAL_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0"))
    env = rv.discover(ompi(OMPI_COMM_WORLD_LOCAL_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0",
                           COMMLIB_COORDINATOR="node1:29400"))
    assert env.coordinator == ("node1", 29400) and env.local_size == 2
    env = rv.discover(ompi(OMPI_COMM_WORLD_LOCAL_SIZE="2", OMPI_COMM_WORLD_LOCAL_RANK="0", MASTER_ADDR="node1",
                           MASTER_PORT="29500"))
    assert env.coordinator == ("node1", 29500)


def test_open_mpi_malformed_vars_are_named():
    with pytest.raises(CommError, match="OMPI_COMM_WORLD_RANK"):
        rv.discover(ompi(OMPI_COMM_WORLD_RANK="4"))
    with pytest.raises(CommError, match="OMPI_COMM_WORLD_SIZE"):
        rv.discover(ompi(OMPI_COMM_WORLD_SIZE="many"))


def test_mpich_hydra():
    env = rv.discover({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2",
                       "PMI_FD": "5", "COMMLIB_SECRET": SECRET})
    assert (env.rank, env.size, env.local_rank, env.local_size) == (1, 2, 1, 2)
    assert env.coordinator[0] == "127.0.0.1"
    with pytest.raises(CommError, match="MPICH/Hydra.*COMMLIB_COORDINATOR"):
        rv.discover({"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})


def test_kubeflow_trainer_plain_python():
    base = {"PET_NNODES": "3", "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "job-node-0-0",
            "PET_MASTER_PORT": "29400", "COMMLIB_SECRET": SECRET}
    env = rv.discover(base)
    assert (env.rank, env.size, env.coordinator, env.source) == (2, 3, ("job-node-0-0", 29400), "trainer")
    with pytest.raises(CommError, match="torchrun"):
        rv.discover(dict(base, PET_NPROC_PER_NODE="4"))
    with pytest.raises(CommError, match="PET_MASTER_ADDR"):
        rv.discover({k: v for k, v in base.items() if k != "PET_MASTER_ADDR"})
    # under torchrun RANK/WORLD_SIZE are set too, and win
    env = rv.discover(dict(base, RANK="5", WORLD_SIZE="6", MASTER_ADDR="m", MASTER_PORT="29400"))
    assert (env.rank, env.size, env.source) == (5, 6, "torchrun")


def test_indexed_job():
    with pytest.raises(CommError, match="COMMLIB_SIZE and COMMLIB_COORDINATOR"):
        rv.discover({"JOB_COMPLETION_INDEX": "1"})
    env = rv.discover({"JOB_COMPLETION_INDEX": "1", "COMMLIB_SIZE": "4", "COMMLIB_COORDINATOR": "train-0.svc:29400",
                       "COMMLIB_SECRET": SECRET})
    assert (env.rank, env.size, env.coordinator, env.host_coordinator) == (1, 4, ("train-0.svc", 29400), False)
    with pytest.raises(CommError, match="JOB_COMPLETION_INDEX"):
        rv.discover({"JOB_COMPLETION_INDEX": "4", "COMMLIB_SIZE": "4", "COMMLIB_COORDINATOR": "h:1",
                     "COMMLIB_SECRET": SECRET})


def test_explicit_set_up():
    env = rv.explicit(1, 4, "node1:29400", SECRET, environ={})
    assert (env.rank, env.size, env.coordinator, env.secret, env.host_coordinator) == \
        (1, 4, ("node1", 29400), bytes.fromhex(SECRET), False)
    assert rv.explicit(0, 1, ("::1", 5), b"k", environ={}).host_coordinator
    assert rv.explicit(0, 2, "h:1", None, environ={"COMMLIB_SECRET": SECRET}).secret == bytes.fromhex(SECRET)
    for args, why in [((None, 4, "h:1", SECRET), "missing rank"), ((0, None, None, SECRET), "size, coordinator"),
                      ((4, 4, "h:1", SECRET), "rank"), ((0, 2, "nohost", SECRET), "host:port"),
                      ((0, 2, "h:1", None), "secret="), ((0, 2, "h:1", "zz"), "hex"),
                      ((True, 2, "h:1", SECRET), "int")]:
        with pytest.raises(CommError, match=why):
            rv.explicit(*args, environ={})
