"""Paper 003 (Vardi, Shamir & Srebro): is GD's limit a local or a global optimum of Problem 2?

Problem 2 is the max-margin problem in parameter space, min ||theta||^2 s.t. y_i f_theta(x_i) >= 1.
GD on a homogeneous net converges in direction to a KKT point of it; the paper builds small
networks where that point is not even a local optimum. This module holds

- Problem 2 for the paper's small networks (each network's module in `gbcli.models` gives its
  margins and their Jacobian in closed form, in numpy, the ReLU taken with derivative 0 at 0, as
  torch does), solved by scipy's SLSQP:
  `nonconvex-global`: the best of `svm.restarts` solves from random starts (no certificate of
  global optimality: the README compares it with the paper's closed forms);
  `local-search`: around GD's limit theta~ (scaled to margin 1), for each eps in `svm.radii`,
  min ||theta||^2 s.t. margins >= 1 and ||theta - theta~|| <= eps, from theta~ and random starts
  in the eps-ball; a feasible point with smaller norm shows theta~ is not a local optimum.
  `local-search-global`: the same around the best global point (a control: nothing smaller
  should be found near a genuine optimum).
- the run's `tables/kkt.csv` (one row, the paper's Tables 1-2 entry for the construction).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from scipy.optimize import minimize
from torch import nn

from gbcli.io import load_yaml, read_csv_untrusted, read_json, read_text_untrusted, write_csv
from gbcli.errors import GbError
from gbcli.models.base import ModelSpec, Program, set_weights
from gbcli.reports.render import save_png

NONCONVEX = ("nonconvex-global", "local-search", "local-search-global")
FEASIBLE_TOL = 1e-9     # a solve's point counts as feasible when every margin is >= 1 - this (then rescaled to 1)
IMPROVE_TOL = 1e-9      # relative decrease of ||theta||^2 that counts as "smaller"
KKT_TOL = 1e-3          # GD's limit counts as a KKT point when its relative KKT residual is below this
SAME_TOL = 1e-4         # relative difference of ||theta||^2 under which GD's limit counts as the global optimum


# ------------------------------------------------------------------ activations of the small networks


def activate(z: torch.Tensor, activation: str) -> torch.Tensor:
    return torch.relu(z) if activation == "relu" else z


def gate(z: np.ndarray, activation: str) -> np.ndarray:
    """The activation's derivative as a 0/1 gate (ReLU: 0 at 0, as torch)."""
    return (z > 0).astype(float) if activation == "relu" else np.ones_like(z)


# ------------------------------------------------------------------ Problem 2 in numpy


class Problem2:
    """min ||theta||^2 s.t. y_i f_theta(x_i) >= 1 for one of the small networks, on flat float64 theta
    (the model's parameters in `named_parameters` order). `margins_jac` gives y_i f(x_i) and its
    Jacobian, from the model spec's closed form (`numpy_margins`)."""

    def __init__(self, cfg, model: nn.Module, x: np.ndarray, y: np.ndarray):
        self.cfg, self.spec, self.x, self.y = cfg, cfg.spec, np.asarray(x, float), np.asarray(y, float)
        self.degree = cfg.model.homogeneity
        self.shapes = [tuple(p.shape) for _, p in model.named_parameters()]
        self.size = int(sum(np.prod(s) for s in self.shapes))

    def split(self, theta: np.ndarray) -> list[np.ndarray]:
        out, i = [], 0
        for s in self.shapes:
            k = int(np.prod(s))
            out.append(theta[i:i + k].reshape(s))
            i += k
        return out

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
        """One SLSQP solve of Problem 2 (within the ball around `center` when given). Returns the
        solution scaled to margin exactly 1, or None when it is not feasible (or leaves the ball)."""
        cons = [{"type": "ineq", "fun": lambda t: self.margins_jac(t)[0] - 1, "jac": lambda t: self.margins_jac(t)[1]}]
        if center is not None:
            cons.append({"type": "ineq", "fun": lambda t: np.atleast_1d(radius ** 2 - np.sum((t - center) ** 2)),
                         "jac": lambda t: -2 * (t - center)[None, :]})
        res = minimize(lambda t: (float(t @ t), 2 * t), start, jac=True, method="SLSQP", constraints=cons,
                       options={"maxiter": max_iter, "ftol": 1e-15})
        t = res.x
        if not np.all(np.isfinite(t)) or self.margins(t).min() < 1 - FEASIBLE_TOL:
            return None
        t = self.to_margin_one(t)
        if center is not None and np.linalg.norm(t - center) > radius * (1 + 1e-9):
            return None
        return t

    def global_search(self, restarts: int, seed: int) -> dict:
        """The best of `restarts` solves from random normal starts (and how many restarts reached it)."""
        rng = np.random.default_rng(seed)
        found = [t for t in (self.solve(rng.standard_normal(self.size)) for _ in range(restarts)) if t is not None]
        if not found:
            return {"theta": None, "value": float("nan"), "feasible_restarts": 0, "hits": 0}
        values = np.array([t @ t for t in found])
        best = found[int(values.argmin())]
        return {"theta": best, "value": float(values.min()), "feasible_restarts": len(found),
                "hits": int(np.sum(values <= values.min() * (1 + 1e-6)))}

    def local_search(self, center: np.ndarray, radii: list[float], restarts: int, seed: int) -> list[dict]:
        """For each eps: the smallest ||theta||^2 found among feasible points within eps of `center`
        (SLSQP from `center` and from `restarts` - 1 uniform random starts in the eps-ball)."""
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




# ------------------------------------------------------------------ the programs (fit-svm)


def fit_nonconvex(obj: str, cfg, spec, problem, trained: nn.Module | None, echo=print) -> tuple[dict, dict]:
    """Solve one of NONCONVEX; returns the result record and the arrays to save
    ({"predictions": {...}, "solution": {...}}, empty when nothing was found).

    `status` is optimal when a feasible point was found; `certified` means only that: the reported
    point is feasible and (global) at least two restarts agree, (local) the search centre is
    feasible. Neither certifies optimality: Problem 2 is not convex."""
    ds, s = problem.dataset, cfg.svm
    shape_model = spec.network(cfg, ds.dim)   # only the parameter shapes are used
    p2 = Problem2(cfg, shape_model, ds.x_train, ds.y_train)
    start = time.perf_counter()
    result = {"predictor": obj, "solver": "slsqp", "restarts": s.restarts, "search_seed": s.search_seed,
              "degree": cfg.model.homogeneity}
    center, value = None, float("nan")
    if obj == "nonconvex-global" or obj == "local-search-global":
        g = p2.global_search(s.restarts, s.search_seed)
        center, value = g["theta"], g["value"]
        result.update(global_norm_sq=value, feasible_restarts=g["feasible_restarts"], hits=g["hits"])
    if obj.startswith("local-search"):
        if obj == "local-search":
            center = p2.to_margin_one(flat_theta(trained))
            if center is None:
                raise GbError("gd: GD's network does not classify every training point correctly, "
                              "so it has no direction at margin 1 to search around (train longer)")
        rows = [] if center is None else p2.local_search(center, s.radii, s.restarts, s.search_seed)
        value = float("nan") if center is None else float(center @ center)
        result.update(center_norm_sq=value, radii=[r["eps"] for r in rows],
                      best_norm_sq=[r["best_norm_sq"] for r in rows], improvement=[r["improvement"] for r in rows],
                      smaller_found=[r["smaller_found"] for r in rows], local_optimum=not any(r["smaller_found"] for r in rows))
    theta = center
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
        f_train = p2.margins(theta) * ds.y_train                        # f itself: margins / y
        f_val = Problem2(cfg, shape_model, ds.x_val, ds.y_val).margins(theta) * ds.y_val
        result.update(train_error=float(np.mean(f_train * ds.y_train <= 0)), val_error=float(np.mean(f_val * ds.y_val <= 0)))
        arrays = {"predictions": {"train_out": f_train, "val_out": f_val}, "solution": {"theta": theta}}
    echo(f"fit-svm {obj}: ||theta||^2 at margin 1 = {value:.6g}"
         + (f"; smaller point found within eps = {[e for e, f in zip(result['radii'], result['smaller_found']) if f]}"
            if obj.startswith("local-search") else f" ({result.get('hits')} of {s.restarts} restarts)")
         + f" ({result['solve_seconds']:.1f} s)")
    return result, arrays


def programs() -> dict:
    """Problem 2 and the local searches, as programs of a model (gbcli.models.base.Program)."""
    options = ("restarts", "radii", "search_seed")
    return {
        "nonconvex-global": Program("nonconvex-global", fit=fit_nonconvex, options=options,
                                    description="Problem 2: the best of svm.restarts SLSQP solves"),
        "local-search": Program("local-search", fit=fit_nonconvex, options=options, needs_trained=True,
                                description="Problem 2 within eps of GD's limit"),
        "local-search-global": Program("local-search-global", fit=fit_nonconvex, options=options,
                                       description="Problem 2 within eps of the best global point (a control)"),
    }


class ConstructionSpec(ModelSpec):
    """The paper's small networks (diagonal, conv): explicit initial weights, Problem 2 as their
    programs, and a construction as the contract test's example (`example_model`, `example_x`)."""

    example_x: list[list[float]] = []

    def build(self, cfg, dim):
        model = self.network(cfg, dim)
        set_weights(model, cfg.model.weights)
        return model

    def example(self, program):
        return example(program, {"kind": self.kind, **self.example_model}, self.example_x)


def example(program: str, model: dict, x: list[list[float]]) -> dict:
    """A tiny raw config of one of the constructions (all labels +1), for the contract test."""
    return {"name": "example-construction", "dataset": {"name": "points", "x": x, "y": [1] * len(x)}, "model": model,
            "training": {"batch_size": None, "epochs": 20, "lr": 0.1, "log_points": 2},
            "svm": {"objectives": [program], "restarts": 3, "radii": [0.1]}}


# ------------------------------------------------------------------ tables and figure


def kkt_row(run_dir: str | Path) -> dict | None:
    """The paper's Tables 1-2 entry for one run: GD's limit (||theta||^2 at margin 1, KKT residual),
    the global value found, and the local search around GD's limit (and around the global point)."""
    run_dir = Path(run_dir)
    res = {o: read_json(run_dir / "svm" / o / "result.json") for o in NONCONVEX
           if (run_dir / "svm" / o / "result.json").is_file()}
    gd_path = run_dir / "gd" / "summary.json"
    if not res or not gd_path.is_file():
        return None
    cfg = load_yaml(read_text_untrusted(run_dir / "gd" / "config.yaml"))
    gd = read_json(gd_path)
    m, t = cfg["model"], cfg["training"]
    g_res = next(iter(res.values()))
    degree = g_res.get("degree", m.get("depth", 2))   # runs before `degree` was recorded: depth (diagonal) or 2
    gamma = gd["normalized_margin"]
    row = {"construction": cfg["name"], "model": m["kind"], "activation": m.get("activation", "relu"),  # ReLU nets: no key
           "depth": m.get("depth", 2), "loss": t["loss"], "step_rule": t["step_rule"],
           "steps": gd["steps"], "gd_norm_sq": gamma ** (-2.0 / degree) if gamma > 0 else float("nan"),
           "kkt_residual": gd.get("track", {}).get("kkt_residual", float("nan"))}
    g = res.get("nonconvex-global", res.get("local-search-global"))
    row["global_norm_sq"] = g["global_norm_sq"] if g else float("nan")
    row["kkt_point"] = bool(row["kkt_residual"] < KKT_TOL)
    row["global"] = bool(abs(row["gd_norm_sq"] - row["global_norm_sq"]) <= SAME_TOL * row["global_norm_sq"])
    for obj, tag in (("local-search", "gd"), ("local-search-global", "global")):
        if obj not in res:
            continue
        r = res[obj]
        row[f"{tag}_center_norm_sq"] = r["center_norm_sq"]   # float64, the search's reference
        if tag == "gd":
            row["local_optimum"] = r["local_optimum"]
        else:
            row["control_smaller_found"] = not r["local_optimum"]
        for eps, best in zip(r["radii"], r["best_norm_sq"]):
            row[f"{tag}_best_norm_sq_eps_{eps:g}"] = best
    return row


def write_kkt_table(run_dir: str | Path) -> Path | None:
    """`tables/kkt.csv` of a run with non-convex results (`gb compare` writes it through here)."""
    row = kkt_row(run_dir)
    if row is None:
        return None
    path = Path(run_dir) / "tables" / "kkt.csv"
    write_csv(path, pd.DataFrame([row]))
    return path


def plot_sweep_kkt(out_dir: str | Path) -> list[Path]:
    """For a sweep of the paper-003 constructions: `tables/kkt.csv` (every point's row) and
    `figures/kkt.png`: (a) ||theta||^2 at margin 1 along training over the global value found;
    (b) the decrease of ||theta||^2 found within eps of GD's limit (and of the global point) vs eps."""
    out_dir = Path(out_dir)
    rows = [dict(point=p.parent.parent.name, **read_csv_untrusted(p).iloc[0].to_dict())
            for p in sorted(out_dir.glob("points/*/tables/kkt.csv"))]
    if not rows:
        return []
    table = pd.DataFrame(rows)
    write_csv(out_dir / "tables" / "kkt.csv", table)
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    ax_a, ax_b = fig.subplots(1, 2)
    names = sorted(table["construction"].unique())
    for _, r in table.iterrows():
        label = f"{r['construction']} ({r['loss']})"
        style = dict(color=f"C{names.index(r['construction']) % 10}", ls="-" if r["loss"] == "exponential" else "--")
        m = read_csv_untrusted(out_dir / "points" / r["point"] / "gd" / "metrics.csv")
        m = m[(m["step"] > 0) & (m["normalized_margin"] > 0)]
        ax_a.plot(m["step"], m["normalized_margin"] ** (-2.0 / r["depth"]) / r["global_norm_sq"], label=label, **style)
        for tag, marker in (("gd", "o"), ("global", "x")):
            cols = [c for c in table.columns if c.startswith(f"{tag}_best_norm_sq_eps_")]
            if not cols:
                continue
            eps = np.array([float(c.rsplit("_", 1)[1]) for c in cols])
            base = r[f"{tag}_center_norm_sq"]
            dec = (base - r[cols].to_numpy(float)) / base
            ax_b.plot(eps, np.clip(dec, 1e-12, None), marker=marker, label=label if tag == "gd" else None,
                      **{**style, "ls": style["ls"] if tag == "gd" else ":"})
    ax_a.axhline(1.0, color="k", lw=0.8)
    ax_a.set(xscale="log", xlabel="step", ylabel="||theta||^2 at margin 1 / global value found",
             title="(a) GD's norm at margin 1 (limits: the KKT values)")
    ax_b.set(xscale="log", yscale="log", xlabel="eps (distance from the point)",
             ylabel="relative decrease of ||theta||^2 found (floor 1e-12 = none)",
             title="(b) local search: o around GD's limit, x around the global point")
    ax_a.legend(fontsize=7)
    ax_b.legend(fontsize=7)
    return [save_png(fig, out_dir / "figures" / "kkt.png")]


# the reports this experiment adds to `gb compare` (a run) and to a sweep's aggregation
RUN_REPORTS = (write_kkt_table,)
SWEEP_REPORTS = (plot_sweep_kkt,)
INSTRUMENTS = {}
