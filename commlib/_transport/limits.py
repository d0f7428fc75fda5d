"""The process limits a rank runs into, in words that name them (and raising the one we may)."""
import errno
import os
import resource

OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)


def raise_fd_limit():
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (as NCCL and Open MPI do): a rank
    holds a socket per peer and group, and the common soft default of 1,024 is reached near 500
    peers. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return want
        except (ValueError, OSError):  # refused (e.g. above fs.nr_open): the soft limit stands
            return soft
    return soft


def fd_limit_text(err):
    """Which descriptor limit a process hit (EMFILE: its RLIMIT_NOFILE; ENFILE: the system's)."""
    if err == errno.ENFILE:
        return "the system is out of file descriptors (ENFILE; see /proc/sys/fs/file-max)"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = f"{len(os.listdir('/proc/self/fd'))} open, "
    except OSError:  # no /proc: the count is only a hint
        used = ""
    return (f"out of file descriptors (EMFILE: {used}limit {soft}, RLIMIT_NOFILE; raise it with `ulimit -n`, "
            f"hard limit {'unlimited' if hard == resource.RLIM_INFINITY else hard})")


def limit_words(which):
    """A limit's soft value as words ('unlimited' or the number)."""
    soft = resource.getrlimit(which)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


def thread_limit_text():
    """Why a thread could not start: memory for its stack, or the process count."""
    return (f"out of memory (RLIMIT_AS {limit_words(resource.RLIMIT_AS)}) or of processes "
            f"(RLIMIT_NPROC {limit_words(resource.RLIMIT_NPROC)})")
