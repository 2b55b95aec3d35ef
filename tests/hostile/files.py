"""Hostile cases: files. Damaged, foreign and odd study files given to every reader
(report, trace, fit, merge), and hostile output paths (--out-dir, --png, -o).

A small real study is built once per session (cached in a private temporary directory,
removed at exit) and each case damages its own copy inside the case's ``tmp``. The
contract (README: "HDF5 layout", "Studies", "Timelines", "Distributed runs (MPI), fit,
merge"): a bad file gives one line on stderr and exit 2, the input is never modified and
nothing is left behind (no --out-dir, --png, --perfetto, --plot, -o, lock or temporary
file); a good file exits 0 with its outputs written. Where the README (and the package's
own tests) say a reader may do without a field (report and fit never read the `study`
attribute; report reads per-run detail leniently), both a refusal and a clean run are
accepted, but not a traceback or a half-written output.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from .common import HS, Skip, case, hs, ok, usage

_STUDY = ["-s", "serial,dynamic,prolific", "-k", "1,2", "-L", "8", "--height", "8",
          "--width", "16", "--reps", "1"]
_ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
_ROWS = 5          # serial k1, dynamic k1, k2, prolific k1, k2
_RUN = 2           # the run that trace draws and detail damages hit: dynamic k = 2
_CACHE: dict[str, Path] = {}
_CACHE_DIR: list[str] = []


def _cache_dir() -> Path:
    if not _CACHE_DIR:
        d = tempfile.mkdtemp(prefix="hostile-files-cache-")
        atexit.register(shutil.rmtree, d, True)
        _CACHE_DIR.append(d)
    return Path(_CACHE_DIR[0])


def _built(kind: str) -> Path:
    """A pristine study of ``kind`` (study, seed2, ge, colocate), built once."""
    if kind in _CACHE and _CACHE[kind].exists():
        return _CACHE[kind]
    path = _cache_dir() / f"{kind}.h5"
    if kind == "study":
        argv = ["run", *_STUDY, "-o", str(path)]
    elif kind == "seed2":
        argv = ["run", *_STUDY, "--seed", "2", "-o", str(path)]
    elif kind == "ge":
        argv = ["ge", "--arch", "A1", "--algo", "rows", "--n", "32", "--threads", "2",
                "--reps", "1", "--out", str(path)]
    elif kind == "colocate":
        argv = ["colocate", "-J", "2", "-T", "1", "--policy", "linux", "--steps", "20",
                "--step-us", "50", "--reps", "1", "-o", str(path)]
    else:
        raise ValueError(kind)
    p = hs(*argv, env=_ENV, timeout=120)
    if p.returncode != 0 or not path.exists():
        raise RuntimeError(f"building the {kind} study failed: exit {p.returncode}: "
                           f"{p.stderr.strip().splitlines()[-1:]}")
    _CACHE[kind] = path
    return path


def _copy(kind: str, dst: Path) -> Path:
    shutil.copyfile(_built(kind), dst)
    return dst


def _walk(root: Path) -> set[str]:
    out = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def _digest(path: Path) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return f"mode {st.st_mode:o}"
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def _bad_bytes(data: bytes) -> bytes:
    try:
        data.decode("utf-8")
        return b""
    except UnicodeDecodeError as exc:
        return data[max(0, exc.start - 12):exc.end + 4]


# --- damage ------------------------------------------------------------------------------


def _h5(path: Path, change) -> None:
    import h5py

    with h5py.File(path, "a") as h5:
        change(h5)


def _rows(change):
    def apply(h5):
        rows = h5["runs"][()]
        change(rows)
        h5["runs"][...] = rows
    return apply


def _replace_runs(make):
    def apply(h5):
        rows = h5["runs"][()]
        del h5["runs"]
        new = make(rows)
        if new is None:
            h5.create_group("runs")
        else:
            h5["runs"] = new
    return apply


def _set(field: str, value, index: int = 1):
    def change(rows):
        rows[field][index] = value
    return change


def _nested(depth: int) -> str:
    return '{"a":' * depth + "{}" + "}" * depth


def _runs_text_time(rows):
    import numpy as np

    dt = [(n, "S8" if n == "time_s" else rows.dtype[n]) for n in rows.dtype.names]
    out = np.zeros(len(rows), dt)
    for n in rows.dtype.names:
        out[n] = rows[n] if n != "time_s" else [b"%.6f" % t for t in rows["time_s"]]
    return out


def _runs_without_k(rows):
    import numpy.lib.recfunctions as rf

    return rf.drop_fields(rows, "k", usemask=False)


def _detail_dataset(h5):
    import numpy as np

    name = f"detail/{_RUN:06d}"
    del h5[name]
    h5[name] = np.arange(3)


def _trace_change(change):
    def apply(h5):
        ds = h5[f"detail/{_RUN:06d}/trace"]
        tr = ds[()]
        change(tr)
        ds[...] = tr
    return apply


def _trace_nan(tr):
    tr["start"][0] = float("nan")


def _trace_count(tr):
    tr["count"][0] = -3


def _workers_other(h5):
    import numpy as np

    name = f"detail/{_RUN:06d}/workers"
    del h5[name]
    h5[name] = np.zeros(2, [("x", "f8"), ("y", "i4")])


def _extra(value):
    def apply(h5):
        h5[f"detail/{_RUN:06d}"].attrs["extra"] = value
    return apply


def _attr(name, value):
    def apply(h5):
        h5.attrs[name] = value
    return apply


def _del_attr(name):
    def apply(h5):
        del h5.attrs[name]
    return apply


def _np(fn):
    """A runs-maker that needs numpy: ``fn(np, rows)``."""
    def make(rows):
        import numpy as np

        return fn(np, rows)
    return make


H5_DAMAGE = {
    # /runs itself
    "no_runs": lambda h5: h5.__delitem__("runs"),
    "runs_of_ints": _replace_runs(_np(lambda np, r: np.arange(4))),
    "runs_2d": _replace_runs(_np(lambda np, r: np.stack([r, r]))),
    "runs_a_group": _replace_runs(lambda r: None),
    "runs_time_as_text": _replace_runs(_runs_text_time),
    "runs_without_k": _replace_runs(_runs_without_k),
    # values in /runs
    "P_zero": _rows(_set("P", 0)),
    "k_minus_one": _rows(_set("k", -1)),
    "L_zero": _rows(_set("L", 0)),
    "time_nan_verified": _rows(_set("time_s", float("nan"), _RUN)),
    "time_inf_verified": _rows(_set("time_s", float("inf"), _RUN)),
    "time_negative_verified": _rows(_set("time_s", -0.5, _RUN)),
    "run_id_twice": _rows(lambda r: r["run_id"].__setitem__(2, r["run_id"][1])),
    "run_id_negative": _rows(_set("run_id", -7)),
    "scheduler_not_utf8": _rows(_set("scheduler", b"dyn\xff\xfeamic")),
    "workload_params_json_list": _rows(_set("workload_params", b"[1, 2]")),
    "workload_params_not_json": _rows(_set("workload_params", b"{not json")),
    "workload_params_text_value": _rows(_set("workload_params", b'{"alpha": "big"}')),
    # root attributes
    "no_format": _del_attr("format"),
    "format_other": _attr("format", "netcdf"),
    "format_version_99": _attr("format_version", 99),
    "format_version_text": _attr("format_version", "one"),
    "study_not_json": _attr("study", "{not json"),
    "study_nested_deep": _attr("study", _nested(5000)),
    "study_json_list": _attr("study", "[1, 2]"),
    "attr_not_utf8": _attr("machine.hostname", b"host\xff\xfe"),
    # per-run detail of run _RUN
    "detail_a_dataset": _detail_dataset,
    "trace_nan_start": _trace_change(_trace_nan),
    "trace_negative_count": _trace_change(_trace_count),
    "workers_other_layout": _workers_other,
    "extra_json_list": _extra("[1, 2]"),
    "extra_not_json": _extra("{extra"),
}


def _not_ours(path: Path) -> None:
    import h5py
    import numpy as np

    with h5py.File(path, "w") as h5:
        h5["runs"] = np.zeros(3)
        h5.attrs["format"] = "something-else"


def _make(damage: str, tmp: Path) -> Path:
    """The file (or thing) a reader is given, at ``tmp/bad.h5``."""
    bad = tmp / "bad.h5"
    if damage in H5_DAMAGE:
        _copy("study", bad)
        _h5(bad, H5_DAMAGE[damage])
    elif damage == "truncated":
        data = _built("study").read_bytes()
        bad.write_bytes(data[:len(data) // 2])
    elif damage == "empty_file":
        bad.write_bytes(b"")
    elif damage == "text_file":
        bad.write_text("this is not a study\nN,speedup\n")
    elif damage == "directory":
        bad.mkdir()
    elif damage == "fifo":
        os.mkfifo(bad)
    elif damage == "other_hdf5":
        _not_ours(bad)
    elif damage == "symlink_to_study":
        real = _copy("study", tmp / "real.h5")
        bad.symlink_to(real)
    elif damage in ("ge_study", "colocate_study"):
        _copy(damage.split("_")[0], bad)
    else:
        raise ValueError(damage)
    return bad


# --- what each reader is given and what it must do ----------------------------------------

COMMANDS = ("report", "trace", "fit", "merge")

# Damage a reader may do without (README: report and fit do not read the `study`
# attribute; report reads per-run detail leniently, tests/store/test_crafted_studies.py): a clean exit 0
# or a one-line refusal, never a traceback or half-written output. Keyed by damage ->
# {command: expectation}; anything not listed must be refused (usage).
_LENIENT_DETAIL = {"report": "either", "fit": "either", "merge": "either"}
EXPECT: dict[str, dict[str, str]] = {
    "study_not_json": {"report": "either", "fit": "either", "trace": "either"},
    "study_nested_deep": {"report": "either", "fit": "either", "trace": "either"},
    "study_json_list": {"report": "either", "fit": "either", "trace": "either"},
    "attr_not_utf8": {"report": "either", "fit": "either", "trace": "either"},
    "detail_a_dataset": _LENIENT_DETAIL,
    "trace_nan_start": _LENIENT_DETAIL,
    "trace_negative_count": _LENIENT_DETAIL,
    "workers_other_layout": _LENIENT_DETAIL,
    "extra_json_list": _LENIENT_DETAIL,
    "extra_not_json": _LENIENT_DETAIL,
    "symlink_to_study": {c: "ok" for c in COMMANDS},
    # a `ge` / `colocate` study: report shows its table and merge carries its rows; it has
    # no /runs rows to trace or fit (README, "hybridsched ge", merge)
    "ge_study": {"report": "ok", "merge": "ok"},
    "colocate_study": {"report": "ok", "merge": "ok"},
}

DAMAGES = list(H5_DAMAGE) + ["truncated", "empty_file", "text_file", "directory", "fifo",
                             "other_hdf5", "symlink_to_study", "ge_study", "colocate_study"]


def _argv(command: str, bad: Path, tmp: Path) -> tuple[list[str], list[Path]]:
    """The command line and the outputs it may create."""
    if command == "report":
        out = tmp / "rep"
        return ["report", str(bad), "--no-plots", "--out-dir", str(out)], [out]
    if command == "trace":
        png, js = tmp / "t.png", tmp / "t.json"
        return ["trace", str(bad), "--run", str(_RUN), "--png", str(png), "--perfetto",
                str(js)], [png, js]
    if command == "fit":
        plot = tmp / "fit.png"
        return ["fit", str(bad), "--model", "amdahl", "--plot", str(plot)], [plot]
    good = _copy("study", tmp / "good.h5")
    out = tmp / "merged.h5"
    return ["merge", str(good), str(bad), "-o", str(out)], [out, Path(str(out) + ".lock")]


def _same(a, b) -> bool:
    """Equal columns; a value not measured (NaN: a built-in job's CPU seconds) equals NaN."""
    import numpy as np

    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))


def _check_ok(command: str, damage: str, bad: Path, tmp: Path, p, outputs) -> str | None:
    if command == "merge":
        why = ok(p, outputs[0])
        if why:
            return why
        from hybridsched import store

        merged = outputs[0]
        runs = store.read_runs(str(merged))
        want = _ROWS + (0 if damage in ("ge_study", "colocate_study") else _ROWS)
        if len(runs) != want:
            return f"the merged study holds {len(runs)} runs, not {want}"
        if sorted(runs["run_id"].tolist()) != list(range(want)):
            return f"merged run_ids are not 0..{want - 1}: {runs['run_id'].tolist()}"
        for table in ("ge", "colocate"):
            src = store.read_table(str(bad), table)
            got = store.read_table(str(merged), table)
            if len(src) != len(got):
                return f"merge carried {len(got)} of the {len(src)} /{table} rows"
            for n in (src.dtype.names or ()):
                if n != "run_id" and not _same(src[n], got[n]):
                    return f"merge changed the /{table} field {n}"
        if os.path.lexists(str(merged) + ".lock"):
            return "merge left its lock file"
        return None
    if command == "report":
        why = ok(p, outputs[0])
        if why:
            return why
        if damage not in ("ge_study", "colocate_study") and not (outputs[0] / "summary.csv").exists():
            return "report wrote no summary.csv"
        return None
    return ok(p, *outputs)


def _matrix(damage: str, command: str):
    expect = EXPECT.get(damage, {}).get(command, "usage")

    def fn(tmp: Path) -> str | None:
        bad = _make(damage, tmp)
        argv, outputs = _argv(command, bad, tmp)
        before, digest = _walk(tmp), _digest(bad)
        try:
            p = hs(*argv, timeout=40)
        except UnicodeDecodeError:  # hs reads stdout and stderr as strict UTF-8
            raw = subprocess.run([*HS, *argv], capture_output=True, timeout=40)
            where = "stdout" if _not_utf8(raw.stdout) else "stderr"
            return (f"exit {raw.returncode}, and its {where} is not UTF-8 (text of the file "
                    f"printed as raw bytes: {_bad_bytes(getattr(raw, where))!r})")
        if p.returncode == -9:
            return f"hung: killed after 40 s ({' '.join(argv[:2])})"
        if "Traceback" in p.stderr:
            return "a traceback: " + " | ".join(p.stderr.strip().splitlines()[-2:])[:300]
        if _digest(bad) != digest:
            return f"{command} modified its input"
        if expect == "ok" or (expect == "either" and p.returncode == 0):
            return _check_ok(command, damage, bad, tmp, p, outputs)
        why = usage(p, *outputs)
        if why:
            return why + ("" if expect == "usage" else " (exit 0 would also do)")
        left = sorted(_walk(tmp) - before)
        return f"left behind: {', '.join(left)}" if left else None

    fn.__name__ = f"{command}_{damage}"
    fn.__doc__ = (f"{command} of a study damaged as {damage.replace('_', ' ')}: "
                  f"{'one line, exit 2, nothing written' if expect == 'usage' else expect}")
    return fn


for _damage in DAMAGES:
    for _command in COMMANDS:
        case("files")(_matrix(_damage, _command))


# --- merge --------------------------------------------------------------------------------


def _refused_untouched(p, *, keep: dict[Path, str | None], absent=(), says="") -> str | None:
    why = usage(p, *absent, says=says)
    if why:
        return why
    changed = [str(k) for k, d in keep.items() if _digest(k) != d]
    return f"changed: {', '.join(changed)}" if changed else None


@case("files")
def merge_same_file_twice(tmp: Path) -> str | None:
    """merge A A: refused (its runs would count twice), nothing written"""
    a = _copy("study", tmp / "a.h5")
    out = tmp / "m.h5"
    return usage(hs("merge", str(a), str(a), "-o", str(out)), out, Path(str(out) + ".lock"),
                 says="twice")


@case("files")
def merge_file_and_symlink_to_it(tmp: Path) -> str | None:
    """merge A link-to-A: the same file twice, refused"""
    a = _copy("study", tmp / "a.h5")
    link = tmp / "link.h5"
    link.symlink_to(a)
    out = tmp / "m.h5"
    return usage(hs("merge", str(a), str(link), "-o", str(out)), out)


@case("files")
def merge_into_first_input(tmp: Path) -> str | None:
    """merge A B -o A: refused, A untouched, no lock left"""
    a, b = _copy("study", tmp / "a.h5"), _copy("study", tmp / "b.h5")
    keep = {a: _digest(a), b: _digest(b)}
    return _refused_untouched(hs("merge", str(a), str(b), "-o", str(a)), keep=keep,
                              absent=[Path(str(a) + ".lock")])


@case("files")
def merge_into_second_input_overwrite(tmp: Path) -> str | None:
    """merge A B -o B --overwrite: still refused (B is an input), both untouched"""
    a, b = _copy("study", tmp / "a.h5"), _copy("study", tmp / "b.h5")
    keep = {a: _digest(a), b: _digest(b)}
    return _refused_untouched(hs("merge", str(a), str(b), "-o", str(b), "--overwrite"),
                              keep=keep, absent=[Path(str(b) + ".lock")])


@case("files")
def merge_different_tensors(tmp: Path) -> str | None:
    """merge of studies of different tensors (--seed 2): refused, nothing written"""
    a, b = _copy("study", tmp / "a.h5"), _copy("seed2", tmp / "b.h5")
    out = tmp / "m.h5"
    return usage(hs("merge", str(a), str(b), "-o", str(out)), out, Path(str(out) + ".lock"))


@case("files")
def merge_onto_existing_file(tmp: Path) -> str | None:
    """merge -o an existing study without --overwrite: refused, it is untouched"""
    a, b = _copy("study", tmp / "a.h5"), _copy("study", tmp / "b.h5")
    out = _copy("seed2", tmp / "m.h5")
    return _refused_untouched(hs("merge", str(a), str(b), "-o", str(out)),
                              keep={out: _digest(out)})


@case("files")
def merge_overwrite_existing_file(tmp: Path) -> str | None:
    """merge -o an existing study with --overwrite: replaced by the union"""
    from hybridsched import store

    a, b = _copy("study", tmp / "a.h5"), _copy("study", tmp / "b.h5")
    out = _copy("seed2", tmp / "m.h5")
    why = ok(hs("merge", str(a), str(b), "-o", str(out), "--overwrite"), out)
    if why:
        return why
    n = len(store.read_runs(str(out)))
    return None if n == 2 * _ROWS else f"{n} runs in the merged study, not {2 * _ROWS}"


@case("files")
def merge_onto_directory(tmp: Path) -> str | None:
    """merge -o a directory: refused, the directory stays empty"""
    a = _copy("study", tmp / "a.h5")
    d = tmp / "d.h5"
    d.mkdir()
    why = usage(hs("merge", str(a), "-o", str(d)))
    return why or (f"wrote into the directory: {os.listdir(d)}" if os.listdir(d) else None)


@case("files")
def merge_onto_symlink(tmp: Path) -> str | None:
    """merge -o a symlink to a file: refused, the target untouched"""
    a = _copy("study", tmp / "a.h5")
    target = tmp / "target.txt"
    target.write_text("precious\n")
    link = tmp / "m.h5"
    link.symlink_to(target)
    why = usage(hs("merge", str(a), "-o", str(link)))
    if why:
        return why
    return None if target.read_text() == "precious\n" else "wrote through the symlink"


@case("files")
def merge_onto_fifo(tmp: Path) -> str | None:
    """merge -o a FIFO: refused at once, no hang"""
    a = _copy("study", tmp / "a.h5")
    fifo = tmp / "m.h5"
    os.mkfifo(fifo)
    p = hs("merge", str(a), "-o", str(fifo), timeout=40)
    return "hung on the FIFO" if p.returncode == -9 else usage(p)


@case("files")
def merge_ge_and_colocate_with_study(tmp: Path) -> str | None:
    """merge study + ge + colocate: every /runs, /ge and /colocate row carried"""
    from hybridsched import store

    s, g, c = (_copy(k, tmp / f"{k}.h5") for k in ("study", "ge", "colocate"))
    out = tmp / "m.h5"
    why = ok(hs("merge", str(s), str(g), str(c), "-o", str(out)), out)
    if why:
        return why
    if len(store.read_runs(str(out))) != _ROWS:
        return "the /runs rows were not all carried"
    for table, src in (("ge", g), ("colocate", c)):
        a, b = store.read_table(str(src), table), store.read_table(str(out), table)
        if len(a) == 0:
            return f"the {table} study holds no /{table} rows to carry"
        if len(a) != len(b):
            return f"{len(b)} of {len(a)} /{table} rows carried"
        for n in a.dtype.names:
            if n != "run_id" and not _same(a[n], b[n]):
                return f"/{table} field {n} changed by the merge"
    return None


@case("files")
def merge_two_ge_studies(tmp: Path) -> str | None:
    """merge of two ge studies: both rows carried, run_id renumbered 0, 1"""
    from hybridsched import store

    g1, g2 = _copy("ge", tmp / "g1.h5"), _copy("ge", tmp / "g2.h5")
    out = tmp / "m.h5"
    why = ok(hs("merge", str(g1), str(g2), "-o", str(out)), out)
    if why:
        return why
    rows = store.read_table(str(out), "ge")
    one = store.read_table(str(g1), "ge")
    if len(rows) != 2 * len(one):
        return f"{len(rows)} /ge rows, not {2 * len(one)}"
    ids = rows["run_id"].tolist()
    return None if ids == list(range(len(rows))) else f"/ge run_ids {ids} not renumbered"


@case("files")
def merge_two_colocate_studies(tmp: Path) -> str | None:
    """merge of two colocate studies: every job row of both carried"""
    from hybridsched import store

    c1, c2 = _copy("colocate", tmp / "c1.h5"), _copy("colocate", tmp / "c2.h5")
    out = tmp / "m.h5"
    why = ok(hs("merge", str(c1), str(c2), "-o", str(out)), out)
    if why:
        return why
    n, one = len(store.read_table(str(out), "colocate")), len(store.read_table(str(c1), "colocate"))
    return None if n == 2 * one and one else f"{n} /colocate rows, not 2 x {one}"


@case("files")
def merge_missing_input(tmp: Path) -> str | None:
    """merge of a file that does not exist: refused, nothing written"""
    a = _copy("study", tmp / "a.h5")
    out = tmp / "m.h5"
    return usage(hs("merge", str(a), str(tmp / "nope.h5"), "-o", str(out)), out)


# --- report --out-dir ---------------------------------------------------------------------


@case("files")
def report_out_dir_is_file(tmp: Path) -> str | None:
    """report --out-dir on a regular file: refused, the file untouched"""
    s = _copy("study", tmp / "s.h5")
    f = tmp / "rep"
    f.write_text("precious\n")
    why = usage(hs("report", str(s), "--no-plots", "--out-dir", str(f)))
    return why or (None if f.read_text() == "precious\n" else "the file was changed")


@case("files")
def report_out_dir_is_symlink(tmp: Path) -> str | None:
    """report --out-dir on a symlink to a directory: refused, nothing written through it"""
    s = _copy("study", tmp / "s.h5")
    target = tmp / "elsewhere"
    target.mkdir()
    link = tmp / "rep"
    link.symlink_to(target)
    why = usage(hs("report", str(s), "--no-plots", "--out-dir", str(link)))
    return why or (f"written through the link: {os.listdir(target)}" if os.listdir(target) else None)


@case("files")
def report_default_out_dir_is_symlink(tmp: Path) -> str | None:
    """report with the default <stem>_report planted as a symlink: refused, not written through"""
    s = _copy("study", tmp / "s.h5")
    target = tmp / "elsewhere"
    target.mkdir()
    (tmp / "s_report").symlink_to(target)
    why = usage(hs("report", str(s), "--no-plots"))
    return why or (f"written through the link: {os.listdir(target)}" if os.listdir(target) else None)


@case("files")
def report_out_dir_unwritable(tmp: Path) -> str | None:
    """report --out-dir on a directory it cannot write: refused, nothing in it"""
    s = _copy("study", tmp / "s.h5")
    if os.geteuid() != 0:
        d = tmp / "ro"
        d.mkdir()
        d.chmod(0o555)
    else:  # root writes anywhere a mode allows: take a directory no one can create files in
        d = Path("/proc/self/fdinfo")
        if not d.is_dir():
            raise Skip("root, and no /proc to give an unwritable directory")
    try:
        before = set(os.listdir(d)) if d != Path("/proc/self/fdinfo") else set()
        p = hs("report", str(s), "--no-plots", "--out-dir", str(d))
        why = usage(p)
        if why:
            return why
        if d != Path("/proc/self/fdinfo") and set(os.listdir(d)) != before:
            return f"left in it: {set(os.listdir(d)) - before}"
        return None
    finally:
        if d.parent == tmp:
            d.chmod(0o755)


@case("files")
def report_out_dir_under_unwritable(tmp: Path) -> str | None:
    """report --out-dir DIR/new where DIR cannot be written: refused"""
    s = _copy("study", tmp / "s.h5")
    if os.geteuid() != 0:
        d = tmp / "ro"
        d.mkdir()
        d.chmod(0o555)
    else:
        d = Path("/proc/self/fdinfo")
    try:
        return usage(hs("report", str(s), "--no-plots", "--out-dir", str(d / "rep")))
    finally:
        if d.parent == tmp:
            d.chmod(0o755)


@case("files")
def report_out_dir_nested_new(tmp: Path) -> str | None:
    """report --out-dir a/b/c (parents missing): made as mkdir -p, files written"""
    s = _copy("study", tmp / "s.h5")
    d = tmp / "a" / "b" / "c"
    return ok(hs("report", str(s), "--no-plots", "--out-dir", str(d)), d / "summary.csv")


@case("files")
def report_out_dir_existing_reused(tmp: Path) -> str | None:
    """report into an existing directory of ours holding a planted symlink named summary.csv:
    the file is replaced by rename, the symlink's target untouched"""
    s = _copy("study", tmp / "s.h5")
    d = tmp / "rep"
    d.mkdir()
    target = tmp / "precious.txt"
    target.write_text("precious\n")
    (d / "summary.csv").symlink_to(target)
    why = ok(hs("report", str(s), "--no-plots", "--out-dir", str(d)), d / "summary.csv")
    if why:
        return why
    if target.read_text() != "precious\n":
        return "written through the planted symlink"
    return None if not (d / "summary.csv").is_symlink() else "summary.csv is still the symlink"


# --- trace outputs ------------------------------------------------------------------------


@case("files")
def trace_png_exists_no_overwrite(tmp: Path) -> str | None:
    """trace --png on an existing file without --overwrite: refused, file kept, no JSON"""
    s = _copy("study", tmp / "s.h5")
    png, js = tmp / "t.png", tmp / "t.json"
    png.write_bytes(b"old")
    p = hs("trace", str(s), "--run", str(_RUN), "--png", str(png), "--perfetto", str(js))
    why = usage(p, js)
    return why or (None if png.read_bytes() == b"old" else "the existing PNG was changed")


@case("files")
def trace_png_exists_overwrite(tmp: Path) -> str | None:
    """trace --png on an existing file with --overwrite: replaced by a PNG"""
    s = _copy("study", tmp / "s.h5")
    png = tmp / "t.png"
    png.write_bytes(b"old")
    why = ok(hs("trace", str(s), "--run", str(_RUN), "--png", str(png), "--overwrite"), png)
    if why:
        return why
    return None if png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" else "not replaced by a PNG"


@case("files")
def trace_perfetto_exists_no_overwrite(tmp: Path) -> str | None:
    """trace --perfetto on an existing file (--png new): refused, no PNG written"""
    s = _copy("study", tmp / "s.h5")
    png, js = tmp / "t.png", tmp / "t.json"
    js.write_text("{}")
    why = usage(hs("trace", str(s), "--run", str(_RUN), "--png", str(png), "--perfetto",
                   str(js)), png)
    return why or (None if js.read_text() == "{}" else "the existing JSON was changed")


@case("files")
def trace_png_symlink(tmp: Path) -> str | None:
    """trace --png on a symlink (even with --overwrite): refused, target untouched"""
    s = _copy("study", tmp / "s.h5")
    target = tmp / "precious.txt"
    target.write_text("precious\n")
    png = tmp / "t.png"
    png.symlink_to(target)
    why = usage(hs("trace", str(s), "--run", str(_RUN), "--png", str(png), "--overwrite"))
    return why or (None if target.read_text() == "precious\n" else "written through the link")


@case("files")
def trace_perfetto_directory(tmp: Path) -> str | None:
    """trace --perfetto on a directory: refused, no PNG"""
    s = _copy("study", tmp / "s.h5")
    d = tmp / "t.json"
    d.mkdir()
    png = tmp / "t.png"
    return usage(hs("trace", str(s), "--run", str(_RUN), "--png", str(png), "--perfetto",
                    str(d), "--overwrite"), png)


@case("files")
def trace_png_fifo(tmp: Path) -> str | None:
    """trace --png on a FIFO: refused at once, no hang"""
    s = _copy("study", tmp / "s.h5")
    fifo = tmp / "t.png"
    os.mkfifo(fifo)
    p = hs("trace", str(s), "--run", str(_RUN), "--png", str(fifo), "--overwrite", timeout=40)
    return "hung on the FIFO" if p.returncode == -9 else usage(p)


@case("files")
def trace_png_missing_directory(tmp: Path) -> str | None:
    """trace --png into a directory that does not exist: refused, nothing made"""
    s = _copy("study", tmp / "s.h5")
    png = tmp / "nodir" / "t.png"
    return usage(hs("trace", str(s), "--run", str(_RUN), "--png", str(png)), png.parent)


@case("files")
def trace_run_absent(tmp: Path) -> str | None:
    """trace --run 999 (no such run): refused, nothing written"""
    s = _copy("study", tmp / "s.h5")
    png = tmp / "t.png"
    return usage(hs("trace", str(s), "--run", "999", "--png", str(png)), png)


@case("files")
def trace_run_with_selectors(tmp: Path) -> str | None:
    """trace --run with -s: refused (--run alone selects)"""
    s = _copy("study", tmp / "s.h5")
    png = tmp / "t.png"
    return usage(hs("trace", str(s), "--run", "1", "-s", "dynamic", "--png", str(png)), png)


@case("files")
def trace_default_outputs(tmp: Path) -> str | None:
    """trace with neither option: <stem>_report/trace_run<ID>.png and .json, valid JSON"""
    s = _copy("study", tmp / "s.h5")
    d = tmp / "s_report"
    why = ok(hs("trace", str(s), "-s", "prolific", "-k", "2"), d)
    if why:
        return why
    names = sorted(os.listdir(d))
    pngs = [n for n in names if n.startswith("trace_run") and n.endswith(".png")]
    jss = [n for n in names if n.startswith("trace_run") and n.endswith(".json")]
    if len(pngs) != 1 or len(jss) != 1 or len(names) != 2:
        return f"{d} holds {names}"
    try:
        json.loads((d / jss[0]).read_text())
    except ValueError as exc:
        return f"the Perfetto file is not JSON: {exc}"
    return None


# --- fit ----------------------------------------------------------------------------------


@case("files")
def fit_plot_on_symlink(tmp: Path) -> str | None:
    """fit --plot on a symlink: refused or replaced, never written through"""
    s = _copy("study", tmp / "s.h5")
    target = tmp / "precious.txt"
    target.write_text("precious\n")
    plot = tmp / "fit.png"
    plot.symlink_to(target)
    p = hs("fit", str(s), "--model", "amdahl", "--plot", str(plot))
    if "Traceback" in p.stderr:
        return "a traceback"
    if target.read_text() != "precious\n":
        return "the plot was written through the symlink"
    return None if p.returncode in (0, 2) else f"exit {p.returncode}"


@case("files")
def fit_json_good_study(tmp: Path) -> str | None:
    """fit --json of a good study: strict JSON on stdout, exit 0"""
    s = _copy("study", tmp / "s.h5")
    p = hs("fit", str(s), "--model", "amdahl", "--json")
    why = ok(p)
    if why:
        return why
    try:
        json.loads(p.stdout, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except ValueError as exc:
        return f"not strict JSON: {exc}"
    return None
