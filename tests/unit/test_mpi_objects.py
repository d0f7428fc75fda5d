"""commlib.MPI's handle objects as mpi4py's behave, in one process: equality, hashing, weak references,
pickling, the safe free(), Status as Fortran's array, error classes, error handler handles, Info."""
import pickle
import weakref

import pytest

from commlib import MPI

NULLS = [MPI.DATATYPE_NULL, MPI.REQUEST_NULL, MPI.INFO_NULL, MPI.ERRHANDLER_NULL, MPI.SESSION_NULL, MPI.GROUP_NULL,
         MPI.WIN_NULL, MPI.OP_NULL, MPI.FILE_NULL, MPI.MESSAGE_NULL, MPI.COMM_NULL]


@pytest.mark.parametrize("obj", NULLS + [MPI.Status()], ids=lambda o: type(o).__name__)
def test_null_handles_behave_as_mpi4py(obj):
    with pytest.raises(TypeError):
        hash(obj)  # unhashable: equal handles can be freed apart
    assert weakref.ref(obj)() is obj
    cls = type(obj)
    if cls is not MPI.Status:
        assert not obj and cls() == obj and cls(obj) == obj
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(obj, protocol)) is obj  # the constant itself
        copy = pickle.loads(pickle.dumps(cls(obj)))
        assert copy is not obj and type(copy) is cls and copy == obj
        obj.free()  # safe on a null object
        assert not obj
    for other in NULLS:
        if type(other) is not cls and not isinstance(obj, type(other)):
            assert obj != other and not obj == other
            with pytest.raises(TypeError):
                cls(other)


def test_free_leaves_constants_and_frees_what_was_made():
    for const in (MPI.INT, MPI.SUM, MPI.COMM_WORLD, MPI.INFO_ENV, MPI.GROUP_EMPTY, MPI.ERRORS_RETURN):
        const.free()
        assert const
        if not isinstance(const, MPI.Errhandler):
            copy = type(const)(const)
            copy.free()  # a copy of a constant: only the handle is emptied
            assert not copy and const
    made = [MPI.COMM_SELF.Dup(), MPI.INT.Dup(), MPI.Op.Create(lambda a, b, t: None), MPI.Info.Create(),
            MPI.COMM_SELF.Get_errhandler(), MPI.COMM_SELF.Get_group()]
    for obj in made:
        assert obj
        obj.free()
        assert not obj
        obj.free()


def test_status_pickles_and_converts_to_fortran():
    st = MPI.Status()
    st.source, st.tag, st.error = 3, 7, MPI.ERR_OTHER
    st.Set_elements(MPI.BYTE, 5)
    back = pickle.loads(pickle.dumps(st))
    assert back == st and back is not st
    f = st.py2f()
    assert len(f) == MPI.F_STATUS_SIZE and (f[MPI.F_SOURCE], f[MPI.F_TAG], f[MPI.F_ERROR]) == (3, 7, MPI.ERR_OTHER)
    assert MPI.Status.f2py(f) == st
    assert MPI._sizeof(st) == MPI._sizeof(MPI.Status) and MPI._sizeof(MPI.COMM_WORLD) == MPI._sizeof(MPI.Comm)
    with pytest.raises(TypeError):
        MPI._sizeof(None)


def test_error_classes_and_exceptions():
    names = [n for n in dir(MPI) if n.startswith("ERR_") and n != "ERR_LASTCODE"]
    assert len(names) >= 62
    for name in names:
        code = getattr(MPI, name)
        exc = MPI.Exception(code)
        assert exc == code and int(exc) == code and hash(exc) == hash(code) and repr(exc) == f"MPI.Exception({code})"
        assert MPI.Get_error_class(code) == code and str(exc) == MPI.Get_error_string(code) != ""
        assert MPI.Exception(MPI.SUCCESS) < exc <= MPI.ERR_LASTCODE
    assert MPI.Exception(-5) == MPI.ERR_UNKNOWN and not MPI.Exception(MPI.SUCCESS)
    cls = MPI.Add_error_class()
    assert cls > MPI.ERR_LASTCODE and MPI.COMM_WORLD.Get_attr(MPI.LASTUSEDCODE) == cls
    code = MPI.Add_error_code(cls)
    MPI.Add_error_string(code, "widget broke")
    assert (MPI.Get_error_class(code), MPI.Get_error_string(code), MPI.Get_error_string(cls)) == (cls, "widget broke", "")
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_class(cls)  # it still has a code
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_code(code)  # the code still has a string
    MPI.Remove_error_string(code)
    MPI.Remove_error_code(code)
    MPI.Remove_error_class(cls)
    with pytest.raises(MPI.Exception):
        MPI.Remove_error_class(cls)
    with pytest.raises(MPI.Exception):
        MPI.Add_error_string(MPI.ERR_ARG, "predefined strings are not the program's")


def test_errhandler_handles():
    assert not MPI.ERRHANDLER_NULL and MPI.ERRORS_RETURN and MPI.ERRORS_ARE_FATAL and MPI.ERRORS_ABORT
    for eh in (MPI.ERRORS_RETURN, MPI.ERRORS_ARE_FATAL, MPI.ERRORS_ABORT):
        assert pickle.loads(pickle.dumps(eh)) is eh
        copy = pickle.loads(pickle.dumps(MPI.Errhandler(eh)))
        assert copy == eh and copy is not eh
    comm = MPI.COMM_SELF.Dup()
    got = comm.Get_errhandler()
    assert got == MPI.ERRORS_RETURN and got is not MPI.ERRORS_RETURN
    got.Free()
    assert got == MPI.ERRHANDLER_NULL and MPI.ERRORS_RETURN  # freeing a handle leaves the predefined one
    calls = []
    eh = MPI.Comm.Create_errhandler(lambda c, code: calls.append(code))
    with pytest.raises(ValueError):
        pickle.dumps(eh)
    comm.Set_errhandler(eh)
    assert comm.Recv(bytearray(1), source=5) is None  # the handler took the error
    assert [MPI.Get_error_class(c) for c in calls] == [MPI.ERR_RANK]
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    with pytest.raises(MPI.Exception):
        comm.Recv(bytearray(1), source=5)
    with pytest.raises(MPI.Exception):
        comm.Set_errhandler(MPI.ERRHANDLER_NULL)
    comm.Free()
    eh.Free()


def test_attribute_callbacks_and_errors(capfd):
    deleted = []
    k = MPI.Comm.Create_keyval(copy_fn=lambda o, key, v: v + ["copied"], delete_fn=lambda o, key, v: deleted.append(v))
    comm = MPI.COMM_SELF.Dup()
    comm.Set_attr(k, ["a"])
    dup = comm.Dup()
    assert dup.Get_attr(k) == ["a", "copied"]
    dup.Free()
    comm.Set_attr(k, ["b"])  # overwriting deletes the old value
    assert deleted == [["a", "copied"], ["a"]]
    comm.Free()
    assert deleted[-1] == ["b"]
    MPI.Comm.Free_keyval(k)
    bad = MPI.Comm.Create_keyval(delete_fn=lambda o, key, v: 1 / 0)
    comm = MPI.COMM_SELF.Dup()
    comm.Set_attr(bad, 1)
    with pytest.raises(MPI.Exception) as info:
        comm.Delete_attr(bad)
    assert info.value.Get_error_class() == MPI.ERR_OTHER and "ZeroDivisionError" in capfd.readouterr().err
    assert comm.Get_attr(bad) is None
    comm.Free()
    with pytest.raises(MPI.Exception):
        MPI.COMM_SELF.Set_attr(bad + 12345, 1)  # not a keyval
    with pytest.raises(MPI.Exception):
        MPI.INT.Set_attr(MPI.Comm.Create_keyval(), 1)  # a Comm keyval on a Datatype
    with pytest.raises(TypeError):
        MPI.Comm.Create_keyval(copy_fn=42)


def test_info_mapping_and_pickle():
    info = MPI.Info.Create([("a", "1")])
    info.update(b="2")
    assert info.items() == [("a", "1"), ("b", "2")] and info.Get("a") == "1" and info.Get("zz") is None
    back = pickle.loads(pickle.dumps(info))
    assert back.items() == info.items() and back != info
    with pytest.raises(MPI.Exception) as e:
        info.Delete("zz")
    assert e.value.Get_error_class() == MPI.ERR_INFO_NOKEY
    with pytest.raises(MPI.Exception):
        info.Get_nthkey(5)
    with pytest.raises(TypeError):
        info.Set("c", 3)
    assert info.popitem() == ("b", "2") and len(info) == 1
    info.Free()
    assert not info and len(MPI.INFO_NULL) == 0 and MPI.INFO_NULL.get("a") is None
    with pytest.raises(KeyError):
        MPI.INFO_NULL["a"] = "1"
    assert MPI.INFO_ENV.Get("maxprocs") == "1" and MPI.INFO_ENV.Get("thread_level") == "MPI_THREAD_MULTIPLE"


def test_generalized_request_is_completed_by_the_program(capfd):
    calls = []

    def query(status, tag):
        status.Set_source(2)
        status.Set_tag(tag)
        calls.append("query")

    greq = MPI.Grequest.Start(query, lambda tag: calls.append("free"), lambda done, tag: calls.append(("cancel", done)),
                              args=(9,))
    assert MPI.Request(greq) == greq and type(MPI.Grequest(greq)) is MPI.Grequest
    with pytest.raises(TypeError):
        MPI.Prequest(greq)
    assert not greq.Test() and calls == []
    greq.Cancel()
    import threading
    threading.Timer(0.05, greq.Complete).start()  # completed from another thread, as a library's worker would
    st = MPI.Status()
    greq.Wait(st)
    assert (st.Get_source(), st.Get_tag(), calls) == (2, 9, [("cancel", False), "query", "free"]) and not greq
    obj = MPI.Grequest.Start()
    obj.complete({"answer": 42})
    assert obj.test() == (True, {"answer": 42})
    bad = MPI.Grequest.Start(lambda status: 1 / 0)
    bad.Complete()
    with pytest.raises(MPI.Exception) as info:
        bad.Wait()
    assert info.value.Get_error_class() == MPI.ERR_OTHER and "ZeroDivisionError" in capfd.readouterr().err


class MyComm(MPI.Intracomm):
    """A program's subclass (module level, so pickle finds it)."""


def test_status_memory_and_subclass_pickles():
    st = MPI.Status()
    st.source, st.tag, st.error = 11, 22, 33
    mem = st.tomemory()
    mem[list(mem).index(22)] = 222  # the memory is the status's own fields
    assert (st.source, st.tag, st.error) == (11, 222, 33)

    copy = pickle.loads(pickle.dumps(MyComm(MPI.COMM_WORLD)))
    assert type(copy) is MyComm and copy == MPI.COMM_WORLD
    info = MPI.Get_abi_info()
    assert info.Get("mpi_aint_size") == str(MPI.AINT.Get_size()) and MPI.Get_abi_fortran_info() == MPI.INFO_NULL
