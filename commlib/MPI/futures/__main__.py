"""python -m commlib.MPI.futures script.py (as `-m mpi4py.futures` through the stand-in): rank 0
runs the script, every other rank serves its MPIPoolExecutor tasks; an uncaught exception in the
script aborts the job as mpi4py.run does."""
import runpy
import sys
import types

from commlib.MPI.futures._pool import _main_served  # absolute: run as mpi4py.futures too


def main(argv=None):
    from commlib.MPI._mpi4py.mpi4py.run import _parse, run_program

    kind, target, args = _parse(sys.argv[1:] if argv is None else argv)

    def script():
        try:
            run_program(kind, target, args)
        except SystemExit:
            raise
        except BaseException:  # noqa: BLE001 - as mpi4py.run: the job ends at once
            from commlib import MPI

            sys.excepthook(*sys.exc_info())
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)
    def as_worker():
        sys.argv[:] = args
        if kind == "module":
            names = runpy.run_module(target, run_name="__worker__", alter_sys=False)
        elif kind == "path":
            names = runpy.run_path(target, run_name="__worker__")
        else:
            names = {"__name__": "__worker__"}
            exec(compile(target, "<string>", "exec"), names)
        module = types.ModuleType("__worker__")
        module.__dict__.update(names)
        sys.modules["__worker__"] = sys.modules["__main__"] = module

    _main_served(script, as_worker)


if __name__ == "__main__":
    main()
