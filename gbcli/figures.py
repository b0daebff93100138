"""The four figure panels of a sweep (protocol section 8), drawn from its aggregated tables.

(a) each SVM's validation error against the GD network's; (b) inconsistency against GD error,
with the 2p(1-p) expected of an uncorrelated predictor; (c) the best configuration of every
predictor; (d) validation error against hidden units H (hyperplanes k for the shallow model).
Only usable results are drawn: GD rows with status ok, SVM rows optimal or inaccurate.
Figures are plain matplotlib Figure objects rendered with Agg, so no display is needed.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from .io import atomic_write_bytes
from .tables import USABLE_STATUSES, pair_key, summarize

NAMES = {"a": "a_gd_vs_svm_error", "b": "b_inconsistency_vs_gd_error", "c": "c_best_configuration",
         "d": "d_error_vs_units"}
MARKERS = "osD^v<>ph*"


def usable(errors: pd.DataFrame) -> pd.DataFrame:
    """Rows to plot: GD networks that trained (ok), programs solved (optimal or inaccurate)."""
    gd = errors["predictor"].str.startswith("gd-")
    return errors[(gd & (errors["status"] == "ok")) | (~gd & errors["status"].isin(USABLE_STATUSES[1:]))]


def series(frame: pd.DataFrame) -> pd.Series:
    """Legend label of every row: the predictor, with the momentum for GD ("gd-gln (momentum 0.9)")."""
    gd = frame["predictor"].str.startswith("gd-")
    mom = frame["momentum"].map(lambda m: f" (momentum {m:g})")
    return frame["predictor"].where(~gd, frame["predictor"] + mom)


def usable_pairs(errors: pd.DataFrame, incons: pd.DataFrame) -> pd.DataFrame:
    """Inconsistency rows whose SVM and GD network are both usable."""
    key = pair_key(errors, incons)
    ok = usable(errors)[key + ["predictor"]].drop_duplicates()
    pairs = incons.merge(ok.rename(columns={"predictor": "predictor_a"}), on=key + ["predictor_a"])
    return pairs.merge(ok.rename(columns={"predictor": "predictor_b"}), on=key + ["predictor_b"])


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no usable results for {what}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _style(labels) -> dict:
    """One colour and marker per legend label, stable across panels."""
    return {s: (f"C{i % 10}", MARKERS[i % len(MARKERS)]) for i, s in enumerate(sorted(set(labels)))}


def _scatter(ax, pairs: pd.DataFrame, style: dict, y: str) -> None:
    for name, g in pairs.groupby("predictor_a"):
        ax.scatter(g["gd_val_error"], g[y], c=style[name][0], marker=style[name][1], label=name, alpha=0.75, s=22)


def panel_a(ax, pairs: pd.DataFrame, style: dict) -> None:
    """GD validation error (x) against each SVM's (y); points below y=x are SVMs that generalize better."""
    ax.set_title("(a) SVM vs GD validation error")
    if pairs.empty:
        return _no_data(ax, "panel (a)")
    _scatter(ax, pairs, style, "svm_val_error")
    lo = min(pairs["gd_val_error"].min(), pairs["svm_val_error"].min())
    hi = max(pairs["gd_val_error"].max(), pairs["svm_val_error"].max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
    ax.set_xlabel("GD validation error")
    ax.set_ylabel("SVM validation error")
    ax.legend(fontsize=8)


def panel_b(ax, pairs: pd.DataFrame, style: dict) -> None:
    """Inconsistency with the GD network against its error p, next to the uncorrelated 2p(1-p)."""
    ax.set_title("(b) inconsistency vs GD validation error")
    if pairs.empty:
        return _no_data(ax, "panel (b)")
    _scatter(ax, pairs, style, "inconsistency")
    lo, hi = pairs["gd_val_error"].min(), pairs["gd_val_error"].max()
    p = np.linspace(lo - 0.05 * (hi - lo + 1e-3), hi + 0.05 * (hi - lo + 1e-3), 200)
    ax.plot(p, 2 * p * (1 - p), "k--", lw=1, label="2p(1-p), uncorrelated")
    ax.set_xlabel("GD validation error p")
    ax.set_ylabel("inconsistency with GD")
    ax.legend(fontsize=8)


def best_configurations(errors: pd.DataFrame, incons: pd.DataFrame) -> pd.DataFrame:
    """Per legend label, the configuration with the lowest mean validation error over seeds."""
    s = summarize(usable(errors), incons).dropna(subset=["val_error_mean"])
    s["series"] = series(s)
    return s.loc[s.groupby("series", sort=True)["val_error_mean"].idxmin()].reset_index(drop=True)


def _config_text(r) -> str:
    units = (f"k={int(np.log2(r['contexts']))}" if r["model"] == "shallow"
             else f"H={r['hidden_units']}, C={r['contexts']}")
    return f"{units}, N={r['train_size']}, median_init={r['median_init']}"


def panel_c(ax, best: pd.DataFrame, style: dict) -> None:
    """Bars of the best mean validation error (std over seeds), annotated with the configuration."""
    ax.set_title("(c) best configuration per predictor")
    if best.empty:
        return _no_data(ax, "panel (c)")
    y = np.arange(len(best))
    ax.barh(y, best["val_error_mean"], xerr=best["val_error_std"].fillna(0), capsize=3,
            color=[style[s][0] for s in best["series"]], alpha=0.8)
    right = (best["val_error_mean"] + best["val_error_std"].fillna(0))
    for i, r in best.iterrows():   # the configuration, just right of its error bar
        ax.text(right[i] + 0.01 * right.max(), i, _config_text(r), va="center", ha="left", fontsize=7)
    ax.set_xlim(0, 1.6 * right.max())
    ax.set_yticks(y, best["series"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("validation error (mean ± std over seeds)")


def panel_d(ax, rows: pd.DataFrame, style: dict, shallow: bool) -> None:
    """Mean validation error against H (log2 axis), or hyperplanes k = log2 C for the shallow model.

    One line per legend label (and per N when `rows` holds several); other settings are averaged.
    """
    ax.set_title("(d) validation error vs " + ("hyperplanes" if shallow else "hidden units"))
    ax.set_xlabel("hyperplanes k = log2(C)" if shallow else "hidden units H (log2 scale)")
    if rows.empty:
        return _no_data(ax, "panel (d)")
    rows = rows.assign(x=np.log2(rows["contexts"]) if shallow else rows["hidden_units"], series=series(rows))
    several_n = rows["train_size"].nunique() > 1
    for j, ((name, n), g) in enumerate(rows.groupby(["series", "train_size"])):
        m = g.groupby("x")["val_error"].mean()
        ax.plot(m.index, m.values, color=style[name][0], marker=style[name][1],
                ls=["-", "--", ":", "-."][sorted(rows["train_size"].unique()).index(n) % 4],
                label=f"{name}, N={n}" if several_n else name)
    if shallow:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(rows["x"].unique()), [f"{x:g}" for x in sorted(rows["x"].unique())])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylabel("mean validation error")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))


def make_figures(errors: pd.DataFrame, incons: pd.DataFrame, title: str | None = None) -> dict[str, Figure]:
    """All five figures (the four panels, then the 2x2 "panels"), keyed by file stem, unsaved."""
    ok, pairs = usable(errors), usable_pairs(errors, incons)
    style = _style(list(series(errors)) + list(errors["predictor"]))
    best = best_configurations(errors, incons)
    kinds = [k for k in (False, True) if ((ok["model"] == "shallow") == k).any()] or [False]
    figs = {}
    for key, draw in (("a", lambda ax: panel_a(ax, pairs, style)), ("b", lambda ax: panel_b(ax, pairs, style)),
                      ("c", lambda ax: panel_c(ax, best, style))):
        fig = Figure(figsize=(7, 5) if key != "c" else (8, 1.5 + 0.5 * max(len(best), 2)), layout="constrained")
        draw(fig.add_subplot())
        figs[NAMES[key]] = fig
    ns = sorted(ok["train_size"].unique()) or [None]
    fig = Figure(figsize=(5 * len(ns), 4 * len(kinds)), layout="constrained")
    axes = fig.subplots(len(kinds), len(ns), squeeze=False)
    for i, shallow in enumerate(kinds):
        for j, n in enumerate(ns):
            panel_d(axes[i, j], ok[((ok["model"] == "shallow") == shallow) & (ok["train_size"] == n)], style, shallow)
            axes[i, j].set_title(axes[i, j].get_title() + (f", N={n}" if n is not None else ""))
    figs[NAMES["d"]] = fig
    fig = Figure(figsize=(14, 10), layout="constrained")
    axes = fig.subplots(2, 2)
    panel_a(axes[0, 0], pairs, style)
    panel_b(axes[0, 1], pairs, style)
    panel_c(axes[1, 0], best, style)
    panel_d(axes[1, 1], ok[(ok["model"] == "shallow") == kinds[0]], style, kinds[0])
    if len(kinds) > 1:
        axes[1, 1].set_title(axes[1, 1].get_title() + f"\n(shallow model: see {NAMES['d']}.png)", fontsize=10)
    figs["panels"] = fig
    if title:
        for fig in figs.values():
            fig.suptitle(title)
    return figs


def plot_sweep(errors: pd.DataFrame, incons: pd.DataFrame, out_dir: str | Path, title: str | None = None) -> list[Path]:
    """Write the five PNGs into out_dir/figures/ atomically; return their paths."""
    paths = []
    for stem, fig in make_figures(errors, incons, title).items():
        FigureCanvasAgg(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120)
        path = Path(out_dir) / "figures" / f"{stem}.png"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
