"""Hostile cases: run.

`hybridsched run` as a hostile user drives it (TINY sizes, one repetition, cwd = the case's
temporary directory): every scheduler, bad values for every option, workloads with good and
bad parameters, kernels and verifiers of one's own (broken on purpose), odd `--input` files,
odd output paths, `--resume`, `--coop`, a narrowed `--preset smoke`.

The contract (README, "`run` options"): bad input is one line on stderr starting with
"hybridsched", exit 2, nothing left behind (no output file, the old one untouched); a kernel
that raises or a verifier that rejects fails the run (stored, `verified=false`, exit 1); a
run that verifies exits 0.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from .common import TINY, Skip, case, failed, hs, ok, usage, write

A = "run"
# the start-of-run load probe warns on stderr on a shared machine: off, as the tests do
ENV = {"HYBRIDSCHED_NO_LOAD_PROBE": "1"}
OUT = "o.h5"


def run(tmp: Path, *argv, out: str | None = OUT, timeout: float = 120):
    """`hybridsched run ARGV --out OUT` in ``tmp``."""
    args = ["run", *argv] + (["--out", str(out)] if out is not None else [])
    return hs(*args, env=ENV, cwd=tmp, timeout=timeout)


def _snap(tmp: Path) -> dict[str, bytes | None]:
    """Every entry of ``tmp`` (recursively) with its bytes (None: not a regular file)."""
    out = {}
    for root, dirs, files in os.walk(tmp):
        for n in dirs + files:
            p = Path(root) / n
            rel = str(p.relative_to(tmp))
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out[rel] = p.read_bytes() if stat.S_ISREG(st.st_mode) else f"mode {st.st_mode:o}"
    return out


def _same(tmp: Path, before: dict) -> str | None:
    after = _snap(tmp)
    new = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = []
    if new:
        parts.append(f"left behind: {', '.join(new)}")
    if gone:
        parts.append(f"removed: {', '.join(gone)}")
    if changed:
        parts.append(f"changed: {', '.join(changed)}")
    return "; ".join(parts) or None


def refused(tmp: Path, *argv, says: str = "", out: str | None = OUT,
            timeout: float = 120) -> str | None:
    """``run ARGV`` is bad input: exit 2, one line, and ``tmp`` exactly as it was."""
    before = _snap(tmp)
    p = run(tmp, *argv, out=out, timeout=timeout)
    return usage(p, says=says) or _same(tmp, before)


def _runs(path: Path):
    from hybridsched.store.reader import read_runs

    return read_runs(str(path))


def good(tmp: Path, *argv, n: int | None = None, out: str = OUT, verified=True,
         timeout: float = 120) -> str | None:
    """``run ARGV`` ran everything: exit 0, the study holds ``n`` runs, all verified (or,
    with ``verified=None``, all unverified by choice: bad_rows -1)."""
    p = run(tmp, *argv, out=out, timeout=timeout)
    problem = ok(p, tmp / out)
    if problem:
        return problem
    runs = _runs(tmp / out)
    if n is not None and len(runs) != n:
        return f"{len(runs)} runs stored, not {n}"
    if len(runs) == 0:
        return "no run stored"
    if verified is True and not all(runs["verified"]):
        return f"unverified runs: {list(runs['error'])[:2]}"
    if verified is None and not all(runs["bad_rows"] == -1):
        return f"bad_rows {list(runs['bad_rows'])}, not -1 (unverified by choice)"
    return None


def stored_failed(tmp: Path, p, says: str, n: int = 1, out: str = OUT) -> str | None:
    """exit 1, and the study holds ``n`` runs, each verified=false with ``says`` in error
    (``says`` empty: error may be empty, as for a rejected result)."""
    problem = failed(p)
    if problem:
        return problem
    if not (tmp / out).exists():
        return "no study file: the failed run was not stored"
    runs = _runs(tmp / out)
    if len(runs) != n:
        return f"{len(runs)} runs stored, not {n}"
    if any(runs["verified"]):
        return "a failed run is stored as verified"
    if says and not all(says.lower() in str(e).lower() for e in runs["error"]):
        return f"stored error {list(runs['error'])[:2]} lacks {says!r}"
    return None


# --- every scheduler, TINY ------------------------------------------------------------------

SCHEDULERS = ("serial", "static", "dynamic", "guided", "chunk", "chunk-steal", "aimd",
              "adaptive", "adaptive-frame", "prolific", "collective", "pipe-1to1",
              "pipe-1toN", "pipe-MtoM", "fac", "fsc", "auto", "pipe-MtoM:fac", "rnd",
              "static_steal", "trapezoidal", "awf", "pipe-MtoM:auto")

for _s in SCHEDULERS:
    def _make(s=_s):
        def fn(tmp: Path) -> str | None:
            return good(tmp, "-s", s, *TINY, n=1)
        fn.__name__ = "sched_" + s.replace("-", "_").replace(":", "_")
        fn.__doc__ = f"run -s {s} TINY: exit 0, one verified run"
        return fn
    case(A)(_make())


@case(A)
def sched_collective_k5(tmp):
    """collective with k=5 (an incomplete mitosis tree) and k > L"""
    return good(tmp, "-s", "collective", "-k", "5", "-L", "3", "--height", "8", "--width",
                "16", "--reps", "1", n=1)


@case(A)
def sched_oversubscribed_dynamic(tmp):
    """dynamic with k=16 on a 2-CPU machine (oversubscription is allowed)"""
    return good(tmp, "-s", "dynamic", "-k", "16", "-L", "8", "--height", "8", "--width",
                "16", "--reps", "1", n=1)


@case(A)
def sched_no_affinity_prolific(tmp):
    """prolific --no-affinity"""
    return good(tmp, "-s", "prolific", *TINY, "--no-affinity", n=1)


@case(A)
def sched_lists(tmp):
    """-L 4,8 and --chunk 1,3 with dynamic: 4 runs"""
    return good(tmp, "-s", "dynamic", "-k", "2", "-L", "4,8", "--chunk", "1,3", "--height",
                "8", "--width", "16", "--reps", "1", n=4)


@case(A)
def sched_duplicate_names(tmp):
    """-s dynamic,dynamic: refused, or run once (never two runs with one identity)"""
    p = run(tmp, "-s", "dynamic,dynamic", *TINY)
    if p.returncode == 2:
        return usage(p)
    problem = ok(p, tmp / OUT)
    if problem:
        return problem
    n = len(_runs(tmp / OUT))
    return None if n == 1 else f"{n} runs of the same configuration"


# --- bad option values ------------------------------------------------------------------

_BAD = {
    "k_zero": (["-s", "dynamic", "-k", "0"], "-k"),
    "k_text": (["-s", "dynamic", "-k", "x"], "-k"),
    "k_negative": (["-s", "dynamic", "-k=-1"], "-k"),
    "k_list_with_zero": (["-s", "dynamic", "-k", "1,0"], "-k"),
    "k_huge": (["-s", "prolific", "-k", "100000"], ""),
    "frames_zero": (["-s", "dynamic", "-L", "0"], ""),
    "frames_list_with_zero": (["-s", "dynamic", "--frames", "8,0"], ""),
    "height_zero": (["-s", "dynamic", "--height", "0"], "height"),
    "width_zero": (["-s", "dynamic", "--width", "0"], "width"),
    "reps_zero": (["-s", "dynamic", "--reps", "0"], "reps"),
    "reps_text": (["-s", "dynamic", "--reps", "two"], "reps"),
    "seed_negative": (["-s", "dynamic", "--seed=-1"], "seed"),
    "seed_too_big": (["-s", "dynamic", "--seed", str(2 ** 64)], "seed"),
    "chunk_zero": (["-s", "dynamic", "--chunk", "0"], "chunk"),
    "chunk_negative": (["-s", "dynamic", "--chunk=-5"], "chunk"),
    "chunk_text": (["-s", "dynamic", "--chunk", "big"], "chunk"),
    "chunk_auto_threads": (["-s", "dynamic", "--chunk", "auto"], "auto"),
    "pipe_batch_zero": (["-s", "pipe-1to1", "--pipe-batch", "0"], "pipe-batch"),
    "pipe_batch_300": (["-s", "pipe-1to1", "--pipe-batch", "300"], "pipe-batch"),
    "inflight_zero": (["-s", "pipe-MtoM", "--inflight", "0"], "inflight"),
    "dispatch_bogus": (["-s", "dynamic", "--dispatch", "bogus"], "dispatch"),
    "dispatch_compiled_static": (["-s", "static", "--dispatch", "compiled"], "compiled"),
    "dispatch_compiled_adaptive": (["-s", "adaptive", "--dispatch", "compiled"], "compiled"),
    "dispatch_compiled_coop": (["-s", "dynamic", "--dispatch", "compiled", "--coop"], ""),
    "split_bogus": (["-s", "dynamic", "--split", "bogus"], "split"),
    "preset_bogus": (["-s", "dynamic", "--preset", "bogus"], "preset"),
    "fiss_stages_with_dynamic": (["-s", "dynamic", "--fiss-stages", "2"], "fiss"),
    "fiss_stages_negative": (["-s", "fiss", "--fiss-stages=-1"], "fiss"),
    "viss_param_zero": (["-s", "viss", "--viss-param", "0"], "viss"),
    "pls_swr_two": (["-s", "pls", "--pls-swr", "2"], "pls-swr"),
    "pls_swr_nan": (["-s", "pls", "--pls-swr", "nan"], "pls-swr"),
    "scheduler_empty": (["-s", ""], "scheduler"),
    "scheduler_unknown": (["-s", "unknown"], "unknown"),
    "scheduler_pipe_MtoM_bogus": (["-s", "pipe-MtoM:bogus"], "bogus"),
    "scheduler_one_unknown_of_two": (["-s", "dynamic,bogus"], "bogus"),
    "unknown_option": (["-s", "dynamic", "--bogus-option"], ""),
    "tensor_too_big": (["-s", "dynamic", "-k", "2", "-L", "1000000", "--height", "10000",
                        "--width", "10000", "--reps", "1"], ""),
    "kernel_unknown_builtin": (["-s", "dynamic", "--kernel", "bubblesort"], "kernel"),
}

for _name, (_argv, _says) in _BAD.items():
    def _make_bad(argv=_argv, says=_says, name=_name):
        def fn(tmp: Path) -> str | None:
            # TINY first, so that the bad value given after it is the one that counts
            return refused(tmp, *TINY, *argv, says=says)
        fn.__name__ = "bad_" + name
        fn.__doc__ = f"run TINY {' '.join(repr(a) if a == '' else a for a in argv)}: exit 2, one line, nothing left"
        return fn
    case(A)(_make_bad())


@case(A)
def chunk_auto_pipe(tmp):
    """--chunk auto with pipe-1to1: runs, stored as chunk -1 with the chunk_used found"""
    problem = good(tmp, "-s", "pipe-1to1", *TINY, "--chunk", "auto", n=1)
    if problem:
        return problem
    runs = _runs(tmp / OUT)
    if runs["chunk"][0] != -1 or runs["chunk_used"][0] < 1:
        return f"chunk {runs['chunk'][0]}, chunk_used {runs['chunk_used'][0]}"
    return None


@case(A)
def pipe_batch_256(tmp):
    """--pipe-batch 256 (the documented maximum) with pipe-1toN: runs, stored"""
    problem = good(tmp, "-s", "pipe-1toN", *TINY, "--pipe-batch", "256", n=1)
    if problem:
        return problem
    b = _runs(tmp / OUT)["pipe_batch"][0]
    return None if b == 256 else f"pipe_batch stored as {b}"


@case(A)
def inflight_4(tmp):
    """--inflight 4 with pipe-MtoM: runs, stored"""
    problem = good(tmp, "-s", "pipe-MtoM", *TINY, "--inflight", "4", n=1)
    if problem:
        return problem
    d = _runs(tmp / OUT)["inflight"][0]
    return None if d == 4 else f"inflight stored as {d}"


@case(A)
def dispatch_compiled_dynamic(tmp):
    """--dispatch compiled with dynamic: runs, notes say dispatch=compiled"""
    problem = good(tmp, "-s", "dynamic", *TINY, "--dispatch", "compiled", n=1)
    if problem:
        return problem
    notes = _runs(tmp / OUT)["notes"][0]
    return None if "dispatch=compiled" in notes else f"notes {notes!r}"


@case(A)
def pls_swr_quarter(tmp):
    """pls --pls-swr 0.25: runs; the parameter stored in params"""
    problem = good(tmp, "-s", "pls", *TINY, "--pls-swr", "0.25", n=1)
    if problem:
        return problem
    params = _runs(tmp / OUT)["params"][0]
    return None if "pls_swr=0.25" in params else f"params {params!r}"


# --- workloads --------------------------------------------------------------------------

for _w in ("uniform", "ramp:min=0.5", "skewed:heavy=0.5", "heavytail:alpha=1.2",
           "varying:min=0.5", "mandelbrot:iters=16"):
    def _make_w(w=_w):
        def fn(tmp: Path) -> str | None:
            problem = good(tmp, "-s", "guided", *TINY, "--workload", w, n=1)
            if problem:
                return problem
            stored = _runs(tmp / OUT)["workload"][0]
            name = w.split(":")[0]
            return None if stored == name else f"workload stored as {stored!r}"
        fn.__name__ = "workload_" + w.split(":")[0]
        fn.__doc__ = f"--workload {w} with guided: verified"
        return fn
    case(A)(_make_w())

_BAD_W = {
    "heavytail_alpha_zero": "heavytail:alpha=0",
    "heavytail_alpha_nan": "heavytail:alpha=nan",
    "ramp_min_two": "ramp:min=2",
    "ramp_min_zero": "ramp:min=0",
    "ramp_min_text": "ramp:min=abc",
    "ramp_no_value": "ramp:min",
    "ramp_unknown_key": "ramp:nokey=1",
    "skewed_heavy_above_one": "skewed:heavy=1.5",
    "varying_min_negative": "varying:min=-1",
    "mandelbrot_iters_zero": "mandelbrot:iters=0",
    "mandelbrot_iters_huge": "mandelbrot:iters=70000",
    "uniform_with_param": "uniform:x=1",
    "unknown_workload": "unknown:x=1",
}
for _name, _w in _BAD_W.items():
    def _make_bw(w=_w, name=_name):
        def fn(tmp: Path) -> str | None:
            return refused(tmp, "-s", "dynamic", *TINY, "--workload", w, says="workload")
        fn.__name__ = "workload_bad_" + name
        fn.__doc__ = f"--workload {w}: exit 2, one line, nothing left"
        return fn
    case(A)(_make_bw())


@case(A)
def workload_mandelbrot_counting(tmp):
    """--workload mandelbrot --kernel counting (a sort kernel for an image workload): exit 2"""
    return refused(tmp, "-s", "dynamic", *TINY, "--workload", "mandelbrot", "--kernel",
                   "counting")


# --- kernels and verifiers of one's own ------------------------------------------------------

MOD = """\
import os, sys
import numba
import numpy as np

@numba.njit(nogil=True)
def inc(task):
    flat = task.reshape(-1)
    for j in range(flat.size):
        flat[j] = flat[j] + 1

def py_inc(task):
    task += 1

def chunk_inc(data, first, count):
    for i in range(first, first + count):
        data[i] += 1

def check(original, result):
    return bool(np.array_equal(result, original + 1))

def boom(task):
    raise ValueError("boom from the kernel")

def exit_in_worker(task):
    sys.exit(4)

def say_no(original, result):
    return False

def verify_raises(original, result):
    raise RuntimeError("the verifier broke")

def always(original, result):
    return True

def one(original):
    return True

def two(a, b):
    pass

CONSTANT = 5

@numba.njit(nogil=True)
def bad_typing(task):
    task[0, 0] = "text"
"""


def _mod(tmp: Path) -> None:
    write(tmp / "umod.py", MOD)


@case(A)
def user_numba_task_kernel(tmp):
    """--kernel umod:inc (numba per-task) --verify umod:check with dynamic: verified"""
    _mod(tmp)
    problem = good(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:inc", "--verify",
                   "umod:check", n=1)
    if problem:
        return problem
    kern = _runs(tmp / OUT)["kernel"][0]
    return None if kern == "umod:inc" else f"kernel stored as {kern!r}"


@case(A)
def user_numba_kernel_prolific_and_pipe(tmp):
    """the numba per-task kernel under prolific and pipe-MtoM: verified"""
    _mod(tmp)
    return good(tmp, "-s", "prolific,pipe-MtoM", *TINY, "--kernel", "umod:inc", "--verify",
                "umod:check", n=2)


@case(A)
def user_python_kernel_verify_none(tmp):
    """--kernel umod:py_inc (plain Python) --verify none with pipe-1to1: exit 0, unverified
    by choice (bad_rows -1)"""
    _mod(tmp)
    return good(tmp, "-s", "pipe-1to1", *TINY, "--kernel", "umod:py_inc", "--verify",
                "none", n=1, verified=None)


@case(A)
def user_python_chunk_kernel_threads(tmp):
    """--kernel umod:chunk_inc (Python chunk kernel) --verify umod:check with guided"""
    _mod(tmp)
    return good(tmp, "-s", "guided", *TINY, "--kernel", "umod:chunk_inc", "--verify",
                "umod:check", n=1)


@case(A)
def user_kernel_in_package(tmp):
    """--kernel pkg.sub:inc from a package in the current directory"""
    (tmp / "upkg").mkdir()
    write(tmp / "upkg" / "__init__.py", "")
    write(tmp / "upkg" / "sub.py", MOD)
    return good(tmp, "-s", "chunk", *TINY, "--kernel", "upkg.sub:inc", "--verify",
                "upkg.sub:check", n=1)


@case(A)
def user_kernel_without_verify(tmp):
    """--kernel umod:inc with no --verify: a kernel of your own needs one -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:inc", says="verify")


@case(A)
def user_kernel_syntax_error(tmp):
    """--kernel broken:f, a module with a syntax error -> exit 2"""
    write(tmp / "broken.py", "def f(task):\n    return (\n")
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "broken:f", "--verify", "none")


@case(A)
def user_kernel_raises_at_import(tmp):
    """--kernel raiser:f, a module raising at import -> exit 2"""
    write(tmp / "raiser.py", "raise RuntimeError('no import for you')\ndef f(task):\n    pass\n")
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "raiser:f", "--verify", "none")


@case(A)
def user_kernel_exits_at_import(tmp):
    """--kernel exiter:f, a module calling sys.exit(0) at import -> exit 2 (not 0)"""
    write(tmp / "exiter.py", "import sys\nsys.exit(0)\ndef f(task):\n    pass\n")
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "exiter:f", "--verify", "none")


@case(A)
def user_kernel_not_function(tmp):
    """--kernel umod:CONSTANT (an int) -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:CONSTANT", "--verify", "none")


@case(A)
def user_kernel_missing_name(tmp):
    """--kernel umod:nothing -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:nothing", "--verify", "none")


@case(A)
def user_kernel_missing_module(tmp):
    """--kernel no_such_mod_xyz:f -> exit 2"""
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "no_such_mod_xyz:f", "--verify",
                   "none")


@case(A)
def user_kernel_two_params(tmp):
    """--kernel umod:two (two parameters) -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:two", "--verify", "none")


@case(A)
def user_kernel_does_not_compile(tmp):
    """--kernel umod:bad_typing (numba, does not type-check for uint8) -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "prolific", *TINY, "--kernel", "umod:bad_typing", "--verify",
                   "none")


@case(A)
def user_kernel_raises_dynamic(tmp):
    """--kernel umod:boom (raises while running) with dynamic: exit 1, run stored failed"""
    _mod(tmp)
    p = run(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:boom", "--verify", "none")
    return stored_failed(tmp, p, "ValueError")


@case(A)
def user_kernel_raises_study_goes_on(tmp):
    """--kernel umod:boom with -s prolific,pipe-1toN,serial: exit 1, all three runs stored
    failed (the study goes on)"""
    _mod(tmp)
    p = run(tmp, "-s", "prolific,pipe-1toN,serial", *TINY, "--kernel", "umod:boom",
            "--verify", "none")
    return stored_failed(tmp, p, "ValueError", n=3)


@case(A)
def user_kernel_exits_in_worker(tmp):
    """--kernel umod:exit_in_worker (sys.exit(4) in the kernel) with prolific: exit 1, stored"""
    _mod(tmp)
    p = run(tmp, "-s", "prolific", *TINY, "--kernel", "umod:exit_in_worker", "--verify",
            "none")
    return stored_failed(tmp, p, "")


@case(A)
def user_kernel_exits_serial(tmp):
    """--kernel umod:exit_in_worker with serial (sys.exit in the main process): exit 1, stored"""
    _mod(tmp)
    p = run(tmp, "-s", "serial", *TINY, "--kernel", "umod:exit_in_worker", "--verify", "none")
    return stored_failed(tmp, p, "")


@case(A)
def user_verify_false(tmp):
    """--verify umod:say_no (returns False): exit 1, run stored unverified"""
    _mod(tmp)
    p = run(tmp, "-s", "guided", *TINY, "--kernel", "umod:inc", "--verify", "umod:say_no")
    return stored_failed(tmp, p, "")


@case(A)
def user_verify_raises(tmp):
    """--verify umod:verify_raises: exit 1, run stored unverified, no traceback"""
    _mod(tmp)
    p = run(tmp, "-s", "pipe-1to1", *TINY, "--kernel", "umod:inc", "--verify",
            "umod:verify_raises")
    return stored_failed(tmp, p, "")


@case(A)
def user_verify_one_param(tmp):
    """--verify umod:one (one parameter) -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:inc", "--verify", "umod:one")


@case(A)
def user_verify_missing(tmp):
    """--verify umod:nothing -> exit 2"""
    _mod(tmp)
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "umod:inc", "--verify",
                   "umod:nothing")


@case(A)
def verify_none_default_kernel(tmp):
    """--verify none with the default quicksort: exit 0, bad_rows -1, verify 'none'"""
    problem = good(tmp, "-s", "static", *TINY, "--verify", "none", n=1, verified=None)
    if problem:
        return problem
    v = _runs(tmp / OUT)["verify"][0]
    return None if v == "none" else f"verify stored as {v!r}"


@case(A)
def verify_user_on_default_kernel(tmp):
    """--verify umod:always on the default kernel: exit 0, verified"""
    _mod(tmp)
    return good(tmp, "-s", "dynamic", *TINY, "--verify", "umod:always", n=1)


# --- --input ------------------------------------------------------------------------------


def _npy(tmp: Path, name: str, arr, **kw) -> str:
    np.save(tmp / name, arr, **kw)
    return name


@case(A)
def input_good_uint8(tmp):
    """--input uint8[6,5,7].npy with the default kernel: L, H, W from it, input_hash stored"""
    arr = np.random.default_rng(0).integers(0, 256, (6, 5, 7), dtype=np.uint8)
    problem = good(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input",
                   _npy(tmp, "in.npy", arr), n=1)
    if problem:
        return problem
    r = _runs(tmp / OUT)[0]
    if (r["L"], r["H"], r["W"]) != (6, 5, 7):
        return f"stored L, H, W = {r['L']}, {r['H']}, {r['W']}"
    return None if str(r["input_hash"]).strip() else "no input_hash stored"


@case(A)
def input_float_user_kernel(tmp):
    """--input float64[5,3].npy with umod:inc and umod:check under prolific: verified"""
    _mod(tmp)
    return good(tmp, "-s", "prolific", "-k", "2", "--reps", "1", "--input",
                _npy(tmp, "in.npy", np.arange(15.0).reshape(5, 3)), "--kernel", "umod:inc",
                "--verify", "umod:check", n=1)


@case(A)
def input_input_unchanged(tmp):
    """--input: the .npy file itself is not written by the run (the original kept)"""
    _mod(tmp)
    name = _npy(tmp, "in.npy", np.arange(15.0).reshape(5, 3))
    before = (tmp / name).read_bytes()
    problem = good(tmp, "-s", "pipe-MtoM", "-k", "2", "--reps", "1", "--input", name,
                   "--kernel", "umod:inc", "--verify", "umod:check", n=1)
    if problem:
        return problem
    return None if (tmp / name).read_bytes() == before else "the --input file was modified"


@case(A)
def input_1d_user_kernel(tmp):
    """--input float64[8].npy (1-D) with umod:inc / umod:check: verified"""
    _mod(tmp)
    return good(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input",
                _npy(tmp, "in.npy", np.arange(8.0)), "--kernel", "umod:inc", "--verify",
                "umod:check", n=1)


_BAD_INPUT = {
    "float_default_kernel": lambda t: _npy(t, "in.npy", np.zeros((4, 3, 3))),
    "empty_axis": lambda t: _npy(t, "in.npy", np.zeros((5, 0, 3), np.uint8)),
    "zero_frames": lambda t: _npy(t, "in.npy", np.zeros((0, 4, 4), np.uint8)),
    "zero_d": lambda t: _npy(t, "in.npy", np.array(7, np.uint8)),
    "big_endian": lambda t: _npy(t, "in.npy", np.zeros((4, 3, 3), ">f8")),
    "datetime": lambda t: _npy(t, "in.npy", np.zeros((4, 3), "datetime64[s]")),
    "object_pickle": lambda t: _npy(t, "in.npy", np.array([[1], ["a"]], dtype=object),
                                    allow_pickle=True),
    "truncated": lambda t: (np.save(t / "full.npy", np.zeros((8, 8, 8), np.uint8)),
                            (t / "in.npy").write_bytes((t / "full.npy").read_bytes()[:300]),
                            (t / "full.npy").unlink(), "in.npy")[-1],
    "text_file": lambda t: (write(t / "in.npy", "this is not numpy\n"), "in.npy")[-1],
    "fifo": lambda t: (os.mkfifo(t / "in.npy"), "in.npy")[-1],
    "directory": lambda t: ((t / "in.npy").mkdir(), "in.npy")[-1],
    "missing": lambda t: "missing.npy",
}
for _name, _make_input in _BAD_INPUT.items():
    def _make_bi(make=_make_input, name=_name):
        def fn(tmp: Path) -> str | None:
            _mod(tmp)
            path = make(tmp)
            extra = (["--kernel", "umod:inc", "--verify", "umod:check"]
                     if name in ("datetime", "object_pickle", "zero_d") else [])
            return refused(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input", path,
                           *extra, says="input", timeout=60)
        fn.__name__ = "input_bad_" + name
        fn.__doc__ = f"--input ({name.replace('_', ' ')}): exit 2, one line naming --input, nothing left, no hang"
        return fn
    case(A)(_make_bi())


# --- output paths ---------------------------------------------------------------------------


def _study(tmp: Path, out: str = OUT, *extra) -> str | None:
    """A first study at ``out`` (dynamic, TINY)."""
    p = run(tmp, "-s", "dynamic", *TINY, *extra, out=out)
    return ok(p, tmp / out)


@case(A)
def out_existing_without_overwrite(tmp):
    """--out an existing file without --overwrite -> exit 2, the file unchanged"""
    write(tmp / OUT, "precious")
    return refused(tmp, "-s", "dynamic", *TINY)


@case(A)
def out_existing_study_overwrite(tmp):
    """--overwrite an existing study: replaced by the new one (one guided run)"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    problem = good(tmp, "-s", "guided", *TINY, "--overwrite", n=1)
    if problem:
        return problem
    s = _runs(tmp / OUT)["scheduler"][0]
    return None if s == "guided" else f"stored {s!r}"


@case(A)
def out_overwrite_failed_start_keeps_old(tmp):
    """--overwrite with a start that fails (unknown kernel module): exit 2, the old study
    byte for byte as it was"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", *TINY, "--overwrite", "--kernel", "nomod_xyz:f",
                   "--verify", "none")


@case(A)
def out_symlink(tmp):
    """--out a symlink to a regular file -> exit 2, link and target unchanged"""
    write(tmp / "target.h5", "precious")
    (tmp / OUT).symlink_to(tmp / "target.h5")
    return refused(tmp, "-s", "dynamic", *TINY)


@case(A)
def out_symlink_overwrite(tmp):
    """--out a symlink with --overwrite -> exit 2 (never through a symlink), target unchanged"""
    write(tmp / "target.h5", "precious")
    (tmp / OUT).symlink_to(tmp / "target.h5")
    return refused(tmp, "-s", "dynamic", *TINY, "--overwrite")


@case(A)
def out_dangling_symlink(tmp):
    """--out a dangling symlink -> exit 2, its target not created"""
    (tmp / OUT).symlink_to(tmp / "nowhere.h5")
    return refused(tmp, "-s", "dynamic", *TINY)


@case(A)
def out_fifo(tmp):
    """--out a FIFO (also with --overwrite) -> exit 2, no hang, the FIFO left"""
    os.mkfifo(tmp / OUT)
    return (refused(tmp, "-s", "dynamic", *TINY, timeout=60)
            or refused(tmp, "-s", "dynamic", *TINY, "--overwrite", timeout=60))


@case(A)
def out_directory(tmp):
    """--out a directory (also with --overwrite) -> exit 2, the directory untouched"""
    (tmp / OUT).mkdir()
    write(tmp / OUT / "keep", "x")
    return (refused(tmp, "-s", "dynamic", *TINY)
            or refused(tmp, "-s", "dynamic", *TINY, "--overwrite"))


@case(A)
def out_empty_string(tmp):
    """--out '' -> exit 2, nothing created"""
    return refused(tmp, "-s", "dynamic", *TINY, out="")


@case(A)
def out_missing_directory(tmp):
    """--out no/such/dir/o.h5 -> exit 2, nothing created"""
    return refused(tmp, "-s", "dynamic", *TINY, out="no/such/dir/o.h5")


@case(A)
def out_unwritable_directory(tmp):
    """--out into a chmod 555 directory -> exit 2, nothing created"""
    d = tmp / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        try:
            (d / "probe").write_text("x")
            (d / "probe").unlink()
            raise Skip("this user (root?) can write into a chmod 555 directory")
        except PermissionError:
            pass
        return refused(tmp, "-s", "dynamic", *TINY, out="ro/o.h5")
    finally:
        d.chmod(0o755)


@case(A)
def out_device(tmp):
    """--out /dev/null (a device, no --overwrite) -> exit 2"""
    p = run(tmp, "-s", "dynamic", *TINY, out="/dev/null")
    return usage(p)


@case(A)
def out_default_name(tmp):
    """no --out: hybridsched-<time>.h5 in the current directory, nothing else left"""
    p = run(tmp, "-s", "dynamic", *TINY, out=None)
    problem = ok(p)
    if problem:
        return problem
    names = sorted(x.name for x in tmp.iterdir())
    if len(names) != 1 or not (names[0].startswith("hybridsched-") and names[0].endswith(".h5")):
        return f"the directory holds {names}"
    return None


# --- --resume ------------------------------------------------------------------------------


@case(A)
def resume_missing_starts_fresh(tmp):
    """--resume on a file that does not exist: starts fresh, exit 0"""
    return good(tmp, "-s", "dynamic", *TINY, "--resume", n=1)


@case(A)
def resume_and_overwrite(tmp):
    """--resume --overwrite together on an existing study -> exit 2, study unchanged"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", *TINY, "--resume", "--overwrite")


@case(A)
def resume_non_study(tmp):
    """--resume on a text file -> exit 2, the file unchanged"""
    write(tmp / OUT, "not a study")
    return refused(tmp, "-s", "dynamic", *TINY, "--resume")


@case(A)
def resume_foreign_hdf5(tmp):
    """--resume on an HDF5 file that is not a study -> exit 2, the file unchanged"""
    import h5py
    with h5py.File(tmp / OUT, "w") as f:
        f["x"] = np.arange(3)
    return refused(tmp, "-s", "dynamic", *TINY, "--resume")


@case(A)
def resume_different_seed(tmp):
    """--resume with another --seed -> exit 2 (the tensor differs), study unchanged"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", *TINY, "--seed", "7", "--resume", says="seed")


@case(A)
def resume_different_height(tmp):
    """--resume with another --height -> exit 2, study unchanged"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", "-k", "2", "-L", "8", "--height", "4", "--width",
                   "16", "--reps", "1", "--resume")


@case(A)
def resume_different_kernel(tmp):
    """--resume with --kernel counting over a quicksort study -> exit 2, study unchanged"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", *TINY, "--kernel", "counting", "--resume")


@case(A)
def resume_same_runs_nothing(tmp):
    """--resume with the same spec: exit 0, no run added"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return good(tmp, "-s", "dynamic", *TINY, "--resume", n=1)


@case(A)
def resume_extends(tmp):
    """--resume adding -k 1 and guided: exit 0, only the missing runs added (1 + 3)"""
    problem = _study(tmp)
    if problem:
        return f"setup: {problem}"
    return good(tmp, "-s", "dynamic,guided", "-k", "1,2", "-L", "8", "--height", "8",
                "--width", "16", "--reps", "1", "--resume", n=4)


@case(A)
def resume_directory(tmp):
    """--resume with --out a directory -> exit 2"""
    (tmp / OUT).mkdir()
    return refused(tmp, "-s", "dynamic", *TINY, "--resume")


# --- --coop, --preset ----------------------------------------------------------------------

for _s in ("dynamic", "prolific", "pipe-MtoM", "chunk-steal"):
    def _make_coop(s=_s):
        def fn(tmp: Path) -> str | None:
            problem = good(tmp, "-s", s, *TINY, "--coop", n=1)
            if problem:
                return problem
            c = _runs(tmp / OUT)["coop"][0]
            return None if c else "coop not stored as true"
        fn.__name__ = "coop_" + s.replace("-", "_")
        fn.__doc__ = f"run -s {s} --coop: verified, coop stored, arbiter segment gone"
        return fn
    case(A)(_make_coop())


@case(A)
def preset_smoke_narrowed(tmp):
    """--preset smoke -s dynamic,serial -k 1,2 --reps 1: quick, every run verified"""
    return good(tmp, "--preset", "smoke", "-s", "dynamic,serial", "-k", "1,2", "--reps", "1",
                timeout=180)


# --- more: --input conflicts, resume over another input, kernels, signals -------------------


@case(A)
def input_with_workload(tmp):
    """--input with --workload ramp (both define the tasks) -> exit 2"""
    arr = np.zeros((6, 5, 7), np.uint8)
    return refused(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input",
                   _npy(tmp, "in.npy", arr), "--workload", "ramp")


@case(A)
def input_with_other_frames(tmp):
    """--input of 6 tasks with -L 3 -> exit 2"""
    arr = np.zeros((6, 5, 7), np.uint8)
    return refused(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input",
                   _npy(tmp, "in.npy", arr), "-L", "3")


@case(A)
def input_with_height(tmp):
    """--input with --height 9 (the file gives the shape) -> exit 2"""
    arr = np.zeros((6, 5, 7), np.uint8)
    return refused(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input",
                   _npy(tmp, "in.npy", arr), "--height", "9")


@case(A)
def resume_other_input(tmp):
    """--resume extending -k with another --input file of the same shape (the tensor
    differs) -> exit 2, study unchanged"""
    rng = np.random.default_rng(0)
    a = _npy(tmp, "a.npy", rng.integers(0, 256, (6, 5, 7), dtype=np.uint8))
    b = _npy(tmp, "b.npy", rng.integers(0, 256, (6, 5, 7), dtype=np.uint8))
    p = run(tmp, "-s", "dynamic", "-k", "2", "--reps", "1", "--input", a)
    problem = ok(p, tmp / OUT)
    if problem:
        return f"setup: {problem}"
    return refused(tmp, "-s", "dynamic", "-k", "1,2", "--reps", "1", "--input", b, "--resume")


@case(A)
def kernel_numpy_and_counting(tmp):
    """--kernel numpy and --kernel counting (built in) with guided: verified"""
    for k in ("numpy", "counting"):
        problem = good(tmp, "-s", "guided", *TINY, "--kernel", k, n=1, out=f"{k}.h5")
        if problem:
            return f"--kernel {k}: {problem}"
    return None


@case(A)
def out_odd_name(tmp):
    """--out with spaces, unicode and '#' in the name: works"""
    return good(tmp, "-s", "dynamic", *TINY, n=1, out="my study é #1.h5")


@case(A)
def chunk_bigger_than_frames(tmp):
    """--chunk 1000 with 8 frames (one chunk) under pipe-MtoM and dynamic: verified"""
    return good(tmp, "-s", "pipe-MtoM,dynamic", *TINY, "--chunk", "1000", n=2)


def _interrupt(tmp: Path, sig: int, want: int) -> str | None:
    """Start a long study, signal it once its file holds a run: exit ``want``, one line,
    the file a readable study with every completed run verified."""
    import signal as _signal
    import subprocess
    import time

    from .common import HS
    env = dict(os.environ, **ENV)
    proc = subprocess.Popen([*HS, "run", "-s", "dynamic", *TINY[:-1], "100000", "--out", OUT],
                            cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp / OUT).exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is not None:
            return f"ended by itself with {proc.returncode} before the signal"
        if not (tmp / OUT).exists():
            return "no study file after 60 s"
        time.sleep(0.3)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            return f"still running 30 s after {_signal.Signals(sig).name}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != want:
        return f"exit {proc.returncode}, not {want}: {err.strip()[-200:]}"
    if "Traceback" in err:
        return "a traceback on stderr"
    runs = _runs(tmp / OUT)
    if len(runs) == 0 or not all(runs["verified"]):
        return f"{len(runs)} runs kept, verified {set(runs['verified'].tolist())}"
    leftovers = sorted(x.name for x in tmp.iterdir() if x.name != OUT)
    return f"left beside the study: {leftovers}" if leftovers else None


@case(A)
def sigint_mid_study(tmp):
    """SIGINT during a long study: exit 130, completed runs kept and readable"""
    import signal as _signal
    return _interrupt(tmp, _signal.SIGINT, 130)


@case(A)
def sigterm_mid_study(tmp):
    """SIGTERM during a long study: exit 143, completed runs kept and readable"""
    import signal as _signal
    return _interrupt(tmp, _signal.SIGTERM, 143)
