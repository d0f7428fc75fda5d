"""commlib.stats(): what this rank (or every rank of a group) recorded, as rows; and the table
COMMLIB_STATS=1 prints at finalize(). The records are commlib._trace's; gathering them across ranks
is the API's own object all-gather."""
import sys

from .. import _trace
from .._errors import CommError
from . import objects


def stats(all_ranks=False, *, group=None):
    """This rank's communication so far, one dict per call and size class (see _trace.summarize()):
    a pandas-friendly list (`pandas.DataFrame(commlib.stats())`). all_ranks: every rank of `group`
    (default: the world) calls it and gets the whole group's, with the time spent waiting for the
    last arrival and which rank that was. Records only while recording (COMMLIB_STATS=1,
    COMMLIB_TRACE=DIR, commrun --stats or --trace); a CommError otherwise."""
    if not _trace.ENABLED:
        raise CommError("commlib.stats() counts only calls that are recorded: set COMMLIB_STATS=1 (or run "
                        "under commrun --stats / --trace) before the program starts")
    mine = _trace.own_records()
    if not all_ranks:
        return _trace.summarize([mine])
    gather = getattr(objects.all_gather_obj, "__wrapped__", objects.all_gather_obj)  # (not itself recorded)
    return _trace.summarize(list(gather(mine, group=group)))


def report_at_finalize(world):
    """COMMLIB_STATS=1: every rank's records to every rank, rank 0 prints the table (stderr)."""
    try:
        rows = stats(all_ranks=True, group=world)
    except Exception as exc:  # a failed job: its error matters more than the table
        print(f"[commlib] COMMLIB_STATS: no table ({type(exc).__name__}: {exc})", file=sys.stderr)
        return
    if world.rank() == 0:
        print(f"commlib: communication by call and size (COMMLIB_STATS=1):\n{_trace.stats_table(rows)}",
              file=sys.stderr, flush=True)
