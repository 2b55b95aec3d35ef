"""Holding SIGINT and SIGTERM over a few steps that must not be cut in half (a snapshot
being published, an attachment and its release being registered)."""
from __future__ import annotations

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
