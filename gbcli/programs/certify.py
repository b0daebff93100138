"""Certificates, the same whatever solver answered: a solution is certified when its relative gap
(against the weak-duality bound of its multipliers lam >= 0) and 1 - its smallest margin are below
the tolerance; an infeasibility when its dual ray bounds every predictor's relative margin below
NOT_SEPARABLE. A failed solve's multipliers get the same bounds, uncertified.
"""

from __future__ import annotations

import numpy as np

from gbcli.programs.design import GatedDesign, Solution, combination, decision
from gbcli.programs.ipm import EXACT_ABOVE, NOT_SEPARABLE
from gbcli.programs.norms import norm_of

CERTIFY_TOL = 1e-6   # a solution is certified when its relative gap and 1 - its smallest margin are below
GAP_FLOOR = 1e-12    # of the problem's own objective scale: below it an optimum counts as 0 (it can be)


def dual_bound(design: GatedDesign, lam: np.ndarray) -> float:
    """A lower bound on the optimum from any lam >= 0: ||zeta|| >= 1'lam / ||V||_* (squared for the
    quadratic norms), whatever lam's scale."""
    lam = np.clip(lam, 0, None)
    norm = norm_of(design)
    dn = norm.dual(design, _combination_for(design, lam))   # NaN (V cannot certify) gives NaN
    if dn == 0:   # lam = 0: the trivial bound; V(lam) = 0 with lam != 0: no feasible point at all
        return 0.0 if not lam.any() else float("inf")
    bound = lam.sum() / dn
    return float(bound ** 2 if norm.quadratic else bound)


def cancels(lam: np.ndarray, v: np.ndarray, radius: float) -> bool:
    """Whether V = combination(lam)'s terms are EXACT_ABOVE times larger than V: its float64 sum is noise."""
    return float(np.clip(lam, 0, None).sum()) * radius > EXACT_ABOVE * max(float(np.abs(v).max()), 1e-300)


def _combination_for(design: GatedDesign, lam: np.ndarray) -> np.ndarray:
    v = combination(design, lam)
    if cancels(lam, v, norm_of(design).input_radius(design)):
        v = combination(design, lam, precise=True).astype(np.float64)
    return v


def relative_margin_bound(design: GatedDesign, lam: np.ndarray) -> float:
    """From a dual ray lam >= 0: an upper bound on min_n y_n f(x_n) / (||zeta|| * input_radius) over
    every predictor; below NOT_SEPARABLE it certifies infeasibility."""
    bound = dual_bound(design, lam)
    norm = norm_of(design)
    if norm.quadratic:
        bound = np.sqrt(bound)
    radius = norm.input_radius(design)
    if radius == 0:   # every gated input is zero: no predictor has a positive margin
        return 0.0
    return float(1 / (bound * radius)) if bound > 0 else float("inf")   # bound = inf (V = 0) gives 0


def relative_gap(primal: float, dual: float, radius: float, quadratic: bool) -> float:
    """(primal - dual) / max(|primal|, GAP_FLOOR (1 / radius)^(1 or 2)): a constant floor is not scale-free."""
    scale = (1.0 / radius) ** (2 if quadratic else 1) if radius > 0 and np.isfinite(radius) else 0.0
    floor = max(abs(primal), GAP_FLOOR * scale)
    if not floor > 0:
        return 0.0 if primal == dual else float("inf")
    return (primal - dual) / floor


def certificate(design: GatedDesign, sol: Solution, tol: float | None = None) -> dict:
    """Primal and dual objectives, relative gap, smallest margin, and whether gap <= tol and margin >= 1 - tol."""
    tol = CERTIFY_TOL if tol is None else tol
    out = {"primal_objective": float("nan"), "dual_objective": float("nan"), "rel_gap": float("nan"),
           "min_margin": float("nan"), "iterations": sol.iterations, "certified": False, "tolerance": tol}
    if sol.zeta is None:
        if sol.lam is not None and np.all(np.isfinite(sol.lam)):   # a ray, or a failed solve's last multipliers
            rel = relative_margin_bound(design, sol.lam)
            out.update(dual_objective=dual_bound(design, sol.lam), relative_margin_bound=rel,
                       certified=bool(sol.status == "infeasible" and rel <= NOT_SEPARABLE))
        return out
    margins = decision(sol.zeta, design.x_train, design.e_train) * design.y_train
    norm = norm_of(design)
    primal = norm.value(design, sol.zeta)
    dual = dual_bound(design, sol.lam) if sol.lam is not None else float("nan")
    gap = relative_gap(primal, dual, norm.input_radius(design), norm.quadratic)
    out.update(primal_objective=primal, dual_objective=dual, rel_gap=gap, min_margin=float(margins.min()),
               certified=bool(abs(gap) <= tol and margins.min() >= 1 - tol))
    return out


def scale_groups(design: GatedDesign) -> list[np.ndarray]:
    """The rows sharing one s_g in zeta_g = s_g recover(V(lam))_g: all, each group, or none (a reduction)."""
    norm = norm_of(design)
    if norm.has_reduction:
        return []
    return [np.arange(design.rows)] if norm.quadratic else list(design.groups)


def recovery_scales(design: GatedDesign, zeta: np.ndarray, lam: np.ndarray) -> np.ndarray | None:
    """s (per `scale_groups` group) making `predictor_from(design, lam, s)` closest to zeta (least squares),
    so storing (lam, s) for zeta loses only rounding; None when the norm has no recovery."""
    norm = norm_of(design)
    if norm.has_reduction:
        return np.zeros(0)
    groups = scale_groups(design)
    try:
        w = norm.recover(design, _combination_for(design, np.clip(lam, 0, None)), np.ones(len(groups)))
    except NotImplementedError:
        return None
    sizes = [float(np.sum(w[g] * w[g])) for g in groups]
    return np.array([float(np.sum(zeta[g] * w[g])) / ww if ww > 0 else 0.0 for g, ww in zip(groups, sizes)], np.float64)


def predictor_from(design: GatedDesign, lam: np.ndarray, s: np.ndarray) -> np.ndarray | None:
    """zeta = recover(V(lam), s) in float64, or a reducing norm's predictor of lam (None: no reduction)."""
    norm = norm_of(design)
    if norm.has_reduction:
        return norm.complete(design, np.clip(lam, 0, None))
    return np.asarray(norm.recover(design, _combination_for(design, np.clip(lam, 0, None)),
                                   np.asarray(s, np.float64)), np.float64)
