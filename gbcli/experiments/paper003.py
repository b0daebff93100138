"""Paper 003 (Vardi, Shamir & Srebro): is GD's limit a local or a global optimum of Problem 2?

Problem 2 is the max-margin problem in parameter space, min ||theta||^2 s.t. y_i f_theta(x_i) >= 1.
GD on a homogeneous net converges in direction to a KKT point of it; the paper builds small
networks where that point is not even a local optimum. The networks and their programs are model
concepts: the shared pieces of the constructions (activations, gates, `ConstructionSpec`, the
programs `nonconvex-global`, `local-search`, `local-search-global`) are in
`gbcli.models.construction`, and Problem 2's SLSQP solves (`Problem2`, `flat_theta`, re-exported
here) in `gbcli.programs.nonconvex`. This module holds what only the paper's report needs:

- the run's `tables/kkt.csv` (one row, the paper's Tables 1-2 entry for the construction);
- the sweep's `tables/kkt.csv` and `figures/kkt.png`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gbcli.io import load_yaml, read_csv_untrusted, read_json, read_text_untrusted, write_csv
from gbcli.models.construction import NONCONVEX
from gbcli.programs.nonconvex import Problem2, flat_theta   # noqa: F401  (re-exported: Problem 2 lives there)
from gbcli.reports.render import save_png

KKT_TOL = 1e-3          # GD's limit counts as a KKT point when its relative KKT residual is below this
SAME_TOL = 1e-4         # relative difference of ||theta||^2 under which GD's limit counts as the global optimum


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
    from matplotlib.figure import Figure   # loaded when a report draws, not with every command

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
