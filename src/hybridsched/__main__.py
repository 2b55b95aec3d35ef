"""``python -m hybridsched`` and the ``hybridsched`` command (``entry``): the command line's
modules load with Ctrl-C and the other ending signals held back, so one that comes early ends the
command with one line and 130 (the others: as their default action does) instead of a
traceback from the middle of an import (numpy turns one into an ImportError that names its C extensions).

Only ``_signal`` and ``os`` here, both loaded with the interpreter: the ``signal`` module
imports ``enum`` (7 ms), a window in which a Ctrl-C would still print a traceback."""
import os
import sys

import _signal  # type: ignore[import-not-found]  # no stub: signal.py re-exports it


def _closed_streams_to_null() -> None:
    """A standard stream closed when we started (``>&-``) is None in ``sys``, and a print
    to a None ``sys.stderr`` goes to ``sys.stdout`` instead. Each gets /dev/null, opened
    close-on-exec: what we would have written to it goes nowhere, as the shell asked; the
    lowest free descriptor is its own, so no file we open later lands there; and the
    commands we start see it closed, as they would have without us."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            setattr(sys, name, open(null, "r" if fd == 0 else "w", closefd=True))


def entry() -> None:
    _closed_streams_to_null()
    held: list[int] = []
    old = {}
    # oslayer.signals.ENDING, not imported from there: importing the package is what this holds
    for sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1,
                _signal.SIGUSR2, _signal.SIGALRM):
        handler = _signal.getsignal(sig)
        if handler in (_signal.default_int_handler, _signal.SIG_DFL):  # not SIG_IGN (`&`)
            old[sig] = _signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        from .cli import entry as run
    except KeyboardInterrupt:  # raised, not signalled: as a held Ctrl-C
        held.insert(0, _signal.SIGINT)
    finally:
        for sig, handler in old.items():
            _signal.signal(sig, handler)
    if held and held[0] == _signal.SIGINT:
        print("hybridsched: interrupted", file=sys.stderr, flush=True)
        os._exit(130)
    if held:
        os.kill(os.getpid(), held[0])  # its default action: ends the process
    run()


if __name__ == "__main__":
    entry()
