"""Problem 2 of paper 003 (min ||theta||^2 s.t. y_i f_theta(x_i) >= 1 in parameter space) by scipy's SLSQP:
`nonconvex-global` (the best of svm.restarts random starts, uncertified), `local-search` (within each eps
of svm.radii around GD's limit at margin 1: a smaller feasible point shows it is not a local optimum) and
`local-search-global` (the same around the global point, a control).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
from scipy.optimize import minimize
from torch import nn

from gbcli.errors import GbError

FEASIBLE_TOL = 1e-9     # a solve's point counts as feasible when every margin is >= 1 - this (then rescaled to 1)
IMPROVE_TOL = 1e-9      # relative decrease of ||theta||^2 that counts as "smaller"


def slsqp(margins_jac: Callable, start: np.ndarray, center: np.ndarray | None = None, radius: float | None = None,
          max_iter: int = 300) -> np.ndarray:
    """SLSQP's last point (unchecked) on min ||t||^2 s.t. margins(t) >= 1 (and ||t - center|| <= radius)."""
    cons = [{"type": "ineq", "fun": lambda t: margins_jac(t)[0] - 1, "jac": lambda t: margins_jac(t)[1]}]
    if center is not None:
        cons.append({"type": "ineq", "fun": lambda t: np.atleast_1d(radius ** 2 - np.sum((t - center) ** 2)),
                     "jac": lambda t: -2 * (t - center)[None, :]})
    return minimize(lambda t: (float(t @ t), 2 * t), start, jac=True, method="SLSQP", constraints=cons,
                    options={"maxiter": max_iter, "ftol": 1e-15}).x


class Problem2:
    """Problem 2 on flat float64 theta (`named_parameters` order), margins from the spec's `numpy_margins`."""

    def __init__(self, cfg, model: nn.Module, x: np.ndarray, y: np.ndarray):
        self.cfg, self.spec, self.x, self.y = cfg, cfg.spec, np.asarray(x, float), np.asarray(y, float)
        self.degree = cfg.model.homogeneity
        self.shapes = [tuple(p.shape) for _, p in model.named_parameters()]
        self.size = int(sum(np.prod(s) for s in self.shapes))

    def split(self, theta: np.ndarray) -> list[np.ndarray]:
        cuts = np.cumsum([int(np.prod(s)) for s in self.shapes])[:-1]
        return [part.reshape(s) for part, s in zip(np.split(theta, cuts), self.shapes)]

    def margins_jac(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f, jac = self.spec.numpy_margins(self.split(theta), self.x, self.cfg)
        return self.y * f, self.y[:, None] * jac

    def margins(self, theta: np.ndarray) -> np.ndarray:
        return self.margins_jac(theta)[0]

    def to_margin_one(self, theta: np.ndarray) -> np.ndarray | None:
        """theta scaled so its smallest margin is 1 (None when some margin is <= 0)."""
        q = self.margins(theta).min()
        return theta * q ** (-1.0 / self.degree) if q > 0 else None

    def solve(self, start: np.ndarray, center: np.ndarray | None = None, radius: float | None = None,
              max_iter: int = 300) -> np.ndarray | None:
        """One SLSQP solve (in the ball around `center` when given), at margin 1; None when infeasible."""
        t = slsqp(self.margins_jac, start, center, radius, max_iter)
        if not np.all(np.isfinite(t)) or self.margins(t).min() < 1 - FEASIBLE_TOL:
            return None
        t = self.to_margin_one(t)
        if center is not None and np.linalg.norm(t - center) > radius * (1 + 1e-9):
            return None
        return t

    def global_search(self, restarts: int, seed: int) -> dict:
        """The best of `restarts` solves from random normal starts, and how many reached it."""
        rng = np.random.default_rng(seed)
        found = [t for t in (self.solve(rng.standard_normal(self.size)) for _ in range(restarts)) if t is not None]
        if not found:
            return {"theta": None, "value": float("nan"), "feasible_restarts": 0, "hits": 0}
        values = np.array([t @ t for t in found])
        best = found[int(values.argmin())]
        return {"theta": best, "value": float(values.min()), "feasible_restarts": len(found),
                "hits": int(np.sum(values <= values.min() * (1 + 1e-6)))}

    def local_search(self, center: np.ndarray, radii: list[float], restarts: int, seed: int) -> list[dict]:
        """For each eps: the smallest ||theta||^2 found within eps of `center` (from it and random starts)."""
        rng = np.random.default_rng(seed)
        base = float(center @ center)
        rows = []
        for eps in radii:
            starts = [center]
            for _ in range(restarts - 1):
                u = rng.standard_normal(self.size)
                starts.append(center + eps * rng.uniform() ** (1 / self.size) * u / np.linalg.norm(u))
            found = [t for t in (self.solve(s, center, eps) for s in starts) if t is not None]
            best = min((float(t @ t) for t in found), default=float("nan"))
            rows.append({"eps": eps, "best_norm_sq": best, "feasible_starts": len(found),
                         "improvement": base - best if found else float("nan"),
                         "smaller_found": bool(found) and best < base * (1 - IMPROVE_TOL)})
        return rows


def flat_theta(model: nn.Module) -> np.ndarray:
    return torch.cat([p.detach().double().reshape(-1) for _, p in model.named_parameters()]).numpy()


def fit_nonconvex(obj: str, cfg, spec, problem, trained: nn.Module | None, echo=print) -> tuple[dict, dict]:
    """(record, arrays) of one program; `certified`: feasible and (global) two restarts agree, not optimal."""
    ds, s = problem.dataset, cfg.svm
    shape_model = spec.network(cfg, ds.dim)   # only the parameter shapes are used
    p2 = Problem2(cfg, shape_model, ds.x_train, ds.y_train)
    start = time.perf_counter()
    result = {"predictor": obj, "solver": "slsqp", "restarts": s.restarts, "search_seed": s.search_seed,
              "degree": cfg.model.homogeneity, "convex": False}
    theta, value = None, float("nan")
    if obj == "nonconvex-global" or obj == "local-search-global":
        g = p2.global_search(s.restarts, s.search_seed)
        theta, value = g["theta"], g["value"]
        result.update(global_norm_sq=value, feasible_restarts=g["feasible_restarts"], hits=g["hits"])
    if obj.startswith("local-search"):
        if obj == "local-search":
            theta = p2.to_margin_one(flat_theta(trained))
            if theta is None:
                raise GbError("gd: GD's network does not classify every training point correctly, "
                              "so it has no direction at margin 1 to search around (train longer)")
        rows = [] if theta is None else p2.local_search(theta, s.radii, s.restarts, s.search_seed)
        value = float("nan") if theta is None else float(theta @ theta)
        result.update(center_norm_sq=value, radii=[r["eps"] for r in rows],
                      **{key: [r[key] for r in rows] for key in ("best_norm_sq", "improvement", "smaller_found")},
                      local_optimum=not any(r["smaller_found"] for r in rows))
    margins = p2.margins(theta) if theta is not None else None
    result.update(status="optimal" if theta is not None else "failed", objective=value,
                  solve_seconds=time.perf_counter() - start,
                  message="" if theta is not None else "no restart reached a feasible point",
                  min_margin=float("nan") if margins is None else float(margins.min()),
                  rel_gap=float("nan"), iterations=None, train_error=float("nan"), val_error=float("nan"))
    feasible = margins is not None and margins.min() >= 1 - s.certify_tol
    result["certified"] = bool(feasible and (obj != "nonconvex-global" or result["hits"] >= 2))
    arrays = {}
    if theta is not None:
        f_train = margins * ds.y_train                                  # f itself: margins / y
        f_val = Problem2(cfg, shape_model, ds.x_val, ds.y_val).margins(theta) * ds.y_val
        result.update(train_error=float(np.mean(f_train * ds.y_train <= 0)), val_error=float(np.mean(f_val * ds.y_val <= 0)))
        arrays = {"predictions": {"train_out": f_train, "val_out": f_val}, "theta": {"theta": theta}}
    echo(f"fit-svm {obj}: ||theta||^2 at margin 1 = {value:.6g}"
         + (f"; smaller point found within eps = {[e for e, f in zip(result['radii'], result['smaller_found']) if f]}"
            if obj.startswith("local-search") else f" ({result.get('hits')} of {s.restarts} restarts)")
         + f" ({result['solve_seconds']:.1f} s)")
    return result, arrays
