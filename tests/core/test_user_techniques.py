"""Issue 24: users' own techniques (hybridsched.Technique) on every backend -- the contract,
its hand-outs on threads (both dispatches), pipe-MtoM, --coop, MPI --split and the API,
what is stored, the errors, the entry-point path and --resume after a source change."""
from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
import textwrap
import time

import h5py
import numba
import numpy as np
import pytest

import hybridsched
from hybridsched.core import contract, registry, usertech
from hybridsched.core import techniques as tq
from hybridsched.core.techniques import adaptive, dispense
from hybridsched.core.techniques.profiled import Profile
from hybridsched.errors import UsageError
from hybridsched.records import param_value
from repo import ROOT

HS = [sys.executable, "-m", "hybridsched"]
EXAMPLES = os.path.join(ROOT, "examples", "techniques")

MODULE = '''
import hybridsched


class Quarter(hybridsched.Technique):
    """Guided with a divisor of four."""
    name = "quarter_t"
    deterministic = True

    def chunk(self, remaining, request, worker):
        return max(self.min_chunk, -(-remaining // (int(self.params.get("divisor", 4)) * self.workers)))


class Starts(hybridsched.Technique):
    """Chunks as large as the number of start() calls so far: shows one object per loop."""
    name = "starts_t"

    def start(self):
        self.starts = getattr(self, "starts", 0) + 1

    def chunk(self, remaining, request, worker):
        return self.starts


class Moody(hybridsched.Technique):
    name = "moody_t"

    def chunk(self, remaining, request, worker):
        return 2 if worker >= 0 else 1
'''


@numba.njit(nogil=True, cache=True)
def add_one(data, first, count):
    for i in range(first, first + count):
        data[i] += 1.0


@pytest.fixture
def techmod(tmp_path, monkeypatch):
    """A module of techniques in a fresh directory (imported by name, as -s would)."""
    name = f"techmod_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


@pytest.fixture(autouse=True)
def _forget_user_techniques():
    """Each test registers its own techniques; none outlives it."""
    yield
    for key in [k for k, v in registry.SCHEDULERS.items() if v.user is not None]:
        del registry.SCHEDULERS[key]


def hs(*argv, cwd, env=None, timeout=120):
    return subprocess.run(HS + list(argv), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def one_line_error(p):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hybridsched"), p.stderr
    return lines[0]


def pieces(trace) -> list[tuple[int, int]]:
    return sorted((int(f), int(c)) for f, c in zip(trace["first"], trace["count"]))


# --- the contract ----------------------------------------------------------------------

def test_the_contract_is_public_and_small():
    assert hybridsched.Technique is contract.Technique
    assert set(inspect.signature(contract.Technique.chunk).parameters) == {
        "self", "remaining", "request", "worker"}

    class MyRule(hybridsched.Technique):
        def chunk(self, remaining, request, worker):
            return 1
    assert MyRule.name == "myrule" and MyRule.deterministic is False


def test_hand_outs_identical_between_plan_threads_compiled_and_pipes(techmod, tmp_path):
    """plan, the thread trace in both dispatches and the pipe producer hand out the same chunks."""
    planned = [(r.first, r.count) for r in hybridsched.plan(f"{techmod}:Quarter", 203, 2, 3)]
    assert sum(c for _, c in planned) == 203 and len(planned) > 10
    with hybridsched.shared_array((203, 4), np.float64) as a:
        for sched, dispatch in ((f"{techmod}:Quarter", "python"), (f"{techmod}:Quarter", "compiled"),
                                (f"pipe-MtoM:{techmod}:Quarter", "auto")):
            r = hybridsched.parallel_for(add_one, a, scheduler=sched, k=2, chunk=3, dispatch=dispatch)
            assert pieces(r.trace) == sorted(planned), (sched, dispatch)
            assert ("dispatch=compiled" in r.record.notes) == (dispatch == "compiled")
            assert r.record.config.scheduler == ("pipe-MtoM:quarter_t" if "pipe" in sched
                                                 else "quarter_t")
        assert np.all(a == 3.0)


def test_one_object_per_loop_started_per_repetition_and_record_hears_each_chunk(techmod):
    tech = sys.modules.get(techmod) or __import__(techmod)
    log = []

    class Logged(tech.Quarter):
        name = "logged_t"
        deterministic = False

        def start(self):
            log.append(("start", self.tasks, self.workers, self.min_chunk, dict(self.params)))

        def record(self, worker, first, count, seconds):
            log.append(("record", worker, first, count, seconds))

    inst = Logged()
    data = np.zeros((60, 3))
    r1 = hybridsched.parallel_for(add_one, data, scheduler=inst, k=2, chunk=2, params={"divisor": 2})
    r2 = hybridsched.parallel_for(add_one, data, scheduler=inst, k=2, chunk=2, params={"divisor": 2})
    starts = [e for e in log if e[0] == "start"]
    assert starts == [("start", 60, 2, 2, {"divisor": 2})] * 2
    records = [e for e in log if e[0] == "record"]
    traced = pieces(r1.trace) + pieces(r2.trace)
    assert sorted((f, c) for _, _, f, c, _ in records) == sorted(traced)
    by_piece = {(int(f), int(c)): e - s for f, c, s, e in
                zip(r1.trace["first"], r1.trace["count"], r1.trace["start"], r1.trace["end"])}
    for _, w, f, c, sec in records[:len(r1.trace)]:
        assert w in (0, 1) and sec == pytest.approx(by_piece[(f, c)], abs=1e-6)
    assert "dispatch=compiled" not in r1.record.notes  # record() needs the Python loop


def test_state_carries_across_the_repetitions_of_a_run(techmod, tmp_path):
    """The same object serves every repetition of one configuration: start() counts them."""
    out = tmp_path / "s.h5"
    p = hs("run", "-s", f"{techmod}:Starts", "-k", "2", "-L", "30", "--height", "8",
           "--width", "8", "--reps", "3", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
        for row in runs:
            trace = h5[f"detail/{row['run_id']:06d}/trace"][()]
            sizes = sorted(set(trace["count"].tolist()))
            assert max(sizes) == row["rep"] + 1, (row["rep"], sizes)
    assert list(runs["scheduler"]) == [b"starts_t"] * 3


def test_stored_name_reference_hash_and_params(techmod, tmp_path):
    out = tmp_path / "q.h5"
    p = hs("run", "-s", f"{techmod}:Quarter,pipe-MtoM:{techmod}:Quarter", "-k", "2", "-L", "40",
           "--height", "8", "--width", "8", "--reps", "1", "--param", "divisor=3", "-o", str(out),
           cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    module = sys.modules.get(techmod, __import__(techmod))
    source = inspect.getsource(module.Quarter) + "\0module " + techmod + "\0" + inspect.getsource(module)
    with h5py.File(out) as h5:
        assert h5.attrs["format_version"] >= 2  # the technique fields came with 2
        runs = h5["runs"][()]
    assert list(runs["scheduler"]) == [b"quarter_t", b"pipe-MtoM:quarter_t"]
    assert set(runs["technique"]) == {f"{techmod}:Quarter".encode()}
    # the class and the module that defines it (issue 33 item 5)
    assert set(runs["technique_hash"]) == {hashlib.sha256(source.encode()).hexdigest().encode()}
    assert set(runs["params"]) == {b"divisor=3"} and runs["verified"].all()
    assert not runs["simulated"].any()


def test_coop_runs_a_user_technique(techmod, tmp_path):
    out = tmp_path / "c.h5"
    p = hs("run", "-s", f"{techmod}:Quarter", "--coop", "-k", "3", "-L", "30", "--height", "8",
           "--width", "8", "--reps", "1", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        row = h5["runs"][0]
    assert row["coop"] and row["verified"] and row["scheduler"] == b"quarter_t"


def test_mpi_split_by_a_user_technique(mpi, techmod, tmp_path):
    out = tmp_path / "m.h5"
    cmd = mpi.argv(2) + HS + ["run", "-s", f"dynamic,{techmod}:Quarter", "--split",
                              f"{techmod}:Quarter", "-k", "1", "-L", "40", "--height", "8",
                              "--width", "8", "--reps", "1", "-o", str(out)]
    p = mpi.call(cmd, cwd=tmp_path, env=mpi.env(), timeout=180)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert runs["verified"].all() and set(runs["P"]) == {2}
    assert all(n.startswith(f"split={techmod}:Quarter".encode()) for n in runs["notes"])


# --- errors ------------------------------------------------------------------------------

def _returning(value):
    class Bad(hybridsched.Technique):
        name = "bad_t"

        def chunk(self, remaining, request, worker):
            if isinstance(value, Exception):
                raise value
            return value if request == 2 else 1
    return Bad


@pytest.mark.parametrize("value", [0, -3, 1.5, None, "2", True, ValueError("nope")])
def test_a_bad_chunk_fails_the_run_naming_technique_worker_and_value(value):
    with pytest.raises(hybridsched.RunFailed) as err:
        hybridsched.parallel_for(add_one, np.zeros((20, 2)), scheduler=_returning(value), k=2)
    text = str(err.value)
    assert "technique bad_t" in text and "worker" in text
    assert ("nope" if isinstance(value, Exception) else repr(value)) in text


class _LyingInt(int):
    """0 that says it is not less than anything (issue 33 item 15)."""

    def __lt__(self, other):
        return False

    def __int__(self):
        return 3


class _LyingInt64(np.int64):
    def __int__(self):
        return 3

    def item(self):
        return 3


@pytest.mark.parametrize("value", [_LyingInt(0), _LyingInt64(0)], ids=["int", "int64"])
def test_an_integer_whose_methods_lie_is_checked_by_the_value_it_holds(value):
    """Issue 33 item 15: an int subclass whose '<' lies passed the check (the raw value was
    compared, int(value) used): an endless loop of empty claims."""
    with pytest.raises(hybridsched.RunFailed, match="technique bad_t: chunk\\(\\) returned (_Lying)?"):
        hybridsched.parallel_for(add_one, np.zeros((20, 2)), scheduler=_returning(value), k=2,
                                 dispatch="python")


def test_numpy_integers_and_too_large_values_are_accepted():
    r = hybridsched.parallel_for(add_one, np.zeros((20, 2)), scheduler=_returning(np.int64(100)), k=2)
    assert pieces(r.trace) == [(0, 1), (1, 1), (2, 18)]


@pytest.mark.parametrize("ref, what", [
    ("no_such_module_xyz:Quarter", "cannot import"),
    ("os:path", "is not a hybridsched.Technique"),
    ("hybridsched.core.contract:Technique", "is not a hybridsched.Technique"),
    ("no_colon_here", "expected package.module:Class"),
])
def test_references_that_are_not_techniques_are_refused(ref, what):
    with pytest.raises(UsageError, match=what):
        usertech.resolve(ref)


def test_name_of_a_builtin_or_of_another_technique_is_refused(techmod):
    class Guided(hybridsched.Technique):
        name = "guided"

        def chunk(self, remaining, request, worker):
            return 1
    with pytest.raises(UsageError, match="already a built-in scheduler"):
        registry.lookup(Guided)
    registry.lookup(f"{techmod}:Quarter")

    class Other(hybridsched.Technique):
        name = "quarter_t"

        def chunk(self, remaining, request, worker):
            return 1
    with pytest.raises(UsageError, match="already technique"):
        registry.lookup(Other)


def test_non_deterministic_techniques_cannot_be_planned_or_split(techmod):
    with pytest.raises(UsageError, match="not deterministic"):
        hybridsched.plan(f"{techmod}:Moody", 10, 2)
    from hybridsched.mpi.runs import check_split
    from hybridsched.records import RunConfig

    with pytest.raises(UsageError, match="not deterministic"):
        check_split([RunConfig("dynamic", 1, 10, 8, 8)], 2, f"{techmod}:Moody")


def test_cli_errors_are_one_line(techmod, tmp_path):
    (tmp_path / f"{techmod}.py").write_text(MODULE)
    assert "expected KEY=VALUE" in one_line_error(hs("run", "-s", f"{techmod}:Quarter", "--param",
                                                    "divisor", cwd=tmp_path))
    assert "not deterministic" in one_line_error(hs("plan", "--policy", f"{techmod}:Moody",
                                                   "-L", "10", "-k", "2", cwd=tmp_path))
    (tmp_path / "nochunk.py").write_text("import hybridsched\nclass N(hybridsched.Technique):\n    pass\n")
    assert "does not define chunk()" in one_line_error(hs("run", "-s", "nochunk:N", cwd=tmp_path))
    line = one_line_error(hs("run", "-s", "nope_mod_zz:Quarter", cwd=tmp_path))
    assert "cannot import 'nope_mod_zz'" in line
    line = one_line_error(hs("run", "-s", "dynamic", "--param", "foo=1", "-L", "10",
                             "--height", "8", "--width", "8", cwd=tmp_path))
    assert "--param foo" in line


def test_param_values_parse_as_numbers_or_text():
    assert [param_value(v) for v in ("3", "2.5", "abc")] == [3, 2.5, "abc"]


# --- installed techniques (entry points) and --resume -----------------------------------

def _installed(tmp_path, body: str, entries: str = "tinytech = tinytech_pkg:Tiny\n") -> dict:
    """A tiny installed distribution contributing technique 'tinytech' (a dist-info on the
    path), or the ``entries`` given."""
    pkg = tmp_path / "site"
    (pkg / "tinytech_pkg").mkdir(parents=True)
    (pkg / "tinytech_pkg" / "__init__.py").write_text(body)
    info = pkg / "tinytech_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tinytech-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hybridsched.techniques]\n" + entries)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(pkg), os.environ.get("PYTHONPATH")]))}


TINY = textwrap.dedent('''
    import hybridsched

    class Tiny(hybridsched.Technique):
        name = "tiny"
        deterministic = True

        def chunk(self, remaining, request, worker):
            return 3
''')


def test_list_marks_a_shadowed_entry_point_and_plan_takes_an_installed_name(tmp_path):
    """Issue 33 item 21: `list` showed an entry point named like a built-in unmarked, and
    `plan --policy NAME` refused an installed name that `-s NAME` accepts."""
    env = _installed(tmp_path, TINY, "tinytech = tinytech_pkg:Tiny\ndynamic = tinytech_pkg:Tiny\n")
    p = hs("list", cwd=tmp_path, env=env)
    lines = [ln for ln in p.stdout.splitlines() if "tinytech_pkg:Tiny" in ln]
    assert len(lines) == 2 and "shadowed by the built-in dynamic" in lines[0], p.stdout
    assert "shadowed" not in lines[1]
    p = hs("plan", "--policy", "tinytech", "--tasks", "7", "--workers", "2", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["worker,first,count", "-1,0,3", "-1,3,3", "-1,6,1"]


def test_an_installed_technique_is_listed_and_runs(tmp_path):
    env = _installed(tmp_path, TINY)
    p = hs("list", cwd=tmp_path, env=env)
    assert p.returncode == 0 and "tinytech" in p.stdout and "tinytech_pkg:Tiny" in p.stdout
    out = tmp_path / "t.h5"
    p = hs("run", "-s", "tinytech,pipe-MtoM:tinytech", "-k", "2", "-L", "20", "--height", "8",
           "--width", "8", "--reps", "1", "-o", str(out), cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert list(runs["scheduler"]) == [b"tiny", b"pipe-MtoM:tiny"]
    assert set(runs["technique"]) == {b"tinytech_pkg:Tiny"} and runs["verified"].all()


def test_an_entry_point_that_fails_to_load_is_one_line(tmp_path):
    env = _installed(tmp_path, "raise RuntimeError('broken package')\n")
    line = one_line_error(hs("run", "-s", "tinytech", "-L", "10", cwd=tmp_path, env=env))
    assert "failed to load" in line and "broken package" in line


def test_resume_refuses_a_changed_technique(tmp_path):
    (tmp_path / "rtech.py").write_text(MODULE)
    out = tmp_path / "r.h5"
    args = ["run", "-s", "rtech:Quarter", "-k", "2", "-L", "20", "--height", "8", "--width", "8",
            "-o", str(out)]
    assert hs(*args, "--reps", "1", cwd=tmp_path).returncode == 0
    assert hs(*args, "--reps", "2", "--resume", cwd=tmp_path).returncode == 0  # unchanged: fine
    (tmp_path / "rtech.py").write_text(MODULE.replace("divisor\", 4", "divisor\", 5"))
    line = one_line_error(hs(*args, "--reps", "3", "--resume", cwd=tmp_path))
    assert "technique quarter_t (rtech:Quarter) changed" in line
    with h5py.File(out) as h5:
        assert len(h5["runs"]) == 2  # nothing added


MODULE_CONSTANT = '''
import hybridsched

SIZE = 2


def size():
    return SIZE


class Sized(hybridsched.Technique):
    deterministic = True

    def chunk(self, remaining, request, worker):
        return size()
'''


def test_a_change_of_a_module_constant_or_helper_changes_the_identity(tmp_path):
    """Issue 33 item 5: the hash covered the class only, so editing the constant or helper
    that chunk() uses was accepted by --resume and pooled by report."""
    (tmp_path / "ctech.py").write_text(MODULE_CONSTANT)
    out = tmp_path / "c.h5"
    args = ["run", "-s", "ctech:Sized", "-k", "2", "-L", "20", "--height", "8", "--width", "8",
            "-o", str(out)]
    assert hs(*args, "--reps", "1", cwd=tmp_path).returncode == 0
    for edit in ("SIZE = 3", "    return SIZE + 1"):
        changed = MODULE_CONSTANT.replace("SIZE = 2", edit) if edit.startswith("SIZE") else \
            MODULE_CONSTANT.replace("    return SIZE\n", edit + "\n")
        (tmp_path / "ctech.py").write_text(changed)
        line = one_line_error(hs(*args, "--reps", "2", "--resume", cwd=tmp_path))
        assert "technique sized (ctech:Sized) changed since its stored runs" in line
    with h5py.File(out) as h5:
        assert len(h5["runs"]) == 1


def test_a_study_hashed_by_the_class_alone_is_not_resumed_as_unchanged(tmp_path):
    """A study written before module hashing stored the class's hash: --resume cannot rule
    out a change elsewhere in the module, and says so."""
    (tmp_path / "ctech.py").write_text(MODULE_CONSTANT)
    out = tmp_path / "old.h5"
    args = ["run", "-s", "ctech:Sized", "-k", "2", "-L", "20", "--height", "8", "--width", "8",
            "-o", str(out)]
    assert hs(*args, "--reps", "1", cwd=tmp_path).returncode == 0
    sys.path.insert(0, str(tmp_path))
    try:
        import ctech
        legacy = usertech.class_source_hash(ctech.Sized)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ctech", None)
    with h5py.File(out, "r+") as h5:
        rows = h5["runs"][()]
        rows["technique_hash"] = legacy.encode()
        h5["runs"][...] = rows
    line = one_line_error(hs(*args, "--reps", "2", "--resume", cwd=tmp_path))
    assert "identified by its class's source alone" in line


@pytest.mark.parametrize("opt", ["--from", "--validate"])
def test_simulate_refuses_a_technique_changed_since_its_runs(tmp_path, opt):
    """Issue 33 item 6: simulate --from / --validate re-simulated the new code over the old
    code's measurements without a word."""
    (tmp_path / "ctech.py").write_text(MODULE_CONSTANT)
    out = tmp_path / "m.h5"
    assert hs("run", "-s", "serial,ctech:Sized", "-k", "2", "-L", "20", "--height", "8",
              "--width", "8", "--reps", "1", "-o", str(out), cwd=tmp_path).returncode == 0
    sim = ["simulate", opt, str(out), "-o", str(tmp_path / "s.h5")]
    assert hs(*sim, cwd=tmp_path).returncode == 0, "unchanged: simulated"
    (tmp_path / "ctech.py").write_text(MODULE_CONSTANT.replace("SIZE = 2", "SIZE = 5"))
    line = one_line_error(hs(*sim, "--overwrite", cwd=tmp_path))
    assert f"{opt} {out}: cannot re-simulate its runs: technique sized (ctech:Sized) changed" in line


def test_report_keeps_two_versions_apart():
    from hybridsched.results.data import versions_apart

    runs = np.zeros(4, [("scheduler", "U64"), ("technique_hash", "U64"), ("k", "i4")])
    runs["scheduler"] = ["q", "q", "dynamic", "q"]
    runs["technique_hash"] = ["aa" * 32, "bb" * 32, "", "aa" * 32]
    out = versions_apart(runs)
    assert list(out["scheduler"]) == ["q@aaaaaaaa", "q@bbbbbbbb", "dynamic", "q@aaaaaaaa"]
    assert versions_apart(runs[[0, 3]]) is not None and list(versions_apart(runs[[0, 3]])["scheduler"]) == ["q", "q"]


# --- the built-ins through the contract (issue 24 item 5) --------------------------------

PROFILE = Profile(1e-4, 3e-5, h=2e-6)


class RuleAsTechnique(hybridsched.Technique):
    """A built-in fixed technique expressed through the contract: chunk i from its rule."""
    deterministic = True

    def __init__(self, name, profile=None):
        self.tq_name, self.profile = name, profile

    def start(self):
        self.rule = tq.rule(self.tq_name, self.tasks, self.workers, self.min_chunk,
                            {k: v for k, v in self.params.items()}, self.profile)

    def chunk(self, remaining, request, worker):
        return self.rule.size(request, remaining)


@pytest.mark.parametrize("name", tq.FIXED)
@pytest.mark.parametrize("n, p, c", [(1000, 4, 1), (97, 3, 5), (5000, 24, 2), (50, 1, 1)])
def test_every_fixed_builtin_through_the_contract_hands_out_the_same(name, n, p, c):
    tech = RuleAsTechnique(name, PROFILE)
    contract.configure(tech, n, p, c, {})
    assert contract.hand_out(tech, n).tolist() == tq.chunk_sizes(name, n, p, c, None, PROFILE).tolist()


class LearnerAsTechnique(hybridsched.Technique):
    """An LB4OMP learner (AWF-B/C/D/E, AF, ...) through the contract: chunk() asks it at the
    request's time, record() feeds it each chunk's time."""

    def __init__(self, learner, clock):
        self.learner, self.clock = learner, clock

    def chunk(self, remaining, request, worker):
        return max(1, self.learner.size(worker, remaining, self.clock()))

    def record(self, worker, first, count, seconds):
        self.learner.done(worker, count, seconds)


@pytest.mark.parametrize("name", ["awf_b", "awf_c", "awf_d", "awf_e", "af", "af_a", "bold", "wf"])
def test_adaptive_builtins_through_the_contract_hand_out_the_same(name):
    """Both dispensers driven by the same claims and times give the same chunks (AWF's
    cross-execution history and the profiling run are what the contract leaves to start())."""
    n, p = 3000, 3
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    params = tq.check_params(None)
    cls = adaptive.LEARNERS[name]
    native = dispense.LearnerCounter(cls(n, p, 1, PROFILE, dict(params)), clock)
    wrapped = dispense.TechniqueCounter(LearnerAsTechnique(cls(n, p, 1, PROFILE, dict(params)), clock), n)
    speeds = [1e-4, 1.5e-4, 3e-4]
    got = {"native": [], "wrapped": []}
    for label, d in (("native", native), ("wrapped", wrapped)):
        now[0], w, rng = 0.0, 0, np.random.default_rng(1)
        while (c := d.claim(w)) is not None:
            got[label].append((w, c))
            seconds = c[1] * speeds[w] * (1 + 0.1 * rng.random())
            now[0] += seconds
            d.done(w, c[1], seconds)
            w = (w + 1) % p
    assert got["native"] == got["wrapped"] and len(got["native"]) >= 5


def test_examples_run_and_the_learner_learns(tmp_path):
    out = tmp_path / "e.h5"
    p = hs("run", "-s", "speedweighted:SpeedWeighted,quarter:Quarter", "-k", "2", "-L", "60",
           "--height", "8", "--width", "8", "--reps", "2", "--param", "divisor=2", "-o", str(out),
           cwd=EXAMPLES)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert runs["verified"].all() and set(runs["scheduler"]) == {b"speedweighted", b"quarter"}
    p = hs("plan", "--policy", "quarter:Quarter", "-L", "100", "-k", "4", cwd=EXAMPLES)
    sizes = [int(line.split(",")[2]) for line in p.stdout.split()[1:]]
    assert p.returncode == 0 and sizes[:3] == [7, 6, 6] and sum(sizes) == 100


def test_auto_races_a_user_technique_beside_builtins(techmod, tmp_path):
    out = tmp_path / "a.h5"
    p = hs("run", "-s", "auto", "--portfolio", f"{techmod}:Quarter,guided", "-k", "2", "-L", "40",
           "--height", "8", "--width", "8", "--reps", "3", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert set(runs["portfolio"]) == {b"quarter_t,guided"} and runs["verified"].all()
    assert list(runs["technique"][:2]) == [f"{techmod}:Quarter".encode(), b"guided"]
    assert runs["technique_hash"][0] and not runs["technique_hash"][1]
    line = one_line_error(hs("run", "-s", "dynamic", "--portfolio", "guided", "-L", "10",
                             cwd=tmp_path))
    assert "no scheduler of this study is auto" in line


# --- from the hostile review ---------------------------------------------------------------

EXITING = '''
import sys
import hybridsched


class StartExits(hybridsched.Technique):
    name = "startexits_t"

    def start(self):
        sys.exit(4)

    def chunk(self, remaining, request, worker):
        return 1


class NeedsArgs(hybridsched.Technique):
    name = "needsargs_t"

    def __init__(self, x):
        self.x = x

    def chunk(self, remaining, request, worker):
        return 1


class Zero(hybridsched.Technique):
    name = "zero_t"

    def chunk(self, remaining, request, worker):
        return 0
'''


def test_a_technique_calling_sys_exit_fails_its_run_alone(tmp_path):
    (tmp_path / "ex.py").write_text(EXITING)
    out = tmp_path / "e.h5"
    p = hs("run", "-s", "guided,ex:StartExits,dynamic", "-k", "2", "-L", "20", "--height", "8",
           "--width", "8", "--reps", "1", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert list(runs["verified"]) == [True, False, True]
    assert b"start() raised SystemExit" in runs["error"][1]


def test_constructor_arguments_long_values_and_selector_names_are_bad_input(tmp_path):
    (tmp_path / "ex.py").write_text(EXITING)
    small = ["-k", "2", "-L", "20", "--height", "8", "--width", "8", "--reps", "1"]
    assert "builds a technique without arguments" in one_line_error(
        hs("run", "-s", "ex:NeedsArgs", *small, "-o", "n.h5", cwd=tmp_path))
    assert "bytes a study stores" in one_line_error(
        hs("run", "-s", "guided,dynamic", "--param", "a=" + "x" * 70, "-s", "ex:Zero", *small,
           "-o", "l.h5", cwd=tmp_path))
    assert "--param profile" in one_line_error(
        hs("run", "-s", "ex:Zero", "--param", "profile=1", *small, cwd=tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["ex.py"]

    class Paper(hybridsched.Technique):
        name = "paper"

        def chunk(self, remaining, request, worker):
            return 1
    with pytest.raises(UsageError, match="a word of -s"):
        registry.lookup(Paper)


def test_api_params_are_checked_for_plan_and_for_a_builtin_that_does_not_read_them(techmod):
    with pytest.raises(UsageError, match="expected a dict"):
        hybridsched.plan(f"{techmod}:Quarter", 20, 2, params=[1])
    with pytest.raises(UsageError, match="does not read divisor"):
        hybridsched.parallel_for(add_one, np.zeros((10, 2)), scheduler="guided", params={"divisor": 3})


def test_simulate_fails_a_misbehaving_technique_alone_and_reads_user_studies(tmp_path):
    (tmp_path / "ex.py").write_text(EXITING)
    (tmp_path / "qm.py").write_text(MODULE)
    out = tmp_path / "s.h5"
    p = hs("simulate", "-s", "guided,ex:Zero", "-k", "2", "-L", "20", "--height", "8", "--width",
           "8", "--reps", "1", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 1
    with h5py.File(out) as h5:
        runs = h5["runs"][()]
    assert list(runs["verified"]) == [True, False] and b"chunk() returned 0" in runs["error"][1]
    meas, sim = tmp_path / "m.h5", tmp_path / "f.h5"
    assert hs("run", "-s", "qm:Quarter,guided", "-k", "1,2", "-L", "20", "--height", "8",
              "--width", "8", "--reps", "1", "-o", str(meas), cwd=tmp_path).returncode == 0
    p = hs("simulate", "--from", str(meas), "-o", str(sim), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    with h5py.File(sim) as h5:
        assert set(h5["runs"]["scheduler"]) == {b"quarter_t", b"guided"}


def test_a_reference_to_something_else_is_named_whole():
    """Issue 33 item 22: a module's repr was cut at 60 characters, in the middle of its
    path ('.../python3.1 is not a hybridsched.Technique')."""
    with pytest.raises(UsageError) as err:
        usertech.resolve("hybridsched.core:registry", "scheduler x")
    assert str(err.value) == ("scheduler x: module hybridsched.core.registry is not a "
                              "hybridsched.Technique subclass or instance")
    with pytest.raises(UsageError, match=r"list \[0, 1, 2, .*\.\.\. is not"):
        usertech.resolve(list(range(100)), "scheduler y")


class _ChunkEndsGenerator(hybridsched.Technique):
    def chunk(self, remaining, request, worker):
        raise GeneratorExit("a chunk() that is a generator's")


@pytest.mark.parametrize("scheduler", ["threads", "pipe-MtoM"])
def test_a_base_exception_from_chunk_fails_the_run_not_the_caller(scheduler, tmp_path):
    """A technique's chunk() raising a BaseException that is not an Exception (GeneratorExit)
    in the main process (pipe-MtoM's producer) went through as a traceback (hostile review)."""
    if scheduler == "threads":
        res = hybridsched.parallel_for(add_one, np.zeros((20, 2)), scheduler=_ChunkEndsGenerator,
                                       k=2, verify="none", check=False)
        assert res.verified is False and "GeneratorExit" in res.record.error
        return
    (tmp_path / "genexit.py").write_text(textwrap.dedent("""
        import hybridsched
        class GenExit(hybridsched.Technique):
            def chunk(self, remaining, request, worker):
                raise GeneratorExit("a chunk() that is a generator's")
        """))
    p = hs("run", "-s", "pipe-MtoM:genexit:GenExit", "-k", "2", "-L", "8", "--height", "4",
           "--width", "8", "--reps", "1", "-o", str(tmp_path / "g.h5"), cwd=tmp_path,
           env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])))
    assert "Traceback" not in p.stderr and "GeneratorExit" in p.stderr, p.stderr
    assert p.returncode == 1  # one failed run, stored
