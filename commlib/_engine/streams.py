"""One ordered stream of collectives per group.

MPI requires every rank to call a group's collectives in the same order, and
so does every algorithm here: collective k+1 of a group may only start once
k has. A `Stream` keeps that order for blocking calls and their `i` variants
alike: a blocking collective runs inline in the caller's thread when the
stream is idle (the fast path: no thread hand-off), and otherwise queues
behind the pending ones and waits; an `i` collective always queues, and the
stream's own worker thread (started on first use, parked when idle) runs the
queue in order. A caller that waits on an `i` collective the worker has not
started yet runs it (and any queued before it) itself, as the blocking call
would: the usual `iall_reduce(x).wait()` then costs no hand-off to the worker
and back (two thread wake-ups, ~70 us of CPU on a 2-core VM), while one the
program does not wait on still runs in the background. Streams of different
groups, and the point-to-point engine, are independent: nothing ever waits
behind another group's work.

Whoever holds `_running` is the only one taking items off the queue, so items
run in order whichever thread runs them.
"""
import collections
import threading
import time

from .requests import Request, _sleep_on_completion


class Stream:
    def __init__(self, name):
        self.name = name
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._running = threading.Lock()  # held while a collective of this group executes
        self._owner = None  # the thread holding _running (its ident): a collective it starts runs at once
        self._helping = False  # (under _cond) a caller is running queued collectives (_wait_for)
        self._thread = None

    def _own(self, blocking):
        """Take _running for this thread; False where another holds it (and not blocking)."""
        if not self._running.acquire(blocking=blocking):
            return False
        self._owner = threading.get_ident()
        return True

    def _disown(self):
        self._owner = None
        self._running.release()

    def run(self, fn, *args):
        """A blocking collective: inline when nothing is pending on this group, else in turn."""
        if self._owner == threading.get_ident():
            return fn(*args)  # a collective built from others (scatter's metadata broadcast)
        if not self._queue and self._own(blocking=False):
            try:
                return fn(*args)
            finally:
                self._disown()
        return self.submit(getattr(fn, "__name__", "collective"), fn, *args).wait()

    def submit(self, what, fn, *args):
        """Queue a collective; its Request completes when it has run (after every earlier one).
        From the thread running this group's collectives (a completion callback that starts a
        collective: a torch future's .then, PowerSGD's hook waiting on the all_reduce it starts) it
        runs at once: it comes right after the collective whose completion started it, on every rank
        alike, and waiting for it there cannot deadlock."""
        req = Request(what, waiter=self._wait_for)
        if self._owner == threading.get_ident():
            self._execute(req, fn, args)
            return req
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"commlib-{self.name}", daemon=True)
                self._thread.start()
            self._queue.append((req, fn, args))
            self._cond.notify_all()
        return req

    def _wait_for(self, req, deadline, any_of=None):
        """Request.wait's waiter for a queued collective: while it is still queued, run the queue's
        head (in order, up to it) in this thread; once another thread has it, sleep until it completes.
        A wait bounded by the caller (a deadline, wait_any) only sleeps: running a collective here could
        outlast the bound."""
        if any_of is not None:
            _sleep_on_completion(any_of)
            return
        if deadline is None and not req._finished and self._owner != threading.get_ident() and \
                self._own(blocking=False):  # else a collective is running: this one or one before it
            try:
                with self._cond:
                    self._helping = True  # the worker, should it wake now, leaves the queue to this thread
                while not req._finished:
                    with self._cond:
                        if not any(item[0] is req for item in self._queue):
                            break  # (completed meanwhile)
                        item = self._queue.popleft()
                    self._execute(*item)
                    del item
            finally:
                with self._cond:
                    self._helping = False
                    if self._queue:  # queued after the one waited on: the worker's
                        self._cond.notify_all()
                self._disown()
        if not req._finished:
            req._done.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    @staticmethod
    def _execute(req, fn, args):
        """Run one collective (its thread owning the stream) and complete its request."""
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # delivered to the caller by wait()
            result, error = None, exc
        del fn, args  # let go of the caller's buffers before it can see the request complete
        # completion callbacks run holding the stream: a collective one starts (submit, above)
        # comes next on every rank, before any blocking call another thread makes meanwhile
        req._finish(result, error)

    def _work(self):
        while True:
            with self._cond:
                while not self._queue or self._helping:
                    self._cond.wait()
            self._own(blocking=True)  # waits for an inline collective, or a waiting caller's, to finish
            try:
                with self._cond:
                    if not self._queue:
                        continue  # a waiting caller ran them
                    item = self._queue.popleft()
                self._execute(*item)
                del item
            finally:
                self._disown()
