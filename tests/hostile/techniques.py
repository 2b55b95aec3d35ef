"""Hostile cases: techniques. Users' own techniques (docs/techniques.md) as a hostile user
writes them: a `tq.py` in the case's directory whose classes return every wrong kind of
chunk, raise, exit, lie, stall, break the naming rules or change between runs; each run
through `run` (threads, compiled, pipe-MtoM, --coop), `plan`, `--resume`, `report`, `auto
--portfolio`, `auto-sim` and installed entry points.

The contract: a technique that misbehaves fails its run alone (exit 1, stored
``verified=false`` with an error naming the technique and the value), a technique that
cannot be used is bad input (one line, exit 2, nothing left behind), a run that verifies
exits 0; a technique's identity (its source, its module's) keeps two versions apart.
Cases named ``i33_<n>_...`` repeat issue 33's defect n.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np

from .colocate import finish, start
from .common import case, failed, hs, ok, usage

A = "techniques"
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
SIZE = ["-k", "2", "-L", "24", "--height", "8", "--width", "16", "--reps", "1"]

TQ = '''
import os, random, sys, threading, time
import numpy as np
from hybridsched import Technique

SIZE = 2


def size():
    return SIZE


class Good(Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        return size()


class Learner(Technique):
    def start(self):
        self.seen = 0

    def chunk(self, remaining, request, worker):
        return 1 + self.seen % 3

    def record(self, worker, first, count, seconds):
        self.seen += 1


class ByParam(Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        return int(self.params["size"])


def returning(value, name):
    class R(Technique):
        def chunk(self, remaining, request, worker):
            return value if request >= 1 else 1
    R.name = name
    R.__qualname__ = R.__name__ = name.capitalize()
    return R


class Liar(int):
    def __lt__(self, other):
        return False


Zero = returning(0, "zero")
Neg = returning(-3, "neg")
Flt = returning(1.5, "flt")
Non = returning(None, "non")
Txt = returning("2", "txt")
Boo = returning(True, "boo")
Lie = returning(Liar(0), "lie")
Huge = returning(2 ** 63 - 1, "huge")
Npi = returning(np.int64(3), "npi")


class Raises(Technique):
    def chunk(self, remaining, request, worker):
        raise ValueError("nope")


class StartRaises(Technique):
    def start(self):
        raise RuntimeError("no start")

    def chunk(self, remaining, request, worker):
        return 1


class RecordRaises(Technique):
    def chunk(self, remaining, request, worker):
        return 1

    def record(self, worker, first, count, seconds):
        raise KeyError("no record")


class Exits(Technique):
    def chunk(self, remaining, request, worker):
        sys.exit(3)


class Stuck(Technique):
    def chunk(self, remaining, request, worker):
        if request >= 1:
            open(os.environ["STUCK_MARK"], "w").close()
            threading.Event().wait()  # held until the case kills it
        return 1


def stuck_kernel(data, first, count):
    if first >= 2:
        open(os.environ["STUCK_MARK"], "w").close()
        threading.Event().wait()  # held until the case kills it
    data[first:first + count].sort(axis=-1)


class NoChunk(Technique):
    pass


class Comma(Technique):
    name = "a,b"

    def chunk(self, remaining, request, worker):
        return 1


class Selector(Technique):
    name = "all"

    def chunk(self, remaining, request, worker):
        return 1


class NeedsArgs(Technique):
    def __init__(self, x):
        self.x = x

    def chunk(self, remaining, request, worker):
        return 1


class DetText(Technique):
    deterministic = "yes"

    def chunk(self, remaining, request, worker):
        return 1


class Dynamic(Technique):
    name = "dynamic"

    def chunk(self, remaining, request, worker):
        return 1
'''


def _tq(tmp: Path, text: str = TQ) -> None:
    (tmp / "tq.py").write_text(text)


def _run(tmp: Path, *argv, out: str = "o.h5", env: dict | None = None, timeout: float = 180):
    _tq(tmp) if not (tmp / "tq.py").exists() else None
    return hs("run", *argv, "-o", out, env={**ENV, **(env or {})}, cwd=tmp, timeout=timeout)


def _runs(path: Path):
    from hybridsched.store import read_runs

    return read_runs(str(path))


def _good(tmp: Path, *argv, n: int = 1) -> str | None:
    p = _run(tmp, *argv)
    problem = ok(p, tmp / "o.h5")
    if problem:
        return problem
    runs = _runs(tmp / "o.h5")
    if len(runs) != n or not runs["verified"].all():
        return f"{len(runs)} runs, verified {list(runs['verified'])}"
    user = runs[np.char.find(runs["technique"].astype(str), ":") >= 0]
    if len(user) and not all(len(h) == 64 for h in user["technique_hash"]):
        return "a user technique's run without its source hash"
    return None


def _fails(tmp: Path, *argv, says: str) -> str | None:
    """The run fails alone: exit 1, stored unverified with ``says`` in its error."""
    p = _run(tmp, *argv)
    problem = failed(p, says)
    if problem:
        return problem
    runs = _runs(tmp / "o.h5")
    if runs["verified"].any() or not all(says.lower() in e.lower() for e in runs["error"]):
        return f"stored: {list(zip(runs['verified'], runs['error']))[:2]}"
    return None


def _refused(tmp: Path, *argv, says: str = "") -> str | None:
    p = _run(tmp, *argv)
    return usage(p, tmp / "o.h5", tmp / "o.h5.lock", says=says)


# --- techniques that work ------------------------------------------------------------

for _name, _argv, _n in (
        ("good_threads", ["-s", "tq:Good", *SIZE], 1),
        ("good_compiled", ["-s", "tq:Good", "--dispatch", "compiled", *SIZE], 1),
        ("good_python_loop", ["-s", "tq:Good", "--dispatch", "python", *SIZE], 1),
        ("good_pipe_mtom", ["-s", "pipe-MtoM:tq:Good", *SIZE], 1),
        ("good_coop", ["-s", "tq:Good", "--coop", *SIZE], 1),
        ("good_with_builtins", ["-s", "serial,tq:Good,guided", *SIZE], 3),
        ("learner_python", ["-s", "tq:Learner", *SIZE], 1),
        ("learner_pipe_mtom", ["-s", "pipe-MtoM:tq:Learner", *SIZE], 1),
        ("param_reaches_technique", ["-s", "tq:ByParam", "--param", "size=5", *SIZE], 1),
        ("huge_chunk_is_cut", ["-s", "tq:Huge", *SIZE], 1),
        ("numpy_integer_chunk", ["-s", "tq:Npi", *SIZE], 1),
        ("auto_portfolio_of_users", ["-s", "auto", "--portfolio", "tq:Good,tq:Learner,guided",
                                     "-k", "2", "-L", "24", "--height", "8", "--width", "16",
                                     "--reps", "4"], 4)):
    def _make(argv=_argv, n=_n):
        def fn(tmp: Path) -> str | None:
            return _good(tmp, *argv, n=n)
        return fn
    _fn = _make()
    _fn.__name__, _fn.__doc__ = _name, f"run {' '.join(_argv)}: exit 0, verified, hashed"
    case(A)(_fn)


@case(A)
def learner_compiled_refused(tmp: Path) -> str | None:
    """--dispatch compiled with a learning technique (record()): refused, one line"""
    return _refused(tmp, "-s", "tq:Learner", "--dispatch", "compiled", *SIZE, says="compiled")


@case(A)
def param_value_with_comma_refused(tmp: Path) -> str | None:
    """--param size=a,b: refused (a run stores key=value,...)"""
    return _refused(tmp, "-s", "tq:ByParam", "--param", "size=a,b", *SIZE)


@case(A)
def plan_a_deterministic_technique(tmp: Path) -> str | None:
    """plan --policy tq:Good --tasks 7: chunks of 2, 2, 2, 1"""
    _tq(tmp)
    p = hs("plan", "--policy", "tq:Good", "--tasks", "7", "--workers", "2", cwd=tmp)
    problem = ok(p)
    if problem:
        return problem
    rows = p.stdout.split()[1:]
    return None if rows == ["-1,0,2", "-1,2,2", "-1,4,2", "-1,6,1"] else f"plan: {rows}"


@case(A)
def plan_a_learning_technique_refused(tmp: Path) -> str | None:
    """plan --policy tq:Learner (not deterministic): refused"""
    _tq(tmp)
    return usage(hs("plan", "--policy", "tq:Learner", "--tasks", "7", "--workers", "2",
                    cwd=tmp), says="deterministic")


# --- techniques that misbehave: the run fails alone ----------------------------------

for _cls, _what in (("Zero", "returned 0"), ("Neg", "returned -3"), ("Flt", "returned 1.5"),
                    ("Non", "returned None"), ("Txt", "returned '2'"), ("Boo", "returned True"),
                    ("Raises", "chunk() raised ValueError"), ("StartRaises", "start() raised"),
                    ("RecordRaises", "record() raised KeyError"), ("Exits", "SystemExit")):
    def _make(cls=_cls, what=_what):
        def fn(tmp: Path) -> str | None:
            return _fails(tmp, "-s", f"tq:{cls}", "--dispatch", "python", *SIZE, says=what)
        return fn
    _fn = _make()
    _fn.__name__ = f"bad_{_cls.lower()}_fails_its_run"
    _fn.__doc__ = f"tq:{_cls}: exit 1, stored unverified, '{_what}'"
    case(A)(_fn)


@case(A)
def i33_15_int_subclass_whose_lt_lies(tmp: Path) -> str | None:
    """chunk() returns Liar(0), an int whose '<' says no: the run fails (was an endless loop)"""
    return _fails(tmp, "-s", "tq:Lie", "--dispatch", "python", *SIZE, says="returned 0")


@case(A)
def a_bad_technique_does_not_stop_the_study(tmp: Path) -> str | None:
    """-s tq:Neg,dynamic: the neg run fails, dynamic still runs and verifies (exit 1)"""
    p = _run(tmp, "-s", "tq:Neg,dynamic", *SIZE)
    problem = failed(p, "neg")
    if problem:
        return problem
    runs = _runs(tmp / "o.h5")
    return None if list(runs["verified"]) == [False, True] else f"verified {list(runs['verified'])}"


# --- techniques that cannot be used: bad input ---------------------------------------

for _cls, _what in (("NoChunk", "chunk()"), ("Comma", "name"), ("Selector", "word of -s"),
                    ("NeedsArgs", "needs x"), ("DetText", "deterministic"),
                    ("Dynamic", "already a built-in"), ("Missing", "Missing"),
                    ("SIZE", "int 2 is not"), ("size", "function size")):
    def _make(cls=_cls, what=_what):
        def fn(tmp: Path) -> str | None:
            return _refused(tmp, "-s", f"tq:{cls}", *SIZE, says=what)
        return fn
    _fn = _make()
    _fn.__name__ = f"unusable_{_cls.lower()}_refused"
    _fn.__doc__ = f"-s tq:{_cls}: one line naming '{_what}', exit 2, nothing left"
    case(A)(_fn)


@case(A)
def i33_22_a_module_is_named_whole(tmp: Path) -> str | None:
    """-s hybridsched.core:registry (a module): named whole, not a repr cut mid-path"""
    return _refused(tmp, "-s", "hybridsched.core:registry", *SIZE,
                    says="module hybridsched.core.registry is not")


@case(A)
def module_that_does_not_import(tmp: Path) -> str | None:
    """-s broken:X where broken.py raises at import: one line"""
    (tmp / "broken.py").write_text("raise RuntimeError('broken module')\n")
    return _refused(tmp, "-s", "broken:X", *SIZE, says="broken")


# --- identity: two versions are never one ---------------------------------------------

def _edit(tmp: Path, old: str, new: str) -> None:
    text = (tmp / "tq.py").read_text()
    assert old in text, old
    (tmp / "tq.py").write_text(text.replace(old, new))


@case(A)
def resume_unchanged_technique(tmp: Path) -> str | None:
    """run, then --resume with one more repetition and the module untouched: exit 0, 2 runs"""
    argv = ["-s", "tq:Good", "-k", "2", "-L", "24", "--height", "8", "--width", "16"]
    if (p := ok(_run(tmp, *argv, "--reps", "1"), tmp / "o.h5")):
        return p
    if (p := ok(_run(tmp, *argv, "--reps", "2", "--resume"), tmp / "o.h5")):
        return "resume: " + p
    return None if len(_runs(tmp / "o.h5")) == 2 else "not 2 runs"


for _name, _old, _new in (("i33_5_module_constant_edited", "SIZE = 2", "SIZE = 3"),
                          ("i33_5_module_helper_edited", "    return SIZE\n", "    return SIZE + 1\n"),
                          ("class_body_edited", "        return size()\n", "        return size() + 1\n")):
    def _make(old=_old, new=_new):
        def fn(tmp: Path) -> str | None:
            argv = ["-s", "tq:Good", "-k", "2", "-L", "24", "--height", "8", "--width", "16"]
            if (p := ok(_run(tmp, *argv, "--reps", "1"), tmp / "o.h5")):
                return p
            before = (tmp / "o.h5").read_bytes()
            _edit(tmp, old, new)
            p = _run(tmp, *argv, "--reps", "2", "--resume")
            problem = usage(p, says="changed since its stored runs")
            if problem:
                return "resume after the edit: " + problem
            return None if (tmp / "o.h5").read_bytes() == before else "the study changed"
        return fn
    _fn = _make()
    _fn.__name__ = _name
    _fn.__doc__ = f"edit {_old.strip()!r} in tq.py, then --resume: refused, the study untouched"
    case(A)(_fn)


@case(A)
def i33_5_report_keeps_two_module_versions_apart(tmp: Path) -> str | None:
    """two studies, SIZE edited between them, merged: report shows good@<hash> twice"""
    argv = ["-s", "tq:Good", "-k", "2", "-L", "24", "--height", "8", "--width", "16", "--reps", "1"]
    if (p := ok(_run(tmp, *argv, out="a.h5"), tmp / "a.h5")):
        return p
    _edit(tmp, "SIZE = 2", "SIZE = 4")
    if (p := ok(_run(tmp, *argv, out="b.h5"), tmp / "b.h5")):
        return p
    if (p := ok(hs("merge", "a.h5", "b.h5", "-o", "m.h5", cwd=tmp), tmp / "m.h5")):
        return "merge: " + p
    r = hs("report", "m.h5", "--no-plots", cwd=tmp)
    if (p := ok(r)):
        return "report: " + p
    return None if r.stdout.count("good@") >= 2 else "report pools the two versions"


# --- auto and auto-sim with a failing member ----------------------------------------------

@case(A)
def i33_14_auto_drops_a_failing_member(tmp: Path) -> str | None:
    """auto --portfolio tq:Neg,fac2,guided --reps 5: one run fails, four verify (all 5 failed)"""
    p = _run(tmp, "-s", "auto", "--portfolio", "tq:Neg,fac2,guided", "-k", "2", "-L", "24",
             "--height", "8", "--width", "16", "--reps", "5")
    if p.returncode != 1 or "Traceback" in p.stderr:
        return f"exit {p.returncode}: {p.stderr[-200:]}"
    runs = _runs(tmp / "o.h5")
    if list(runs["verified"]) != [False, True, True, True, True]:
        return f"verified {list(runs['verified'])}"
    return None if "dropped from the portfolio: neg" in runs["notes"][-1] else "not recorded"


@case(A)
def i33_13_auto_sim_drops_and_names_a_failing_member(tmp: Path) -> str | None:
    """auto-sim --portfolio tq:Good,tq:Neg: every run verified, neg named as dropped"""
    p = _run(tmp, "-s", "auto-sim", "--portfolio", "tq:Good,tq:Neg", "-k", "2", "-L", "24",
             "--height", "8", "--width", "16", "--reps", "3")
    if (problem := ok(p, tmp / "o.h5")):
        return problem
    runs = _runs(tmp / "o.h5")
    if not runs["verified"].all():
        return f"errors: {list(runs['error'])}"
    return None if "dropped from the portfolio: neg" in runs["notes"][0] else "neg not named"


@case(A)
def i33_13_auto_sim_all_members_failing(tmp: Path) -> str | None:
    """auto-sim --portfolio tq:Neg,tq:Zero: exit 1 naming the members, not the profiling run"""
    p = _run(tmp, "-s", "auto-sim", "--portfolio", "tq:Neg,tq:Zero", *SIZE)
    problem = failed(p, "every technique of the portfolio failed")
    if problem:
        return problem
    return "blames the profiling run" if "profiling run" in p.stderr else None


# --- a worker stuck in user code, and one signal ------------------------------------------

def _stuck(name: str, sig: int, code: int, kernel: bool):
    def fn(tmp: Path) -> str | None:
        _tq(tmp)
        mark = tmp / "stalled"
        argv = (["-s", "serial,dynamic", "--kernel", "tq:stuck_kernel", "--verify", "none"]
                if kernel else ["-s", "serial,tq:Stuck"])
        p = start("run", *argv, *SIZE, "-o", "o.h5", cwd=tmp, env={"STUCK_MARK": str(mark),
                                                                 "PYTHONPATH": str(tmp)})
        deadline = time.monotonic() + 120
        while not mark.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if not mark.exists():
            r = finish(p, 5)
            return f"never stalled: exit {r.returncode} {r.stderr[-200:]}"
        p.send_signal(sig)
        t0 = time.monotonic()
        r = finish(p, 60)
        if r.returncode != code:
            return f"exit {r.returncode}, not {code}, after {time.monotonic() - t0:.1f} s"
        if "abandoned worker thread" not in r.stderr or "Traceback" in r.stderr:
            return f"stderr: {r.stderr[-300:]}"
        if len(_runs(tmp / "o.h5")) != 1:
            return "the completed serial run was not kept"
        return "the lock file is left" if (tmp / "o.h5.lock").exists() else None
    fn.__name__ = name
    fn.__doc__ = (f"signal {int(sig)} while a worker is stuck in a {'kernel' if kernel else 'technique'}: "
                  f"exit {code} within the grace, said, the serial run kept, no lock")
    case(A)(fn)


_stuck("i33_2_sigint_stuck_technique", signal.SIGINT, 130, False)
_stuck("i33_2_sigterm_stuck_technique", signal.SIGTERM, 143, False)
_stuck("i33_2_sigint_stuck_python_kernel", signal.SIGINT, 130, True)
_stuck("i33_2_sigterm_stuck_python_kernel", signal.SIGTERM, 143, True)


# --- installed techniques ---------------------------------------------------------------

def _installed(tmp: Path, entries: str) -> dict:
    site = tmp / "site"
    (site / "epkg").mkdir(parents=True)
    (site / "epkg" / "__init__.py").write_text(TQ)
    info = site / "epkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: epkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hybridsched.techniques]\n" + entries)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


@case(A)
def i33_21_list_marks_a_shadowed_entry_point(tmp: Path) -> str | None:
    """an entry point named dynamic: list says the built-in shadows it"""
    env = _installed(tmp, "dynamic = epkg:Good\nmine = epkg:Good\n")
    p = hs("list", env=env, cwd=tmp)
    if (problem := ok(p)):
        return problem
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("dynamic ") and "epkg" in ln]
    return None if line and "shadowed" in line[0] else f"listed as: {line}"


@case(A)
def i33_21_plan_takes_an_installed_name(tmp: Path) -> str | None:
    """plan --policy mine (an entry point): the hand-out, as -s mine runs it"""
    env = _installed(tmp, "mine = epkg:Good\n")
    p = hs("plan", "--policy", "mine", "--tasks", "5", "--workers", "2", env=env, cwd=tmp)
    if (problem := ok(p)):
        return problem
    return None if p.stdout.split()[1:] == ["-1,0,2", "-1,2,2", "-1,4,1"] else p.stdout


@case(A)
def installed_technique_runs(tmp: Path) -> str | None:
    """-s mine,pipe-MtoM:mine (an entry point): exit 0, both verified"""
    env = _installed(tmp, "mine = epkg:Good\n")
    p = hs("run", "-s", "mine,pipe-MtoM:mine", *SIZE, "-o", "o.h5", env={**ENV, **env}, cwd=tmp)
    if (problem := ok(p, tmp / "o.h5")):
        return problem
    runs = _runs(tmp / "o.h5")
    return None if len(runs) == 2 and runs["verified"].all() else "not two verified runs"


@case(A)
def installed_technique_that_fails_to_load(tmp: Path) -> str | None:
    """an entry point whose module raises: -s broken is one line naming it"""
    env = _installed(tmp, "broken = epkg.nothere:X\n")
    p = hs("run", "-s", "broken", *SIZE, "-o", "o.h5", env={**ENV, **env}, cwd=tmp)
    return usage(p, tmp / "o.h5", says="failed to load")


@case(A)
def parallel_for_with_a_technique_instance(tmp: Path) -> str | None:
    """parallel_for(kernel, data, tq.Good()) and with the class and the reference: verified"""
    import sys

    import numpy as np

    import hybridsched

    _tq(tmp)
    sys.path.insert(0, str(tmp))
    try:
        sys.modules.pop("tq", None)
        import tq  # noqa: F401

        for sched in (tq.Good(), tq.Good, "tq:Good"):
            data = np.random.default_rng(0).integers(0, 255, (30, 4, 8), dtype=np.uint8)
            r = hybridsched.parallel_for("quicksort", data, sched, k=2)
            if not r.verified:
                return f"{sched!r}: not verified"
    finally:
        sys.path.remove(str(tmp))
        sys.modules.pop("tq", None)
    return None
