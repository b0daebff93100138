"""Paper 003 (Vardi, Shamir & Srebro): is GD's limit, a KKT point of Problem 2 (min ||theta||^2 s.t.
y_i f_theta(x_i) >= 1), a local or a global optimum? The constructions and programs are in
`gbcli.models.construction` and `gbcli.programs.nonconvex`; here the report: `tables/kkt.csv` (the
paper's Tables 1-2) and `figures/kkt.png`, and the instruments `relu_pattern` (Theorem 3.2) and
`layer_optimality` (Theorems 5.2-5.4) with their sweep reports.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gbcli.experiments.paper001 import in_sweep_order, new_figure, point_frames, save_figure, write_table
from gbcli.instruments.base import Instrument, as_numpy
from gbcli.store.records import NOT_GBS, GdRecord, ProgramRecord
from gbcli.store.views import RunView, SweepView, point_names
from gbcli.models.construction import NONCONVEX
from gbcli.programs.nonconvex import IMPROVE_TOL, Problem2, flat_theta, slsqp
from gbcli.reports.render import spans_decades
from gbcli.fs import layout
from gbcli.errors import GbError
from gbcli.text import quoted

KKT_TOL = 1e-3          # GD's limit counts as a KKT point when its relative KKT residual is below this
SAME_TOL = 1e-4         # relative difference of ||theta||^2 under which GD's limit counts as the global optimum


def kkt_row(run_dir: str | Path) -> dict | None:
    """The paper's Tables 1-2 entry of one run: GD's limit (||theta||^2 at margin 1, KKT residual), the
    global value found, and the local searches around GD's limit and the global point."""
    view = RunView(run_dir)
    run = view.dir
    res = {o: ProgramRecord.read(run.result(o), strict=True).fields for o in NONCONVEX if run.result(o).is_file()}
    if not res or not run.summary.is_file():
        return None
    cfg = view.config(strict=True)
    gd = GdRecord.read(run.summary, strict=True).fields
    m, t = cfg["model"], cfg["training"]
    degree = next(iter(res.values())).get("degree", m.get("depth", 2))   # not recorded: depth (diagonal) or 2
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
        row.update({"local_optimum": r["local_optimum"]} if tag == "gd" else
                   {"control_smaller_found": not r["local_optimum"]})
        for eps, best in zip(r["radii"], r["best_norm_sq"]):
            row[f"{tag}_best_norm_sq_eps_{eps:g}"] = best
    return row


def write_kkt_table(run_dir: str | Path) -> Path | None:
    """`tables/kkt.csv` of a run with non-convex results (`gb compare` writes it through here)."""
    row = kkt_row(run_dir)
    return None if row is None else write_table(run_dir, "kkt", pd.DataFrame([row]))


def plot_sweep_kkt(out_dir: str | Path) -> list[Path]:
    """`tables/kkt.csv` (every point's row) and `figures/kkt.png`: (a) ||theta||^2 at margin 1 along
    training over the global value; (b) the decrease found within eps of GD's limit (and the global point)."""
    rows = []
    sweep = SweepView(out_dir)
    for point in (view.root for view in sweep.points().values()):   # each row computed from its point's records
        try:
            row = kkt_row(point)
        except NOT_GBS as exc:
            raise GbError(f"{point}: a record of its Tables 1-2 row is not gb's ({type(exc).__name__}: "
                          f"{quoted(str(exc), 80)}); rerun the point") from None
        if row is not None:
            rows.append(dict(point=point.name, **row))
    if not rows:
        return []
    table = pd.DataFrame(rows)
    write_table(out_dir, "kkt", table)
    fig, (ax_a, ax_b) = new_figure((14, 4.8), 1, 2)
    names = sorted(table["construction"].unique())
    for _, r in table.sort_values(["construction", "loss"]).iterrows():   # the legend's order
        label = f"{r['construction']} ({r['loss']})"
        style = dict(color=f"C{names.index(r['construction']) % 10}", ls="-" if r["loss"] == "exponential" else "--")
        m = sweep.point(r["point"]).metrics()
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
             ylabel="relative decrease of ||theta||^2 found",
             title="(b) local search within eps of a point")
    from matplotlib.lines import Line2D

    # one legend for both panels, beside them (inside, it covered curves); what the markers and the floor mean
    handles = ax_a.get_lines()[:-1] + [
        Line2D([], [], color="0.4", marker="o", ls="", label="(b) around GD's limit"),
        Line2D([], [], color="0.4", marker="x", ls=":", label="(b) around the global point"),
        Line2D([], [], color="none", label="(b) at 1e-12: no decrease found")]
    fig.legend(handles=handles, loc="outside right center", fontsize=7)
    return save_figure(fig, out_dir, "kkt")


# `relu_pattern` (two-layer ReLU nets; columns: results/theory/paper-003.md). A run ends as one of
# OUTCOMES: one unit carries the net (its share of ||theta||^2 above ONE_UNIT_SHARE, every point fitted:
# Theorem 3.2's KKT point, not a local optimum), units split the points, or not fitted.


def thm32_premise(w1: np.ndarray, v: np.ndarray, x: np.ndarray) -> bool:
    """Theorem 3.2's assumption on the init: a unit j with <w_j, x_i> > 0 on every point and v_j > 0, and
    <w_k, x_i> < 0 on every point for every other unit (both strict). w1: rows are units; v: output weights."""
    pre = x @ w1.T
    pos, neg = (pre > 0).all(0), (pre < 0).all(0)
    return any(pos[j] and v[j] > 0 and all(neg[k] for k in range(len(v)) if k != j) for j in range(len(v)))


def relu_pattern(w1: np.ndarray, v: np.ndarray, x: np.ndarray, y: np.ndarray) -> dict:
    """The columns of `relu_pattern` for first layer w1 (rows: units), output weights v and data (x, y)."""
    active = x @ w1.T > 0
    every, none = active.all(0), ~active.any(0)
    sq = (w1 ** 2).sum(1) + v ** 2
    low = float((y * (np.maximum(x @ w1.T, 0) @ v)).min())
    return {"units_active_all": int(every.sum()), "units_dead": int(none.sum()),
            "thm32_premise": float(thm32_premise(w1, v, x)),
            "top_unit_share": float(sq.max() / sq.sum()) if sq.sum() > 0 else float("nan"),
            "norm_sq_margin1": float(sq.sum() / low) if low > 0 else float("nan")}


class ReluPattern(Instrument):
    name = "relu_pattern"
    description = "paper 003's Theorem 3.2: the units' activity pattern on the training points"
    columns = ("units_active_all", "units_dead", "thm32_premise", "top_unit_share", "norm_sq_margin1")
    panels = (("top_unit_share", "largest share of ||theta||^2 in one unit", "linear"),
              ("norm_sq_margin1", "||theta||^2 at margin 1", "log"))

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return relu_pattern(as_numpy(model.w1), as_numpy(model.w2[0]), as_numpy(x), as_numpy(y))


OUTCOMES = ("one unit carries the net", "units split the points", "not fitted")
ONE_UNIT_SHARE = 0.95   # a fitted net whose largest unit carries more of ||theta||^2 is Thm 3.2's kind of end


def outcome_of(last: pd.Series) -> str:
    if last["train_error"] > 0:
        return OUTCOMES[2]
    return OUTCOMES[0] if last["top_unit_share"] > ONE_UNIT_SHARE else OUTCOMES[1]


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a fraction k / n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    c, h = (p + z * z / (2 * n)) / (1 + z * z / n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, float(c - h)), min(1.0, float(c + h))


def write_init_outcomes(out_dir: str | Path) -> list[Path]:
    """`tables/init_outcomes.csv` (per point: init, premise at step 0, the end's pattern, outcome),
    `tables/init_outcomes_summary.csv` (per init scheme and scale: each outcome's fraction with its 95%
    Wilson interval) and `figures/init_outcomes.png`, for a sweep tracking `relu_pattern`."""
    rows = []
    for pid, point in SweepView(out_dir).points(layout.METRICS).items():
        m = point.metrics()
        if "thm32_premise" not in m or len(m) < 2:
            continue
        cfg = point.config(strict=True)
        mod, last = cfg["model"], m.iloc[-1]
        rows.append({"point": pid, "init": mod.get("init") or "kaiming",
                     "init_scale": mod.get("init_scale", 1.0), "init_seed": mod.get("init_seed"),
                     "loss": cfg["training"].get("loss", "logistic"), "steps": int(last["step"]),
                     "premise_at_init": bool(m["thm32_premise"].iloc[0] == 1), "train_error": last["train_error"],
                     **{c: last[c] for c in ReluPattern.columns if c != "thm32_premise"},
                     "kkt_residual": last.get("kkt_residual", float("nan")), "outcome": outcome_of(last)})
    if not rows:
        return []
    table = pd.DataFrame(rows).sort_values(["init", "init_scale", "loss", "init_seed"])
    write_table(out_dir, "init_outcomes", table)
    summary = []
    for (init, scale, loss), g in table.groupby(["init", "init_scale", "loss"], sort=False):
        row = {"init": init, "init_scale": scale, "loss": loss, "runs": len(g),
               "premise_at_init": float(g["premise_at_init"].mean())}
        for o in OUTCOMES:
            k = int((g["outcome"] == o).sum())
            row[o] = k / len(g)
            row[f"{o} (95% low)"], row[f"{o} (95% high)"] = wilson(k, len(g))
        pre = g.loc[g["premise_at_init"], "outcome"]
        row["premise_runs_ending_one_unit"] = float((pre == OUTCOMES[0]).mean()) if len(pre) else float("nan")
        summary.append(row)
    summary = pd.DataFrame(summary)
    write_table(out_dir, "init_outcomes_summary", summary)
    fig, (ax_a, ax_b) = new_figure((12, 4.6), 1, 2)
    labels = [f"{r['init']} x{r['init_scale']:g}\n{r['loss']}\n{r['runs']} runs" for _, r in summary.iterrows()]
    xs = np.arange(len(summary))
    for i, o in enumerate(OUTCOMES):
        val = summary[o].to_numpy(float)
        err = np.abs(np.vstack([summary[f"{o} (95% low)"], summary[f"{o} (95% high)"]]) - val)
        ax_a.bar(xs + (i - 1) * 0.27, val, 0.27, yerr=err, capsize=3, label=o)
    ax_a.set(xticks=xs, ylabel="fraction of random initializations", ylim=(0, 1),
             title="(a) where GD ends (95% Wilson intervals)")
    ax_a.set_xticklabels(labels, fontsize=7)
    ax_a.legend(fontsize=7)
    for i, (_, g) in enumerate(table.groupby(["init", "init_scale", "loss"], sort=False)):
        ok = g[g["outcome"] != OUTCOMES[2]]
        jitter = np.linspace(-0.3, 0.3, len(ok)) if len(ok) > 1 else np.zeros(len(ok))
        for k, o in enumerate(OUTCOMES[:2]):   # the colours of (a)
            sel = (ok["outcome"] == o).to_numpy()
            ax_b.scatter(i + jitter[sel], ok["norm_sq_margin1"][sel], color=f"C{k}", s=14, marker="o",
                         label=o if i == 0 else None)
    if spans_decades(table["norm_sq_margin1"], 1):   # log only where the norms span a decade
        ax_b.set_yscale("log")
    ax_b.set(xticks=xs, xlim=(-0.5, len(xs) - 0.5), ylabel="||theta||^2 at margin 1 at the last step",
             title="(b) the fitted runs' norms")
    ax_b.set_xticklabels(labels, fontsize=7)
    ax_b.legend(fontsize=7)
    return save_figure(fig, out_dir, "init_outcomes")


# `layer_optimality`: each layer u~ of GD's net at margin 1 (a parameter tensor; a row of a diagonal net's
# `w`) against Problem 4, min ||u||^2 s.t. y_i f(x_i) >= 1 with the other layers fixed, by SLSQP from u~
# and LAYER_RESTARTS random starts (`global_norm_sq`) and within eps of u~ (`local_norm_sq_eps_*`).

LAYER_RESTARTS = 20
LAYER_RADII = (0.1, 0.01, 0.001)


def layer_problem(p2: Problem2, theta: np.ndarray, idx: np.ndarray) -> dict:
    """Problem 4 for the layer theta[idx], the rest fixed at theta (scaled to margin 1 already)."""
    def margins_jac(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = theta.copy()
        t[idx] = u
        q, jac = p2.margins_jac(t)
        return q, jac[:, idx]

    def solve(start, center=None, radius=None):
        u = slsqp(margins_jac, start, center, radius)
        if not np.all(np.isfinite(u)) or (margins_jac(u)[0] - 1).min() < -1e-9:
            return None
        if center is not None and np.linalg.norm(u - center) > radius * (1 + 1e-9):
            return None
        return float(u @ u)

    rng = np.random.default_rng(0)
    u0 = theta[idx].copy()
    base = float(u0 @ u0)
    scale = max(np.sqrt(base / len(idx)), 1e-3)
    found = [v for v in [solve(u0)] + [solve(rng.standard_normal(len(idx)) * scale) for _ in range(LAYER_RESTARTS)]
             if v is not None]
    row = {"size": len(idx), "layer_norm_sq": base, "global_norm_sq": min(found + [base])}
    local = []
    for eps in LAYER_RADII:
        starts = [u0 + 1e-3 * eps * rng.standard_normal(len(idx))]
        for _ in range(LAYER_RESTARTS // 4):
            d = rng.standard_normal(len(idx))
            starts.append(u0 + eps * rng.uniform() * d / np.linalg.norm(d))
        best = min([v for v in (solve(s, u0, eps) for s in starts) if v is not None] + [base])
        row[f"local_norm_sq_eps_{eps:g}"] = best
        local.append(best)
    row["local_optimum"] = bool(all(b >= base * (1 - IMPROVE_TOL) for b in local))
    row["global_optimum"] = bool(row["global_norm_sq"] >= base * (1 - 1e-6))
    return row


def layer_table(cfg, model, x: np.ndarray, y: np.ndarray) -> pd.DataFrame | None:
    """Problem 4 for every layer of `model` at its margin-1 direction (None when a point is misclassified)."""
    p2 = Problem2(cfg, model, x, y)
    theta = p2.to_margin_one(flat_theta(model))
    if theta is None:
        return None
    slices, i = [], 0   # (name, indices into the flat theta) of each layer (module comment above)
    for name, p in model.named_parameters():
        idx = np.arange(i, i + p.numel())
        if cfg.spec.rows_are_layers and p.ndim == 2:
            slices += [(f"{name}[{j}]", row) for j, row in enumerate(idx.reshape(p.shape[0], -1))]
        else:
            slices.append((name, idx))
        i += p.numel()
    return pd.DataFrame([{"layer": name, **layer_problem(p2, theta, idx)} for name, idx in slices])


class LayerOptimality(Instrument):
    name = "layer_optimality"
    description = "paper 003's Problem 4: each layer of GD's limit against its own max-margin problem"

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return {}

    def final_tables(self, tracker, model):
        ds = tracker.problem.dataset
        table = layer_table(tracker.cfg, model, ds.x_train, ds.y_train)
        return {} if table is None else {"layer_optimality": table}


def write_layer_table(out_dir: str | Path) -> list[Path]:
    """`tables/layer_optimality.csv` (every point's layers) and `figures/layer_optimality.png` (per layer:
    the smallest ||u||^2 found within eps and anywhere, over ||u~||^2)."""
    tables, frames = point_frames(out_dir, "layer_optimality.csv"), []
    for pid in in_sweep_order(tables, point_names(out_dir)):   # the grid's order
        cfg = SweepView(out_dir).point(pid).config(strict=True)
        frames.append(tables[pid].assign(
            point=pid, construction=cfg["name"], model=cfg["model"]["kind"],
            activation=cfg["model"].get("activation", "relu"), loss=cfg["training"].get("loss", "logistic")))
    if not frames:
        return []
    table = pd.concat(frames, ignore_index=True)
    first = ["point", "construction", "model", "activation", "loss", "layer"]
    table = table[first + [c for c in table.columns if c not in first]]
    write_table(out_dir, "layer_optimality", table)
    fig, ax = new_figure((12, 5))
    cols = [c for c in table.columns if c.startswith("local_norm_sq_eps_")]
    one_loss = table["loss"].nunique() == 1   # then named once, in the title
    labels = [f"{r['construction']}: {r['layer']}" + ("" if one_loss else f" ({r['loss']})") for _, r in table.iterrows()]
    xs = np.arange(len(table))
    for j, c in enumerate(cols):
        ax.scatter(xs, table[c] / table["layer_norm_sq"], marker="o", s=18, label=f"within eps = {c.rsplit('_', 1)[1]}")
    ax.scatter(xs, table["global_norm_sq"] / table["layer_norm_sq"], marker="x", color="k", s=30, label="anywhere")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set(xticks=xs, xlabel="construction: layer", ylabel="smallest ||u||^2 found / ||u~||^2",
           title="each layer of GD's limit against its own max-margin problem (1: nothing smaller found)"
                 + (f", {table['loss'].iloc[0]} loss" if one_loss else ""))
    ax.set_xticklabels(labels, rotation=70, ha="right", fontsize=7)
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "layer_optimality")


RUN_REPORTS = (write_kkt_table,)
SWEEP_REPORTS = (plot_sweep_kkt, write_init_outcomes, write_layer_table)
INSTRUMENTS = {i.name: i for i in (ReluPattern(), LayerOptimality())}

