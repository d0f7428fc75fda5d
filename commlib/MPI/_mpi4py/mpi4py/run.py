"""`python -m mpi4py`: run a Python program so that an uncaught exception aborts the whole job.

As mpi4py's: the program runs as __main__ (a file, `-m module`, `-c command` or `-` for standard
input); if it raises, the traceback is printed and MPI.COMM_WORLD.Abort(1) ends every rank at once,
instead of the others waiting for a rank that is gone. `--rc key=value` sets mpi4py.rc.
"""
import runpy
import sys

USAGE = "usage: python -m mpi4py [--rc key=value ...] <pyfile | -m module | -c command | -> [arg ...]"


def _rc(arg):
    from . import rc

    key, _, value = arg.partition("=")
    if not key or not _:
        raise SystemExit(f"mpi4py: --rc takes key=value, got {arg!r}\n{USAGE}")
    text = value.strip()
    parsed = {"true": True, "false": False, "none": None}.get(text.lower(), text)
    if isinstance(parsed, str) and parsed.isdigit():
        parsed = int(parsed)
    try:
        rc(**{key.strip(): parsed})
    except TypeError as exc:
        raise SystemExit(f"mpi4py: {exc}") from None


def _parse(argv):
    args = list(argv)
    while args and args[0] == "--rc":
        if len(args) < 2:
            raise SystemExit(USAGE)
        _rc(args[1])
        del args[:2]
    if not args:
        raise SystemExit(USAGE)
    if args[0] == "-m":
        if len(args) < 2:
            raise SystemExit(USAGE)
        return "module", args[1], args[1:]
    if args[0] == "-c":
        if len(args) < 2:
            raise SystemExit(USAGE)
        return "command", args[1], ["-c"] + args[2:]
    if args[0] == "-":
        return "command", sys.stdin.read(), args
    if args[0].startswith("-"):
        raise SystemExit(f"mpi4py: unknown option {args[0]!r}\n{USAGE}")
    return "path", args[0], args


def run_program(kind, target, argv):
    sys.argv[:] = argv
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif kind == "path":
        runpy.run_path(target, run_name="__main__")
    else:
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})


def main(argv=None):
    kind, target, args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        run_program(kind, target, args)
    except SystemExit:  # an exit is the program's own choice: the launcher reports its code
        raise
    except BaseException:  # noqa: BLE001 - every uncaught exception (KeyboardInterrupt too) ends the job
        from commlib import MPI

        sys.excepthook(*sys.exc_info())
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
