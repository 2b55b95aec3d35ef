"""Scalability models fitted to measured speedups over N = P x k execution units (§3.3-3.10).

``amdahl``     Eq. 6 / Eq. 19 fitted by nonlinear least squares for the serial fraction alpha,
               plus the per-point estimates of Eq. 8 (k units) / Eq. 20 (P_k = P x k units).
``gustafson``  Eq. 9, sigma(N) = N - alpha_scaled (N - 1), by linear least squares.
``usl``        Eq. 21 / Gunther's X(N) = lambda N / (1 + alpha (N-1) + beta N (N-1)), by the
               linear regression of Eq. 23 and by nonlinear least squares (scipy curve_fit)
               with standard errors and 95 % confidence intervals; peak N* = sqrt((1-alpha)/beta).

Input is either a CSV with columns ``N`` and ``speedup`` or ``throughput`` (any others,
e.g. P and k, are ignored) or a hybridsched study: speedups of one scheduler's verified runs
per (P, k) against T_serial, the mean of the verified serial runs at P = 1, k = 1.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import metrics
from ..core.capabilities import BASELINE
from ..errors import UsageError

MODELS = ("amdahl", "gustafson", "usl")
CONFIDENCE = 0.95  # two-sided level of the reported intervals
# Relative size of the coherence term at the largest N below which beta counts as 0 (no
# peak reported): 1e-4 is far below run-to-run timing noise (~1 %), so a smaller term is
# numerical residue of the fit, not a measured cost; larger would hide real small betas.
BETA_VISIBLE = 1e-4


@dataclass
class Data:
    """Measured points: N units and speedup (or throughput) at each."""

    N: np.ndarray
    y: np.ndarray
    kind: str = "speedup"             # speedup | throughput
    source: str = ""
    P: np.ndarray | None = None
    k: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    cores: int | None = None          # physical cores (per node): N beyond them oversubscribe


# --- the models (Eqs. 6/19 and 9 are metrics.amdahl_speedup / gustafson_speedup) -------


def usl_throughput(n, lam, alpha, beta):
    """Eq. 21 scaled by lambda: X(N) = lambda N / (1 + alpha (N - 1) + beta N (N - 1))."""
    n = np.asarray(n, float)
    return lam * n / (1.0 + alpha * (n - 1.0) + beta * n * (n - 1.0))


def usl_peak(alpha: float, beta: float) -> float | None:
    """N* = sqrt((1 - alpha) / beta), where X(N) peaks; None when beta <= 0 (no peak)."""
    if not beta > 0.0 or alpha >= 1.0:
        return None
    return math.sqrt((1.0 - alpha) / beta)


# --- helpers ----------------------------------------------------------------------------


def _r2(y: np.ndarray, yhat: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - yhat) ** 2))
    return 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else math.nan)


def _param(value: float, se: float, dof: int) -> dict:
    from scipy import stats

    if dof > 0 and math.isfinite(se):
        h = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se
        lo, hi = value - h, value + h
    else:
        se, lo, hi = math.nan, math.nan, math.nan
    return {"value": float(value), "stderr": float(se), "ci": [float(lo), float(hi)]}


def _lambda0(d: Data) -> float:
    """Throughput of one unit: measured at N = 1 when there is such a point, else the
    best single-unit rate the data allow (used as the speedup scale and initial guess)."""
    if d.kind == "speedup":
        return 1.0
    ones = d.y[d.N == 1]
    return float(ones.mean()) if len(ones) else float(np.max(d.y / d.N))


def _curve_fit(f, x, y, p0, bounds):
    import warnings

    from scipy.optimize import OptimizeWarning, curve_fit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        try:
            popt, pcov = curve_fit(f, x, y, p0=p0, bounds=bounds, maxfev=20000)
        except (RuntimeError, ValueError) as exc:
            raise UsageError(f"the fit did not converge: {exc}") from None
    se = np.sqrt(np.clip(np.diag(pcov), 0, None)) if np.all(np.isfinite(pcov)) else np.full(len(p0), np.nan)
    return popt, se


def _check(d: Data, model: str, need: int) -> None:
    distinct = len(np.unique(d.N))
    if distinct < need:
        raise UsageError(f"{d.source or 'data'}: {model} needs speedups at {need} or more "
                         f"different N, got {distinct}")


# --- the models ------------------------------------------------------------------------


def fit_usl(d: Data) -> dict:
    """USL by the Eq. 23 regression and by nonlinear least squares (the headline values)."""
    _check(d, "usl", 3)
    lam0 = _lambda0(d)
    sigma = d.y / lam0
    out: dict = {"model": "usl", "kind": d.kind, "n_points": int(len(d.N))}
    # Eq. 22-23: Y/(N-1) = alpha + beta N, over the points with N > 1
    m = d.N > 1
    x, z = d.N[m].astype(float), (d.N[m] / sigma[m] - 1.0) / (d.N[m] - 1.0)
    lin: dict = {}
    if len(np.unique(x)) >= 2:
        from scipy import stats

        reg = stats.linregress(x, z)
        dof = len(x) - 2
        lin = {"alpha": _param(reg.intercept, reg.intercept_stderr, dof),
               "beta": _param(reg.slope, reg.stderr, dof), "r2": float(reg.rvalue ** 2)}
    out["linear"] = lin
    a0 = min(max(lin["alpha"]["value"], 0.0), 0.99) if lin else 0.05
    b0 = max(lin["beta"]["value"], 0.0) if lin else 0.0
    # alpha in [0, 1] and beta >= 0 are the model's domain: a negative beta would be a
    # "retrograde" speed-up that no coherence cost produces.
    x = d.N.astype(float)
    if d.kind == "speedup":
        # Eq. 21 as written: sigma(1) = 1, so lambda is fixed at 1 and only alpha and
        # beta are fitted (a free lambda would absorb part of the serial fraction)
        popt, se = _curve_fit(lambda n, a, b: usl_throughput(n, 1.0, a, b), x, d.y,
                              [a0, b0 + 1e-9], ([0.0, 0.0], [1.0, np.inf]))
        dof = len(d.N) - 2
        lam, alpha, beta = 1.0, float(popt[0]), float(popt[1])
        se = np.concatenate([[math.nan], se])
        out["params"] = {"alpha": _param(alpha, se[1], dof), "beta": _param(beta, se[2], dof)}
    else:
        # throughput X(N) = lambda N / (...): lambda, the one-unit rate, is a parameter too
        # (as R's usl package fits it)
        popt, se = _curve_fit(usl_throughput, x, d.y, [lam0, a0, b0 + 1e-9],
                              ([0.0, 0.0, 0.0], [np.inf, 1.0, np.inf]))
        dof = len(d.N) - 3
        lam, alpha, beta = (float(v) for v in popt)
        out["params"] = {"lambda": _param(lam, se[0], dof), "alpha": _param(alpha, se[1], dof),
                         "beta": _param(beta, se[2], dof)}
    out["lambda_fixed"] = d.kind == "speedup"
    out["r2"] = _r2(d.y, usl_throughput(d.N, lam, alpha, beta))
    out["alpha"], out["beta"], out["lambda"] = alpha, beta, lam
    # A beta within two standard errors of 0, or one whose term beta N (N-1) changes the
    # model at the largest measured N by under BETA_VISIBLE (far below timing noise), is no
    # evidence of a retrograde region: report no peak rather than an extrapolation to a
    # huge N* that the data cannot support.
    nmax = float(d.N.max())
    coherence = beta * nmax * (nmax - 1) / (1.0 + alpha * (nmax - 1))
    out["beta_is_zero"] = bool(beta <= 0 or (math.isfinite(se[2]) and dof > 0 and beta < 2 * se[2])
                               or coherence < BETA_VISIBLE)
    out["peak_N"] = None if out["beta_is_zero"] else usl_peak(alpha, beta)
    out["peak_X"] = (float(usl_throughput(out["peak_N"], lam, alpha, beta))
                     if out["peak_N"] is not None else None)
    return out


def fit_amdahl(d: Data) -> dict:
    """Eq. 6 / 19 by nonlinear least squares, with Eq. 8 / 20 per point."""
    _check(d, "amdahl", 2)
    lam0 = _lambda0(d)
    n = d.N.astype(float)
    f: Callable[..., np.ndarray]  # the model curve_fit fits: f(N, *params)
    if d.kind == "speedup":
        f = lambda x, a: metrics.amdahl_speedup(a, x)  # noqa: E731
        popt, se = _curve_fit(f, n, d.y, [0.05], ([0.0], [1.0]))
        lam, alpha, se_a = 1.0, float(popt[0]), se[0]
        dof = len(n) - 1
    else:
        f = lambda x, lam, a: lam * metrics.amdahl_speedup(a, x)  # noqa: E731
        popt, se = _curve_fit(f, n, d.y, [lam0, 0.05], ([0.0, 0.0], [np.inf, 1.0]))
        lam, alpha, se_a = float(popt[0]), float(popt[1]), se[1]
        dof = len(n) - 2
    sigma = d.y / lam
    points = _points(d, [metrics.distributed_alpha(s, 1, x).value for s, x in zip(sigma, n)])
    yhat = lam * metrics.amdahl_speedup(alpha, n)
    return {"model": "amdahl", "kind": d.kind, "n_points": int(len(n)),
            "alpha": alpha, "beta": 0.0, "lambda": lam, "peak_N": None,
            "params": {"alpha": _param(alpha, se_a, dof)}, "r2": _r2(d.y, yhat),
            "limit_speedup": (1.0 / alpha) if alpha > 0 else None,
            "points": points, "alpha_eq20_mean": _nanmean([p["alpha"] for p in points])}


def fit_gustafson(d: Data) -> dict:
    """Eq. 9 by least squares through sigma(1) = 1: alpha_scaled = sum((N-sigma)(N-1)) / sum((N-1)^2)."""
    _check(d, "gustafson", 2)
    lam = _lambda0(d)
    n, sigma = d.N.astype(float), d.y / lam
    u = n - 1.0
    denom = float(np.sum(u * u))
    if denom == 0:
        raise UsageError("gustafson needs a point with N > 1")
    a = float(np.sum((n - sigma) * u) / denom)
    resid = sigma - metrics.gustafson_speedup(a, n)
    dof = len(n) - 1
    se = math.sqrt(float(np.sum(resid ** 2)) / dof / denom) if dof > 0 else math.nan
    pts = _points(d, [((x - s) / (x - 1.0)) if x > 1 else math.nan for x, s in zip(n, sigma)])
    return {"model": "gustafson", "kind": d.kind, "n_points": int(len(n)),
            "alpha": a, "beta": 0.0, "lambda": lam, "peak_N": None,
            "params": {"alpha": _param(a, se, dof)}, "r2": _r2(sigma, metrics.gustafson_speedup(a, n)),
            "points": pts}


def _points(d: Data, alphas: list[float]) -> list[dict]:
    out = []
    for i, a in enumerate(alphas):
        p = {"N": int(d.N[i]), "y": float(d.y[i]), "alpha": float(a)}
        if d.P is not None and d.k is not None:
            p["P"], p["k"] = int(d.P[i]), int(d.k[i])
        out.append(p)
    return out


def _nanmean(xs: list[float]) -> float:
    v = [x for x in xs if not math.isnan(x)]
    return float(np.mean(v)) if v else math.nan


def fit(d: Data, model: str) -> dict:
    if model not in MODELS:
        raise UsageError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    res = {"amdahl": fit_amdahl, "gustafson": fit_gustafson, "usl": fit_usl}[model](d)
    res["source"] = d.source
    res["data"] = {"N": [int(x) for x in d.N], d.kind: [float(v) for v in d.y]}
    if d.P is not None and d.k is not None:  # given together
        res["data"]["P"] = [int(x) for x in d.P]
        res["data"]["k"] = [int(x) for x in d.k]
    if d.notes:
        res["notes"] = d.notes
    from .fitcheck import warnings

    res["cores"] = d.cores
    res["warnings"] = warnings(res, d.cores)
    return res


# --- input ------------------------------------------------------------------------------


def load(path: str, scheduler: str | None = None, frames: int | None = None) -> Data:
    """Points from a CSV or a study file (chosen by content, not by extension)."""
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise UsageError(f"{path}: not a regular file (a directory, device or FIFO)")
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if magic == b"\x89HDF\r\n\x1a\n":
        return load_study(path, scheduler, frames)
    return load_csv(path)


# The largest N and speedup or throughput a CSV may give: far past any machine, and far
# below where the fits' sums of squares overflow (1e308 gave overflow warnings from scipy
# and an alpha of -inf, the hostile review)
CSV_MAX_N = 10**9
CSV_MAX_Y = 1e12
CSV_MIN_Y = 1e-12  # and 1e-300 overflowed the other way


def load_csv(path: str) -> Data:
    """A CSV with a header naming ``N`` and ``speedup`` or ``throughput`` (a UTF-8 one
    with a byte-order mark too, as spreadsheets save it)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from None
    cols = {c.strip().lower(): c for c in (rows[0].keys() if rows else []) if c}
    kind = "speedup" if "speedup" in cols else "throughput" if "throughput" in cols else None
    if "n" not in cols or kind is None:
        raise UsageError(f"{path}: a CSV for fit needs columns N and speedup or throughput")
    n, y = [], []
    for i, r in enumerate(rows, start=2):
        if any(x.strip() for x in r.get(None) or ()):  # DictReader's key for the fields
            # past the header's; empty ones (a spreadsheet's trailing comma) are nothing
            raise UsageError(f"{path}: line {i}: more fields than the header names")
        try:
            nv, yv = float(r[cols["n"]]), float(r[cols[kind]])
        except (TypeError, ValueError):
            raise UsageError(f"{path}: line {i}: N and {kind} must be numbers") from None
        if not (1 <= nv <= CSV_MAX_N and nv == int(nv)) or not CSV_MIN_Y <= yv <= CSV_MAX_Y:
            raise UsageError(f"{path}: line {i}: N must be a whole number from 1 to "
                             f"{CSV_MAX_N:.0e} and {kind} from {CSV_MIN_Y:.0e} to "
                             f"{CSV_MAX_Y:.0e}")
        n.append(int(nv))
        y.append(yv)
    if not n:
        raise UsageError(f"{path}: no data rows")
    return Data(np.array(n), np.array(y, float), kind, path)


def _one_split(ok: np.ndarray, splits: dict[int, str], scheduler: str | None):
    """``scheduler`` as report names it in a merge of studies of several --split, ``X [split
    Y]``: X's runs on one rank, and those on several ranks that split the frames by Y (the
    runs and X); any other name: the runs and the name, as they are."""
    from .data import splits_apart

    named = splits_apart(ok, splits)["scheduler"]
    if scheduler is None or scheduler in set(ok["scheduler"].tolist()) \
            or scheduler not in set(named.tolist()):
        return ok, scheduler
    plain = scheduler.split(" [split ", 1)[0]
    other_split = (ok["scheduler"] == plain) & (ok["P"] > 1) & (named != scheduler)
    return ok[~other_split], plain


def load_study(path: str, scheduler: str | None = None, frames: int | None = None) -> Data:
    """Speedup per (P, k) of one scheduler against T_serial (serial runs at P = 1, k = 1),
    from verified runs only, at one tensor size L."""
    from ..store import StudyFile

    from .data import SIMULATED_MARK, run_splits, versions_apart

    with StudyFile(path) as study:  # the loader report and the simulator share: one open
        runs = versions_apart(study.runs)
        cores = _physical_cores(study.attrs)
        splits = run_splits(study, runs[runs["verified"]])
    ok, scheduler = _one_split(runs[runs["verified"]], splits, scheduler)
    base = (BASELINE, BASELINE + SIMULATED_MARK)
    others = ok[~np.isin(ok["scheduler"], base)]
    notes: list[str] = []
    if "simulated" in (runs.dtype.names or ()) and len(runs) and runs["simulated"].all():
        notes.append("every point is simulated (hybridsched simulate), none measured")
    if scheduler is None:
        names = sorted(set(others["scheduler"].tolist()))
        if not names:
            raise UsageError(f"{path}: no verified runs of a parallel scheduler")
        scheduler = "dynamic" if "dynamic" in names else max(
            names, key=lambda s: (len(np.unique(others["P"][others["scheduler"] == s] *
                                                others["k"][others["scheduler"] == s])), s))
        notes.append(f"scheduler {scheduler} (choose with --scheduler)")
    mine = others[others["scheduler"] == scheduler]
    if len(mine) == 0:
        raise UsageError(f"{path}: no verified runs of scheduler {scheduler!r}")
    ways = sorted({splits.get(int(r), "") or "not recorded" for r in mine["run_id"][mine["P"] > 1]})
    if len(ways) > 1:  # one curve from two ways of handing frames to ranks would mix them
        raise UsageError(f"{path}: the runs of {scheduler} on several ranks split the frames "
                         f"in {len(ways)} ways ({', '.join(ways)}): choose one as report names "
                         f"it, e.g. --scheduler '{scheduler} [split {ways[0]}]'")
    # a simulated scheduler of a study that also holds measured runs: the simulated T_serial
    own = base[1] if str(scheduler).endswith(SIMULATED_MARK) else base[0]
    if own != base[0]:
        notes.append(f"{scheduler}: simulated points (the study also holds measured runs)")
    serial = ok[(ok["scheduler"] == own) & (ok["P"] == 1) & (ok["k"] == 1)]
    if len(serial) == 0:
        raise UsageError(f"{path}: no verified {own} runs at P=1, k=1 to take T_serial from "
                         "(run -s serial without mpiexec, then merge)")
    Ls = sorted(set(serial["L"].tolist()) & set(mine["L"].tolist()))
    if frames is not None:
        if frames not in Ls:
            raise UsageError(f"{path}: no serial and {scheduler} runs at L={frames} (have {Ls})")
        L = frames
    elif not Ls:
        raise UsageError(f"{path}: no L with both serial and {scheduler} runs")
    else:
        L = max(Ls, key=lambda v: (int(np.sum(mine["L"] == v)), v))
        if len(Ls) > 1:
            notes.append(f"L={L} of {Ls} (choose with --frames)")
    t1 = float(serial["time_s"][serial["L"] == L].mean())
    mine = mine[mine["L"] == L]
    variants = sorted({(int(r["chunk"]), bool(r["affinity"])) for r in mine},
                      key=lambda v: (v[0] != 0, not v[1], v[0]))
    if len(variants) > 1:
        # one curve only: never average different chunks or placements into one point
        chunk, aff = variants[0]
        mine = mine[(mine["chunk"] == chunk) & (mine["affinity"] == aff)]
        notes.append(f"chunk={chunk or 'default'}, affinity {'on' if aff else 'off'} of "
                     f"{len(variants)} variants in the study")
    groups: dict[tuple[int, int], list[float]] = {}
    for r in mine:
        groups.setdefault((int(r["P"]), int(r["k"])), []).append(float(r["time_s"]))
    keys = sorted(groups, key=lambda pk: (pk[0] * pk[1], pk))
    P = np.array([p for p, _ in keys])
    k = np.array([kk for _, kk in keys])
    sigma = np.array([t1 / float(np.mean(groups[key])) for key in keys])
    return Data(P * k, sigma, "speedup", f"{path} [{scheduler}, L={L}]", P, k, notes, cores)


def _physical_cores(attrs: dict) -> int | None:
    """Physical cores the study could use: the recorded physical count, capped by the usable
    CPUs N (a cpuset smaller than the machine); a simulated study's virtual cores per node;
    None where neither is recorded."""
    from ..store import simulated_cores

    if cores := simulated_cores(attrs):
        return cores
    vals = []
    for key in ("machine.cpu_count_physical", "machine.N"):
        try:
            v = int(attrs.get(key, 0) or 0)
        except (TypeError, ValueError):
            v = 0
        if v > 0:
            vals.append(v)
    return min(vals) if vals else None


# --- output -----------------------------------------------------------------------------


def _fmt_param(name: str, p: dict) -> str:
    from .fitcheck import bound_of, value_text

    lo, hi = p["ci"]
    if bound_of(name, p) is not None:  # an interval around a wall the optimiser hit says nothing
        return f"  {name:<8} {value_text(name, p)}"
    ci = "" if math.isnan(lo) else f"  {int(CONFIDENCE * 100)}% CI [{lo:.4g}, {hi:.4g}]"
    se = "" if math.isnan(p["stderr"]) else f" ± {p['stderr']:.3g}"
    return f"  {name:<8} {value_text(name, p)}{se}{ci}"


def text(res: dict) -> str:
    """The human-readable summary ``hybridsched fit`` prints without --json."""
    lines = [f"{res['model']} fit of {res['n_points']} points ({res['kind']}) from {res['source']}"]
    if res.get("lambda_fixed"):
        lines.append("  lambda   1 (fixed: speedup data, Eq. 21)")
    lines += [f"  note: {n}" for n in res.get("notes", [])]
    for name, p in res["params"].items():
        lines.append(_fmt_param(name, p))
    lines.append(f"  R²       {res['r2']:.5f}")
    if res["model"] == "usl":
        lin = res["linear"]
        if lin:
            ci = lambda q: ("" if math.isnan(q["ci"][0]) else  # noqa: E731
                            f" [{q['ci'][0]:.4g}, {q['ci'][1]:.4g}]")
            lines.append(f"  Eq. 23 regression: alpha {lin['alpha']['value']:.6g}{ci(lin['alpha'])}, "
                         f"beta {lin['beta']['value']:.6g}{ci(lin['beta'])}, R² {lin['r2']:.5f}")
        pk = res["peak_N"]
        lines.append("  peak N*  none (beta indistinguishable from 0: no retrograde region)"
                     if pk is None else
                     f"  peak N*  {pk:.4g} (X = {res['peak_X']:.4g})")
    if res["model"] == "amdahl":
        lim = res["limit_speedup"]
        lines.append(f"  limit    {'unbounded' if lim is None else f'{lim:.4g}'} (1/alpha)")
        lines.append(f"  Eq. 20 alpha per point (P_k = P x k): mean {res['alpha_eq20_mean']:.4g}")
    if "points" in res:
        for p in res["points"]:
            pk = f" (P={p['P']}, k={p['k']})" if "P" in p else ""
            a = "—" if math.isnan(p["alpha"]) else f"{p['alpha']:.4g}"
            lines.append(f"    N={p['N']}{pk}: {res['kind']} {p['y']:.4g}, alpha {a}")
    lines += [f"  WARNING: {w}" for w in res.get("warnings", [])]
    return "\n".join(lines)


def predict(res: dict, n) -> np.ndarray:
    if res["model"] == "usl":
        return usl_throughput(n, res["lambda"], res["alpha"], res["beta"])
    if res["model"] == "amdahl":
        return res["lambda"] * metrics.amdahl_speedup(res["alpha"], n)
    return res["lambda"] * metrics.gustafson_speedup(res["alpha"], n)


def jsonable(obj):
    """``obj`` with NaN and infinities replaced by None, so it prints as strict JSON."""
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
