"""Paper 003, issue 36: Remarks 3.1 / 3.2 and Theorem 5.1 for m = 4, 5, from the sweep
configs/theory/untested-kkt-remarks.yaml, with the closed forms next to what GD and the searches found.

Remark 3.1 (x1 = (1, c), x2 = (-1, c), y = +1): GD's limit puts one unit along (0, 1): ||theta~||^2 = 2 / c at
margin 1; the global optimum gives each point its own unit: 2 (1/||x1|| + 1/||x2||) = 4 / sqrt(1 + c^2)
(x1.x2 = c^2 - 1 < 0, so a unit along x1 is off on x2). ||theta~|| / ||theta*|| = sqrt(sqrt(1 + c^2) / (2 c)).
Remark 3.2 (perturbed inputs): GD's limit puts one unit along u = argmin ||u|| s.t. <u, x_i> >= 1 (both
points), ||theta~||^2 = 2 ||u||, the other unit dead. The closed-form limit theta~ (w1 = sqrt||u|| u/||u||,
v1 = sqrt||u||, unit 2 zero) is checked here directly: KKT residual (NNLS multipliers) and the local search
of gbcli.programs.nonconvex around it (eps 0.1 / 0.01 / 0.001, 20 starts).

    .venv/bin/python results/theory/untested-003/remarks.py [SWEEP_DIR]   (default runs/theory/untested-kkt-remarks)
Writes results/theory/untested-003/tables/remarks.csv.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import nnls

from gbcli.config import validate
from gbcli.programs.nonconvex import Problem2
from gbcli.runs.stages import build_model

HERE = Path(__file__).resolve().parent
RADII = [0.1, 0.01, 0.001]


def two_point_svm(x: np.ndarray) -> np.ndarray:
    """min ||u|| s.t. <u, x_i> >= 1 for the two points (both constraints active when the points are not aligned)."""
    best = None
    for i in range(2):                       # one constraint active
        u = x[i] / (x[i] @ x[i])
        if (x @ u).min() >= 1 - 1e-12:
            best = u if best is None or u @ u < best @ best else best
    if best is None:
        best = np.linalg.solve(x, np.ones(2))
    return best


def kkt_residual(p2: Problem2, theta: np.ndarray) -> float:
    q, jac = p2.margins_jac(theta)
    active = q <= q.min() * (1 + 1e-9)
    lam, res = nnls(jac[active].T, theta)    # theta = sum_i lambda_i grad q_i, lambda >= 0 (grad of ||theta||^2 / 2)
    return float(res / np.linalg.norm(theta))


def main(sweep: Path) -> pd.DataFrame:
    points = pd.read_csv(sweep / "tables" / "points.csv")
    kkt = pd.read_csv(sweep / "tables" / "kkt.csv").set_index("point")
    rows = []
    for _, p in points.iterrows():
        k = kkt.loc[p.point]
        row = {"construction": p["name"], "steps": int(k.steps), "gd_norm_sq": k.gd_norm_sq, "gd_kkt_residual": k.kkt_residual,
               "global_found": k.global_norm_sq,
               **{f"gd_best_eps_{e}": k[f"gd_best_norm_sq_eps_{e}"] for e in RADII}}
        if p["name"].startswith("thm51"):
            m = int(p["model.depth"])
            row.update(closed_limit=2 * m * 2 ** (-2 / m), closed_global=float(m))
        else:
            x = np.array(yaml.safe_load(p["dataset.x"]), float)
            u = two_point_svm(x)
            split = 2 * sum(1 / np.linalg.norm(xi) for xi in x) if x[0] @ x[1] < 0 else np.inf
            row.update(closed_limit=2 * np.linalg.norm(u), closed_global=min(2 * np.linalg.norm(u), split),
                       angle_deg=float(np.degrees(np.arccos(np.clip(x[0] @ x[1] / np.linalg.norm(x[0]) / np.linalg.norm(x[1]), -1, 1)))))
            cfg = validate(yaml.safe_load((sweep / "points" / p.point / "gd" / "config.yaml").read_text()))
            p2 = Problem2(cfg, build_model(cfg, 2), x, np.ones(2))
            s = np.sqrt(np.linalg.norm(u))
            theta = np.concatenate([s * u / np.linalg.norm(u), np.zeros(2), [s, 0.0]])   # w1 (2x2 rows), w2 = v (1x2)
            theta = p2.to_margin_one(theta)
            row["closed_kkt_residual"] = kkt_residual(p2, theta)
            for r in p2.local_search(theta, RADII, restarts=20, seed=0):
                row[f"closed_best_eps_{r['eps']}"] = r["best_norm_sq"]
        row["ratio_norm_limit_over_global"] = float(np.sqrt(row["closed_limit"] / row["closed_global"]))
        rows.append(row)
    tab = pd.DataFrame(rows)
    (HERE / "tables").mkdir(exist_ok=True)
    tab.to_csv(HERE / "tables" / "remarks.csv", index=False)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(tab.to_string(index=False))
    return tab


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("runs/theory/untested-kkt-remarks"))
