"""Core binding plans (commrun --bind-to) on made-up hosts, and the mask a started child inherits."""
import os
import subprocess
import sys

import pytest

from commrun import binding

pytestmark = pytest.mark.timeout(20)


def host(sockets, cores, smt):
    """A made-up topology: `sockets` x `cores` cores of `smt` hardware threads, numbered as Linux
    does (the first thread of every core, then the second ones)."""
    per_thread = sockets * cores
    return [(s, tuple(s * cores + c + t * per_thread for t in range(smt)))
            for s in range(sockets) for c in range(cores)]


def cpus_of(cores):
    return {cpu for _, cpus in cores for cpu in cpus}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_core_blocks_split_the_host_evenly(n):
    cores = host(2, 4, 2)  # 8 cores, 16 CPUs
    blocks, why = binding.plan(n, "auto", cores=cores)
    assert why is None and len(blocks) == n
    k = 8 // n
    for i, block in enumerate(blocks):
        assert block == cpus_of(cores[i * k:(i + 1) * k])  # whole cores, both hardware threads
    assert all(not (a & b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    assert len(set().union(*blocks)) == 2 * k * n


def test_auto_leaves_a_one_socket_host_unbound():
    cores = host(1, 4, 2)
    assert binding.plan(2, "auto", cores=cores) == ([None, None], "one socket: --bind-to core binds")
    assert binding.plan(2, "core", cores=cores)[0] == [{0, 4, 1, 5}, {2, 6, 3, 7}]


def test_ranks_that_outnumber_the_cores_are_left_unbound_unless_asked():
    cores = host(2, 1, 1)
    blocks, why = binding.plan(3, "auto", cores=cores)
    assert blocks == [None] * 3 and why == "3 ranks on 2 cores"
    blocks, why = binding.plan(5, "core", cores=cores)  # asked: round robin, ranks share cores
    assert blocks == [{0}, {1}, {0}, {1}, {0}] and why is None


def test_threads_that_do_not_fit_a_block_leave_auto_unbound():
    cores = host(2, 2, 1)
    assert binding.plan(2, "auto", threads=2, cores=cores) == ([{0, 1}, {2, 3}], None)
    blocks, why = binding.plan(2, "auto", threads=3, cores=cores)
    assert blocks == [None, None] and "3 compute threads a rank, 2 CPUs" in why
    assert binding.plan(2, "core", threads=3, cores=cores)[0] == [{0, 1}, {2, 3}]  # asked for: bound


def test_socket_binding_widens_each_block_to_its_sockets():
    cores = host(2, 2, 1)  # cores 0,1 on socket 0; 2,3 on socket 1
    blocks, _ = binding.plan(2, "socket", cores=cores)
    assert blocks == [{0, 1}, {2, 3}]
    blocks, _ = binding.plan(4, "socket", cores=cores)
    assert blocks == [{0, 1}, {0, 1}, {2, 3}, {2, 3}]
    blocks, _ = binding.plan(1, "socket", cores=cores)
    assert blocks == [{0, 1, 2, 3}]


def test_none_binds_nothing():
    assert binding.plan(2, "none", cores=host(1, 4, 1)) == ([None, None], "--bind-to none")


def test_topology_reads_sysfs_and_survives_missing_entries(tmp_path):
    for cpu, package, core in ((0, 0, 0), (1, 0, 1), (2, 0, 0), (3, 0, 1)):  # two cores of two threads
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
        (d / "core_id").write_text(f"{core}\n")
    assert binding.topology([0, 1, 2, 3], sysfs=tmp_path) == [(0, (0, 2)), (0, (1, 3))]
    assert binding.topology([0, 5], sysfs=tmp_path) == [(0, (0,)), (0, (5,))]  # cpu5 unreadable: a core alone


def test_threads_of_reads_the_first_number_of_omp_num_threads():
    assert binding.threads_of({"OMP_NUM_THREADS": "4"}) == 4
    assert binding.threads_of({"OMP_NUM_THREADS": "4,2"}) == 4
    assert binding.threads_of({"OMP_NUM_THREADS": ""}) is None
    assert binding.threads_of({"OMP_NUM_THREADS": "x"}) is None
    assert binding.threads_of({}) is None


def test_report_lines():
    assert binding.report(1, {1}, None, [0, 1, 2, 3]) == "rank 1 bound to CPU 1 [.B..]"
    assert binding.report(0, {0, 2}, None, [0, 1, 2, 3], "h1") == "rank 0 on h1 bound to CPUs 0,2 [B.B.]"
    assert binding.report(2, None, "3 ranks on 2 cores", [0, 1]) == "rank 2 not bound (3 ranks on 2 cores)"


@pytest.mark.skipif(not binding.SUPPORTED, reason="no sched_setaffinity on this system")
def test_a_child_started_inside_bound_inherits_the_mask_and_the_caller_gets_its_own_back():
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with binding.bound(one):
        out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                             capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(sorted(one))
    assert os.sched_getaffinity(0) == before
    with binding.bound(None):
        assert os.sched_getaffinity(0) == before
