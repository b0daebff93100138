"""The figures of a run or sweep (protocol section 8): (a) each SVM's validation error against the GD
network's; (b) inconsistency against GD error, beside the uncorrelated 2p(1-p); (c) the best configuration
of every predictor; (d) error against hidden units H (or hyperplanes k); and the training curves. Only
usable results are drawn (GD ok; SVM optimal or inaccurate); plain matplotlib Figures, rendered with Agg.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator, NullLocator

from gbcli.errors import GbError
from gbcli.fs import layout
from gbcli.fs.layout import RunDir, SweepDir
from gbcli.fs.safe import flatten, is_file, write_csv
from gbcli.registry import INSTRUMENTS, MODELS
from gbcli.reports.render import readable_log_ticks, save_png, spans_decades
from gbcli.reports.tables import USABLE_STATUSES, pair_key, summarize
from gbcli.runs.index import grid_axes, headline, sweep_points
from gbcli.store.records import read_metrics as _read_metrics
from gbcli.store.views import SweepView

NAMES = {"a": "a_gd_vs_svm_error", "b": "b_inconsistency_vs_gd_error", "c": "c_best_configuration",
         "d": "d_error_vs_units"}
MARKERS = "osD^v<>ph*"
COLOUR_KEYS = ("hidden_units", "train_size", "contexts")   # the first that varies colours the dots
LINE_STYLES = ("-", "--", ":", "-.")   # one per momentum value of a sweep's curves (in the grid's order), per N in (d)
# a dot's fill per momentum value (panels a, b), and its word in the legend
FILLS = {"full": "filled", "none": "hollow", "left": "left-half", "bottom": "lower-half", "right": "right-half",
         "top": "upper-half"}
RUN_STYLES = ("-", "--", "-.")   # runs 11-20 dashed, 21-30 dash-dotted: ten colours are not enough
SLOPE_DECADES = 2.0   # the margin-gap slope is fitted over the last two decades of steps
TRAINING_LOG_DECADES = 1.0   # a panel declared "log" keeps a log axis once its positive values span a decade
FEW_POINTS = 12              # a line with fewer logged values marks each of them
MAX_LABELLED = 12   # lines with a legend entry; a larger sweep draws its points thin and grey, with their mean
# the legend of panels (a) and (b): right of the axes, never over the dots
BESIDE = {"fontsize": 7, "loc": "upper left", "bbox_to_anchor": (1.02, 1), "borderaxespad": 0}
BASIC_CURVES = (("train_loss", "training loss", "log"), ("train_error", "training error", "linear"),
                ("val_error", "validation error", "linear"),
                # the implicit-bias quantities: the smallest training margin at unit parameter norm, and the norm
                ("normalized_margin", "normalized margin (smallest over training points)", "linear"),
                ("weight_norm", "parameter norm", "auto"))
# (column, axis label, y scale) of every registered instrument's panels, in registry order
TRAINING_PANELS = tuple(p for ins in INSTRUMENTS.values() for p in ins.panels)
# why a tracked column has no value in a run's first rows (NaN): its instrument's definition
UNDEFINED_BEFORE = {"kkt_residual": "the KKT conditions are defined once the network separates the training data",
                    "kkt_complementarity": "defined once the network separates the training data",
                    "kkt_complementarity_rel": "defined once the network separates the training data"}
# gb trains in float32 (largest finite 3.4e38): a value beyond this is none of gb's, and one near 1e308
# overflows an axis's limits and ticks. A step beyond 2**53 is not a whole number a float can hold.
PLOTTABLE = 1e200
MAX_STEP = 2.0 ** 53


def read_metrics(path: Path) -> pd.DataFrame:
    """A metrics.csv to draw; a finite value beyond what an axis can hold is refused (NaN, inf: not drawn)."""
    frame = _read_metrics(path)
    for col in frame.columns:
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(float)
        limit = MAX_STEP if col == "step" else PLOTTABLE
        bad = np.flatnonzero(np.isfinite(values) & (np.abs(values) > limit))
        if len(bad):
            raise GbError(f"{path}: {str(col)[:40]} = {values[bad[0]]:g} (row {bad[0] + 1}) is beyond what gb logs "
                          f"or a figure can draw (|value| <= {limit:g}); not gb's metrics table: rerun the stage")
    return frame


def usable(errors: pd.DataFrame) -> pd.DataFrame:
    """Rows to plot: GD networks that trained (ok), programs solved (optimal or inaccurate)."""
    gd = errors["predictor"].str.startswith("gd-")
    return errors[(gd & (errors["status"] == "ok")) | (~gd & errors["status"].isin(USABLE_STATUSES[1:]))]


def series(frame: pd.DataFrame) -> pd.Series:
    """Legend label of every row: the predictor, with the momentum for GD ("gd-gln (momentum 0.9)")."""
    gd = frame["predictor"].str.startswith("gd-")
    mom = frame["momentum"].map(lambda m: f" (momentum {m:g})").astype(str)   # str even when empty (pandas 3)
    return frame["predictor"].where(~gd, frame["predictor"] + mom)


def _titled(ax, title: str, rows: pd.DataFrame) -> bool:
    """Title a panel; True, with a note in place of the plot, when `rows` has nothing to draw."""
    ax.set_title(title)
    if rows.empty:
        ax.text(0.5, 0.5, f"no usable results for panel {title[:3]}", ha="center", va="center", transform=ax.transAxes)
        ax.set(xticks=[], yticks=[])
    return rows.empty


def predictor_style(label: str) -> tuple:
    """(colour, marker) of a legend label, the same in every figure (registry order); a GD network's momentum
    variant ("gd-gln (momentum 0.9)") keeps its hue, darkened, with its own marker."""
    base, _, rest = label.partition(" (")
    order = list(dict.fromkeys(n for kind, spec in MODELS.items() for n in (f"gd-{kind}", *spec.programs)))
    # tab10 first (the strongest colours go to the first kinds' predictors), then tab20b / tab20c
    palette = [*colormaps["tab10"].colors, *colormaps["tab20b"].colors, *colormaps["tab20c"].colors]
    i = order.index(base) if base in order else len(order) + sum(map(ord, base))
    colour = palette[i % len(palette)]
    marker = MARKERS[i % len(MARKERS)]
    if rest.startswith("momentum "):
        try:
            m = float(rest[len("momentum "):].rstrip(")"))
        except ValueError:
            m = 0.0
        if m:
            colour = tuple(0.6 * c for c in colour[:3])
            marker = MARKERS[(i + 3 + int(round(10 * m))) % len(MARKERS)]
    return colour, marker


def _readable_limits(ax, axis: str, values, min_span: float = 0.02) -> None:
    """Limits of an error axis that span at least `min_span` (not 0.16596 to 0.16604), clipped to [0, 1]."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) and float(v.max()) - float(v.min()) < min_span:
        mid = (float(v.min()) + float(v.max())) / 2
        (ax.set_xlim if axis == "x" else ax.set_ylim)(max(0.0, mid - min_span), min(1.0, mid + min_span))


def _scatter(ax, pairs: pd.DataFrame, style: dict, y: str, xlabel: str, ylabel: str) -> list:
    """One dot per (point, program) at (GD validation error, `y`): the marker says the program, its fill the momentum,
    its colour a varying grid key (else the program's); returns the legend's handles (programs, momenta, the key)."""
    key = next((k for k in COLOUR_KEYS if k in pairs and pairs[k].nunique() > 1), None)
    momenta = sorted(pairs["momentum"].unique()) if "momentum" in pairs and pairs["momentum"].nunique() > 1 else []
    fill = {m: list(FILLS)[i % len(FILLS)] for i, m in enumerate(momenta)}
    values = sorted(pairs[key].unique()) if key else []
    colour = {v: colormaps["viridis"](i / max(len(values) - 1, 1) * 0.9) for i, v in enumerate(values)}
    by = ["predictor_a"] + (["momentum"] if momenta else []) + ([key] if key else [])
    for group, g in pairs.groupby(by, sort=True):
        group = dict(zip(by, group if isinstance(group, tuple) else (group,)))
        name = group["predictor_a"]
        ax.plot(g["gd_val_error"], g[y], ls="", marker=style[name][1], ms=5.5, alpha=0.8,
                color=colour[group[key]] if key else style[name][0], fillstyle=fill.get(group.get("momentum"), "full"))
    handles = [Line2D([], [], color="0.35" if key else style[n][0], marker=style[n][1], ls="", label=n)
               for n in sorted(pairs["predictor_a"].unique())]
    handles += [Line2D([], [], color="0.35", marker="o", ls="", fillstyle=fill[m],
                       label=f"momentum {m:g} ({FILLS[fill[m]]} markers)") for m in momenta]
    handles += [Line2D([], [], color=colour[v], marker="s", ls="", label=f"{key}={v:g}" if isinstance(v, float) else
                       f"{key}={v}") for v in values]
    ax.set(xlabel=xlabel, ylabel=ylabel)
    _readable_limits(ax, "x", pairs["gd_val_error"])
    return handles


def panel_a(ax, pairs: pd.DataFrame, style: dict) -> None:
    """GD validation error (x) against each SVM's (y); points below y=x are SVMs that generalize better."""
    if _titled(ax, "(a) SVM vs GD validation error", pairs):
        return
    handles = _scatter(ax, pairs, style, "svm_val_error", "GD validation error", "SVM validation error")
    _readable_limits(ax, "y", pairs["svm_val_error"])
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    if max(x0, y0) >= min(x1, y1):   # y = x would miss the panel (every SVM far above or below GD): show it
        x0 = y0 = min(x0, y0)
        x1 = y1 = max(x1, y1)
    line, = ax.plot([min(x0, y0), max(x1, y1)], [min(x0, y0), max(x1, y1)], "k--", lw=1, label="y = x")
    ax.set(xlim=(x0, x1), ylim=(y0, y1))
    ax.legend(handles=handles + [line], **BESIDE)


def panel_b(ax, pairs: pd.DataFrame, style: dict) -> None:
    """Inconsistency with the GD network against its error p, next to the uncorrelated 2p(1-p)."""
    if _titled(ax, "(b) inconsistency vs GD validation error", pairs):
        return
    handles = _scatter(ax, pairs, style, "inconsistency", "GD validation error p", "inconsistency with GD")
    lo, hi = pairs["gd_val_error"].min(), pairs["gd_val_error"].max()
    mid, half = (lo + hi) / 2, max((hi - lo) * 0.55, 0.02)   # at least the readable span of the x axis
    p = np.linspace(max(0.0, mid - half), min(1.0, mid + half), 200)
    line, = ax.plot(p, 2 * p * (1 - p), "k--", lw=1, label="2p(1-p), uncorrelated")
    ax.legend(handles=handles + [line], **BESIDE)


def panel_c(ax, best: pd.DataFrame, style: dict) -> None:
    """Bars of the best mean validation error (std over seeds), annotated with the configuration."""
    if _titled(ax, "(c) best configuration per predictor", best):
        return
    y = np.arange(len(best))
    ax.barh(y, best["val_error_mean"], xerr=best["val_error_std"].fillna(0), capsize=3,
            color=[style[s][0] for s in best["series"]], alpha=0.8)
    right = (best["val_error_mean"] + best["val_error_std"].fillna(0))
    for i, r in best.iterrows():   # the configuration in the model's own words, just right of its error bar
        spec = MODELS.get(r["model"])
        text = spec.describe(r) if spec is not None else f"H={r['hidden_units']}, N={r['train_size']}"
        ax.text(right[i] + 0.01 * right.max(), i, text, va="center", ha="left", fontsize=7)
    ax.set_xlim(0, 1.6 * right.max() if right.max() > 0 else 0.01)   # every error 0: keep a visible axis
    ax.set_yticks(y, best["series"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("validation error (mean ± std over seeds)" if (best["n_seeds"] > 1).any() else "validation error")


def panel_d(ax, rows: pd.DataFrame, style: dict, by_k: bool) -> None:
    """Mean validation error against H (log2 axis) or hyperplanes k = log2 C; a line per label (and N), averaged."""
    ax.set_xlabel("hyperplanes k = log2(C)" if by_k else "hidden units H (log2 scale)")
    if _titled(ax, "(d) validation error vs " + ("hyperplanes" if by_k else "hidden units"), rows):
        return
    rows = rows.assign(x=np.log2(rows["contexts"]) if by_k else rows["hidden_units"], series=series(rows))
    one = rows["x"].nunique() == 1   # a single H (one run): no log axis of one point
    if one and not by_k:
        ax.set_xlabel("hidden units H (one value)")
    several_n = rows["train_size"].nunique() > 1
    for (name, n), g in rows.groupby(["series", "train_size"]):
        m = g.groupby("x")["val_error"].mean()
        ax.plot(m.index, m.values, color=style[name][0], marker=style[name][1],
                ls=LINE_STYLES[sorted(rows["train_size"].unique()).index(n) % len(LINE_STYLES)],
                label=f"{name}, N={n}" if several_n else name)
    if by_k:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        if not one:
            ax.set_xscale("log", base=2)
        xs = sorted(rows["x"].unique())
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylabel("mean validation error")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))


def make_figures(errors: pd.DataFrame, incons: pd.DataFrame, title: str | None = None) -> dict[str, Figure]:
    """All five figures (the four panels, then the 2x2 "panels"), keyed by file stem, unsaved."""
    ok, key = usable(errors), pair_key(errors, incons)
    # the inconsistency rows whose SVM and GD network are both usable
    done = ok[key + ["predictor"]].drop_duplicates()
    pairs = incons.merge(done.rename(columns={"predictor": "predictor_a"}), on=key + ["predictor_a"]).merge(
        done.rename(columns={"predictor": "predictor_b"}), on=key + ["predictor_b"])
    style = {s: predictor_style(s) for s in {*series(errors), *errors["predictor"]}}
    # per legend label, the configuration with the lowest mean validation error over seeds
    best = summarize(ok, incons).dropna(subset=["val_error_mean"])
    best["series"] = series(best)
    best = best.loc[best.groupby("series", sort=True)["val_error_mean"].idxmin()].reset_index(drop=True)
    # rows whose model puts hyperplanes k = log2 C, not hidden units, on panel (d)'s x axis
    hyper = ok["model"].map(lambda k: getattr(MODELS.get(k), "figure_axis", "units") == "hyperplanes").astype(bool)
    kinds = [k for k in (False, True) if (hyper == k).any()] or [False]
    draw = {"a": lambda ax: panel_a(ax, pairs, style), "b": lambda ax: panel_b(ax, pairs, style),
            "c": lambda ax: panel_c(ax, best, style),
            "d": lambda ax: panel_d(ax, ok[hyper == kinds[0]], style, kinds[0])}
    figs = {}
    for key in "abc":
        fig = Figure(figsize=(7, 5) if key != "c" else (8, 1.5 + 0.5 * max(len(best), 2)), layout="constrained")
        draw[key](fig.add_subplot())
        figs[NAMES[key]] = fig
    ns = sorted(ok["train_size"].unique()) or [None]
    fig = Figure(figsize=(5 * len(ns), 4 * len(kinds)), layout="constrained")
    axes = fig.subplots(len(kinds), len(ns), squeeze=False)
    for (i, by_k), (j, n) in itertools.product(enumerate(kinds), enumerate(ns)):
        panel_d(axes[i, j], ok[(hyper == by_k) & (ok["train_size"] == n)], style, by_k)
        axes[i, j].set_title(axes[i, j].get_title() + (f", N={n}" if n is not None else ""))
    figs[NAMES["d"]] = fig
    fig = Figure(figsize=(14, 10), layout="constrained")
    axes = fig.subplots(2, 2)
    for ax, key in zip(axes.ravel(), "abcd"):
        draw[key](ax)
    if len(kinds) > 1:
        axes[1, 1].set_title(axes[1, 1].get_title() + f"\n(models by hyperplanes: see {NAMES['d']}.png)", fontsize=10)
    figs["panels"] = fig
    return {stem: _finish(fig, title) for stem, fig in figs.items()}


def _finish(fig: Figure, title: str | None) -> Figure:
    """Tick labels as the values themselves (no '+1e-3' offsets that make a reader add numbers); the title."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            fmt = axis.get_major_formatter()
            if hasattr(fmt, "set_useOffset"):
                fmt.set_useOffset(False)
    if title:
        fig.suptitle(title)
    return fig


def figure_title(errors: pd.DataFrame, out_dir: str | Path) -> str:
    """What the panels show, named: the sweep and its points' count, or the run."""
    points = errors["point"].nunique() if "point" in errors else 0
    return f"sweep {Path(out_dir).name} ({points} points)" if points else f"run {Path(out_dir).name}"


def plot_sweep(errors: pd.DataFrame, incons: pd.DataFrame, out_dir: str | Path, title: str | None = None) -> list[Path]:
    """Write the five PNGs into out_dir/figures/ (and a tracked sweep's training curves); their paths."""
    title = figure_title(errors, out_dir) if title is None else title
    return [save_png(fig, Path(out_dir) / layout.FIGURES / f"{stem}.png")
            for stem, fig in make_figures(errors, incons, title).items()] + plot_sweep_training(out_dir)


# ------------------------------------------------------------ training curves (gbcli.theory)


def gap_slope(metrics: pd.DataFrame, decades: float = SLOPE_DECADES) -> float:
    """Least-squares slope of log(margin gap) against log(step) over the last `decades` of steps
    (paper 004: -1 with loss-normalized steps; about -1/ln t, i.e. near 0, with a constant step)."""
    if "margin_gap" not in metrics:
        return float("nan")
    m = metrics[(metrics["step"] > 0) & (metrics["margin_gap"] > 0)]
    m = m[m["step"] >= m["step"].max() / 10 ** decades]
    if len(m) < 3:
        return float("nan")
    return float(np.polyfit(np.log(m["step"]), np.log(m["margin_gap"]), 1)[0])


def _panel_grid(n: int, height: float) -> tuple[Figure, list]:
    """A figure of `n` panels, three a row (the places left blank), and their axes."""
    ncols = min(n, 3)
    fig = Figure(figsize=(5.2 * ncols, height * -(-n // ncols)), layout="constrained")
    grid = fig.subplots(-(-n // ncols), ncols, squeeze=False).ravel()
    for ax in grid[n:]:
        ax.set_axis_off()
    return fig, grid[:n]


def _finite(runs: dict[str, pd.DataFrame], col: str, log: bool):
    """(index, label, metrics, values, mask) of each run with a finite value of `col` (positive on a log axis)."""
    for i, (label, m) in enumerate(runs.items()):
        y = pd.to_numeric(m[col], errors="coerce") if col in m else pd.Series(dtype=float)
        ok = np.isfinite(y) & ((y > 0) if log else True)
        if ok.any():
            yield i, label, m, y, ok


def training_figure(runs: dict[str, pd.DataFrame], title: str | None = None) -> Figure | None:
    """One panel per tracked metric against the step (log axis), one line per run (None without tracked columns);
    every panel spans the whole logged history, so a quantity defined only late reads as late."""
    cols = [p for p in TRAINING_PANELS if any(p[0] in m and m[p[0]].notna().any() for m in runs.values())]
    if not cols:
        return None
    fig, axes = _panel_grid(len(cols), 4.0)
    runs = {label: m[m["step"] > 0] for label, m in runs.items()}   # step 0 has no place on a log axis
    steps = pd.concat([m["step"] for m in runs.values()])
    first, last = (float(steps.min()), float(steps.max())) if len(steps) else (1.0, 10.0)
    pad = (last / first) ** 0.03 if last > first else 2.0   # matplotlib's usual 3% margin, on a log axis
    for ax, (col, ylabel, scale) in zip(axes, cols):
        values = pd.concat([pd.to_numeric(m[col], errors="coerce") for m in runs.values() if col in m])
        log = scale == "log" and spans_decades(values[values > 0], TRAINING_LOG_DECADES)
        for i, label, m, y, ok in _finite(runs, col, log):
            slope = gap_slope(m) if col == "margin_gap" else float("nan")
            name = f"{label} (slope {slope:.2f})" if np.isfinite(slope) else label
            ax.plot(m["step"][ok], y[ok], color=f"C{i % 10}", ls=RUN_STYLES[i // 10 % 3], label=name, lw=1.4,
                    marker="." if ok.sum() < FEW_POINTS else None)
            if col == "inconsistency":
                ax.plot(m["step"], m["val_error"], color=f"C{i % 10}", ls=":", lw=1, label=f"{label}: GD val error")
        note = late_note(runs, col)   # a quantity defined only late reads as late, and says why
        if note:
            ax.text(0.02, 0.97, note, transform=ax.transAxes, ha="left", va="top", fontsize=7, color="0.3",
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.8", "alpha": 0.9})
        ax.set(xscale="log", xlim=(first / pad, last * pad), yscale="log" if log else "linear", xlabel="step")
        ax.set_title(ylabel, fontsize=9)
        if col == "margin_ratio":
            ax.axhline(1.0, color="k", ls="--", lw=0.8)
            values = np.concatenate([np.asarray(line.get_ydata(), float) for line in ax.get_lines()])   # 1 among them
            values = values[np.isfinite(values)]
            lo, hi = min(values.min(), 0.0), max(values.max(), 1.0)
            ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))   # the whole curve (it may start far below 0)
        readable_log_ticks(ax.xaxis)
        if log:
            readable_log_ticks(ax.yaxis)
    shared = len(runs) > 3 or max(map(len, runs), default=0) > 30
    if shared:   # many runs or long names: one legend under the panels, never over the curves
        handles = [Line2D([], [], color=f"C{i % 10}", ls=RUN_STYLES[i // 10 % 3], lw=1.4, label=label)
                   for i, label in enumerate(runs)]
        if any(c[0] == "inconsistency" for c in cols):
            handles.append(Line2D([], [], color="0.3", ls=":", lw=1, label="dotted: GD val error"))
        longest = max(len(h.get_label()) for h in handles)
        width, height = fig.get_size_inches()
        ncol = max(1, min(len(handles), int(width * 17 // (longest + 6))))   # ~17 characters an inch at 7 pt
        fig.set_size_inches(width, height + 0.17 * -(-len(handles) // ncol) + 0.3)   # the legend's rows below
        fig.legend(handles=handles, loc="outside lower center", fontsize=7, ncol=ncol)
    for ax in axes:
        if ax.get_lines() and not shared:
            ax.legend(fontsize=7)
    return _finish(fig, title)


def late_note(runs: dict[str, pd.DataFrame], col: str) -> str:
    """A panel's note when `col` has no value in every run's first rows: from which step, how many, why ("" else)."""
    firsts, counts, starts = [], 0, []
    for m in runs.values():
        if col not in m or not len(m):
            continue
        ok = np.isfinite(pd.to_numeric(m[col], errors="coerce").to_numpy(float))
        starts.append(float(m["step"].iloc[0]))
        if ok.any():
            firsts.append(float(m["step"][ok].iloc[0]))
            counts += int(ok.sum())
    if not firsts or min(firsts) <= min(starts):
        return ""
    why = UNDEFINED_BEFORE.get(col, "no value logged before (NaN)")
    return f"values from step {min(firsts):,.0f} only ({counts} logged):\n{why}"


def short_value(v, width: int = 40) -> str:
    """A config value for a legend: floats to 4 significant digits, at most `width` characters."""
    text = (f"{v:.4g}" if isinstance(v, float) else "[" + ", ".join(short_value(x, width) for x in v) + "]"
            if isinstance(v, (list, tuple)) else str(v))
    return text if len(text) <= width else text[:width - 1] + "…"


def plot_run_training(run_dir: str | Path) -> Path | None:
    """`figures/training.png` of a run whose gd/metrics.csv has tracked columns (else nothing)."""
    path = RunDir(run_dir).metrics
    if not path.is_file():
        return None
    fig = training_figure({Path(run_dir).name: read_metrics(path)}, title=str(run_dir))
    return None if fig is None else save_png(fig, RunDir(run_dir).figures / "training.png")


def _sortable(v) -> tuple:
    """A config value as a sort key: numbers by value, before anything else by its text."""
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, str(v))


def _naming_keys(varied: list[str], runs: dict) -> list[str]:
    """The fewest varied keys that tell the points apart, the step rule and the descent first."""
    order = sorted(varied, key=lambda k: k not in ("training.step_rule", "training.descent"))
    seen = lambda ks: len({tuple(repr(c.get(x)) for x in ks) for _, c in runs.values()})  # noqa: E731
    keys: list[str] = []
    for k in order:
        if seen(keys + [k]) > seen(keys):
            keys.append(k)
        if seen(keys) == len(runs):
            break
    return keys


def _sweep_runs(out_dir: Path, keep=lambda m: True) -> tuple[dict[str, tuple[pd.DataFrame, dict]], list[str]]:
    """Each point's metrics (those `keep` takes) and flat config, by id: the points of points.csv, else all; and
    the config keys whose values differ between them (sorted)."""
    grid = {str(r["point"]) for r in sweep_points(out_dir)}
    runs = {}
    for p, point in SweepView(out_dir).points(layout.METRICS).items():
        m = read_metrics(point.dir.metrics) if (not grid or p in grid) and is_file(point.dir.metrics) else None
        if m is not None and keep(m):
            config = point.config()
            if config is None:
                raise GbError(f"{point.dir.gd_config}: not a readable gb config; rerun the stage")
            runs[p] = (m, flatten(config))
    keys = sorted({k for _, c in runs.values() for k in c} - {"name", "output.dir"})
    return runs, [k for k in keys if len({repr(c.get(k)) for _, c in runs.values()}) > 1]


def plot_sweep_training(out_dir: str | Path) -> list[Path]:
    """A tracked sweep's `figures/training.png`, `tables/training.csv` (all rows) and `tables/training_summary.csv`
    (last row, margin-gap slope), each point labelled by the config values that differ between them."""
    out_dir, tracked = Path(out_dir), [c for ins in INSTRUMENTS.values() for c in ins.columns]
    runs, varied = _sweep_runs(out_dir, lambda m: len(m) and any(c in m for c in tracked))
    if not runs:
        return []
    naming = _naming_keys(varied, runs)   # once, not once a point
    label = {p: ", ".join(f"{k.split('.')[-1]}={short_value(c.get(k))}" for k in naming) or p
             for p, (_, c) in runs.items()}
    summary = []
    for p, (m, cfg) in runs.items():
        last = m.iloc[-1]
        summary.append({"point": p, "run": label[p], **{k: cfg.get(k) for k in varied}, "steps": int(last["step"]),
                        "val_error": last["val_error"], "normalized_margin": last["normalized_margin"],
                        **{c: last[c] for c in tracked if c in m}, "gap_slope": gap_slope(m)})
    sweep = SweepDir(out_dir)
    write_csv(sweep.tables / "training.csv",
              pd.concat([m.assign(point=p, run=label[p]) for p, (m, _) in runs.items()], ignore_index=True))
    write_csv(sweep.tables / "training_summary.csv", pd.DataFrame(summary))
    fig = training_figure({label[p]: m for p, (m, _) in runs.items()}, title=out_dir.name)
    return [save_png(fig, sweep.figures / "training.png")]


# ------------------------------------------------------------ training curves of every run (`gb plot`)


def curves_figure(runs: dict[str, pd.DataFrame], title: str | None = None,
                  styles: dict[str, str] | None = None) -> Figure | None:
    """Loss, errors and every tracked instrument's column against the step, one line per run in the order
    given, `styles` its line style; None when no run has a logged row. Several runs: one legend, at right."""
    styles = styles or {}
    runs = {k: m for k, m in runs.items() if "step" in m and len(m)}
    if not runs:
        return None
    panels = list(dict.fromkeys(p for p in (*BASIC_CURVES, *TRAINING_PANELS) if any(
        p[0] in m and pd.to_numeric(m[p[0]], errors="coerce").notna().any() for m in runs.values())))
    if not panels:
        return None
    fig, grid = _panel_grid(len(panels), 3.8)
    many = len(runs) > MAX_LABELLED
    for ax, (col, label, scale) in zip(grid, panels):
        if scale == "auto":   # log when the values are positive and span more than two decades
            values = pd.concat([pd.to_numeric(m[col], errors="coerce") for m in runs.values() if col in m])
            scale = "log" if spans_decades(values, 2) else "linear"
        stacked = []
        for i, name, m, y, ok in _finite(runs, col, scale == "log"):
            if many:
                ax.plot(m["step"][ok], y[ok], color="0.6", lw=0.6, alpha=0.5)
                stacked.append(pd.Series(y[ok].values, index=m["step"][ok].values))
            else:
                ax.plot(m["step"][ok], y[ok], color=f"C{i % 10}", lw=1.4, label=name, ls=styles.get(name, "-"),
                        marker="." if ok.sum() < 5 else None)
        if many and stacked:
            mean = pd.concat(stacked, axis=1).mean(axis=1).sort_index()
            ax.plot(mean.index, mean.values, color="C3", lw=1.8, label=f"mean of {len(stacked)} points")
        ax.set(title=label, xlabel="step")
        if scale == "log":
            ax.set_yscale("log")
            readable_log_ticks(ax.yaxis)
    if len(runs) > 1:   # one legend for every panel, in the runs' order, beside the curves (never over them)
        handles: dict = {}
        for ax in grid:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(lab, h)
        order = [lab for lab in dict.fromkeys([*runs, *handles]) if lab in handles]
        if order:
            fig.legend([handles[lab] for lab in order], order, loc="outside right upper", fontsize=7)
    return _finish(fig, title)


def sweep_curves(out_dir: Path) -> tuple[Figure | None, dict[str, pd.DataFrame], dict[str, str]]:
    """A sweep's training curves (one line per point in the grid's order, line style by momentum when it
    varies), each point's metrics and its label (what tells it apart); (None, {}, {}) without metrics."""
    runs, varied = _sweep_runs(out_dir)
    if not runs:
        return None, {}, {}
    grid = [str(r["point"]) for r in sweep_points(out_dir)]   # the grid's order (tables/points.csv)
    axes = list(grid_axes(out_dir))
    naming = _naming_keys([k for k in axes if k in varied] + [k for k in _naming_keys(varied, runs) if k not in axes],
                          runs)
    runs = dict(sorted(runs.items(), key=lambda kv: (grid.index(kv[0]) if kv[0] in grid else len(grid),
                                                     tuple(_sortable(kv[1][1].get(k)) for k in naming))))
    label = {p: ", ".join(f"{k.split('.')[-1]}={c.get(k)}" for k in naming) or p for p, (_, c) in runs.items()}
    momenta = list(dict.fromkeys(c.get("training.momentum") for _, c in runs.values()))
    styles = {label[p]: LINE_STYLES[momenta.index(c.get("training.momentum")) % len(LINE_STYLES)]
              for p, (_, c) in runs.items()} if len(momenta) > 1 else {}
    fig = curves_figure({label[p]: m for p, (m, _) in runs.items()},
                        title=f"sweep {out_dir.name}: training curves of its {len(runs)} points"
                              + (" (line style: momentum)" if styles else ""), styles=styles)
    return fig, {p: m for p, (m, _) in runs.items()}, label


def plot_curves(out_dir: str | Path, per_point: bool = False) -> list[Path]:
    """`figures/curves.png` of a run or of a sweep (every point's); with `per_point`, each point's own too."""
    out_dir = Path(out_dir)
    run = RunDir(out_dir)
    if run.metrics.is_file():
        said = headline(out_dir)
        figs = [(run, curves_figure({out_dir.name: read_metrics(run.metrics)},
                                    title=f"{out_dir}" + (f"\n{said}" if said else "")))]
    else:
        fig, runs, label = sweep_curves(out_dir)
        title = {p: f"{out_dir.name}/{layout.POINTS}/{p}: {label[p]}" for p in runs}
        points = ((SweepDir(out_dir).point(p), curves_figure({label[p]: m}, title=title[p]))
                  for p, m in runs.items() if per_point)
        figs = itertools.chain([(run, fig)], points)   # drawn and written one at a time
    return [save_png(fig, d.figures / "curves.png") for d, fig in figs if fig is not None]
