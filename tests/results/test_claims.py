"""The claims (results.claims): synthetic studies written through StudyWriter with chosen
times, N = 2, k in {1, 2 = N, 3 = ⌈4N/3⌉}, two L (100 for the paper's 1000, 1000 for its
10000). BASE is a study where the paper's claims hold; each test changes a few times."""
from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

from hybridsched.core import registry
from hybridsched.records import RunConfig, RunRecord, WORKER_DTYPE
from hybridsched.results import claims
from hybridsched.results.claims.common import VERDICTS
from hybridsched.results.data import load_study, summarise
from hybridsched.results.report import build_report
from hybridsched.store import StudyWriter

S, B = 100, 1000          # the study's smaller and larger L
ON, OFF = True, False


def _base() -> dict:
    t = {}
    for L in (S, B):
        t[("serial", L, 1, ON, 0)] = 1.0
        for s in ("static", "dynamic", "guided", "aimd", "adaptive"):
            t[(s, L, 1, ON, 0)] = 1.0
        # k = N = 2: dynamic σ 1.961 (σE 0.980), guided 0.984, adaptive within 1 % of guided,
        # aimd 3.9 % slower than dynamic, prolific 1.9 % faster than collective
        t.update({("dynamic", L, 2, ON, 0): 0.51, ("guided", L, 2, ON, 0): 0.508,
                  ("adaptive", L, 2, ON, 0): 0.509, ("static", L, 2, ON, 0): 0.51,
                  ("aimd", L, 2, ON, 0): 0.53,
                  ("prolific", L, 2, ON, 0): 0.52, ("collective", L, 2, ON, 0): 0.53,
                  ("prolific", L, 2, OFF, 0): 0.521, ("collective", L, 2, OFF, 0): 0.531,
                  ("pipe-1to1", L, 2, ON, 0): 0.52, ("pipe-1toN", L, 2, ON, 0): 0.52,
                  ("pipe-MtoM", L, 2, ON, 0): 0.52})
        # tuned chunk at k = N: 2 % faster than chunk 1; 1to1 ahead at S, MtoM ahead at B
        t[("pipe-1to1", L, 2, ON, 4)] = 0.50 if L == S else 0.51
        t[("pipe-MtoM", L, 2, ON, 4)] = 0.51 if L == S else 0.50
        t[("pipe-1toN", L, 2, ON, 4)] = 0.51
        # k = 3 = ⌈4N/3⌉ (bound k/⌈k/N⌉ = 1.5): pinned forks and pinned static collapse
        # (0.505/0.74 = 0.68 of dynamic), unpinned ones do not
        t.update({("dynamic", L, 3, ON, 0): 0.505, ("aimd", L, 3, ON, 0): 0.53,
                  ("prolific", L, 3, ON, 0): 0.74, ("collective", L, 3, ON, 0): 0.75,
                  ("prolific", L, 3, OFF, 0): 0.52, ("collective", L, 3, OFF, 0): 0.53,
                  ("static", L, 3, ON, 0): 0.745, ("static", L, 3, OFF, 0): 0.51,
                  ("pipe-1to1", L, 3, ON, 0): 0.508, ("pipe-MtoM", L, 3, ON, 0): 0.507,
                  ("pipe-1toN", L, 3, ON, 0): 0.76})
    return t


def _rec(key, t, rep=0, foreign=0.01, batch=1):
    s, L, k, aff, chunk = key
    fam = registry.get(s).family
    w = np.zeros(k, WORKER_DTYPE)
    w["start"], w["end"], w["user"] = 0.0, t, t * 0.9
    cfg = RunConfig(s, k, L, 8, 8, chunk, aff, rep)
    if batch != 1:
        from dataclasses import replace
        cfg = replace(cfg, pipe_batch=batch)
    r = RunRecord(cfg, fam, t, True, workers=w)
    r.extra["foreign_cpu"] = foreign
    return r


def write(tmp_path, times: dict, foreign=None, name="c.h5", extra=()) -> str:
    """Two repetitions per configuration at exactly the chosen time; ``foreign`` maps keys
    to the share of the CPUs other processes used (default 1 %)."""
    path = str(tmp_path / name)
    with StudyWriter(path, {"N": 2, "cpus_usable": 2, "cpu_model": "test"}, {}) as w:
        for key, t in times.items():
            for rep in range(2):
                w.append(_rec(key, t, rep, (foreign or {}).get(key, 0.01)))
        for r in extra:
            w.append(r)
    return path


def report(path) -> str:
    text, _ = build_report(load_study(path), None)
    return text.split("## The paper's claims")[1]


def lines_of(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "→ **" in ln]


def line(text: str, *parts: str) -> str:
    got = [ln for ln in lines_of(text) if all(p in ln for p in parts)]
    assert len(got) == 1, (parts, got)
    return got[0]


def verdict(ln: str) -> str:
    return re.search(r"→ \*\*(.+?)\*\*", ln).group(1)


@pytest.fixture
def base():
    return _base()


def test_every_claim_reproduces_on_the_paper_like_study(tmp_path, base):
    text = report(write(tmp_path, base))
    # headline claims
    for s in ("dynamic", "guided"):
        for L in (S, B):
            assert verdict(line(text, f"{s} near-ideal", f"L = {L} ")) == "reproduces"
    ln = line(text, "prolific collapses pinned", f"L = {S} ")
    assert "k = 3 = ⌈4N/3⌉ (the paper's 32)" in ln and "the paper's 1000" in ln
    assert "σ 1.351 vs dynamic 1.980 → 0.682 of dynamic (bound k/⌈k/N⌉ = 1.50)" in ln
    assert "roughly 15–16" in ln and verdict(ln) == "reproduces"
    assert verdict(line(text, "pipe-1to1 tuned chunk", f"L = {S} ")) == "reproduces"
    ln = line(text, "AIMD slower than dynamic at k = 2", f"L = {B} ")
    assert "the paper's 10000" in ln and "dynamic 3.9 % faster" in ln and verdict(ln) == "reproduces"
    # §6 statements
    ln = line(text, "pipe-1toN collapses beyond N", f"L = {S} ")
    assert "σ/N = 0.658" in ln and "σ 15.335, σE 0.479" in ln and verdict(ln) == "reproduces"
    ln = line(text, "pipe-1toN collapses beyond N", f"L = {B} ")
    assert "σ 15.909, σE 0.497" in ln
    assert verdict(line(text, "pipe-MtoM sustains", f"L = {B} ")) == "reproduces"
    ln = line(text, "pipe-MtoM far ahead", f"L = {S} ")
    assert "MtoM 49.9 % faster" in ln and "48%" in ln and verdict(ln) == "reproduces"
    ln = line(text, "prolific ≈ 2 % faster", f"L = {S} ")
    assert "prolific 1.9 % faster" in ln and "1.5% better" in ln and verdict(ln) == "reproduces"
    ln = line(text, "the pipe ranking flips")
    assert "1.7%" in ln and verdict(ln) == "reproduces"
    ln = line(text, "guided ≈ adaptive", f"L = {S} ")
    assert "23.497" in ln and verdict(ln) == "reproduces"
    assert verdict(line(text, "prolific affinity on ≈ off", f"L = {S} ")) == "reproduces"
    # pinned forks at k = 3 are slower than unpinned: §6.3's oversubscribed statement fails
    ln = line(text, "prolific affinity helps oversubscribed", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "unpinned faster" in ln
    assert verdict(line(text, "α rises beyond N", f"L = {S} ")) == "reproduces"


def test_one_verdict_per_line(tmp_path, base):
    text = report(write(tmp_path, base))
    assert len(lines_of(text)) > 40
    for ln in text.splitlines():
        found = [v for v in VERDICTS if f"**{v}**" in ln]
        assert len(found) <= 1, ln
        if ln.startswith("- ") and "paper " in ln and "→" in ln:
            assert len(found) == 1, ln
        # the vocabulary appears only in the verdict slot
        body = re.sub(r"→ \*\*.+?\*\*", "", ln)
        assert "reproduces" not in body and "does not apply" not in body, ln


def test_claims_not_reproduced(tmp_path, base):
    base[("guided", S, 2, ON, 0)] = 0.54          # σE 0.926: below 0.97, above the old 0.9
    base[("adaptive", S, 2, ON, 0)] = 0.509       # now 10 % faster than guided
    base[("prolific", S, 3, ON, 0)] = 0.55        # 0.918 of dynamic: no collapse
    base[("collective", S, 2, ON, 0)] = 0.522     # prolific only 0.4 % faster
    base[("aimd", S, 2, ON, 0)] = 0.512           # 0.4 % slower: equivalent
    base[("pipe-1to1", S, 2, ON, 4)] = 0.53       # tuned chunk slower than chunk 1
    base[("pipe-1toN", S, 3, ON, 0)] = 0.52       # 1toN holds up beyond N
    base[("pipe-MtoM", S, 2, ON, 4)] = 0.49       # MtoM ahead at the small L too
    text = report(write(tmp_path, base))
    ln = line(text, "guided near-ideal", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "min σE 0.926 < 0.97" in ln
    assert verdict(line(text, "guided ≈ adaptive", f"L = {S} ")) == "does not reproduce"
    ln = line(text, "prolific collapses pinned", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "0.918 > 0.7" in ln
    ln = line(text, "prolific ≈ 2 % faster", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "practically equivalent" in ln
    ln = line(text, "AIMD slower than dynamic at k = 2", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "practically equivalent" in ln
    ln = line(text, "pipe-1to1 tuned chunk", f"L = {S} ")
    assert verdict(ln) == "does not reproduce" and "chunk 1 faster" in ln
    assert verdict(line(text, "pipe-1toN collapses beyond N", f"L = {S} ")) == "does not reproduce"
    assert verdict(line(text, "pipe-MtoM far ahead", f"L = {S} ")) == "does not reproduce"
    ln = line(text, "the pipe ranking flips")
    assert verdict(ln) == "does not reproduce"
    # the untouched L still reproduces
    assert verdict(line(text, "guided near-ideal", f"L = {B} ")) == "reproduces"


def test_cannot_tell_without_the_data(tmp_path, base):
    # no k = 3: every claim about the paper's 32 says what is missing
    small = {k: v for k, v in base.items() if k[2] != 3}
    del small[("adaptive", S, 2, ON, 0)]
    text = report(write(tmp_path, small))
    for what in ("prolific collapses pinned", "pipe-1toN collapses beyond N", "pipe-MtoM far ahead",
                 "α rises beyond N", "prolific affinity helps"):
        ln = line(text, what, f"L = {S} ")
        assert verdict(ln) == "cannot tell here" and "no k = ⌈4N/3⌉ = 3" in ln, ln
    ln = line(text, "guided ≈ adaptive", f"L = {S} ")
    assert verdict(ln) == "cannot tell here" and "not in this study: pinned adaptive" in ln
    assert "the study has no pinned k > N = 2" in text  # the control


def test_cannot_tell_when_the_premise_is_absent(tmp_path, base):
    # forks below σ = 1 at every pinned k: there is no speedup to collapse
    for k in (2, 3):
        base[("prolific", S, k, ON, 0)] = 1.2 + k
    base[("pipe-1toN", S, 2, ON, 0)] = 0.9        # 1toN already poor at k = N
    text = report(write(tmp_path, base))
    ln = line(text, "prolific collapses pinned", f"L = {S} ")
    assert verdict(ln) == "cannot tell here" and "premise absent" in ln and "below σ = 1" in ln
    ln = line(text, "pipe-1toN collapses beyond N", f"L = {S} ")
    assert verdict(ln) == "cannot tell here" and "premise absent" in ln


def test_disturbed_serial_and_shared_rows(tmp_path, base):
    for L in (S,):
        base[("serial", L, 1, ON, 0)] = 1.3          # +30 % off the k = 1 thread times
    foreign = {("guided", B, 2, ON, 0): 0.4, ("adaptive", B, 2, ON, 0): 0.4}
    text = report(write(tmp_path, base, foreign))
    ln = line(text, "dynamic near-ideal", f"L = {S} ")
    assert verdict(ln) == "cannot tell here" and "T_serial disturbed: +30.0 %" in ln
    # time ratios do not need T_serial
    assert verdict(line(text, "prolific ≈ 2 % faster", f"L = {S} ")) == "reproduces"
    ln = line(text, "guided ≈ adaptive", f"L = {B} ")
    assert verdict(ln) == "cannot tell here" and "shared machine" in ln


def test_aimd_claim_does_not_apply_on_a_shared_machine(tmp_path, base):
    # more than one run in ten above 5 %: the header and claim 4 both call it shared
    foreign = {k: 0.2 for k in list(base)[: len(base) // 5]}
    foreign.update({k: 0.01 for k in base if k[0] in ("aimd", "dynamic")})
    path = write(tmp_path, base, foreign)
    text, _ = build_report(load_study(path), None)
    assert "the machine was shared" in text.split("## Per scheduler")[0]
    claims_text = text.split("## The paper's claims")[1]
    for L in (S, B):
        ln = line(claims_text, "AIMD slower than dynamic at k = 2", f"L = {L} ")
        assert verdict(ln) == "does not apply (shared machine)" and "dynamic 3.9 % faster" in ln
    # without foreign-CPU records the machine's state is unknown
    rows = summarise(load_study(path).runs, 2)
    md = claims.claims_markdown(rows, 2)
    assert verdict(line(md, "AIMD slower than dynamic at k = 2", f"L = {S} ")) == "cannot tell here"


def _finding(text, L, k):
    block = text.split(f"**L = {L}")[1].split("- finding: ")[1]
    return block.splitlines()[0]


def test_control_attributes_collapse_to_static_assignment(tmp_path, base):
    text = report(write(tmp_path, base))
    ctl = text.split("#### The control for claim 2")[1].split("### 3.")[0]
    assert "| static | on | 745.00 | 1.342 | 1.50 | 0.895 | 0.678 |" in ctl
    assert "| prolific | off | 520.00 | 1.923 | 2.00 (N) | 0.962 | 0.971 |" in ctl
    f = _finding(ctl, S, 3)
    assert ("pinned static threads collapse as far as pinned forks and unpinned forks do not "
            "and unpinned static threads do not either: the collapse comes from static "
            "assignment under pinning, not from fork()") in f


def test_control_attributes_collapse_to_fork_when_static_holds(tmp_path, base):
    for L in (S, B):
        base[("static", L, 3, ON, 0)] = 0.51         # pinned static does not collapse
        base[("prolific", L, 3, OFF, 0)] = 0.76      # unpinned forks collapse too
    text = report(write(tmp_path, base))
    f = _finding(text.split("#### The control")[1], S, 3)
    assert "the collapse comes from fork()" in f and "static assignment under pinning" not in f
    base[("prolific", S, 3, OFF, 0)] = 0.52          # only pinned forks collapse
    text = report(write(tmp_path, base, name="d.h5"))
    f = _finding(text.split("#### The control")[1], S, 3)
    assert "needs fork() and pinning together" in f


def test_control_says_what_is_missing(tmp_path, base):
    for L in (S, B):
        del base[("static", L, 3, ON, 0)]
    text = report(write(tmp_path, base))
    f = _finding(text.split("#### The control")[1], S, 3)
    assert "the control is incomplete" in f and "pinned static threads" in f


def test_pipe_variants_never_decide(tmp_path, base):
    # a batched pipe-1toN run at k = 3, fast: it must not enter the 1toN collapse verdict
    extra = [_rec(("pipe-1toN", S, 3, ON, 0), 0.50, rep, batch=8) for rep in range(2)]
    text = report(write(tmp_path, base, extra=extra))
    ln = line(text, "pipe-1toN collapses beyond N", f"L = {S} ")
    assert "σ/N = 0.658" in ln and verdict(ln) == "reproduces"


def test_claims_csv_has_a_record_per_verdict_line(tmp_path, base):
    path = write(tmp_path, base)
    text, files = build_report(load_study(path), str(tmp_path / "out"))
    with open(tmp_path / "out" / "claims.csv") as fh:
        recs = list(csv.DictReader(fh))
    verdicts = [r for r in recs if r["verdict"]]
    assert len(verdicts) == len(lines_of(text.split("## The paper's claims")[1]))
    assert {r["verdict"] for r in verdicts} <= set(VERDICTS)
    one = next(r for r in verdicts if r["claim"] == "2" and r["scheduler"] == "prolific"
               and r["L"] == str(S))
    assert one["k"] == "3" and one["paper_k"] == "32" and one["paper_L"] == "1000"
    assert float(one["value"]) == pytest.approx(0.505 / 0.74)
    assert one["verdict"] == "reproduces" and "15–16" in one["paper_figure"]
    ctl = [r for r in recs if r["claim"] == "2-control"]
    assert ctl and {r["finding"] for r in ctl if r["k"] == "3"} == {"static assignment under pinning"}
    st = next(r for r in ctl if r["scheduler"] == "static" and r["affinity"] == "True"
              and r["L"] == str(S))
    assert float(st["bound"]) == 1.5 and math.isclose(float(st["ratio_to_dynamic"]), 0.505 / 0.745)


def test_near_ideal_cannot_tell_without_a_serial_time(tmp_path, base):
    # no serial run at S: σE is unknown at every k (no row has one to be the worst), and
    # claim 1 says why instead of judging
    del base[("serial", S, 1, ON, 0)]
    text = report(write(tmp_path, base))
    for s in ("dynamic", "guided"):
        ln = line(text, f"{s} near-ideal", f"L = {S} ")
        assert verdict(ln) == "cannot tell here", ln
