"""Paper 002 (leaky nets in the perfect agreement regime; the net and svm-par: `gbcli.models.leaky`): the
instruments `clusters` (the two unit groups around w_bar / u_bar, the linear regime, the PAR) and
`output_linearity` (Figure 3), and the sweep reports output_linearity, risk (Theorem 4.1: SGD against
GD), risk_by_init and boundary_by_init (Theorem 4.1 and Figure 1 per `model.init_scale`). The columns
are defined in results/theory/paper-002.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from gbcli.experiments.paper001 import in_sweep_order, new_figure, point_frames, save_figure, write_table
from gbcli.instruments.base import Instrument, first_layer
from gbcli.fs.safe import load_tensors_untrusted, read_csv_untrusted
from gbcli.store.views import SweepView, point_names
from gbcli.reports.render import readable_log_ticks
from gbcli.fs import layout
from gbcli.fs.layout import SweepDir


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """The largest angle (degrees) of a row of `a` to the direction b."""
    cos = a @ b / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b), 1e-300)
    return float(np.degrees(np.arccos(np.clip(cos.min(), -1, 1))))


def par_measures(w1: np.ndarray, x: np.ndarray, y: np.ndarray, par_rows: np.ndarray | None) -> dict:
    """`par_fraction` (`_w`, `_u`): units in the PAR (section 6.2); `par_max_angle`: their largest angle to (w*, u*)."""
    k = len(w1) // 2
    yz = y[:, None] * (x @ w1.T)
    in_w, in_u = (yz[:, :k] > 0).all(0), (yz[:, k:] < 0).all(0)
    row = {"par_fraction": float((in_w.sum() + in_u.sum()) / len(w1)),
           "par_fraction_w": float(in_w.mean()), "par_fraction_u": float(in_u.mean())}
    if par_rows is not None:
        row["par_max_angle"] = max(_angle(w1[:k], par_rows[0]), _angle(w1[k:], par_rows[1]))
    return row


ISO_POINTS = 4000


def net_outputs(model: nn.Module, z: np.ndarray) -> np.ndarray:
    """The net's outputs on the inputs z (rows), float64."""
    with torch.no_grad():
        return model(torch.tensor(z, dtype=model.w1.dtype, device=model.w1.device)).double().cpu().numpy()


class Clusters(Instrument):
    name, needs_matching = "clusters", True
    description = "the two neuron groups of paper 002"
    columns = ("cluster_radius", "cluster_radius_rel", "outside_linear", "outside_linear_val", "max_group_angle",
               "linear_sign_mismatch_val", "par_cosine", "zero_output_val", "par_fraction", "par_fraction_w",
               "par_fraction_u", "par_max_angle", "zero_output_iso", "linear_sign_mismatch_iso")
    panels = (("cluster_radius_rel", "cluster radius r / mean unit norm", "log"),
              ("outside_linear", "fraction of train points outside the linear regime", "linear"),
              ("max_group_angle", "max angle within a group (degrees)", "linear"),
              ("par_cosine", "cos(w_bar - u_bar, svm-par direction)", "linear"),
              ("par_fraction", "fraction of units in the PAR", "linear"),
              ("par_max_angle", "max angle of a unit to svm-par's w* / u* (degrees)", "log"),
              ("linear_sign_mismatch_iso", "sign f != sign <w_bar - u_bar, x> (isotropic inputs)", "linear"))

    def setup(self, tracker, context):
        z = tracker.solution.zeta   # svm-par: rows (w, u)
        tracker.par_rows = z if z.shape[0] == 2 and tracker.design.e_val.shape[1] == 2 else None
        tracker.par_direction = None if tracker.par_rows is None else z[0] - z[1]
        tracker.x_iso = np.random.default_rng(0).standard_normal((ISO_POINTS, tracker.problem.dataset.dim))
        return {}

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        """The cluster radius, linear regime and group angles (results/theory/paper-002.md), then `par_measures`."""
        xn, w1 = x.double().cpu().numpy(), first_layer(model)
        x_val, x_iso = tracker.problem.dataset.x_val, tracker.x_iso
        k = len(w1) // 2
        groups = (w1[:k], w1[k:])
        means = [g.mean(0) for g in groups]
        r = max(np.linalg.norm(g - m, axis=1).max() for g, m in zip(groups, means))
        direction = means[0] - means[1]
        outside = lambda z: float(np.mean(np.abs(z @ direction) <= 2 * r * np.linalg.norm(z, axis=1)))
        units = [g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300) for g in groups]
        angle = max(0.0, *(float(np.degrees(np.arccos(np.clip((u @ u.T).min(), -1, 1)))) for u in units))
        f, f_iso = net_outputs(model, x_val), net_outputs(model, x_iso)
        row = {"cluster_radius": float(r), "cluster_radius_rel": float(r / np.linalg.norm(w1, axis=1).mean()),
               "outside_linear": outside(xn), "outside_linear_val": outside(x_val), "max_group_angle": angle,
               "linear_sign_mismatch_val": float(np.mean(np.sign(f) != np.sign(x_val @ direction))),
               "zero_output_val": float(np.mean(f == 0)), "zero_output_iso": float(np.mean(f_iso == 0)),
               "linear_sign_mismatch_iso": float(np.mean(np.sign(f_iso) != np.sign(x_iso @ direction)))}
        if tracker.par_direction is not None:
            na = np.linalg.norm(direction) * np.linalg.norm(tracker.par_direction)
            row["par_cosine"] = float(direction @ tracker.par_direction / na) if na > 0 else 0.0
        return {**row, **par_measures(w1, xn, y.double().cpu().numpy(), tracker.par_rows)}


# `output_linearity` (Figure 3: a clustered net's decision boundary is linear, its output is not), on
# a GRID x GRID grid over [-R, R]^2 of the input plane (R the largest training norm; with `dataset.bias`
# the constant feature appended): `output_linear_r2` and `output_linear_dev` (largest residual over
# max |f|) of f's least-squares linear (affine with the bias) fit; `output_sign_mismatch_grid`, where
# sign f != sign <w_bar - u_bar, x>; `output_slope_ratio`, f's largest slope over its smallest along the
# normal of the rule's boundary line (1 when linear, nan when f is not increasing there).

GRID = 61


def linearity_inputs(x_train: np.ndarray, const: float) -> dict:
    """The grid and its radius (net inputs: the plane, then the constant when there is one)."""
    r = float(np.linalg.norm(x_train[:, :2], axis=1).max())
    t = np.linspace(-r, r, GRID)
    g = np.stack(np.meshgrid(t, t), -1).reshape(-1, 2)
    return {"radius": r, "const": const, "grid": g}


def output_linearity(f_of, w1: np.ndarray, inputs: dict, bias: bool) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """The columns (see above) and the two final tables, for a net f_of(net inputs) -> outputs."""
    k = len(w1) // 2
    direction = w1[:k].mean(0) - w1[k:].mean(0)
    r, const, g = inputs["radius"], inputs["const"], inputs["grid"]
    lift = lambda p: np.c_[p, np.full(len(p), const)] if bias else p   # net inputs: the constant appended
    # sign with rounding noise (|v| <= 1e-9 max |v|, grid points on the boundary line) counted as 0
    sign = lambda v: np.sign(np.where(np.abs(v) <= 1e-9 * np.abs(v).max(), 0.0, v))
    xg = lift(g)
    f = f_of(xg)
    coef, *_ = np.linalg.lstsq(xg, f, rcond=None)
    fit = xg @ coef
    ss = float(((f - f.mean()) ** 2).sum())
    rule = xg @ direction
    # the line x0 + t n, t in [-r, r]: n the unit normal of the rule's boundary line, x0 its point nearest 0
    d = max(np.linalg.norm(direction[:2]), 1e-300)
    t = np.linspace(-r, r, 201)
    line = ((-(direction[2] * const) / d if bias else 0.0) + t)[:, None] * (direction[:2] / d)[None]
    xl = lift(line)
    fl = f_of(xl)
    slopes = np.diff(fl) / np.diff(t)   # f is piecewise linear along the line: its slopes' range
    row = {"output_linear_r2": 1 - float(((f - fit) ** 2).sum()) / ss if ss > 0 else float("nan"),
           "output_linear_dev": float(np.abs(f - fit).max() / max(np.abs(f).max(), 1e-300)),
           "output_sign_mismatch_grid": float(np.mean(sign(f) != sign(rule))),
           "output_slope_ratio": float(slopes.max() / slopes.min()) if slopes.min() > 0 else float("nan")}
    grid = pd.DataFrame({"x1": g[:, 0], "x2": g[:, 1], "f": f, "fit": fit, "rule": rule})
    line_t = pd.DataFrame({"t": t, "x1": line[:, 0], "x2": line[:, 1], "f": fl, "fit": xl @ coef})
    return row, grid, line_t


class OutputLinearity(Instrument):
    name, needs_matching = "output_linearity", False
    description = "paper 002's Figure 3: f against its best linear fit on a 2-D input plane"
    columns = ("output_linear_r2", "output_linear_dev", "output_sign_mismatch_grid", "output_slope_ratio")
    panels = (("output_linear_r2", "R^2 of the best linear fit of f (input plane)", "linear"),
              ("output_sign_mismatch_grid", "sign f != sign <w_bar - u_bar, x> (plane grid)", "linear"))

    def setup(self, tracker, context):
        x, bias = tracker.problem.dataset.x_train, bool(getattr(context.cfg.dataset, "bias", False))
        # an input plane: 2-D inputs, or 3-D ones whose last is the bias feature's constant
        plane = x.shape[1] == 2 or (bias and x.shape[1] == 3 and np.ptp(x[:, -1]) == 0)
        tracker.linearity = (linearity_inputs(x, 0.0 if x.shape[1] == 2 else float(x[0, -1])), bias) if plane else None
        return {}

    def _measure(self, tracker, model):
        inputs, bias = tracker.linearity
        return output_linearity(functools.partial(net_outputs, model), first_layer(model), inputs, bias)

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        if tracker.linearity is None:
            return dict.fromkeys(self.columns, float("nan"))
        return self._measure(tracker, model)[0]

    def final_tables(self, tracker, model):
        if tracker.linearity is None:
            return {}
        _, grid, line = self._measure(tracker, model)
        return {"output_grid": grid, "output_line": line}


def on_grid(grid: pd.DataFrame, *columns: str) -> list[np.ndarray]:
    """Columns of an `output_grid` table as square arrays (the grid's rows)."""
    n = int(round(np.sqrt(len(grid))))
    return [grid[c].to_numpy().reshape(n, n) for c in columns]


def plot_sweep_output_linearity(out_dir: str | Path) -> list[Path]:
    """`tables/output_linearity.csv` (each point's last logged columns) and `figures/output_linearity.png`
    (f over the plane, f = 0 and the rule's boundary; f and its fit along the normal)."""
    grids, lines = point_frames(out_dir, "output_grid.csv"), point_frames(out_dir, "output_line.csv")
    points = in_sweep_order([p for p in grids if p in lines], point_names(out_dir))
    if not points:
        return []
    rows = []
    for p in points:
        view = SweepView(out_dir).point(p)
        cfg, last = view.config(strict=True), view.metrics().iloc[-1]
        rows.append({"point": p, "run": cfg["name"], "hidden_units": cfg["model"].get("hidden_units"),
                     "leaky_alpha": cfg["model"].get("leaky_alpha"), "bias": bool(cfg["dataset"].get("bias", False)),
                     "steps": int(last["step"]), "train_error": last["train_error"],
                     **{c: last.get(c, float("nan")) for c in OutputLinearity.columns + ("max_group_angle",)}})
    table = pd.DataFrame(rows)
    write_table(out_dir, "output_linearity", table)
    fig, axes = new_figure((max(4.2 * len(points), 9.0), 7.6), 2, len(points), squeeze=False)
    for j, r in table.iterrows():
        g, line = grids[r["point"]], lines[r["point"]]
        x1, x2, f, rule = on_grid(g, "x1", "x2", "f", "rule")
        ax = axes[0, j]
        lim = float(np.abs(f).max())
        cs = ax.contourf(x1, x2, f, levels=21, cmap="RdBu_r", vmin=-lim, vmax=lim)
        ax.contour(x1, x2, f, levels=9, colors="k", linewidths=0.4, alpha=0.5)
        ax.contour(x1, x2, f, levels=[0.0], colors="k", linewidths=2.0)
        ax.contour(x1, x2, rule, levels=[0.0], colors="y", linewidths=1.0, linestyles="--")
        ax.plot(line["x1"], line["x2"], color="g", lw=0.8)
        fig.colorbar(cs, ax=ax, shrink=0.8).ax.set_title("f", fontsize=9)
        ax.set(aspect="equal", xlabel="x1", ylabel="x2")
        ax.set_title(f"2k = {r['hidden_units']} units, alpha {r['leaky_alpha']}, bias {'yes' if r['bias'] else 'no'}",
                     fontsize=9)
        ax = axes[1, j]
        ax.plot(line["t"], line["f"], label="f (the net)")
        ax.plot(line["t"], line["fit"], ls="--", label="best linear fit (over the grid)")
        ax.axhline(0, color="k", lw=0.6)
        ax.axvline(0, color="y", lw=0.8, ls="--")
        ax.set(xlabel="t along the green normal\n(0: the rule's boundary)", ylabel="f")
        ax.set_title(f"R^2 {r['output_linear_r2']:.4f}, max |f - fit| / max |f| {r['output_linear_dev']:.3f}\n"
                     f"slope ratio {r['output_slope_ratio']:.3f}, sign f != rule on {r['output_sign_mismatch_grid']:.2%}",
                     fontsize=8)
        ax.legend(fontsize=7, loc="upper left")   # f increases along t: the upper left is free
    fig.suptitle("f over the input plane (paper 002, Figure 3)\nblack: f = 0; dashed yellow: the linear rule's boundary "
                 "<w_bar - u_bar, x> = 0; green: its normal (lower row)", fontsize=10)
    return save_figure(fig, out_dir, "output_linearity")


def _max_point_loss(m: pd.DataFrame, loss: str) -> pd.Series:
    """The largest loss of a training point: the loss at the smallest margin, normalized_margin x ||w||
    (leaky nets are 1-homogeneous)."""
    low = m["normalized_margin"] * m["weight_norm"]
    return np.exp(-low) if loss == "exponential" else np.logaddexp(0.0, -low)


RISK_EPS = 0.1   # Theorem 4.1's eps in `tables/risk.csv`: the first step with every point's loss below it


def _risk(m: pd.DataFrame, cfg: dict) -> tuple[pd.Series, dict]:
    """The largest point loss at each logged step, and the last mean and largest point loss with the first
    logged steps where the latter is below RISK_EPS and where the training error is 0."""
    worst = _max_point_loss(m, cfg["training"].get("loss", "logistic"))
    below, fitted = m["step"][worst < RISK_EPS], m["step"][m["train_error"] == 0]
    return worst, {"train_loss": m["train_loss"].iloc[-1], "max_point_loss": float(worst.iloc[-1]),
                   "first_step_all_below_eps": below.min() if len(below) else None,
                   "first_step_train_error_0": fitted.min() if len(fitted) else None, "eps": RISK_EPS}


def _risk_figure(curves: list[tuple], xlabel: str, eps_label: str | None = None):
    """(a) the mean training loss and (b) the largest point loss against the step (log scales);
    `curves`: (step, mean, worst, line style) each."""
    fig, (ax_a, ax_b) = new_figure((12, 4.6), 1, 2)
    for step, mean, worst, style in curves:
        ax_a.plot(step[step > 0], mean[step > 0], **style)
        ax_b.plot(step[step > 0], worst[step > 0], **style)
    ax_b.axhline(RISK_EPS, color="k", lw=0.6, ls=":", label=eps_label)
    ax_a.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="mean training loss", title="(a) training loss")
    ax_b.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="largest loss of a training point",
             title="(b) the worst point")
    return fig, ax_a, ax_b


def plot_sweep_risk(out_dir: str | Path) -> list[Path]:
    """For leaky nets that differ in `training.batch_size` (SGD against GD, Theorem 4.1): `tables/risk.csv`
    (per point: last mean and largest point loss, `_risk`'s first steps) and `figures/risk.png`."""
    metrics = point_frames(out_dir, layout.METRICS)
    cfgs = {p: SweepView(out_dir).point(p).config(strict=True) for p in metrics}
    leaky = [p for p in metrics if "normalized_margin" in metrics[p]]   # homogeneous nets (the sweep's leaky ones)
    if len({cfgs[p]["training"].get("batch_size") for p in leaky}) < 2:
        return []
    margins = sorted({cfgs[p]["dataset"].get("margin") for p in leaky}, key=str)
    rows, curves = [], {}
    for p in leaky:
        c, m = cfgs[p], metrics[p]
        worst, last = _risk(m, c)
        bs, margin = c["training"].get("batch_size"), c["dataset"].get("margin")
        rows.append({"point": p, "run": f"{c['name']}, margin {margin}, batch {bs if bs else 'full'}",
                     "batch_size": bs if bs else "full", "margin": margin, "steps": int(m["step"].iloc[-1]), **last})
        label = f"margin {margin}, " + (f"SGD, batch {bs}" if bs else "GD, full batch")
        curves[p] = (m["step"], m["train_loss"], worst,
                     dict(label=label, color=f"C{margins.index(margin) % 10}", ls="-" if bs else "--"))
    table = pd.DataFrame(rows).sort_values(["margin", "batch_size"], key=lambda s: s.astype(str))
    write_table(out_dir, "risk", table)
    # the legend in the table's order: by margin, then batch
    fig, ax_a, ax_b = _risk_figure([curves[p] for p in table["point"]], "step", f"eps = {RISK_EPS}")
    for ax in (ax_a, ax_b):   # a loss that falls less than a decade: plain labels, not '6x10^-1'
        readable_log_ticks(ax.yaxis)
    ax_a.legend(fontsize=7)
    ax_b.legend(handles=ax_b.get_lines()[-1:], fontsize=7)
    fig.suptitle("SGD (solid) against full-batch GD (dashed) on leaky nets, one colour per data margin (paper 002, "
                 "Theorem 4.1)", fontsize=10)
    return save_figure(fig, out_dir, "risk")


def _init_scale_points(out_dir: str | Path) -> tuple[dict[str, dict], dict[str, dict], dict[str, pd.DataFrame],
                                                     dict[str, Path]]:
    """(rows, configs, metrics, grid files) of the homogeneous nets of a sweep over `model.init_scale` with
    `gd/output_grid.csv`, in the sweep's order (rows: each point's `point`, `init_scale` and `bias`); empty
    unless two init scales or more."""
    grids = SweepDir(out_dir).gd_files("output_grid.csv")
    metrics = {p: m for p, m in point_frames(out_dir, layout.METRICS).items() if p in grids and "normalized_margin" in m}
    points = in_sweep_order(metrics, point_names(out_dir))
    cfgs = {p: SweepView(out_dir).point(p).config(strict=True) for p in points}
    if len({cfgs[p]["model"].get("init_scale") for p in points}) < 2:
        return {}, {}, {}, {}
    heads = {p: {"point": p, "init_scale": cfgs[p]["model"]["init_scale"],
                 "bias": bool(cfgs[p]["dataset"].get("bias", False))} for p in points}
    return heads, cfgs, metrics, grids


def plot_sweep_risk_by_init(out_dir: str | Path) -> list[Path]:
    """`tables/risk_by_init.csv` (per point: first and last mean and largest point loss, `_risk`'s first
    steps) and `figures/risk_by_init.png` for `_init_scale_points` (Theorem 4.1 holds at any init scale)."""
    heads, cfgs, metrics, _ = _init_scale_points(out_dir)
    if not heads:
        return []
    rows, worsts = [], {}
    for p, head in heads.items():
        c, m = cfgs[p], metrics[p]
        worsts[p], last = _risk(m, c)
        rows.append({**head, "batch_size": c["training"].get("batch_size"), "lr": c["training"].get("lr"),
                     "steps": int(m["step"].iloc[-1]), "initial_train_loss": m["train_loss"].iloc[0],
                     "initial_max_point_loss": float(worsts[p].iloc[0]), **last})
    table = pd.DataFrame(rows).sort_values(["bias", "init_scale"], kind="stable")
    write_table(out_dir, "risk_by_init", table)
    scales = sorted(set(table["init_scale"]))
    curves = [(metrics[r.point]["step"], metrics[r.point]["train_loss"], worsts[r.point],
               dict(color=f"C{scales.index(r.init_scale) % 10}", ls="--" if r.bias else "-",
                    label=f"init x {r.init_scale:g}" + (", bias" if r.bias else "")))
              for r in table.itertuples()]   # the legend in the table's order: by bias, then init scale
    batches = {str(r["batch_size"] or "full") for r in rows}
    fig, ax_a, _ = _risk_figure(curves, f"step (batch {batches.pop()})" if len(batches) == 1 else "step")
    ax_a.legend(fontsize=7)
    fig.suptitle(f"Theorem 4.1 at several init scales (paper 002; dashed: with the bias feature, dotted: eps = {RISK_EPS})",
                 fontsize=10)
    return save_figure(fig, out_dir, "risk_by_init", dpi=110)


LINE_STEP_DEG = 0.05    # the directions of `best_line_disagreement`
LINE_OFFSETS = 241      # its offsets over [-r, r] (with the bias feature)
CIRCLE_STEP_DEG = 0.5   # the points of `sign_changes_on_circle`


def best_line_disagreement(x: np.ndarray, s: np.ndarray, offsets: np.ndarray) -> float:
    """The smallest fraction of the points x (rows, in the plane) whose sign s (+-1) differs from sign(<d, x> + c)
    over the unit directions d every LINE_STEP_DEG degrees and the offsets c (a point on the line differs),
    counted from each direction's sorted projections."""
    th = np.deg2rad(np.arange(0, 360, LINE_STEP_DEG))
    proj = x @ np.stack([np.cos(th), np.sin(th)], 1).T   # points x directions
    t = -np.asarray(offsets, dtype=float)
    if len(t) == 1:   # lines through one point (the origin): no sorting needed
        return int(((proj[s > 0] <= t[0]).sum(0) + (proj[s < 0] >= t[0]).sum(0)).min()) / len(x)
    pos, neg = np.sort(proj[s > 0], axis=0), np.sort(proj[s < 0], axis=0)
    wrong = min(int((np.searchsorted(pos[:, j], t, side="right")
                     + len(neg) - np.searchsorted(neg[:, j], t, side="left")).min()) for j in range(proj.shape[1]))
    return wrong / len(x)


def boundary_row(grid: pd.DataFrame, bias: bool) -> dict:
    """How far sign f on the grid (where |f| > 1e-9 max |f|) is from ANY line: `best_line_disagreement`
    (lines through the origin only without the bias feature: f is then 1-homogeneous), and the sign
    changes of f around the circle of half the grid's radius (2 for a line through the disc), at the grid
    point nearest each CIRCLE_STEP_DEG degrees."""
    x, f = grid[["x1", "x2"]].to_numpy(), grid["f"].to_numpy()
    keep = np.abs(f) > 1e-9 * np.abs(f).max()
    x, s = x[keep], np.sign(f[keep])
    r = np.abs(x).max()
    offsets = np.linspace(-r, r, LINE_OFFSETS) if bias else np.array([0.0])
    (f,) = on_grid(grid, "f")
    lim = float(np.abs(grid["x1"]).max())
    t = np.linspace(-lim, lim, len(f))
    ang = np.deg2rad(np.arange(0, 360, CIRCLE_STEP_DEG))
    ix = np.abs(t[None] - (0.5 * t.max() * np.cos(ang))[:, None]).argmin(1)
    iy = np.abs(t[None] - (0.5 * t.max() * np.sin(ang))[:, None]).argmin(1)
    signs = np.sign(f[iy, ix])
    return {"best_linear_disagreement_grid": best_line_disagreement(x, s, offsets),
            "sign_changes_circle_R/2": int(np.sum(signs != np.roll(signs, 1)))}


def plot_sweep_boundary_by_init(out_dir: str | Path) -> list[Path]:
    """Figure 1 (a small init gives a boundary close to linear) for `_init_scale_points`:
    `tables/boundary_by_init.csv` (`boundary_row` per point) and `figures/boundary_by_init.png` (sign f,
    f = 0, the rule's boundary and each unit's direction; a row per bias setting, a column per scale)."""
    heads, _, _, grid_files = _init_scale_points(out_dir)
    if not heads:
        return []
    grids = {p: read_csv_untrusted(grid_files[p]) for p in heads}
    rows = [{**head, **boundary_row(grids[p], head["bias"])} for p, head in heads.items()]
    table = pd.DataFrame(rows).sort_values(["bias", "init_scale"], kind="stable")
    write_table(out_dir, "boundary_by_init", table)
    scales, biases = sorted(set(table["init_scale"])), sorted(set(table["bias"]))
    fig, axes = new_figure((3.3 * len(scales), 3.4 * len(biases)), len(biases), len(scales), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()   # a cell without a point stays empty
    for r in table.itertuples():
        g = grids[r.point]
        x1, x2, f, rule = on_grid(g, "x1", "x2", "f", "rule")
        ax = axes[biases.index(r.bias), scales.index(r.init_scale)]
        ax.set_axis_on()
        ax.contourf(x1, x2, np.sign(f), levels=[-2, 0, 2], colors=["#c6dbef", "#fcbba1"])
        ax.contour(x1, x2, f, levels=[0.0], colors="k", linewidths=1.6)
        ax.contour(x1, x2, rule, levels=[0.0], colors="y", linewidths=1.0, linestyles="--")
        w1 = load_tensors_untrusted(SweepDir(out_dir).point(r.point).model)["state_dict"]["w1"].double().numpy()
        k = len(w1) // 2
        lim = float(np.abs(g["x1"]).max())
        for i, w in enumerate(w1):
            v = w[:2] / max(np.linalg.norm(w[:2]), 1e-300) * 0.9 * lim
            ax.plot([0, v[0]], [0, v[1]], color="r" if i < k else "b", lw=0.8, alpha=0.7)
        ax.set(aspect="equal", xlim=(-lim, lim), ylim=(-lim, lim))
        ax.set_title(f"init x {r.init_scale:g}, bias {'yes' if r.bias else 'no'}\n"
                     f"sign f off the best line on {r.best_linear_disagreement_grid:.2%}", fontsize=9)
    fig.suptitle("sign f over the input plane at each init scale (paper 002, Figure 1). Black: f = 0; dashed yellow: "
                 "<w_bar - u_bar, x> = 0;\nlines from the origin: each unit's direction in the plane (red +v, blue -v)",
                 fontsize=10)
    return save_figure(fig, out_dir, "boundary_by_init", dpi=100)


INSTRUMENTS = {i.name: i for i in (Clusters(), OutputLinearity())}
RUN_REPORTS = ()
SWEEP_REPORTS = (plot_sweep_output_linearity, plot_sweep_risk, plot_sweep_risk_by_init, plot_sweep_boundary_by_init)
