"""Hostile cases: docs. Every `hybridsched` command line of README.md and docs/*.md run as a
reader would run it, page by page in the page's order (a later line reads what an earlier
one wrote), with its sizes cut so that the whole list runs in minutes: -L/--frames,
--height/--width, --reps, -k, ge's --n and --threads and colocate's --steps are capped and
a preset gets small overrides; `mpiexec -n N` becomes `mpiexec -n 2`; an environment
assignment before the command is kept. The files a page assumes (its mykern.py, scale.py,
quarter.py, tasks.npy, speedups.csv, studies p1/p2/p4.h5 and all.h5) are made first.

The contract: each line exits as its page says (0, or 2 for the refusals the page shows),
with no traceback, and writes the output it names. Cases are named after the page and line.
"""
from __future__ import annotations

import atexit
import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from doclines import FENCE, hybridsched_words, pages

from .common import HS, Skip, case, mpi_launch

A = "docs"
ROOT = Path(__file__).resolve().parents[2]
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
# the lines whose page shows a refusal (exit 2)
EXPECT = {("docs/reliability.md", "nosuch:fn"): 2, ("docs/reliability.md", "/etc/hostname"): 2}
# caps: a documented size above these is cut to them
CAP = {"-L": 40, "--frames": 40, "--height": 16, "--width": 16, "--reps": 2, "--n": 128,
       "--steps": 200}
SIM_CAP = {"-L": 20000, "--frames": 20000, "--reps": 2}
WRITERS = ("run", "simulate", "merge", "ge", "colocate", "calibrate")


def command_lines(text: str):
    """(line, env assignments, launcher words, argv after `hybridsched`) of every command
    line in a shell block (in a console block, the lines after a `$` prompt)."""
    for line, words in hybridsched_words(text):
        at = words.index("hybridsched")
        env = dict(w.split("=", 1) for w in words[:at] if re.match(r"^[A-Z_]+=", w))
        launcher = [w for w in words[:at] if not re.match(r"^[A-Z_]+=", w)]
        argv = [w for w in words[at + 1:] if not w.startswith(">")]
        yield line, env, launcher, argv


def _cap_list(value: str, most: int) -> str:
    kept = [v for v in value.split(",") if not v.isdigit() or int(v) <= most]
    return ",".join(kept) or str(most)


def shrink(argv: list[str]) -> list[str]:
    """The command with its sizes cut (see the module's doc)."""
    cmd = argv[0] if argv else ""
    caps = SIM_CAP if cmd == "simulate" else CAP
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        v = argv[i + 1] if i + 1 < len(argv) else None
        if a in caps and v is not None and v.isdigit() and not (cmd == "fit" and a != "--frames"):
            out += [a, str(min(int(v), caps[a]))]
            i += 2
            continue
        if cmd == "fit" and a == "--frames" and v is not None:
            out += [a, "40"]  # the frames the prepared studies ran
            i += 2
            continue
        if a == "-k" and v is not None and cmd == "run":
            out += [a, _cap_list(v, 4)]
            i += 2
            continue
        if a == "--threads" and v is not None and cmd == "ge":
            out += [a, _cap_list(v, 64)]
            i += 2
            continue
        out.append(a)
        i += 1
    if cmd == "run" and ("--preset" in out or not any(o in out for o in ("-s", "--scheduler"))):
        out += ["-k", "1,2", "-L", "24", "--reps", "1"]
    if cmd == "run" and "--input" not in out:  # one tensor shape for every page's studies
        out += [o for o in ("--height", "--width") if o not in out for o in (o, "16")]
    if cmd == "simulate" and "--preset" in out:
        out += ["--reps", "1", "-L", "1000"]
    if cmd == "colocate" and "--steps" not in out and "--cmd" not in out:
        out += ["--steps", "200", "--reps", "1"]
    if cmd == "colocate" and "--cmd" in out:  # unmodified commands take no --steps
        out = _without(out, "--reps") + ["--reps", "1"]
    return out


def _without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _programs(argv: list[str], d: Path) -> None:
    """The programs a line runs that the pages ask the reader to build or write: the
    examples' OpenMP programs are built into ``d`` (gcc -fopenmp); another (the reader's
    own `./my-openmp-program`, `infer.py`) skips the line."""
    words = [w for a in argv for w in shlex.split(a)] if argv else []
    for w in words:
        name = w[2:] if w.startswith("./") else w if w.endswith(".py") else ""
        if not name or (d / name).exists():
            continue
        source = ROOT / "examples" / "unmodified" / f"{name}.c"
        cc = shutil.which("gcc") or shutil.which("cc")
        if not (source.exists() and cc):
            raise Skip(f"runs {w}, a program of the reader's own")
        subprocess.run([cc, "-O2", "-fopenmp", str(source), "-o", str(d / name)], check=True,
                       capture_output=True)


def _output(argv: list[str]) -> str | None:
    for flag in ("-o", "--out"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    return None


# --- the files pages assume -------------------------------------------------------------

_PREP: list[Path] = []
STUDY = ["-s", "serial,dynamic,guided", "-k", "1,2", "-L", "40", "--height", "16", "--width",
         "16", "--reps", "1"]


def _hs(argv: list[str], cwd: Path, mpi: int = 0) -> subprocess.CompletedProcess:
    launcher, env = mpi_launch() if mpi else ([], dict(os.environ))
    pre = [*launcher, "-n", str(mpi)] if mpi else []
    return subprocess.run([*pre, *HS, *argv], cwd=cwd, capture_output=True, text=True,
                          env=dict(env, **ENV), timeout=600)


def _block_with(page: str, needle: str) -> str:
    text = (ROOT / page).read_text()
    for m in FENCE.finditer(text):
        if m.group(1) == "python" and needle in m.group(2):
            return m.group(2)
    raise RuntimeError(f"{page}: no python block with {needle!r}")


def prepared() -> Path:
    """A directory with every file the pages assume, made once."""
    if _PREP:
        return _PREP[0]
    import numpy as np

    d = Path(tempfile.mkdtemp(prefix="hostile-docs-prep-"))
    atexit.register(shutil.rmtree, d, True)
    (d / "mykern.py").write_text(_block_with("docs/kernels.md", "def invert"))
    (d / "quarter.py").write_text(_block_with("docs/techniques.md", "class Quarter"))
    (d / "scale.py").write_text("import numba\n\n\n@numba.njit(nogil=True)\ndef halve(task):\n"
                                "    for i in range(task.shape[0]):\n        task[i] *= 0.5\n")
    np.save(d / "tasks.npy", np.random.default_rng(0).random((40, 8)))
    (d / "speedups.csv").write_text("N,speedup\n1,1.0\n2,1.9\n4,3.5\n8,6.0\n16,9.0\n")
    for name, mpi in (("p1.h5", 0), ("p2.h5", 2)):
        p = _hs(["run", *STUDY, "-o", name], d, mpi)
        if p.returncode != 0:
            raise RuntimeError(f"cannot prepare {name}: {p.stderr[-300:]}")
    shutil.copy(d / "p2.h5", d / "p4.h5")
    (d / "results").mkdir()
    shutil.copy(d / "p1.h5", d / "results" / "hybridsched-P1-1.h5")
    shutil.copy(d / "p2.h5", d / "results" / "hybridsched-P2-1.h5")
    p = _hs(["merge", "p1.h5", "p2.h5", "-o", "all.h5"], d)
    if p.returncode != 0:
        raise RuntimeError(f"cannot prepare all.h5: {p.stderr[-300:]}")
    _PREP.append(d)
    return d


_DIRS: dict[str, Path] = {}


def page_dir(page: str) -> Path:
    """The page's own directory (a copy of the prepared files), shared by its lines."""
    if page not in _DIRS:
        d = Path(tempfile.mkdtemp(prefix="hostile-docs-"))
        atexit.register(shutil.rmtree, d, True)
        shutil.copytree(prepared(), d, dirs_exist_ok=True)
        _DIRS[page] = d
    return _DIRS[page]


def run_line(page: str, env: dict, launcher: list[str], argv: list[str]) -> str | None:
    d = page_dir(page)
    argv = shrink(argv)
    argv = [x for a in argv for x in (sorted(glob.glob(a, root_dir=d)) or [a] if "*" in a else [a])]
    _programs(argv, d)
    out = _output(argv)
    if argv and argv[0] in WRITERS and out and (d / out).exists() and \
            "--resume" not in argv and "--overwrite" not in argv:
        (d / out).unlink()  # a reader follows one block at a time: the name is theirs
    pre, base = [], dict(os.environ)
    if launcher and launcher[0] in ("mpiexec", "mpirun"):
        mpirun, base = mpi_launch()
        pre = [*mpirun, "-n", "2"]
    elif launcher and launcher[0] == "taskset":  # the CPUs this machine has
        pre = ["taskset", "-c", f"0-{os.cpu_count() - 1}"]
    elif launcher:
        raise Skip(f"launcher {launcher[0]} is not run here")
    p = subprocess.run([*pre, *HS, *argv], cwd=d, capture_output=True, text=True,
                       env=dict(base, **ENV, **env), timeout=900)
    want = next((code for (pg, word), code in EXPECT.items()
                 if pg == page and any(word in a for a in argv)), 0)
    if p.returncode != want:
        return f"exit {p.returncode}, not {want}: {' | '.join(p.stderr.strip().splitlines()[-2:])[:300]}"
    if "Traceback" in p.stderr:
        return "a traceback"
    if want == 2 and len(p.stderr.strip().splitlines()) != 1:
        return "the refusal is not one line"
    if want == 0 and out and not (d / out).exists():
        return f"{out} was not written"
    return None


_LINES: dict[str, list[tuple[dict, list[str], list[str]]]] = {}  # a page's lines, in order
_RAN: dict[str, int] = {}  # how many of them ran in this process's page directory


def run_in_order(page: str, index: int) -> str | None:
    """Line ``index`` of ``page`` in the directory its earlier lines left, as a reader has it:
    the earlier lines that did not run in this process (the test workers share out a page's
    lines) run first, their outcome their own cases' business."""
    for env, launcher, argv in _LINES[page][_RAN.get(page, 0):index]:
        try:
            run_line(page, env, launcher, argv)
        except Skip:
            pass
    _RAN[page] = max(_RAN.get(page, 0), index + 1)
    return run_line(page, *_LINES[page][index])


for _page in pages():
    _rel = str(_page.relative_to(ROOT))
    for _line, _env, _launcher, _argv in command_lines(_page.read_text()):
        _LINES.setdefault(_rel, []).append((_env, _launcher, _argv))

        def _make(page=_rel, index=len(_LINES[_rel]) - 1):
            def fn(tmp: Path) -> str | None:
                return run_in_order(page, index)
            return fn
        _fn = _make()
        _fn.__name__ = f"{_rel.replace('docs/', '').replace('.md', '')}_{_line}"
        _fn.__doc__ = " ".join([*(f"{k}={v}" for k, v in _env.items()), *_launcher,
                                "hybridsched", *_argv])[:150]
        case(A)(_fn)
