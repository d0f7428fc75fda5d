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
        self._running = False  # a collective of this group is executing (inline or on the worker)
        self._thread = None

    def busy(self):
        return self._running or bool(self._queue)

    def _in_worker(self):
        return threading.current_thread() is self._thread

    def run(self, fn, *args):
        """A blocking collective: inline when nothing is pending on this group, else in turn."""
        if self._in_worker():  # a collective built from others (scatter's metadata broadcast)
            return fn(*args)
        with self._cond:
            inline = not self._running and not self._queue
            if inline:
                self._running = True
        if not inline:
            return self.submit(getattr(fn, "__name__", "collective"), fn, *args).wait()
        try:
            return fn(*args)
        finally:
            with self._cond:
                self._running = False
                if self._queue:
                    self._cond.notify_all()

    def submit(self, what, fn, *args):
        """Queue a collective; its Request completes when it has run (after every earlier one)."""
        req = Request(what)
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
                while not self._queue or self._running:
                    self._cond.wait()
                req, fn, args = self._queue.popleft()
                self._running = True
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # delivered to the caller by wait()
                result, error = None, exc
            with self._cond:
                self._running = False
                self._cond.notify_all()
            req._finish(result, error)
