"""--trace and --stats across hosts: the ranks of each other host record into a directory there,
which commrun fetches over the remote shell once the job has ended, however it ended.

The directory on the i-th other host is `remote_dir(trace_dir, i)`: inside a directory of the same
name as commrun's own (the first rank there to record makes it). After the job, one remote-shell
call per host runs `python -m commlib._trace --pack DIR` there, which streams the files as a tar
and removes them; commrun unpacks them into `trace_dir/from-<i>`, where the merge reads them
beside the local ranks' files. Where the hosts share a filesystem the ranks' files simply travel
through it the same way.
"""
import os
import subprocess
import sys
import tempfile
import threading

FETCH_TIMEOUT_S = 60.0  # per host: a host that does not answer in this time is named and skipped


def remote_dir(trace_dir, index):
    """Where the ranks on the index-th other host record, on that host."""
    return os.path.join(trace_dir, f"host-{index}")


def fetch(rsh, hosts, trace_dir, say, timeout=FETCH_TIMEOUT_S):
    """Every other host's records copied under trace_dir/from-<i>, the hosts in parallel, each bounded
    by `timeout`; a host that cannot be reached is named (say) and the rest are merged anyway."""
    threads = [threading.Thread(target=_fetch_one, args=(rsh, host, i, trace_dir, say, timeout), daemon=True)
               for i, host in enumerate(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 10)


def _fetch_one(rsh, host, index, trace_dir, say, timeout):
    import tarfile  # (here: every commrun start imported it, for a --trace across hosts)

    from commlib import _trace
    from commlib._hosts import forwarded_env, remote_argv
    env = {k: v for k, v in forwarded_env().items() if k not in ("COMMLIB_TRACE", "COMMLIB_STATS")}
    argv = remote_argv(rsh, host, [sys.executable, "-m", "commlib._trace", "--pack", remote_dir(trace_dir, index)],
                       env, os.getcwd())
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                    start_new_session=True)
        except OSError as e:
            say(f"--trace: cannot fetch the records of {host}: {e}")
            return
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            with proc.stdout:
                _trace.unpack(proc.stdout, os.path.join(trace_dir, f"from-{index}"))
            proc.wait()
        except (tarfile.TarError, OSError) as e:
            proc.kill()
            proc.wait()
            err.seek(0)
            why = err.read().decode(errors="replace").strip().splitlines()
            late = " (it did not answer within {:g} s)".format(timeout) if not timer.is_alive() else ""
            say(f"--trace: the records of the ranks on {host} are missing{late}: "
                f"{why[-1] if why else f'{type(e).__name__}: {e}'}")
        finally:
            timer.cancel()
