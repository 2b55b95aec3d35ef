"""One wait over many descriptors: the event loop of a process team and of command jobs.

A parent that watches forked workers waits on their pidfds (readable once the process has
exited) and on the pipes it talks to them through, all in one ``poll``, as loky's executor
waits on its result pipe and the process sentinels together: whichever is ready first is
handled first, so a death is seen while the producer is still writing. Whoever owns a
descriptor gives the loop a handler for it; the loop knows nothing of what they mean.

poll, not select: select refuses descriptors from FD_SETSIZE (1024) up, which a process
team of many workers (or a high ``ulimit -n``) reaches.
"""
from __future__ import annotations

import select
from typing import Callable, Sized

READ = select.POLLIN
WRITE = select.POLLOUT

Handler = Callable[[int], None]


def readable(fd: int, timeout: float | None = 0) -> bool:
    """Whether ``fd`` (a pipe, a pidfd) is readable within ``timeout`` seconds (None: wait)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(None if timeout is None else int(timeout * 1000)))


class EventLoop:
    """Descriptors and their handlers; :meth:`once` waits until one is ready and calls the
    handler of each ready one, ``handler(fd)``, also on an error or hang-up (poll reports
    those whatever was asked), so a handler reads or writes and finds out. A handler may
    add and remove descriptors, its own included: one removed by an earlier handler of the
    same round is not called."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._handlers: dict[int, Handler] = {}

    def add(self, fd: int, handler: Handler, events: int = READ) -> None:
        self._poll.register(fd, events)
        self._handlers[fd] = handler

    def discard(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed: a closed number may be reused)."""
        if self._handlers.pop(fd, None) is not None:
            self._poll.unregister(fd)

    def __contains__(self, fd: int) -> bool:
        return fd in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)

    def once(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` seconds (None: until something is ready), then handle
        whatever is ready, in the order the descriptors were added."""
        handlers = self._handlers
        for fd, _ in self._poll.poll(None if timeout is None else int(timeout * 1000)):
            handler = handlers.get(fd)
            if handler is not None:
                handler(fd)

    def run(self, pending: Sized) -> None:
        """:meth:`once` until ``pending`` is empty (a set the handlers take from, the loop
        itself): the per-chunk path of a pipe producer, so nothing else between two polls."""
        handlers, poll = self._handlers, self._poll.poll
        while pending:
            for fd, _ in poll():
                handler = handlers.get(fd)
                if handler is not None:
                    handler(fd)
