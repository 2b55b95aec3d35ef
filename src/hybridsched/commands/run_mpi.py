"""`hybridsched run` under mpiexec: every rank runs, rank 0 alone checks the input, writes
the study and prints. Input is checked on rank 0 and its verdict broadcast, so bad input
stops every rank with one line (exit 2); a rank that fails later aborts the whole job
(:func:`mpi.ranks.abort_on_error`), and one killed outright is named by its watchdog."""
from __future__ import annotations

import json
import os
import signal
import sys

from ..core.splits import dynamic_chunks, handout_digest, split_technique
from ..errors import HybridschedError, UsageError
from ..mpi.ranks import Solo, World, abort_on_error, agree, world
from ..mpi.runs import check_split, run_split
from ..mpi.watchdog import RankWatchdog
from ..oslayer.signals import ENDING, KEPT_IF_IGNORED
from ..results.summary import run_summary
from ..store import StudyLock, check_output
from ..study.options import build_spec
from ..study.output import new_study, this_machine
from ..study.progress import describe
from .common import check_test_hooks, load, load_checked, out_name


def main_mpi(args, w: World) -> int:
    """`run` on every rank of an MPI job: all ranks run, rank 0 alone writes and prints."""
    # A rank blocked in an MPI call (a collective, waiting for a dead peer) never returns to
    # Python to run a handler, so the ending signals keep their default action and end the
    # rank at once (but one of KEPT_IF_IGNORED we were started ignoring: `nohup`, a batch
    # script's `trap '' USR1`). Nothing is lost: each run is stored
    # when it ends, the slab's names are gone already, forked workers die with their parent,
    # and the study lock is removed by the rank's watchdog.
    for sig in ENDING:
        if sig not in KEPT_IF_IGNORED or signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    spec = _agreed_spec(args, w)
    configs = spec.configurations()
    _same_everywhere(w, dict(spec.to_dict(), split=args.split, out=args.out,
                             overwrite=args.overwrite))
    _same_code(w, _agreed(w, lambda: _code(spec, configs, args.split, w.size)))
    out = w.bcast(out_name(args.out) if args.out is None else args.out)
    lock = StudyLock(out)

    def check() -> None:
        if getattr(args, "resume", False):
            raise UsageError("--resume is not supported under mpiexec yet; use a new --out "
                             "and `hybridsched merge`")
        out_name(out)
        check_output(out)
        check_test_hooks()
        check_split(configs, w.size, args.split, w.local_size)
        lock.acquire()  # held by rank 0 until the study is written
        w.watchdog.holds(lock.path)  # removed by it if this rank is killed
        if os.path.lexists(out) and not args.overwrite:
            raise UsageError(f"--out {out}: file exists (use --overwrite to replace it)")

    try:
        # a rank killed outright (SIGKILL, OOM) is named by its watchdog (mpi/watchdog.py)
        with RankWatchdog(w.rank, w.size, w.host) as w.watchdog:
            shell = w.watchdog.behind_a_shell() if w.rank == 0 else ""
            if shell:  # the ranks are started alike: rank 0 speaks for them
                print(f"hybridsched: warning: the ranks run under a {shell} script that does "
                      "not `exec` them: under MPICH's mpiexec, a rank killed outright (SIGKILL, "
                      "the OOM killer) would leave the others waiting for it forever; end the "
                      "script with `exec hybridsched ...`", file=sys.stderr)
            agree(w, check)
            with abort_on_error(w):
                return _study(args, w, spec, configs, out, lock)
    finally:
        lock.release()


def refuse(message: str) -> None:
    """This rank's command line is bad (it did not even parse): say so to the others in
    the collectives a good rank enters (:func:`_agreed_spec`), so every rank stops."""
    w = world()
    if isinstance(w, Solo):  # not is_mpi
        raise UsageError(message)
    _agree_on(w, message)


def _agreed_spec(args, w: World):
    """Each rank's study from its own command line; a rank whose input is bad stops every
    rank (rank 0 says why, naming the rank when it is not itself), not only itself while
    the others wait for it in the next collective."""
    error = None
    try:
        spec = build_spec(args, split=args.split)
    except UsageError as exc:
        spec, error = None, str(exc)
    _agree_on(w, error)
    return spec


def _agree_on(w: World, error: str | None) -> None:
    """Gather every rank's error (None: fine); any error stops all: exit 2 everywhere,
    rank 0 printing the first one."""
    errors = w.gather(error) or []
    verdict = w.bcast(next((e if r == 0 else f"rank {r}: {e}"
                            for r, e in enumerate(errors) if e), None))
    if verdict is not None:
        if w.rank == 0:
            raise UsageError(verdict)
        raise SystemExit(2)


def _same_everywhere(w: World, mine: dict) -> None:
    """Every rank must run the same study: rank 0's options are sent to all (one
    broadcast) and a rank started with other ones (an MPMD launch, a wrong script) stops
    the job before any run, one line and exit 2 on every rank. Otherwise a run would be
    stored as verified for frames the other ranks never worked on, or a collective would
    wait forever for a rank with fewer repetitions."""
    text = json.dumps(mine, sort_keys=True, default=str)
    root = w.bcast(text)
    differ = [r for r, d in enumerate(w.gather(int(text != root)) or []) if d]
    differ = w.bcast(differ)
    if differ:
        if w.rank == 0:
            theirs = json.loads(root)
            raise UsageError(f"the {w.size} MPI ranks were started with different options: "
                             f"rank {differ[0]} differs from rank 0 (every rank must be given "
                             "the same command line; rank 0 runs "
                             f"{_listed(theirs.get('schedulers'))} at L = "
                             f"{_listed(theirs.get('frames'))}, seed {theirs.get('seed')})")
        raise SystemExit(2)


def _listed(values) -> str:
    """'dynamic,prolific' for a list, as the command line gives it."""
    return ",".join(map(str, values)) if isinstance(values, list) else str(values)


def _agreed(w: World, make):
    """``make()`` on every rank; a UsageError (or a failing hand-out) on any rank stops all."""
    error = value = None
    try:
        value = make()
    except HybridschedError as exc:
        error = str(exc)
    _agree_on(w, error)
    return value


def _code(spec, configs, split: str, P: int) -> dict:
    """What every rank must share beyond its options: the code of each user technique
    (module:qualname and source sha256: an MPMD launch or another PYTHONPATH may import
    other code under the same name) and, where frames are handed out by chunk, the chunk
    sequence of every (L, k) of the study, computed now on each rank."""
    from ..core import registry

    code = {}
    for name in dict.fromkeys([*spec.schedulers, *spec.portfolio]):
        user = registry.get(name).user
        if user is not None:
            code[f"technique {name}"] = f"{user.ref} (source sha256 {user.hash[:12]})"
    if ":" in split:
        user = split_technique(split)
        code[f"--split {split}"] = f"{user.ref} (source sha256 {user.hash[:12]})"
    if split != "static":
        for L, k in dict.fromkeys((c.frames, c.k) for c in configs):
            code[f"the --split {split} hand-out at L={L} k={k}"] = handout_digest(
                dynamic_chunks(L, P, k, split, spec.params))
    return code


def _same_code(w: World, mine: dict) -> None:
    """Every rank runs the same techniques and computed the same hand-out between ranks
    (one broadcast, one gather): otherwise one line naming what differs, exit 2 on every
    rank, before any run -- each rank checks only the frames it ran, so a difference would
    be stored as verified work."""
    root = w.bcast(mine)
    differ = [(key, mine.get(key, "absent")) for key in sorted(set(root) | set(mine))
              if root.get(key) != mine.get(key)]
    found = w.bcast([(r, d[0]) for r, d in enumerate(w.gather(differ) or []) if d])
    if not found:
        return
    if w.rank == 0:
        r, (key, theirs) = found[0]
        raise UsageError(f"rank {r} runs other code than rank 0: {key} is {root.get(key, 'absent')} "
                         f"on rank 0 but {theirs} on rank {r} (every rank must import the same "
                         "techniques, and a --split technique must give every rank the same chunks)")
    raise SystemExit(2)


def _study(args, w: World, spec, configs, out: str, lock: StudyLock) -> int:
    if w.rank:
        load(spec, configs)  # before any worker or fork exists
        return 1 if run_split(w, configs, lambda rec: None, args.split, spec.params) else 0
    meta = this_machine(**load_checked(spec, configs))  # rank 0's node
    study = dict(spec.to_dict(), P=w.size, split=args.split)
    with new_study(out, study, overwrite=True, lock=lock, metadata=meta) as writer:
        done = iter(range(1, len(configs) + 1))

        def on_record(rec):
            writer.append(rec)  # flushed: a later abort keeps this run
            # one line per run (mpiexec pipes stderr: no bar), in the bar's words
            print(f"[{next(done)}/{len(configs)}] P={rec.config.P} "
                  f"{describe(rec.config, spec.reps)}: {rec.time_s * 1e3:.2f} ms"
                  f"{'' if rec.verified else ' UNVERIFIED'}", file=sys.stderr)
        failed = run_split(w, configs, on_record, args.split, spec.params)
    # sigma needs T_serial from a P = 1 study: merge one in (`hybridsched merge`)
    print(run_summary(out))
    under = " ".join(str(meta.get(k, "")) for k in ("mpi_implementation", "mpi_version")).strip()
    print(f"\n{len(configs)} runs at P={w.size}{f' under {under}' if under else ''} ({failed} "
          f"failed or unverified) written to {out}", file=sys.stderr)
    return 1 if failed else 0
