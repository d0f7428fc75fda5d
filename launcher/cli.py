"""The click command: options, program passthrough, calls supervise.run()."""
import os
import shutil
import sys
import tempfile

import click

from commlib._hosts import route_address
from commlib._transport.limits import raise_fd_limit
from commlib._transport.seal import enabled as seal_enabled

from . import binding, hostagents, hosts, spawn, supervise, tracefetch

EPILOG = """\b
Examples:
  commrun -n 4 script.py --lr 0.1      python script.py on 4 ranks
  commrun -n 4 -m package.module       python -m package.module
  commrun -n 2 -- ./program args       any executable
  commrun -np 4 python script.py       as with mpirun: the interpreter (or any
                                       executable) given first runs as is
  commrun --hosts a:2,b:2 script.py    2 ranks on each host, over --rsh
  salloc -n 8 commrun script.py        inside a Slurm allocation: its nodes and
                                       task counts, ranks started by srun
"""


class _Command(click.Command):
    def parse_args(self, ctx, args):
        # click drops a `--` that ends commrun's options; remember it: it means "run as is".
        rest = super().parse_args(ctx, list(args))
        n = len(ctx.params.get("program") or ())
        ctx.meta["commrun.direct"] = len(args) > n and args[len(args) - n - 1] == "--"
        return rest


def _ifname_address(ifname, routed, local=False):
    """The coordinator's address on --ifname (a job across hosts): never loopback. `local`: only
    check that the value names an address of this host, for the ranks started here."""
    from commlib._transport.interfaces import choose, describe, interfaces, is_loopback
    from commlib._errors import CommError

    try:
        table = interfaces()
        address = choose(ifname, table, routed)
    except CommError as e:
        raise click.BadParameter(str(e), param_hint="--ifname")
    if is_loopback(address) and not local:
        raise click.BadParameter(f"{ifname} gives the loopback address {address}, which the other hosts cannot "
                                 f"reach; interfaces: {describe(table)}", param_hint="--ifname")
    return address


def _slurm_hosts(ctx, rsh, verbose):
    """Inside a Slurm allocation (salloc, sbatch) and given no hosts: the allocation's nodes and
    task counts, ranks started on them by srun (unless --rsh says otherwise), as mpirun does."""
    try:
        allocation = hosts.slurm_allocation(os.environ)
    except ValueError as e:
        raise click.UsageError(f"inside Slurm job {os.environ.get('SLURM_JOB_ID')}: {e}; "
                               "pass --hosts to choose the hosts yourself")
    if allocation is None:
        return None, rsh
    if ctx.get_parameter_source("rsh") == click.core.ParameterSource.DEFAULT:
        rsh = hosts.SRUN_RSH
    if verbose:
        supervise.say(f"Slurm job {os.environ['SLURM_JOB_ID']}: "
                      f"{', '.join(f'{h}:{n}' for h, n in allocation)}; ranks on other nodes started by "
                      f"`{rsh}`")
    return allocation, rsh


def _runs_as_is(first):
    """An executable given first (`python`, `./a.out`, `hostname`) runs as it is, as under mpirun;
    a Python source file (`x.py`, or any file that is not executable) runs under this Python."""
    if first.startswith("-") or first.endswith(".py"):
        return False
    if os.path.isfile(first):
        return os.access(first, os.X_OK)
    return "/" not in first and shutil.which(first) is not None


def _this_python(program):
    """Under --fork, `PYTHON SCRIPT ARGS...` or `PYTHON -m MODULE ARGS...` where PYTHON is the interpreter
    commrun runs in (the one a forked rank is): (the program without it, whether it is a module); None
    where program[0] is another executable."""
    first = program[0]
    path = first if "/" in first else shutil.which(first)
    if path is None or not os.path.isfile(path) or os.path.realpath(path) != os.path.realpath(sys.executable):
        return None
    rest = tuple(program[1:])
    if rest[:1] == ("-m",) and len(rest) > 1:
        return rest[1:], True
    if rest and not rest[0].startswith("-"):
        return rest, False
    raise click.UsageError(f"--fork runs `{first} SCRIPT` or `{first} -m MODULE` as forks of this Python; "
                           f"interpreter options ({' '.join(rest[:2]) or 'no script'}) need exec'd ranks (no --fork)")


def _check_program(program, module, direct):
    if not program:
        raise click.UsageError("no program given: commrun -n N script.py | -m module | -- executable")
    first = program[0]
    if module:
        return
    if direct:
        found = (os.path.isfile(first) and os.access(first, os.X_OK)) if "/" in first else shutil.which(first)
        if not found:
            raise click.UsageError(f"{first}: no such executable")
    elif not os.path.isfile(first):
        raise click.UsageError(f"{first}: no such script (use -m for a module, or -- for an executable)")


def _print_version(ctx, _param, value):
    """--version: the installed version, read only when asked (see commrun.__getattr__)."""
    if value and not ctx.resilient_parsing:
        from . import __version__
        click.echo(f"commrun, version {__version__}")
        ctx.exit()


@click.command(
    cls=_Command,
    epilog=EPILOG,
    context_settings={"allow_interspersed_args": False, "help_option_names": ["-h", "--help"]},
)
@click.option("-n", "-np", "--np", "nprocs", type=click.IntRange(min=1), metavar="N",
              help="Number of ranks [default: the slots of --hosts/--hostfile or of the Slurm allocation, else 1].")
@click.option("--oversubscribe", "mpirun_habits", flag_value="oversubscribe", multiple=True,
              help="Accepted and ignored (mpirun habit): commrun never limits ranks to cores.")
@click.option("--allow-run-as-root", "mpirun_habits", flag_value="allow-run-as-root", multiple=True,
              help="Accepted and ignored (mpirun habit): commrun runs as any user.")
@click.option("-m", "--module", is_flag=True, help="Run the program as a module (python -m).")
@click.option("--hosts", "host_list", type=hosts.HostsType(), help="Hosts and slots, e.g. a:2,b:2 (ranks placed in order).")
@click.option("--hostfile", type=click.File("r"), help="File of 'host slots=N', 'host:N' or 'host' lines.")
@click.option("--rsh", envvar="COMMLIB_RSH", default=spawn.DEFAULT_RSH, show_default=True, show_envvar=True,
              help="Remote-shell template for ranks on other hosts.")
@click.option("--coordinator-host", metavar="ADDR",
              help="Address the coordinator binds and ranks connect to [default: 127.0.0.1 for local "
                   "jobs, else this machine's address on the route to the first remote host].")
@click.option("--ifname", metavar="IF[,IF...]|CIDR",
              help="Interface(s) or network whose address every rank listens on (sets COMMLIB_IFNAME); "
                   "across hosts the coordinator binds it too [default: the route to the coordinator].")
@click.option("--encrypt", is_flag=True,
              help="Encrypt and integrity-protect every TCP connection of the job (AES-256-GCM, keys from the "
                   "job's secret; sets COMMLIB_ENCRYPT=1): for networks others share. Same-host traffic "
                   "(shared memory, Unix sockets) stays in the kernel, in clear.")
@click.option("-v", "--verbose", is_flag=True,
              help="Each rank prints its address and the transport it uses to every peer (COMMLIB_VERBOSE=1).")
@click.option("--doctor", is_flag=True,
              help="Check the set-up instead of running a program: every pair connects and authenticates; "
                   "addresses, transports, bandwidth and latency per pair.")
@click.option("--pair-timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="With --doctor: how long each pair may take to connect and authenticate [default: 5].")
@click.option("--threads-per-rank", "threads_per_rank", type=click.IntRange(min=1), metavar="N",
              help="Compute threads a rank (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS). Default: "
                   "a host's cores shared among its ranks, where more than one runs there and none of "
                   "these is set.")
@click.option("--bind-to", "bind_to", type=click.Choice(binding.CHOICES), default="auto", show_default=True,
              envvar=binding.BIND_VAR, show_envvar=True,
              help="Bind each rank to a block of its host's cores (the cores split evenly among the host's ranks, "
                   "all their hardware threads), to those blocks' sockets, or to nothing. auto: core on a host of "
                   "more than one socket where the ranks do not outnumber the cores and their compute threads "
                   "fit their blocks, else none.")
@click.option("--report-bindings", "report_bindings", is_flag=True,
              help="Print the CPUs each rank is bound to.")
@click.option("--fork", "fork", is_flag=True,
              help="Start local ranks by forking commrun after it imports NumPy and commlib once, instead of a "
                   "new interpreter each (Python scripts and -m modules, with or without this Python named "
                   "before them; for many ranks on few cores).")
@click.option("--preload", "preload", multiple=True, metavar="MODULE",
              help="With --fork: import MODULE too (torch, say: about 1.5 s of CPU a rank) in commrun before it "
                   "forks the ranks, so each starts with it loaded. Repeatable; refused if the import starts a "
                   "thread (a forked copy of a threaded process may deadlock) or commlib (mpi4py does: MPI_Init "
                   "at import).")
@click.option("--mpi4py", "mpi4py", is_flag=True,
              help="Make 'import mpi4py' load commlib's stand-in (its MPI is commlib.MPI), shadowing any real one.")
@click.option("--tag-output/--no-tag-output", default=True, help="Prefix each output line with [rank].")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop the job after this long, dumping every Python rank's stacks (exit 124).")
@click.option("--grace", type=click.FloatRange(min=0), default=3.0, show_default=True, metavar="SECONDS",
              help="Wait this long after SIGTERM/SIGINT before SIGKILL.")
@click.option("--trace", "trace", type=click.Path(dir_okay=False), metavar="FILE.json",
              help="Record every rank's communication calls and write the job's timeline to FILE.json "
                   "(Chrome / Perfetto trace format: open it at https://ui.perfetto.dev).")
@click.option("--stats", "stats", is_flag=True,
              help="Print a table of every collective and call after the job: calls, bytes, time, busbw, "
                   "time spent waiting for the last rank to arrive and which rank that was.")
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
@click.argument("program", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def main(ctx, nprocs, mpirun_habits, module, host_list, hostfile, rsh, coordinator_host, ifname, encrypt, verbose, doctor,
         pair_timeout, threads_per_rank, bind_to, report_bindings, fork, preload, mpi4py, tag_output, timeout, grace, trace, stats, program):
    """Run PROGRAM as N ranks of a commlib job."""
    raise_fd_limit()  # two pipes and a coordinator connection per rank here, and the ranks inherit it
    direct = ctx.meta.get("commrun.direct", False) and not module
    if not module and not direct and program and _runs_as_is(program[0]):
        direct = True
    if fork and direct and program:  # `commrun --fork -n N python script.py`: this Python, forked
        stripped = _this_python(program)
        if stripped is not None:
            (program, module), direct = stripped, False
    if host_list and hostfile:
        raise click.UsageError("give --hosts or --hostfile, not both")
    if hostfile:
        try:
            host_list = hosts.parse_hostfile(hostfile.read())
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--hostfile")
    if not host_list:
        host_list, rsh = _slurm_hosts(ctx, rsh, verbose)
    host_list = host_list or [("localhost", nprocs or 1)]
    n = nprocs or sum(slots for _, slots in host_list)
    ranks = [
        spawn.Rank(r, host, local_rank, local_size, hosts.is_local(host))
        for r, (host, local_rank, local_size) in enumerate(hosts.place(n, host_list))
    ]
    if doctor:
        if program:
            raise click.UsageError(f"--doctor runs its own check: no program ({program[0]}) is taken")
        program, module, direct = ("commlib.doctor",), True, False
        if pair_timeout is not None:
            program += ("--pair-timeout", repr(pair_timeout))
    elif pair_timeout is not None:
        raise click.UsageError("--pair-timeout is an option of --doctor")
    if any(rank.local for rank in ranks):
        _check_program(program, module, direct)
    elif not program:
        _check_program(program, module, direct)
    remote = [rank.host for rank in ranks if not rank.local]
    if coordinator_host is None:
        coordinator_host = "127.0.0.1"
        if remote:
            try:
                coordinator_host = route_address(remote[0])
            except OSError as e:
                if not ifname:
                    raise click.UsageError(f"cannot tell which address {remote[0]} reaches this machine by ({e}); "
                                           f"pass --ifname or --coordinator-host")
                coordinator_host = None
            if ifname:
                coordinator_host = _ifname_address(ifname, coordinator_host)
    if ifname and len(remote) < len(ranks):
        _ifname_address(ifname, None, local=True)  # this host's ranks would each fail on a bad value: say it once
    argv = spawn.program_argv(program, module, direct)
    extra = {"COMMLIB_RSH": rsh}  # MPI.Spawn starts children on other hosts the way commrun starts ranks
    if ifname:
        extra["COMMLIB_IFNAME"] = ifname
    if encrypt:  # the ranks, and the coordinator here
        extra["COMMLIB_ENCRYPT"] = os.environ["COMMLIB_ENCRYPT"] = "1"
    try:
        seal_enabled()
    except ValueError as e:
        raise click.UsageError(str(e))
    if mpi4py:
        standin = spawn.mpi4py_standin()
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (standin, os.environ.get("PYTHONPATH", "")) if p)
        if fork:
            sys.path.insert(1, standin)  # after the entry a forked rank sets to its program's directory
    if verbose:
        extra["COMMLIB_VERBOSE"] = "1"
        supervise.say(f"coordinator on {coordinator_host}" + (f", ranks on COMMLIB_IFNAME={ifname}" if ifname else ""))
    # Compute threads: each host shares its cores among its ranks (a remote host's agent applies
    # the rule with its own core count), as torchrun and mpirun's binding do.
    per_rank = "auto" if threads_per_rank is None else threads_per_rank
    local_size = next((rank.local_size for rank in ranks if rank.local), 0)
    threads, notice = spawn.thread_vars(local_size, spawn.cpu_count(), os.environ, per_rank)
    if notice:
        supervise.say(notice)
    if remote and (per_rank != "auto" or not spawn.threads_set(os.environ)):  # (they are not forwarded)
        extra[spawn.THREADS_VAR] = str(per_rank)
    _bind(ranks, local_size, bind_to, binding.threads_of({**os.environ, **threads}), report_bindings)
    if remote:
        extra[binding.BIND_VAR] = bind_to
        if report_bindings:
            extra[binding.REPORT_VAR] = "1"

    if preload and not fork:
        raise click.UsageError("--preload imports modules for ranks forked from commrun: it needs --fork")
    if fork:
        if direct:
            raise click.UsageError(f"--fork starts Python programs (a script or -m module, or this Python, "
                                   f"{sys.executable}, running one), not executables ({program[0]})")
        os.environ.update(threads)  # before NumPy loads: forked ranks keep the thread pools it sizes
        try:
            spawn.preload(preload)
        except (ImportError, spawn.PreloadError) as e:
            supervise.say(f"--fork: cannot import what ranks share ({e})")
            ctx.exit(1)

    host_cpus = binding.host_cpus_env()  # what a bound rank's children (MPI.Spawn) may use again

    def setup(ranks, address, secret):
        master = spawn.master_vars(ranks[0], address, os.environ, spans_hosts=bool(remote))  # torch's env:// works
        by_host = {}  # remote host -> [(Rank, its variables)]
        for rank in ranks:
            env = spawn.job_vars(rank.rank, len(ranks), rank.local_rank, rank.local_size, address, secret)
            env.update(master)
            env.update(extra)
            if rank.local:
                rank.argv, rank.env = argv, {**os.environ, **env, **threads}
                if rank.cpus is not None:
                    rank.env.update(host_cpus)
                rank.forked = (module, list(program)) if fork else None
            else:
                env = {**spawn.forwarded_env(), **env}
                if trace_dir is not None:  # that host's own directory of the same name, fetched at the end
                    env["COMMLIB_TRACE"] = tracefetch.remote_dir(trace_dir, host_number[rank.host])
                rank.argv = argv
                by_host.setdefault(rank.host, []).append((rank, env))
        # One remote shell per host: its agent starts the host's ranks. commrun starts up to
        # COMMLIB_AGENT_FANOUT of them; beyond, each of those starts a part of the others (a tree).
        for host, subtree in hostagents.launch_tree(list(by_host), agent_fanout):
            agent = hostagents.HostAgent(host, subtree, by_host, rsh, os.getcwd(), argv, grace=grace)
            for r in agent.procs:
                ranks[r].agent = agent

    remote_hosts = list(dict.fromkeys(remote))
    host_number = {host: i for i, host in enumerate(remote_hosts)}  # (a rank's lookup: no scan of the hosts)
    try:
        agent_fanout = hostagents.fanout()
    except ValueError as e:
        raise click.UsageError(str(e))
    trace_dir = None
    if trace or stats:  # made last: nothing above may leave it behind
        trace_dir = tempfile.mkdtemp(prefix="commlib-trace-")
        extra["COMMLIB_TRACE"] = trace_dir  # setup() reads extra when the ranks are started
        if stats:
            extra["COMMLIB_STATS"] = ""  # the table is commrun's to print, once
    try:
        rc = supervise.run(ranks, setup, coordinator_host=coordinator_host, tag_output=tag_output,
                           timeout=timeout, grace=grace, verbose=verbose)
    finally:
        if trace_dir is not None:
            if remote_hosts:
                tracefetch.fetch(rsh, remote_hosts, trace_dir, say=supervise.say)
            _report(trace_dir, trace, stats)
    ctx.exit(rc)


def _bind(ranks, local_size, bind_to, threads, report):
    """Each local rank's CPUs (binding.plan), said per rank where `report`."""
    if not local_size:
        return
    blocks, why = binding.plan(local_size, bind_to, threads)
    every = binding.allowed_cpus() if report else ()
    for rank in ranks:
        if rank.local:
            rank.cpus = blocks[rank.local_rank]
            if report:
                supervise.say(binding.report(rank.rank, rank.cpus, why, every))


def _report(trace_dir, path, stats):
    """The ranks' records (whatever each wrote before the job ended, however it ended): merged into
    the trace at `path`, and/or the --stats table on stderr."""
    from commlib import _trace
    try:
        try:
            traces = _trace.read(trace_dir)  # once, for both
        except OSError as e:
            supervise.say(f"--{'trace' if path else 'stats'}: could not read the ranks' records: {e}")
            return
        if path:
            try:
                procs, records = _trace.merge(trace_dir, path, traces)
                supervise.say(f"trace of {procs} rank(s), {records} calls: {path} "
                              "(open it at https://ui.perfetto.dev)")
            except (OSError, ValueError) as e:
                supervise.say(f"--trace: could not write {path}: {e}")
        if stats:
            try:
                table = _trace.stats_table(_trace.summarize(traces))
                print(f"commrun: communication by call and size (--stats):\n{table}", file=sys.stderr, flush=True)
            except (OSError, ValueError) as e:
                supervise.say(f"--stats: could not read the ranks' records: {e}")
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
