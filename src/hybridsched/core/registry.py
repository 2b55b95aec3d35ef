"""The scheduler registry: the only place where a scheduler name is bound to a backend.

An entry says everything the rest of the package would otherwise decide by testing the
name: which backend runs it, how that backend hands out work (the thread dispenser, the
fork tree, the pipe topology), how many workers it starts, whether it needs the
utilisation monitor, its default chunk, and which run options it reads. Backends, the
study layer, MPI and the CLI read the entry. Adding a scheduler is one entry here (plus
its tests); a scheduler the paper does not have is marked ``paper=False`` and is never
part of a preset, so the presets stay the paper's study. The entry's type, its kinds and
what callers ask of it (rather than testing its fields or the name) are in
:mod:`capabilities`.
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

import numpy as np

from . import contract, dispatch, usertech
from .capabilities import BASELINE, Backend, Family, Forker, SchedulerInfo, Topology, _one
from . import policies as pol
from .memory import Memory
from ..errors import UsageError
from ..records import Params, as_params, params_text, parse_params


def _at_most_n(k: int, n: int) -> int:
    """§2.3: AIMD's fixed pool is min(k, N) threads."""
    return min(k, n)


def _blocks(frames: int) -> int:
    return 0  # static without chunk: one block per worker


def _aimd_chunk(frames: int) -> int:
    return pol.AIMD_CHUNK


def _whole(frames: int) -> int:
    return frames


# --- thread dispensers: (frames, workers, chunk, monitor) -> Dispenser -------------------

def _static(n, workers, c, monitor, job=None):
    return dispatch.Preassigned(pol.static_assignment(n, workers, c))


def _fixed(n, workers, c, monitor, job=None):
    return dispatch.fixed_chunks(n, workers, c)


def _guided(n, workers, c, monitor, job=None):
    return dispatch.SharedCounter(n, partial(pol.guided_size, k=workers, c=c))


def _steal(n, workers, c, monitor, job=None):
    return dispatch.StealQueues(pol.static_chunks(n, workers, c))


def _aimd(n, workers, c, monitor, job=None):
    # window initialised to the pool size min(k, N) (§4), limited to it
    return dispatch.AimdGate(n, workers, workers, monitor, c)


# --- hand-outs as fixed sequences: (frames, workers, chunk) -> chunk boundaries -----------
# Only for first-come-first-served policies whose chunk i depends on i alone (claims are
# serialised by one counter): the thread backend may then run them in compiled code
# (backends/compiled.py) with exactly the hand-out of the dispenser above.

def _fixed_sequence(n, workers, c, params=None, job=None):
    return pol.fixed_bounds(n, c)


def _guided_sequence(n, workers, c, params=None, job=None):
    return pol.fcfs_bounds(n, partial(pol.guided_size, k=workers, c=c))


def _technique_sequence(name: str):
    """A rule technique's hand-out (techniques.bounds: the rule applied in claim order, as
    its RuleCounter does; sized from i or from what remains, it is fixed either way)."""
    def seq(n, workers, c, params=None, job=None):
        from . import techniques as tq

        return tq.bounds(name, n, workers, c, params)
    return seq


def _adaptive(reading: str):
    return lambda n, workers, c, monitor, job=None: dispatch.Adaptive(n, workers, reading)


# --- the LB4OMP portfolio (techniques/): one shared-counter dispenser per technique -------

def _technique(name: str):
    """The dispenser factory of a technique, for the threads and the pipe-MtoM producer."""
    def make(n, workers, c, monitor, job=None):
        from .techniques import dispense

        params = dict(job.params) if job is not None else {}
        profile = params.pop("profile", None)
        return dispense.dispenser(name, n, workers, c, params, profile, job)
    return make


def _memory(job) -> Memory:
    """The job's cross-repetition memory; none outlives the call without a job."""
    return job.memory if job is not None else Memory()


def _arm(name: str, n, workers, c, monitor, job):
    """The dispenser of portfolio entry ``name`` (a technique: threads claim from it)."""
    info = get(name)
    if info.dispenser is None:
        raise UsageError(f"{name}: no dispenser to race (not a technique)")
    return info.dispenser(n, workers, info.resolve_chunk(c, n), monitor, job)


def _auto(n, workers, c, monitor, job=None):
    from .techniques import auto, dispense

    key = dispense.loop_key(job) if job is not None else ("auto", n, workers, c)
    arms = tuple(job.portfolio) if job is not None and job.portfolio else auto.PORTFOLIO

    def make(name: str):
        # every portfolio entry's thread dispenser: the pipe producer claims from it too
        return _arm(name, n, workers, c, monitor, job)
    return auto.AutoDispenser(auto.racer_for(_memory(job), key, arms), make, n, arm=get)


def _auto_sim_predictor(job, n: int, workers: int, c: int):
    from .techniques import auto, autosim, dispense

    key = dispense.loop_key(job) if job is not None else ("auto-sim", n, workers, c)
    arms = tuple(job.portfolio) if job is not None and job.portfolio else auto.PORTFOLIO
    return autosim.predictor_for(_memory(job), key, arms, get)


def _auto_sim_prepare(job) -> None:
    """Untimed, after the profiling run: simulate the portfolio on the loop's iteration
    times (again when a measured time drifted from its prediction)."""
    workers = job.info.workers(job.k, len(job.cpus))
    pred = _auto_sim_predictor(job, job.frames, workers, job.chunk)
    prof = job.params.get("profile")
    costs = prof.costs if prof is not None and prof.costs is not None and \
        len(prof.costs) == job.frames else np.full(job.frames, prof.mu if prof else 1e-6)
    pred.ready(costs, workers, job.chunk, prof.h if prof else 1e-6, prof)
    choice = pred.choose()  # stored with the run: what it will run and the time it expects
    job.extra["auto_sim"] = {"technique": choice, "predicted_s": pred.predicted[choice],
                             "simulations": pred.simulations}
    if pred.dropped:  # the portfolio's members that failed, named with why
        job.extra["auto_sim"]["dropped"] = dict(pred.dropped)


def _auto_sim(n, workers, c, monitor, job=None):
    from .techniques import autosim

    pred = _auto_sim_predictor(job, n, workers, c)
    if not pred.predicted:  # no preparation ran (a bare dispenser): equal costs
        pred.ready(np.full(n, 1e-6), workers, c, 1e-6, None)

    def make(name: str):
        return _arm(name, n, workers, c, monitor, job)
    return autosim.AutoSimDispenser(pred, make, arm=get)


_PIPE_OPTS = ("pipe_batch",)

_ALL = [
    SchedulerInfo(BASELINE, Family.SERIAL, Backend.SERIAL,
                  "one kernel call over every frame on one thread: T_serial of Eq. 4",
                  default_chunk=_whole),
    SchedulerInfo("static", Family.THREAD, Backend.THREADS,
                  "OpenMP static: one contiguous block per thread (or chunks round-robin with --chunk)",
                  default_chunk=_blocks, dispenser=_static),
    SchedulerInfo("dynamic", Family.THREAD, Backend.THREADS,
                  "OpenMP dynamic: threads take the next chunk (default 1) from an atomic ticket counter",
                  dispenser=_fixed, sequence=_fixed_sequence),
    SchedulerInfo("guided", Family.THREAD, Backend.THREADS,
                  "OpenMP guided: chunk = max(min_chunk, ceil(remaining / k)), first come first served",
                  dispenser=_guided, sequence=_guided_sequence),
    SchedulerInfo("chunk", Family.THREAD, Backend.THREADS,
                  "fixed chunks from the ticket counter (default L/100, the paper's 10 and 100)",
                  default_chunk=pol.paper_chunk, dispenser=_fixed, sequence=_fixed_sequence),
    SchedulerInfo("chunk-steal", Family.THREAD, Backend.THREADS,
                  "static chunks in per-thread queues; idle threads steal round-robin",
                  default_chunk=pol.paper_chunk, dispenser=_steal),
    SchedulerInfo("aimd", Family.THREAD, Backend.THREADS,
                  "AIMD contention window over min(k, N) threads, chunks of 4, fed by /proc/stat (§2.3)",
                  default_chunk=_aimd_chunk, pool=_at_most_n, dispenser=_aimd, needs_monitor=True),
    SchedulerInfo("adaptive", Family.THREAD, Backend.THREADS,
                  "adaptive chunks (§2.4, Eq. 3): remaining / k x speed factor, thread_avg = the "
                  "thread's mean time per finished chunk",
                  dispenser=_adaptive(pol.PER_CHUNK)),
    SchedulerInfo("adaptive-frame", Family.THREAD, Backend.THREADS,
                  "variant of adaptive: speeds from the mean time per frame (a slice), not per chunk",
                  dispenser=_adaptive(pol.PER_FRAME), paper=False),
    SchedulerInfo("prolific", Family.PROCESS, Backend.FORKS,
                  "the parent forks k workers; frame i to worker i mod k (§2.1.1)",
                  forker=Forker.PARENT),
    SchedulerInfo("collective", Family.PROCESS, Backend.FORKS,
                  "workers fork workers in ceil(log2 k) mitosis rounds; frame i to worker i mod k (§2.1.2)",
                  forker=Forker.MITOSIS),
    SchedulerInfo("pipe-1to1", Family.PIPE, Backend.PIPES,
                  "one task pipe read by all workers; one chunk (default 1 frame) per message (§2.1.3)",
                  topology=Topology.SHARED, chunk_search=True, options=_PIPE_OPTS),
    SchedulerInfo("pipe-1toN", Family.PIPE, Backend.PIPES,
                  "one task pipe per worker; the parent deals chunks round-robin (§2.1.3)",
                  topology=Topology.DEALT, chunk_search=True, options=_PIPE_OPTS),
    SchedulerInfo("pipe-MtoM", Family.PIPE, Backend.PIPES,
                  "task and done pipe per worker; the next chunk to whoever reports done (one in "
                  "flight); re-sends a lost worker's chunk (§2.1.3)",
                  topology=Topology.FEEDBACK, chunk_search=True, options=("inflight",)),
]

# The technique parameters (RunConfig.params names) each technique reads; auto reads
# those of the techniques in its portfolio.
_TECH_OPTIONS = {"fiss": ("fiss_stages",), "viss": ("viss_param",), "pls": ("pls_swr",),
                 "rnd": ("rnd_start", "seed"),
                 "auto": ("fiss_stages", "viss_param", "pls_swr", "rnd_start", "seed",
                          "portfolio")}
_TECH_OPTIONS["auto-sim"] = _TECH_OPTIONS["auto"]


def _portfolio() -> list[SchedulerInfo]:
    """Each LB4OMP technique on the thread backend under its bare name and as
    ``pipe-MtoM:<name>`` (the producer sizes each chunk it sends), plus ``auto`` on both.
    A name per (technique, backend) pair rather than an option: the study's scheduler
    column then says what ran, reports group by it, and no run option has to mean
    something for only one scheduler."""
    from . import techniques as tq

    out = []
    for name in tq.NAMES:
        out += _on_both(name, tq.DESCRIPTIONS[name], _technique(name),
                        default_chunk=_blocks if name in tq.OWN_DEFAULT_CHUNK else _one,
                        profiled=name in tq.NEEDS_PROFILE,
                        sequence=_technique_sequence(name) if name in tq.RULES else None)
    # auto's portfolio holds the techniques that need the loop's profile, and rnd
    out += _on_both("auto", "picks a technique per repetition of the loop (successive halving "
                    "over 27 techniques)", _auto, default_chunk=_blocks,
                    profiled=True, chooses=True)
    out += [replace(i, prepare=_auto_sim_prepare) for i in _on_both(
        "auto-sim", "picks a technique by simulating the portfolio on the loop's profiled "
        "iteration times, before the first timed repetition",
        _auto_sim, default_chunk=_blocks, profiled=True, chooses=True)]
    return out


def _on_both(name: str, desc: str, make: Callable, *, default_chunk: Callable,
             profiled: bool, sequence: Callable | None = None,
             chooses: bool = False) -> list[SchedulerInfo]:
    """A technique's entry on the threads and its ``pipe-MtoM:<name>`` entry."""
    reads = _TECH_OPTIONS.get(name, ())
    label = f"{name}: {desc}" if chooses else f"LB4OMP {name}: {desc}"
    return [SchedulerInfo(name, Family.THREAD, Backend.THREADS, label,
                          default_chunk=default_chunk, dispenser=make, paper=False,
                          technique=name, profiled=profiled, options=reads, sequence=sequence,
                          chooses=chooses),
            SchedulerInfo(f"pipe-MtoM:{name}", Family.PIPE, Backend.PIPES,
                          f"pipe-MtoM, the producer sizing chunks by {name}",
                          default_chunk=default_chunk, dispenser=make, topology=Topology.FEEDBACK,
                          options=("inflight",) + reads, paper=False, technique=name,
                          profiled=profiled, in_all=False)]


_ALL += _portfolio()

SCHEDULERS: dict[str, SchedulerInfo] = {s.name: s for s in _ALL}

# The contract's order (DESIGN.md §6): table and report order; entries not listed follow.
ALL_NAMES = tuple(s.name for s in _ALL)


def get(name: str) -> SchedulerInfo:
    """The entry of a scheduler name; a ``package.module:Class`` reference (optionally
    after ``pipe-MtoM:``) or an installed technique's entry-point name is registered first."""
    if not isinstance(name, str):
        raise UsageError(f"a scheduler is named by a string, got {type(name).__name__}")
    info = SCHEDULERS.get(name)
    if info is not None:
        return info
    pipe, _, rest = name.partition(_MTOM)
    user = None
    if not pipe and rest:  # pipe-MtoM:<technique>
        user = _find_user(rest)
    elif not name.startswith(_MTOM):
        user = _find_user(name)
    if user is None:
        shown = [n for n in ALL_NAMES if SCHEDULERS[n].in_all]
        raise UsageError(f"unknown scheduler {name!r}; choose from {', '.join(shown)}, "
                         "pipe-MtoM:<technique>, package.module:Class, techniques, paper or all")
    threads, pipes = register(user)
    return pipes if name.startswith(_MTOM) else threads


_MTOM = "pipe-MtoM:"


def pipe_name(technique: str) -> str:
    """The name of ``technique`` on the pipe backend (its producer sizing the chunks)."""
    return _MTOM + technique


def resends_by_name(name: str) -> bool:
    """Whether a stored run's scheduler is pipe-MtoM or a ``pipe-MtoM:<technique>`` (an
    entry's ``resends``), from the name alone: a user technique's need not import here."""
    return name == "pipe-MtoM" or name.startswith(_MTOM)


def _find_user(name: str) -> usertech.UserTechnique | None:
    if usertech.is_reference(name):
        return usertech.resolve(name, f"scheduler {name}")
    return usertech.from_entry_point(name)


def register(user: usertech.UserTechnique) -> tuple[SchedulerInfo, SchedulerInfo]:
    """Enter a user technique under its name and ``pipe-MtoM:<name>`` (again: replaced);
    a name taken by a built-in scheduler or by another technique is refused."""
    name = user.name
    had = SCHEDULERS.get(name)
    if (had is not None and had.user is not None and had.user.cls is user.cls
            and had.user.hash == user.hash and had.user.instance is user.instance):
        return had, SCHEDULERS[_MTOM + name]  # the same technique: keep its loops' state
    if had is not None and (had.user is None or had.user.ref != user.ref):
        what = "a built-in scheduler" if had.user is None else f"technique {had.user.ref}"
        raise UsageError(f"technique {user.ref}: its name {name!r} is already {what}; "
                         "give it another name (class attribute name = ...)")
    threads, pipes = _on_both(name, f"user technique {user.ref}", _user_dispenser(user),
                              default_chunk=_one, profiled=False,
                              sequence=_user_sequence(user) if user.deterministic and not user.learns else None)
    threads = _as_user(threads, user)
    pipes = _as_user(pipes, user)
    SCHEDULERS[threads.name], SCHEDULERS[pipes.name] = threads, pipes
    return threads, pipes


def _as_user(info: SchedulerInfo, user: usertech.UserTechnique) -> SchedulerInfo:
    return replace(info, description=info.description.replace("LB4OMP ", "", 1), user=user,
                   technique="")


def _user_dispenser(user: usertech.UserTechnique):
    def make(n, workers, c, monitor, job=None):
        tech = user.for_loop(_user_loop(job, n, workers, c), n, workers, c, _user_params(job))
        from .techniques.dispense import TechniqueCounter

        return TechniqueCounter(tech, n, user.ref)
    return make


def _user_sequence(user: usertech.UserTechnique):
    def seq(n, workers, c, params=None, job=None):
        tech = user.for_loop(_user_loop(job, n, workers, c), n, workers, c,
                             _user_params(job) if job is not None else dict(params or {}))
        return contract.bounds(tech, n)
    return seq


def _user_loop(job, n: int, workers: int, c: int) -> tuple:
    from .techniques import dispense

    return dispense.loop_key(job) if job is not None else ("user", n, workers, c)


def _user_params(job) -> dict:
    params = dict(job.params) if job is not None else {}
    params.pop("profile", None)
    return params


def names(family: str | None = None, paper_only: bool = False, technique: bool | None = None,
          everything: bool = True) -> list[str]:
    """Scheduler names in registry order (optionally of one family, or the paper's only;
    ``technique`` True/False: only/no LB4OMP technique entries; ``everything`` False: only
    the entries of `-s all`)."""
    return [n for n, s in SCHEDULERS.items()
            if (family is None or s.family == family) and (s.paper or not paper_only)
            and (technique is None or bool(s.technique) == technique)
            and (everything or s.in_all)]


def paper_names() -> list[str]:
    """The paper's schedulers: what every preset runs."""
    return names(paper_only=True)


def identity(scheduler: str, chosen: str = "") -> tuple[str, str]:
    """(technique, technique_hash) that a run of ``scheduler`` stores: what ``auto`` chose
    (``chosen``), or a user technique's ``module:qualname`` and the sha256 of its source."""
    user = get(scheduler).user
    if chosen:  # auto's choice (a name) or a user technique's dispenser (its reference)
        chosen_info = SCHEDULERS.get(chosen)
        users = [i.user for i in SCHEDULERS.values() if i.user is not None and i.user.ref == chosen]
        user = chosen_info.user if chosen_info is not None else users[0] if users else None
        if user is None:
            return chosen, ""
    return (user.ref, user.hash) if user is not None else ("", "")


def lookup(scheduler) -> SchedulerInfo:
    """:func:`get` for a name, or the entry of a user technique given as a
    :class:`~hybridsched.core.contract.Technique` instance or class (registered first)."""
    if isinstance(scheduler, str):
        return get(scheduler)
    if not (isinstance(scheduler, contract.Technique) or isinstance(scheduler, type)):
        raise UsageError(f"a scheduler is named by a string or is a hybridsched.Technique, got "
                         f"{type(scheduler).__name__}")
    return register(usertech.resolve(scheduler, "scheduler"))[0]


# bytes of the study's params field (store.format)
MAX_PARAMS = 64


def run_params(info: SchedulerInfo, params: dict | None, strict: bool = False) -> Params:
    """The parameters a run of ``info`` stores (RunConfig.params): those its entry reads
    (a user technique reads all), sorted, each value as the study file gives it back (so a
    resumed study knows its runs); bad ones refused, and with ``strict`` also one that
    ``info`` does not read (the API's single scheduler)."""
    params = contract.check_params(params)
    mine = {k: v for k, v in params.items() if k in info.options or info.user is not None}
    if strict and len(mine) < len(params):
        unread = sorted(set(params) - set(mine))
        raise UsageError(f"technique parameters: {info.name} does not read {', '.join(unread)}")
    if info.technique:
        from .techniques import check_params

        check_params(mine)
    text = params_text(as_params(mine))
    if len(text.encode()) > MAX_PARAMS:
        raise UsageError(f"technique parameters {text[:40]}...: longer than the {MAX_PARAMS} "
                         "bytes a study stores for them")
    return parse_params(text)
