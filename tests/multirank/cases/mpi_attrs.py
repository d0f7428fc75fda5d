"""Attributes, error handlers, error classes and Info, as programs and libraries use them.

usage: mpi_attrs.py [fatal]

Sections:
  attrs     a library caches its private duplicate of the user's communicator under a keyval (the
            classic MPI idiom): found again on the next call, copied into a Dup by the copy callback,
            released by the delete callback on Delete_attr, on Free and when overwritten; copy_fn
            True/False/None/NotImplemented; datatype attributes; predefined TAG_UB, APPNUM
  errh      a user error handler sees the real error of a bad call (its code and the communicator),
            and the call returns to the caller; Call_errhandler; handles from Get_errhandler free to
            ERRHANDLER_NULL; ERRORS_RETURN is the default and what every new communicator starts with
  codes     Add_error_class / Add_error_code / Add_error_string, Get_error_class of a code,
            LASTUSEDCODE, MPI.Exception comparing as its code
  info      Info as a mapping; INFO_ENV's facts
With `fatal`: ERRORS_ARE_FATAL set on COMM_WORLD and a bad call on the last rank: the job stops with
an error naming the handler, while the others wait in a barrier (checked by the test through commrun).

Each section runs on every rank; validated against mpi4py 4.1.2 on MPICH 5.0.2 with
COMMLIB_TEST_MPI=mpi4py under mpiexec.
"""
import sys

from _mpicase import MPI, USING_MPI4PY, Checker

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
c = Checker()


def attrs():
    log = []
    key = MPI.Comm.Create_keyval(copy_fn=lambda o, k, v: v.Dup(),
                                 delete_fn=lambda o, k, v: (log.append("delete"), v.Free()))

    def library_call(user):  # a library keeps its own communicator per user communicator
        private = user.Get_attr(key)
        if private is None:
            private = user.Dup()
            user.Set_attr(key, private)
            log.append("made")
        return private.allreduce(1)

    user = comm.Dup()
    c.equal((library_call(user), library_call(user)), (n, n), "attrs: the cached communicator works")
    c.equal(log, ["made"], "attrs: made once, found again on the next call")
    first = user.Get_attr(key)
    dup = user.Dup()
    copied = dup.Get_attr(key)
    c.ok(copied is not None and copied != first and copied.Get_size() == n, "attrs: Dup runs the copy callback")
    dup.Free()
    c.equal((log[-1:], bool(copied)), (["delete"], False), "attrs: Free runs the delete callback (it freed its comm)")
    other = comm.Dup()
    user.Set_attr(key, other)
    c.equal((log.count("delete"), bool(first)), (2, False), "attrs: overwriting deletes the old value")
    user.Delete_attr(key)
    c.equal((log.count("delete"), bool(other), user.Get_attr(key)), (3, False, None),
            "attrs: Delete_attr runs the delete callback")
    user.Free()
    MPI.Comm.Free_keyval(key)

    value = [1, 2]
    keys = {how: MPI.Comm.Create_keyval(copy_fn=how) for how in (True, False, None)}
    keys["skip"] = MPI.Comm.Create_keyval(copy_fn=lambda o, k, v: NotImplemented)
    for k in keys.values():
        comm.Set_attr(k, value)
    d = comm.Dup()
    got = {how: d.Get_attr(k) for how, k in keys.items()}
    c.ok(got[True] is value and got[False] is None and got[None] is None and got["skip"] is None,
         "attrs: copy_fn True shares the value; False, None and NotImplemented copy nothing", repr(got))
    d.Free()
    for k in keys.values():
        comm.Delete_attr(k)
        MPI.Comm.Free_keyval(k)

    tkey = MPI.Datatype.Create_keyval(copy_fn=True)
    t = MPI.DOUBLE.Create_contiguous(3).Commit()
    t.Set_attr(tkey, "a 3-vector")
    t2 = t.Dup()
    c.equal((t.Get_attr(tkey), t2.Get_attr(tkey)), ("a 3-vector",) * 2, "attrs: datatype attributes and Dup")
    for x in (t, t2):
        x.Delete_attr(tkey)
        x.Free()
    MPI.Datatype.Free_keyval(tkey)
    c.ok(comm.Get_attr(MPI.TAG_UB) >= 32767, "attrs: TAG_UB is at least 32767")
    c.raises(MPI.Exception, lambda: comm.Set_attr(MPI.KEYVAL_INVALID, 1), "attrs: KEYVAL_INVALID is refused")


def errh():
    c.equal(comm.Get_errhandler(), MPI.ERRORS_RETURN, "errh: ERRORS_RETURN is the default")
    seen = []
    eh = MPI.Comm.Create_errhandler(lambda cm, code: seen.append((cm, code)))
    user = comm.Dup()
    user.Set_errhandler(eh)
    c.equal(user.Send(b"x", dest=n + 3), None, "errh: a bad call returns to the caller once the handler ran")
    c.equal((len(seen), seen and isinstance(seen[0][0], MPI.Comm), seen and MPI.Get_error_class(seen[0][1])),
            (1, True, MPI.ERR_RANK), "errh: the handler saw the communicator and the error's code")
    h = user.Get_errhandler()
    c.equal(h, eh, "errh: Get_errhandler")
    h.Free()
    c.equal(h, MPI.ERRHANDLER_NULL, "errh: a handle from Get_errhandler frees to ERRHANDLER_NULL")
    user.Call_errhandler(MPI.ERR_OTHER)
    c.equal(seen[-1][1], MPI.ERR_OTHER, "errh: Call_errhandler invokes it")
    d = user.Dup()
    c.equal(d.Get_errhandler(), MPI.ERRORS_RETURN, "errh: a new communicator starts with ERRORS_RETURN")
    d.Free()
    user.Set_errhandler(MPI.ERRORS_RETURN)
    c.raises(MPI.Exception, lambda: user.Send(b"x", dest=n + 3), "errh: back to ERRORS_RETURN")
    c.equal(len(seen), 2, "errh: ... and the handler is no longer called")
    user.Free()
    eh.Free()
    c.equal(eh, MPI.ERRHANDLER_NULL, "errh: Free of a user handler")


def codes():
    before = comm.Get_attr(MPI.LASTUSEDCODE)
    cls = MPI.Add_error_class()
    c.ok(cls > before and comm.Get_attr(MPI.LASTUSEDCODE) == cls, "codes: a new class comes after LASTUSEDCODE",
         f"{before} {cls}")
    code = MPI.Add_error_code(cls)
    MPI.Add_error_string(code, "my library: the widget broke")
    c.equal((MPI.Get_error_class(code), MPI.Get_error_string(code)), (cls, "my library: the widget broke"),
            "codes: a code's class and string")
    exc = MPI.Exception(code)
    c.equal((exc.Get_error_class(), exc == code, str(exc)), (cls, True, "my library: the widget broke"),
            "codes: an MPI.Exception of the code")
    c.ok(MPI.Exception(MPI.ERR_RANK) == MPI.ERR_RANK and MPI.Exception(MPI.ERR_ARG) < MPI.ERR_LASTCODE
         and not MPI.Exception(MPI.SUCCESS), "codes: exceptions compare as their codes")
    for k in range(MPI.ERR_LASTCODE if MPI.ERR_LASTCODE < 100 else 63):
        if not MPI.Get_error_string(k):
            c.ok(False, f"codes: error class {k} has a string")
            break
    MPI.Remove_error_string(code)
    MPI.Remove_error_code(code)
    MPI.Remove_error_class(cls)


def info():
    i = MPI.Info.Create({"cb_nodes": "4"})
    i["striping_unit"] = "1048576"
    c.equal(sorted(i.items()), [("cb_nodes", "4"), ("striping_unit", "1048576")], "info: a mapping")
    c.equal((i.Get("cb_nodes"), i.Get("nope"), len(i), "cb_nodes" in i), ("4", None, 2, True), "info: Get and len")
    d = i.Dup()
    d.Delete("cb_nodes")
    c.equal((i.Get_nkeys(), d.Get_nkeys()), (2, 1), "info: Dup is its own")
    c.raises(MPI.Exception, lambda: d.Delete("cb_nodes"), "info: deleting a missing key")
    d.Free()
    i.Free()
    c.equal(i, MPI.INFO_NULL, "info: Free")
    c.ok(MPI.INFO_ENV and MPI.INFO_ENV.Get("no such key") is None, "info: INFO_ENV")
    if not USING_MPI4PY:  # MPICH's INFO_ENV under mpiexec does not say maxprocs
        c.equal(MPI.INFO_ENV.Get("maxprocs"), str(n), "info: INFO_ENV maxprocs")


if sys.argv[-1] == "fatal":
    comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    comm.Barrier()
    if me == n - 1:
        comm.Send(b"x", dest=n + 7)
    comm.Barrier()
    print(f"rank {me}: not stopped", flush=True)
    sys.exit(0)

for fn in (attrs, errh, codes, info):
    c.run([fn])
    comm.Barrier()
c.finish()
