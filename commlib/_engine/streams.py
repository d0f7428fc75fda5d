"""One ordered stream of collectives per group.

MPI requires every rank to call a group's collectives in the same order, and
so does every algorithm here: collective k+1 of a group may only start once
k has. A `Stream` keeps that order for blocking calls and their `i` variants
alike: a blocking collective runs inline in the caller's thread when the
stream is idle (the fast path: no thread hand-off), and otherwise queues
behind the pending ones and waits; an `i` collective always queues, and the
stream's own worker thread (started on first use, parked when idle) runs the
queue in order. Streams of different groups, and the point-to-point engine,
are independent: nothing ever waits behind another group's work.
"""
import collections
import threading

from .requests import Request


class Stream:
    def __init__(self, name):
        self.name = name
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._running = threading.Lock()  # held while a collective of this group executes
        self._thread = None

    def run(self, fn, *args):
        """A blocking collective: inline when nothing is pending on this group, else in turn."""
        if not self._queue and self._running.acquire(blocking=False):
            try:
                return fn(*args)
            finally:
                self._running.release()
        if self._thread is not None and threading.current_thread() is self._thread:
            return fn(*args)  # a collective built from others (scatter's metadata broadcast)
        return self.submit(getattr(fn, "__name__", "collective"), fn, *args).wait()

    def submit(self, what, fn, *args):
        """Queue a collective; its Request completes when it has run (after every earlier one).
        From the worker itself (a completion callback that starts a collective: a torch future's
        .then, PowerSGD's hook waiting on the all_reduce it starts) it runs at once: it comes right
        after the collective whose completion started it, on every rank alike, and waiting for it
        there cannot deadlock."""
        req = Request(what)
        if self._thread is not None and threading.current_thread() is self._thread:
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # delivered to the caller by wait()
                result, error = None, exc
            req._finish(result, error)
            return req
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"commlib-{self.name}", daemon=True)
                self._thread.start()
            self._queue.append((req, fn, args))
            self._cond.notify_all()
        return req

    def _work(self):
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
            with self._running:  # waits for an inline collective to finish
                req, fn, args = self._queue.popleft()
                try:
                    result, error = fn(*args), None
                except BaseException as exc:  # delivered to the caller by wait()
                    result, error = None, exc
                del fn, args  # let go of the caller's buffers before it can see the request complete
                # completion callbacks run holding the stream: a collective one starts (submit, above)
                # comes next on every rank, before any blocking call another thread makes meanwhile
                req._finish(result, error)
            del req, result, error
