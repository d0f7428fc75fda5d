"""One-sided communication (MPI.Win) and mpi4py.util.sync as programs use them, checked on every rank.

usage: mpi_rma.py SEED [die]

Sections:
  counter   a work-sharing counter: Fetch_and_op under Lock/Unlock on rank 0 hands out every task
            index exactly once
  halo      a halo exchange with Put under Fence, then the same halos read back with Get
  pscw      Get and Accumulate between Start/Complete and Post/Wait (each rank exposes its window
            to its left neighbour and accesses its right one)
  passive   passive target while the target sleeps in time.sleep: the others' Lock/Accumulate/Get/
            Unlock complete meanwhile, then a second epoch puts a flag the target waits for, reading
            its own memory between sleeps (the check is commlib's own: MPICH progresses only where
            its transport allows, so there the target makes MPI calls while it waits)
  exclusive read-modify-write under exclusive locks on rank 0 by every rank (rank 0's own
            epochs included): Get, Flush, Put of the value plus one, Unlock; and epochs of a
            Get alone (whose release is not acknowledged) between them: no increment is lost,
            however the lock requests queue up at the target
  blocked   passive target while the target waits in a blocking Recv for a token each other rank
            sends only after its Lock/Accumulate/Get/Unlock epoch on it: the epochs complete
            meanwhile (the waiting thread serves them); and, commlib's own check, three windows
            cost no thread of their own
  serving   (commlib's own check) a target waiting in Win.Wait serves its origins' requests on
            its own thread, while they come (no hand-off to the progress thread)
  computing (commlib's own check) a target busy elsewhere (no MPI call) is served by its progress
            thread, which never defers to itself
  shared    Allocate_shared + Shared_query: each rank reads its neighbour's part directly; nothing
            is left in /dev/shm (commlib's own check)
  sync      util.sync: Counter, Mutex (a read-modify-write under it loses no update), Sequential
  errors    Unlock without Lock, a bad lock type, Sync outside a passive epoch, and (commlib's own
            check) a Put outside the target's window: MPI.Exception
The last window made is never freed: the job must still exit at once with 0.

With `die` (commlib only), the last rank leaves during the job while the others wait in Fence on
a window: they get PeerLost (an MPI.Exception) instead of a hang.

Validated against mpi4py 4.1.2 on MPICH (COMMLIB_TEST_MPI=mpi4py under mpiexec).
"""
import glob
import os
import sys
import threading
import time

import numpy as np

import _batch
from _mpicase import MPI, USING_MPI4PY, Checker

if USING_MPI4PY:
    from mpi4py.util import sync
else:
    from commlib.MPI.util import sync

comm = MPI.COMM_WORLD
me, n = comm.Get_rank(), comm.Get_size()
right, left = (me + 1) % n, (me - 1) % n
c = Checker()
NTASKS = 23
PASSIVE_WAIT_S = 10.0 * _batch.SCALE  # how long the passive target computes at most, waiting for the others


def counter():
    win = MPI.Win.Allocate(8 if me == 0 else 0, 8, comm=comm)
    if me == 0:
        np.frombuffer(win.tomemory(), np.int64)[:] = 0
    comm.Barrier()
    mine, one, got = [], np.ones(1, np.int64), np.empty(1, np.int64)
    while True:
        win.Lock(0)
        win.Fetch_and_op(one, got, 0)
        win.Unlock(0)
        if got[0] >= NTASKS:
            break
        mine.append(int(got[0]))
    everyone = sorted(sum(comm.allgather(mine), []))
    c.equal(everyone, list(range(NTASKS)), "counter: every task index handed out exactly once")
    win.Fence()
    if me == 0:
        c.equal(int(np.frombuffer(win.tomemory(), np.int64)[0]), NTASKS + n, "counter: the final count")
    win.Free()


def halo():
    local = np.full(6, -1.0)  # [left halo, 4 interior points, right halo]
    local[1:5] = 10 * me + np.arange(4)
    win = MPI.Win.Create(local, local.itemsize, comm=comm)
    win.Fence()
    win.Put(local[1:2], left, 5)  # my first point is my left neighbour's right halo
    win.Put(local[4:5], right, 0)
    win.Fence()
    c.equal(local[0], 10.0 * left + 3, "halo: left halo from Put")
    c.equal(local[5], 10.0 * right, "halo: right halo from Put")
    back = np.empty(4)
    win.Get(back, right, 1)
    win.Fence()
    c.equal(back, 10.0 * right + np.arange(4), "halo: Get of the right neighbour's interior")
    c.equal(win.Get_attr(MPI.WIN_SIZE), local.nbytes, "halo: WIN_SIZE")
    c.equal(win.Get_attr(MPI.WIN_DISP_UNIT), local.itemsize, "halo: WIN_DISP_UNIT")
    c.equal(win.Get_attr(MPI.WIN_CREATE_FLAVOR), MPI.WIN_FLAVOR_CREATE, "halo: the flavor")
    win.Free()
    c.ok(not win and win == MPI.WIN_NULL, "halo: a freed window is MPI.WIN_NULL")


def pscw():
    data = np.arange(8, dtype=np.int32) + 100 * me
    win = MPI.Win.Create(data, data.itemsize, comm=comm)
    group = win.Get_group()
    exposed_to, access = group.Incl([left]), group.Incl([right])
    got = np.empty(8, np.int32)
    win.Post(exposed_to)
    win.Start(access)
    win.Get(got, right)
    win.Accumulate(np.full(2, me + 1, np.int32), right, (6, 2, MPI.INT), MPI.SUM)
    win.Complete()
    win.Wait()
    c.equal(got, np.arange(8, dtype=np.int32) + 100 * right, "pscw: Get of the right neighbour's window")
    want = np.arange(8, dtype=np.int32) + 100 * me
    want[6:] += left + 1
    c.equal(data, want, "pscw: Accumulate from the left neighbour")
    win.Free()


def passive():
    buf = np.zeros(2 * n, np.float64)  # [rank r's value] * n, then [1.0 once rank r's epoch has ended] * n
    win = MPI.Win.Create(buf, buf.itemsize, comm=comm)
    comm.Barrier()
    if me == 0:
        # computing (time.sleep, no MPI call) until every other rank's flag is in this memory: each
        # puts it in an epoch it opens only once its first one has ended, so those ended meanwhile
        deadline = time.monotonic() + PASSIVE_WAIT_S
        while not np.all(buf[n + 1:] == 1.0) and time.monotonic() < deadline:
            if USING_MPI4PY:
                comm.Iprobe(MPI.ANY_SOURCE, 999)  # MPICH progresses a passive target only in MPI calls
            time.sleep(0.001)
        if not USING_MPI4PY:
            c.ok(bool(np.all(buf[n + 1:] == 1.0)), "passive: the epochs complete while the target sleeps",
                 f"after {PASSIVE_WAIT_S:.0f} s the flags of ranks 1 to {n - 1} were {buf[n + 1:].tolist()}")
        win.Lock(0)  # then read what they left (the lock waits for any epoch still open)
        seen = buf[:n].copy()
        win.Unlock(0)
    else:
        win.Lock(0, MPI.LOCK_SHARED)
        win.Accumulate(np.array([float(me)]), 0, (me, 1, MPI.DOUBLE), MPI.REPLACE)
        win.Flush(0)
        back = np.empty(1)
        win.Get(back, 0, (me, 1, MPI.DOUBLE))
        win.Unlock(0)
        c.equal(back[0], float(me), "passive: Get sees the rank's own Accumulate")
        win.Lock(0, MPI.LOCK_SHARED)
        win.Put(np.ones(1), 0, (n + me, 1, MPI.DOUBLE))
        win.Unlock(0)
    comm.Barrier()
    if me == 0:
        c.equal(seen, np.arange(n, dtype=np.float64), "passive: every rank's value arrived")
    win.Free()


def exclusive():
    k = 40
    mem = np.zeros(1, "i8")
    win = MPI.Win.Create(mem, comm=comm)
    got, peek = np.zeros(1, "i8"), np.zeros(1, "i8")
    comm.Barrier()
    for i in range(k):
        win.Lock(0, MPI.LOCK_EXCLUSIVE)
        win.Get(got, 0)
        win.Flush(0)
        got += 1
        win.Put(got, 0)
        win.Unlock(0)
        if i % 4 == 0:  # an epoch with a reply only: its release goes unacknowledged
            win.Lock(0, MPI.LOCK_SHARED)
            win.Get(peek, 0)
            win.Unlock(0)
            c.ok(0 < peek[0] <= n * k, "exclusive: a shared epoch reads a count in range", str(peek[0]))
    comm.Barrier()
    win.Lock(0, MPI.LOCK_SHARED)
    win.Get(got, 0)
    win.Unlock(0)
    c.equal(int(got[0]), n * k, "exclusive: every rank's increments under exclusive locks, none lost")
    comm.Barrier()
    win.Free()


def blocked():
    mem = np.zeros(n, "i8")
    wins = [MPI.Win.Create(mem if i == 0 else np.zeros(2, "i8"), mem.itemsize, comm=comm) for i in range(3)]
    win = wins[0]
    if not USING_MPI4PY:
        own = [t.name for t in threading.enumerate() if t.name.startswith("commlib-rma")
               and not t.name.startswith("commlib-rma-connect")]
        c.equal(own, [], "blocked: windows cost no thread of their own")
    comm.Barrier()
    if me == 0:
        token = np.zeros(1, "i8")
        for _ in range(n - 1):  # the others' epochs on this rank end before their tokens leave
            comm.Recv(token, MPI.ANY_SOURCE, 77)
        win.Lock(0, MPI.LOCK_SHARED)
        seen = mem.copy()
        win.Unlock(0)
        c.equal(seen[1:], np.arange(1, n, dtype="i8") * 10, "blocked: every epoch reached the waiting target")
    else:
        back = np.zeros(1, "i8")
        for _ in range(10):
            win.Lock(0, MPI.LOCK_EXCLUSIVE)
            win.Accumulate(np.array([me], "i8"), 0, (me, 1, MPI.INT64_T), MPI.SUM)
            win.Get(back, 0, (me, 1, MPI.INT64_T))
            win.Unlock(0)
        c.equal(int(back[0]), 10 * me, "blocked: Get after Accumulate in one epoch")
        comm.Send(np.array([me], "i8"), 0, 77)
    comm.Barrier()
    for w in wins:
        w.Free()


def serving():
    if USING_MPI4PY or n == 1:  # (which thread serves is commlib's own check)
        return
    import commlib
    from commlib.MPI import _winserve
    engine, by_thread = commlib.init().engine, []
    mem = np.zeros(20 * n, "i8")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    group = win.Get_group()
    if me == 0:
        serve = _winserve.Target._serve

        def counted(self, *args):
            by_thread.append(threading.current_thread() is engine._thread)
            return serve(self, *args)
        _winserve.Target._serve = counted
        try:
            win.Post(group.Excl([0]))
            comm.Barrier()
            win.Wait()
        finally:
            _winserve.Target._serve = serve
        want = np.arange(20 * n) % 20 + np.arange(20 * n) // 20 * 100
        want[:20] = 0
        c.equal(mem, want, "serving: every Put reached the waiting target")
        c.ok(len(by_thread) >= 20 * (n - 1) and not any(by_thread),
             "serving: the waiting target served every request itself",
             f"{sum(by_thread)} of {len(by_thread)} requests served by the progress thread")
    else:
        comm.Barrier()
        time.sleep(0.2)  # an origin that comes late: rank 0 waits in Win.Wait by now (what is checked: who serves)
        win.Start(group.Incl([0]))
        for k in range(20):
            win.Put(np.array([100 * me + k], "i8"), 0, (20 * me + k, 1, MPI.INT64_T))
        win.Complete()
    comm.Barrier()
    win.Free()


def computing():
    """A target that computes (no MPI call) is served by its progress thread, and the thread never
    defers to itself: the service posts its next receive (and sends its replies) on that thread,
    which once counted as a caller at work, and each request then cost the origin the thread's
    deferral (1 ms; 50 epochs 0.1 -> 0.6 ms each)."""
    if USING_MPI4PY or n == 1:
        return
    import commlib
    engine = commlib.init().engine
    mem = np.zeros(4, "i8")
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    if me == 1:
        at_work, seen = engine._caller_at_work, []

        def watched():  # (an instance attribute: what the engine calls)
            before = engine._drove_at
            at_work()
            if threading.current_thread() is engine._thread:
                seen.append(engine._drove_at != before)
        engine._caller_at_work = watched
        try:
            comm.Barrier()
            end = time.monotonic() + 10
            while mem[0] < 50 * (n - 1) and time.monotonic() < end:  # busy elsewhere: no MPI call
                time.sleep(0.0005)
        finally:
            del engine._caller_at_work
        c.ok(mem[0] == 50 * (n - 1), "computing: every origin's 50 epochs served", repr(mem))
        c.ok(seen and not any(seen), "computing: the progress thread served and never deferred to itself",
             f"{sum(seen)} of {len(seen)} of its own posts and sends put it off" if seen else "it served nothing")
    else:
        comm.Barrier()
        one, got = np.ones(1, "i8"), np.empty(1, "i8")
        for _ in range(50):
            win.Lock(1)
            win.Get_accumulate(one, got, 1, op=MPI.SUM)
            win.Unlock(1)
    comm.Barrier()
    win.Free()


def shared():
    _shared("shared")
    if not USING_MPI4PY and hasattr(os, "memfd_create"):  # commlib's fallback where /proc cannot open a memfd
        from commlib.MPI import _win
        memfd, _win._map_memfd = _win._map_memfd, lambda g, total: None
        try:
            _shared("shared (a named segment)")
        finally:
            _win._map_memfd = memfd


def _shared(what):
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    r, size = node.Get_rank(), node.Get_size()
    pids = node.allgather(os.getpid())
    win = MPI.Win.Allocate_shared(16 + 8 * r, 8, comm=node)
    mine = np.frombuffer(win.tomemory(), np.int64)
    mine[:] = r
    win.Lock_all()
    win.Sync()  # stores to the window become visible to the other ranks (a passive epoch is needed)
    win.Unlock_all()
    node.Barrier()
    nb = (r + 1) % size
    mem, unit = win.Shared_query(nb)
    theirs = np.frombuffer(mem, np.int64)
    c.equal(unit, 8, f"{what}: the neighbour's disp_unit")
    c.equal(theirs, np.full(2 + nb, nb, np.int64), f"{what}: the neighbour's part, read directly")
    c.equal(win.Get_attr(MPI.WIN_CREATE_FLAVOR), MPI.WIN_FLAVOR_SHARED, f"{what}: the flavor")
    if not USING_MPI4PY and what == "shared" and size > 1 and hasattr(os, "memfd_create"):
        with open("/proc/self/maps") as maps:
            c.ok(any("memfd:commlib-win" in line for line in maps), f"{what}: the window is a memfd (never named)")
    node.Barrier()
    theirs[0] = -r  # written directly into the neighbour's memory
    node.Barrier()
    c.equal(int(mine[0]), -((r - 1) % size), f"{what}: a direct store by the previous rank")
    del mine, theirs, mem
    win.Free()
    node.Free()
    if not USING_MPI4PY:  # this job's names only: other jobs may be making theirs meanwhile
        left = [p for p in glob.glob("/dev/shm/commlib-win-*") if int(p.split("-")[2]) in pids]
        c.equal(left, [], f"{what}: nothing left in /dev/shm")


def sync_tools():
    counter = sync.Counter(comm=comm)
    values = comm.allgather(next(counter))
    c.equal(sorted(values), list(range(n)), "sync: Counter values are distinct")
    counter.free()
    total = MPI.Win.Allocate(8 if me == 0 else 0, 8, comm=comm)
    if me == 0:
        np.frombuffer(total.tomemory(), np.int64)[:] = 0
    comm.Barrier()
    mutex = sync.Mutex(comm=comm)
    x = np.empty(1, np.int64)
    for _ in range(5):
        with mutex:  # a non-atomic read-modify-write: only mutual exclusion makes it right
            total.Lock(0, MPI.LOCK_SHARED)
            total.Get(x, 0)
            total.Unlock(0)
            x += 1
            total.Lock(0, MPI.LOCK_SHARED)
            total.Put(x, 0)
            total.Unlock(0)
    mutex.free()
    comm.Barrier()
    if me == 0:
        c.equal(int(np.frombuffer(total.tomemory(), np.int64)[0]), 5 * n, "sync: no update lost under Mutex")
    total.Free()
    counter = sync.Counter(comm=comm)
    with sync.Sequential(comm):
        turn = next(counter)
    counter.free()
    c.equal(turn, me, "sync: Sequential runs the ranks in order")


def errors():
    mem = np.zeros(4, np.int32)
    win = MPI.Win.Create(mem, mem.itemsize, comm=comm)
    win.Fence()
    if not USING_MPI4PY:  # MPICH does not check the target's range
        c.raises(MPI.Exception, lambda: win.Put(np.ones(2, np.int32), right, 3), "errors: Put outside the window")
    win.Fence()
    c.raises(MPI.Exception, lambda: win.Unlock(right), "errors: Unlock without Lock")
    c.raises(MPI.Exception, lambda: win.Lock(right, 12345), "errors: a bad lock type")
    c.raises(MPI.Exception, win.Sync, "errors: Sync outside a passive epoch")
    win.Free()


def die():
    win = MPI.Win.Allocate(8, comm=comm)
    comm.Barrier()
    if me == n - 1:
        os._exit(3)
    t0 = time.perf_counter()
    try:
        win.Fence()
        win.Fence()
        print(f"NOERROR rank {me}", flush=True)
    except MPI.Exception as e:
        print(f"PEERLOST rank {me} after {time.perf_counter() - t0:.1f} s: {type(e).__name__}: {e}", flush=True)
    sys.stdout.flush()
    os._exit(0)


if "die" in sys.argv[2:]:
    die()
for fn in (counter, halo, pscw, passive, exclusive, blocked, serving, computing, shared, sync_tools, errors):
    c.run([fn])
    comm.Barrier()
forgotten = MPI.Win.Allocate(64, comm=comm)  # never freed: the exit must not wait for it
c.finish()
