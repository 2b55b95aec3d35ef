"""Helpers shared by the coop arbiter and worker suites."""
from __future__ import annotations

import os
import signal


def fork_token_holder(arbiter, job: int) -> int:
    """Fork a worker of ``job`` that takes a token and keeps it until killed; returns
    once it holds the token (its pid: the caller kills and reaps it)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            arbiter.worker(job).acquire()
            os.write(w, b"x")
            while True:  # holds the token until the caller kills it
                signal.pause()
        finally:
            os._exit(0)
    try:
        assert os.read(r, 1) == b"x"
    finally:
        os.close(r), os.close(w)
    return pid
