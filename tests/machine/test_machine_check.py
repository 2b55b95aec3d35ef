"""`hybridsched check` (machine/probes.py) on this machine and on faked /sys trees; the facts
stored with every study; the one warning `run` gives on a shared machine; help shows
every option's default."""
from __future__ import annotations

import argparse
import json

import pytest

from hybridsched.machine import probes as hostcheck
from hybridsched.cli import main, make_parser
from hybridsched.store import read_attrs

GIB = 2 ** 30


def test_check_on_this_machine(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    for item in ("usable CPU set", "CPU frequency governor", "turbo / boost", "SMT siblings",
                 "other load now", "memory available", "/dev/shm"):
        assert item in out
    assert main(["check", "--json", "-L", "4", "--height", "8", "--width", "8"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["facts"]["planned_bytes"] == 2 * 4 * 8 * 8
    assert {f["verdict"] for f in data["findings"]} <= {"ok", "WARN", "unknown"}


def _fake_sys(root, governor="powersave", boost="1", siblings=("0-1", "0-1")):
    for cpu, sib in enumerate(siblings):
        (root / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (root / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (root / f"cpu{cpu}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
        (root / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(sib + "\n")
    (root / "cpufreq").mkdir()
    (root / "cpufreq" / "boost").write_text(boost + "\n")


def _verdicts(f):
    return {what: (value, verdict) for what, value, verdict in hostcheck.findings(f)}


def test_faked_noisy_machine_warns(tmp_path):
    _fake_sys(tmp_path)
    f = hostcheck.facts([0, 1], planned_bytes=10 * GIB, sample_load=False, root=str(tmp_path),
                        shm=str(tmp_path), mem_available=GIB)
    assert (f.governor, f.boost, f.smt, f.cores_usable) == ("powersave", "on", [[0, 1]], 1)
    v = _verdicts(f)
    for item in ("CPU frequency governor", "turbo / boost", "SMT siblings", "memory available"):
        assert v[item][1] == "WARN", item
    assert v["other load now"] == ("not sampled", "unknown")
    f.shm_free = GIB  # a planned 10 GiB does not fit in /dev/shm
    assert _verdicts(f)["/dev/shm free"][1] == "WARN"


def test_faked_quiet_machine_is_ok(tmp_path):
    _fake_sys(tmp_path, governor="performance", boost="0", siblings=("0", "1"))
    f = hostcheck.facts([0, 1], planned_bytes=1, sample_load=False, root=str(tmp_path),
                        shm=str(tmp_path), mem_available=GIB)
    f.load = [0.0, 0.01, 0.0, 0.02]
    assert f.shared is False
    assert all(verdict == "ok" for _, _, verdict in hostcheck.findings(f))


def test_missing_sys_reads_unknown_not_an_error(tmp_path):
    f = hostcheck.facts([0, 1], sample_load=False, root=str(tmp_path / "nothing"),
                        shm=str(tmp_path / "noshm"), mem_available=GIB)
    assert (f.governor, f.boost, f.smt, f.shm_free) == ("unknown", "unknown", None, None)
    v = _verdicts(f)
    assert v["SMT siblings"][1] == v["CPU frequency governor"][1] == "unknown"
    # intel_pstate says it the other way round
    (tmp_path / "intel_pstate").mkdir()
    (tmp_path / "intel_pstate" / "no_turbo").write_text("1\n")
    assert hostcheck.boost(str(tmp_path)) == "off"


def test_shared_uses_the_reports_rule():
    from hybridsched.machine.rule import dedicated

    for load in ([0.3, 0.0, 0.0, 0.0], [0.0] * 4, [0.06] * 4):
        f = hostcheck.Facts([0], load=load)
        assert f.shared is (not dedicated(load))
    assert hostcheck.Facts([0]).shared is None


def test_run_warns_once_on_a_shared_machine_and_stores_the_facts(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(hostcheck.NO_PROBE_ENV)
    monkeypatch.setattr(hostcheck, "load_now", lambda cpus, *a, **k: [0.4, 0.5, 0.3, 0.6])
    out = str(tmp_path / "s.h5")
    assert main(["run", "-s", "serial,dynamic", "-k", "1,2", "-L", "4", "--height", "4",
                 "--width", "8", "--reps", "2", "-o", out]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("warning: other processes are using up to 60 %") == 1
    assert cap.out.rstrip().endswith(f"Next: hybridsched report {out}")
    attrs = read_attrs(out)
    assert json.loads(attrs["machine.check_load"]) == [0.4, 0.5, 0.3, 0.6]
    for key in ("governor", "boost", "smt", "cpus", "mem_available", "shm_free", "planned_bytes"):
        assert f"machine.check_{key}" in attrs
    assert int(attrs["machine.check_planned_bytes"]) == 2 * 4 * 4 * 8


def test_quiet_machine_gives_no_warning(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(hostcheck.NO_PROBE_ENV)
    monkeypatch.setattr(hostcheck, "load_now", lambda cpus, *a, **k: [0.0] * 4)
    out = str(tmp_path / "q.h5")
    assert main(["run", "-s", "serial", "-k", "1", "-L", "2", "--height", "2", "--width", "8",
                 "--reps", "1", "-o", out]) == 0
    assert "warning: other processes" not in capsys.readouterr().err


def test_the_probe_hook_skips_sampling(monkeypatch, capsys):
    def boom(*a, **k):
        raise AssertionError("sampled")

    monkeypatch.setattr(hostcheck, "load_now", boom)
    assert hostcheck.shared_warning([0]) == []  # conftest set the hook
    monkeypatch.setenv(hostcheck.NO_PROBE_ENV, "0")
    with pytest.raises(AssertionError):
        hostcheck.shared_warning([0])


def _subparsers(p):
    return [a for a in p._actions if isinstance(a, argparse._SubParsersAction)][0].choices


def test_help_shows_every_default(capsys):
    parser = make_parser()
    missing = []
    for name, sp in _subparsers(parser).items():
        fmt = sp._get_formatter()
        for a in sp._actions:
            if not a.option_strings or a.required or isinstance(a, argparse._HelpAction):
                continue
            if "default" not in fmt._get_help_string(a) % {"default": a.default}:
                missing.append(f"{name} {a.option_strings[0]}")
    assert not missing, missing
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "hybridsched trace" in out and "hybridsched check" in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    run_help = capsys.readouterr().out
    assert "(default: 3)" in run_help and "counting: numba counting sort" in run_help
    assert "--split {static,dynamic," in run_help and "(default: static)" in run_help
