"""Holding SIGINT and SIGTERM over a few steps that must not be cut in half (a snapshot
being published, an attachment and its release being registered)."""
from __future__ import annotations

import functools
import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM for the duration of the block, then replay the first one to the
    handler that was installed. Python handlers always run in the main thread, so swapping
    them (unlike masking, which other threads would bypass) holds the signal everywhere."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            handler = old.get(got[0])
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), got[0])


def loading(fn):
    """Decorate a function that loads or compiles numba code: Ctrl-C and SIGTERM wait for
    its end. numba reads its on-disk cache through ctypes callbacks of llvmlite, where an
    exception raised by a signal handler is printed and dropped, so a Ctrl-C landing there
    was lost and the command ran to its end."""
    @functools.wraps(fn)
    def held(*args, **kwargs):
        with signals_held():
            return fn(*args, **kwargs)
    return held
