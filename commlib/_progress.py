"""Requests and the progress thread behind the i* functions.

One daemon thread per process runs submitted operations in submission
order. The data loops release the GIL, so the caller computes (in numpy,
which also releases it) while communication proceeds. Program order is
kept across blocking and non-blocking calls: while anything is queued or
running, a blocking call is queued behind it and waited for, instead of
overtaking it on the wire.
"""
import collections
import threading


class Request:
    """Handle of a non-blocking operation: `.wait()` returns its result, `.test()` polls."""

    __slots__ = ("_done", "_result", "_error", "what")

    def __init__(self, what):
        self._done = threading.Event()
        self._result = self._error = None
        self.what = what

    def test(self):
        """True once the operation has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self):
        """Block until done; return the result or raise the operation's error.

        The operation is itself bounded by the group's timeout, so this never
        waits forever.
        """
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result

    def __repr__(self):
        return f"<commlib.Request {self.what} {'done' if self.test() else 'pending'}>"


class Engine:
    """The progress thread and its FIFO of (request, function, args, kwargs)."""

    def __init__(self):
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._busy = 0  # queued + running
        self._thread = None

    @property
    def busy(self):
        return self._busy > 0

    def in_worker(self):
        return threading.current_thread() is self._thread

    def submit(self, what, fn, *args, **kwargs):
        req = Request(what)
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="commlib-progress", daemon=True)
                self._thread.start()
            self._queue.append((req, fn, args, kwargs))
            self._busy += 1
            self._cond.notify()
        return req

    def _run(self):
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                req, fn, args, kwargs = self._queue.popleft()
            try:
                req._result = fn(*args, **kwargs)
            except BaseException as exc:  # delivered to the caller by wait()
                req._error = exc
            finally:
                with self._cond:
                    self._busy -= 1
                req._done.set()


engine = Engine()


def ordered(fn):
    """Run a blocking API function behind pending requests, keeping program order."""

    def call(*args, **kwargs):
        if engine._busy and not engine.in_worker():
            return engine.submit(fn.__name__, fn, *args, **kwargs).wait()
        return fn(*args, **kwargs)

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    call.__wrapped__ = fn
    return call


def nonblocking(fn):
    """The i* variant of a blocking API function: same arguments, returns a Request."""

    def call(*args, **kwargs):
        return engine.submit(fn.__name__, fn, *args, **kwargs)

    call.__name__ = "i" + fn.__name__
    call.__qualname__ = call.__name__
    call.__doc__ = f"Non-blocking {fn.__name__}: same arguments; returns a Request whose wait() gives its result."
    return call
