"""A process's wait status in words: how a worker, a rank or a job ended."""
from __future__ import annotations

import os
import signal


def describe_status(status: int | None) -> str:
    """A wait status as words: 'was killed by signal 9 (SIGKILL)', ..."""
    if status is None:
        return "died (exit status unknown)"
    if os.WIFSIGNALED(status):
        return killed_by(os.WTERMSIG(status))
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return "exited early (status 0) before finishing its work"
    return f"exited with status {code} before finishing its work"


def killed_by(sig: int) -> str:
    """'was killed by signal 9 (SIGKILL)'."""
    name = signal.Signals(sig).name if sig in _SIGNALS else f"signal {sig}"
    return f"was killed by signal {sig} ({name})"


def ending(status: int | None) -> dict:
    """A wait status as WorkerLost's fields: the signal's name or the exit status."""
    if status is None:
        return {}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {"signal": signal.Signals(sig).name if sig in _SIGNALS else f"signal {sig}"}
    return {"status": os.waitstatus_to_exitcode(status)}


_SIGNALS = frozenset(int(s) for s in signal.Signals)
