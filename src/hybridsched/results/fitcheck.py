"""How far a scalability fit (fit.py) can be trusted: the warnings ``hybridsched fit`` prints.

Six cases, each a plain sentence in ``res["warnings"]``:

- the points leave fewer than MIN_DOF degrees of freedom (points − fitted parameters);
- some N exceed the physical cores: those points measure oversubscription, not scaling;
- a parameter sits at a bound of its domain (alpha at 0 or 1, beta or lambda at 0): the
  optimiser stopped at the wall, and its interval means nothing (printed "0 (at bound)");
- the Eq. 23 regression and the nonlinear fit disagree beyond their intervals;
- R² below 0 (the curve fits worse than the points' mean: the fit failed);
- a fitted value (nonlinear or Eq. 23) outside its parameter's domain (alpha beyond [0, 1]).
"""
from __future__ import annotations

import math

# Degrees of freedom below which a fit is not worth its intervals: at 1 the t quantile of a
# 95 % interval is 12.7 (intervals twelve standard errors wide); at 2 it is 4.3, and each
# further point narrows it less. 2 is the least that makes the residual mean a variance.
MIN_DOF = 2

# Distance from a bound (in the parameter's own units, alpha and beta are dimensionless)
# within which a fitted value counts as sitting on it. curve_fit's trust-region solver stops
# about 1e-14 off a wall; real betas of this workload are 1e-5 and above, so 1e-9 keeps both
# apart.
AT_BOUND = 1e-9

# the domain of each parameter, as fit.py bounds it
BOUNDS = {"alpha": (0.0, 1.0), "beta": (0.0, math.inf), "lambda": (0.0, math.inf)}


def bound_of(name: str, p: dict) -> float | None:
    """The bound ``p["value"]`` sits on, or None."""
    lo, hi = BOUNDS.get(name, (-math.inf, math.inf))
    v = p["value"]
    for b in (lo, hi):
        if math.isfinite(b) and abs(v - b) <= AT_BOUND:
            return b
    return None


def _overlap(a: dict, b: dict) -> bool | None:
    """Whether two parameters' intervals overlap (None if either has none)."""
    (alo, ahi), (blo, bhi) = a["ci"], b["ci"]
    if any(not math.isfinite(x) for x in (alo, ahi, blo, bhi)):
        return None
    return alo <= bhi and blo <= ahi


def oversubscribed(res: dict, cores: int | None) -> list[int]:
    """The measured N beyond the physical cores (per node where P and k are known: k > cores)."""
    if not cores:
        return []
    data = res["data"]
    if "P" in data and "k" in data:
        return sorted({n for n, k in zip(data["N"], data["k"]) if k > cores})
    return sorted({n for n in data["N"] if n > cores})


def warnings(res: dict, cores: int | None = None) -> list[str]:
    """The warnings for one fit result (fit.fit's dict), in the order of the module doc."""
    out = []
    n_par = len(res["params"])
    dof = res["n_points"] - n_par
    if dof < MIN_DOF:
        out.append(f"{res['n_points']} points for {n_par} fitted parameter(s) leave {dof} "
                   f"degree(s) of freedom (fewer than {MIN_DOF}): too few to tell the model from "
                   "noise, its intervals are " + ("undefined" if dof < 1 else "very wide")
                   + "; measure more N")
    over = oversubscribed(res, cores)
    if over:
        one = len(over) == 1
        out.append(f"N = {', '.join(map(str, over))} exceed{'s' if one else ''} the {cores} "
                   f"physical cores: {'that point measures' if one else 'those points measure'} "
                   "oversubscription (workers sharing cores), not scaling; the plot marks them")
    for name, p in res["params"].items():
        b = bound_of(name, p)
        if b is not None:
            p["at_bound"] = True
            out.append(f"{name} sits at its bound {b:g}: the data push it out of the model's "
                       "domain, so its value and interval say only that")
    r2 = res.get("r2")
    if r2 is not None and r2 == r2 and r2 < 0:
        out.append(f"R² = {r2:.3g} < 0: the fitted curve describes the points worse than their "
                   "mean does; the fit failed and its parameters mean nothing")
    for label, ps in (("the nonlinear fit's", res["params"]),
                      ("the Eq. 23 regression's", res.get("linear") or {})):
        for name, p in ps.items():
            lo, hi = BOUNDS.get(name, (-math.inf, math.inf))
            v = p.get("value", math.nan) if isinstance(p, dict) else math.nan
            if v == v and not lo <= v <= hi:
                out.append(f"{label} {name} = {v:.4g} lies outside its domain [{lo:g}, {hi:g}]: "
                           "the model does not describe these points")
    lin = res.get("linear") or {}
    if res["model"] == "usl" and lin:
        for name in ("alpha", "beta"):
            ok = _overlap(lin[name], res["params"][name])
            if ok is False:
                out.append(f"the Eq. 23 regression ({name} {lin[name]['value']:.4g}, CI "
                           f"[{lin[name]['ci'][0]:.4g}, {lin[name]['ci'][1]:.4g}]) and the "
                           f"nonlinear fit ({name} {res['params'][name]['value']:.4g}, CI "
                           f"[{res['params'][name]['ci'][0]:.4g}, {res['params'][name]['ci'][1]:.4g}]) "
                           "disagree beyond their intervals: the model does not describe "
                           "these points well")
    return out


def value_text(name: str, p: dict) -> str:
    """A parameter's value as printed: "0 (at bound)" when it sits on a bound."""
    b = bound_of(name, p)
    return f"{b:g} (at bound)" if b is not None else f"{p['value']:.6g}"
