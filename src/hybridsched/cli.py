"""Command line: ``hybridsched <subcommand>``. This module only assembles the parsers
(:mod:`commands.parsers`) and turns exceptions into exit statuses; each subcommand is a
module of :mod:`commands`, imported only when it runs. Nothing imports this module.

Exit statuses, the same for every subcommand: 0 everything ran (and verified), 1 a run,
job or rank failed, 2 bad input (one line on stderr), 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP,
138, 140 and 142 SIGUSR1, SIGUSR2 and SIGALRM (a batch system's warning).
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import os
import signal
import sys
import threading

from .commands.args import PROG, Parser
from .commands.parsers import DESCRIPTION, EXAMPLES, HELP, PER_RANK, SUBCOMMANDS
from .errors import INTERRUPTS, HybridschedError, Terminated, UsageError
from .machine.launch import detect_launch
from .oslayer.signals import ENDING, honour_pending, pending, raising, signals_held, taken
from .version import __version__

_KEPT = "; completed runs are kept in the output file"
_ENDED: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated",
                         signal.SIGHUP: "hung up", signal.SIGUSR1: "ended by SIGUSR1",
                         signal.SIGUSR2: "ended by SIGUSR2", signal.SIGALRM: "ended by SIGALRM"}


def make_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser, or with ``only`` that one's in full and the others by name
    and help line (what a command line needs: ``only=""`` for one that names none, e.g.
    --version or --help; nothing else is imported)."""
    p = Parser(prog=PROG, description=DESCRIPTION, epilog=EXAMPLES)
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command_name", parser_class=Parser, metavar="COMMAND")
    for name, add in SUBCOMMANDS.items():
        if only is None or only == name:
            add(sub)
        else:
            sub.add_parser(name, help=HELP[name])
    return p


def _subcommand(argv: list[str]) -> str:
    """The subcommand a command line names (its first word), "" if none."""
    return argv[0] if argv and argv[0] in SUBCOMMANDS else ""


def _is_run(argv: list[str]) -> bool:
    """Whether the command stores each run as it finishes (so an interruption keeps them)."""
    return argv[:1] == ["run"] or (argv[:1] == ["simulate"] and "--validate" not in argv)


def _launched_rank() -> int:
    """This process's rank as the MPI launcher's environment says (0 without a launcher),
    known before MPI is initialised, e.g. while the command line is parsed."""
    launch = detect_launch()
    return (launch.rank or 0) if launch is not None else 0


def _once_per_launch(name: str) -> None:
    """A subcommand that is not :data:`PER_RANK` is refused under a launch of several ranks
    (each rank would run it again)."""
    launch = detect_launch()
    if name not in PER_RANK and launch is not None:
        ranks = f" with {launch.size} ranks" if launch.size else ""
        raise UsageError(f"{name} runs once, not on every rank: started by {launch.how}{ranks}; "
                         "run it once, outside the launcher (HYBRIDSCHED_NO_MPI=1 is for a "
                         "single process that inherited a launcher's variables)")


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line; under an MPI launch a `run` rank that cannot parse its own tells
    the others (they wait for it in their first collective otherwise)."""
    try:
        return make_parser(_subcommand(argv)).parse_args(argv)
    except UsageError as exc:
        launch = detect_launch()
        if launch is not None and _subcommand(argv) == "run":
            from .commands.run_mpi import refuse

            refuse(str(exc))
        raise


def _handlers() -> dict:
    """Each :data:`ENDING` signal raises an exception, remembered until the command takes it
    (oslayer.signals: an exception Python drops is raised again): Ctrl-C KeyboardInterrupt,
    the others Terminated. A signal we were started ignoring (a background job's
    SIGINT, `nohup`'s SIGHUP, a SIGTERM ignored on purpose) stays ignored; `nohup`'s SIGHUP
    also by the commands we run (colocate's jobs start with the others' defaults, as from
    a shell). Returns the old ones."""
    old: dict[int, object] = {}
    for sig in ENDING:
        if sig == signal.SIGINT:
            if signal.getsignal(sig) is signal.default_int_handler:
                old[sig] = signal.signal(sig, raising(lambda signum: KeyboardInterrupt()))
        elif signal.getsignal(sig) != signal.SIG_IGN:
            old[sig] = signal.signal(sig, raising(lambda signum: Terminated(128 + signum)))
    return old


def _unraisable(hook):
    """sys.unraisablehook that stays quiet about a signal's exception Python had to drop
    (it is raised again: oslayer.signals.honour_pending) and passes the rest to ``hook``."""
    def quiet(unraisable) -> None:
        if not isinstance(unraisable.exc_value, INTERRUPTS):
            hook(unraisable)
    return quiet


def _signalled(argv: list[str]) -> int | None:
    """The status of an :data:`ENDING` signal whose exception another one replaced on the way
    out (raised in threading's `with lock:` as a thread started, CPython's __exit__
    released a lock it never took: RuntimeError; or an error of ours raised while
    unwinding), reported in one line; None when no signal came."""
    signum = pending()
    return None if signum is None else _ended_by(argv, signum)


def _ended_by(argv: list[str], signum: int) -> int:
    """The command ends by an :data:`ENDING` signal: the signal taken, one line (none where
    the terminal is gone: SIGHUP), its status."""
    taken()
    try:
        print(f"{PROG}: {_ENDED[signum]}{_KEPT if _is_run(argv) else ''}", file=sys.stderr)
    except OSError:
        pass
    return 128 + signum


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hybridsched`` and ``python -m hybridsched``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    old, old_hook = _handlers(), sys.unraisablehook
    sys.unraisablehook = _unraisable(old_hook)
    try:
        # Held while modules load (the parsers of run, colocate and plan import numpy and
        # numba, then the command's module): an import cut by a signal's exception may
        # end as an ImportError instead (numpy's names its C extensions)
        with signals_held():
            args = _parse(argv)
            command = getattr(args, "command", None)
            if command is None:
                raise UsageError(f"a command is required ({', '.join(SUBCOMMANDS)}); "
                                 "see --help")
            _once_per_launch(args.command_name)
            module = importlib.import_module(f"{__package__}.commands.{command}")
        code = module.main(args)
        honour_pending()  # a signal whose exception was lost on the way: never exit as done
        return code
    except UsageError as exc:
        # one line whatever it quotes: a file name with a line break in it (-o $'a\nb.h5')
        msg = str(exc).replace("\r", "\\r").replace("\n", "\\n")
        if _launched_rank() == 0:  # under mpiexec every rank parses: one line, from rank 0
            print(msg if msg.startswith(f"{PROG}:") else f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except HybridschedError as exc:
        code = _signalled(argv)
        if code is None:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            code = 1
        return code
    except KeyboardInterrupt:
        return _ended_by(argv, signal.SIGINT)
    except Terminated as exc:  # a status, as for Ctrl-C: entry() then ends at once
        return _ended_by(argv, int(exc.code) - 128)  # type: ignore[arg-type]
    except BrokenPipeError:
        return 141
    except Exception:
        code = _signalled(argv)
        if code is None:
            raise
        return code
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        sys.unraisablehook = old_hook


def _no_colour_reset() -> None:
    """numba's error highlighting starts colorama at its first compilation, and colorama
    then writes a colour reset (ESC [0m) to a terminal's stdout at exit: after every
    ``coop exec``, even of ``true`` (its arbiter's rules compile). We print no colour."""
    colorama = sys.modules.get("colorama.initialise")
    if colorama is not None:
        atexit.unregister(colorama.reset_all)


def entry() -> None:
    """The ``hybridsched`` command and ``python -m hybridsched``: :func:`main`'s status as
    the process's, with the exit handlers run and the streams flushed, but without the
    interpreter's teardown of every module: numba's and llvmlite's finalizers alone take
    0.4 s of every command's wall time here (benchmarks/bench_startup.py). It also keeps
    130 after Ctrl-C: CPython ends a process by SIGINT itself when a KeyboardInterrupt
    crossed its C-level code during start-up, even one that main() caught and reported.
    With a thread of ours still running (none should be), or MPI initialised (MPI_Finalize
    is collective: every rank must reach it), the ordinary exit runs instead."""
    code = main()
    _no_colour_reset()
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others or "mpi4py.MPI" in sys.modules:
        sys.exit(code)
    atexit._run_exitfuncs()
    # after an ending signal, what stdout still holds is dropped: a reader that stalled
    # (a stopped terminal, a pipe nobody reads) kept the command blocked in its flush, the
    # signal's line printed and the signal taken (the review)
    ended = code - 128 in _ENDED
    for stream in (sys.stderr,) if ended else (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more to say
            pass
    os._exit(code)
