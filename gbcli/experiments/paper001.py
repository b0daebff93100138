"""Paper 001 (min-norm / rank-two bias of ReLU nets on orthogonally separable data): the instruments
`rank`, `alignment` (neurons against svm-pos / svm-neg, `gd/neurons.csv`) and, for the deeper nets of
section 5.2 and appendix D (`matrices()`, `row_weights()`), `layer_rank`, `closest_alignment` and
`features`; their sweep reports; and the sweep reports' shared readers and writers (`point_frames`,
`stacked`, `write_table`, `save_figure`), which the other papers' modules use. The balanced init and
the programs live with the models (`gbcli.models.relu`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from gbcli.instruments.base import Instrument, TrackContext, as_numpy, first_layer
from gbcli.fs.safe import read_csv_untrusted, write_csv
from gbcli.reports.render import readable_log_ticks, save_png
from gbcli.fs import layout
from gbcli.fs.layout import SweepDir
from gbcli.store.views import point_names

RANK_TOL = 0.05   # numerical rank: singular values above 5% of the largest


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of a with b (0 for a zero row)."""
    na = np.linalg.norm(a, axis=-1) * np.linalg.norm(b)
    return np.divide(a @ b, na, out=np.zeros(a.shape[:-1]), where=na > 0)


def rank_measures(w1: np.ndarray) -> dict:
    """Singular values of the first layer and its numerical rank."""
    s = np.linalg.svd(w1, compute_uv=False)
    s3 = np.pad(s, (0, max(0, 3 - len(s))))[:3]
    return {"sv1": s3[0], "sv2": s3[1], "sv3": s3[2], "sv3_ratio": s3[2] / s[0] if s[0] > 0 else float("nan"),
            "numerical_rank": int((s > RANK_TOL * s[0]).sum())}


class Rank(Instrument):
    name = "rank"
    description = "singular values of the first layer"
    columns = ("sv1", "sv2", "sv3", "sv3_ratio", "numerical_rank")
    panels = (("sv3_ratio", "rank: s3 / s1 of the first layer", "log"),)

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return rank_measures(first_layer(model))


class Alignment(Instrument):
    name = "alignment"
    description = "neurons against svm-pos / svm-neg"
    columns = ("align_median", "align_above_090", "mean_align_median", "mean_align_above_090")
    panels = (("align_median", "median cosine of neurons with w+ / w- (svm-pos / svm-neg)", "linear"),
              ("mean_align_median", "median cosine of neurons with the class means", "linear"))

    def setup(self, tracker, context: TrackContext) -> dict:
        """w+ (svm-pos), w- (svm-neg), mu+, mu- in `tracker.references`; objectives and cos(w+-, mu+-) returned."""
        ds, refs, info = context.problem.dataset, {}, {}
        for obj, key, s in (("svm-pos", "pos", 1.0), ("svm-neg", "neg", -1.0)):
            _, sol = context.solve(obj)
            refs[f"w_{key}"], refs[f"mean_{key}"] = sol.zeta[0], ds.x_train[ds.y_train == s].mean(0)
            info[f"{obj}_objective"] = sol.value
            info[f"cos_w_{key}_mean_{key}"] = float(refs[f"w_{key}"] @ refs[f"mean_{key}"] / (
                np.linalg.norm(refs[f"w_{key}"]) * np.linalg.norm(refs[f"mean_{key}"])))
        tracker.references = refs
        return info

    def table(self, tracker, model) -> pd.DataFrame:
        """Per neuron: output weight a_j, ||w_j||, cosine with w+ or w- by the sign of a_j, and with mu+ / mu-."""
        w1, a, refs = first_layer(model), as_numpy(model.w2)[0], tracker.references
        pos = a > 0
        return pd.DataFrame({"neuron": np.arange(len(a)), "a": a, "w_norm": np.linalg.norm(w1, axis=1),
                             "align": np.where(pos, _cos(w1, refs["w_pos"]), _cos(w1, refs["w_neg"])),
                             "mean_align": np.where(pos, _cos(w1, refs["mean_pos"]), _cos(w1, refs["mean_neg"]))})

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        table = self.table(tracker, model)
        return {"align_median": float(table["align"].median()), "align_above_090": float((table["align"] > 0.9).mean()),
                "mean_align_median": float(table["mean_align"].median()),
                "mean_align_above_090": float((table["mean_align"] > 0.9).mean())}

    def final_tables(self, tracker, model):
        return {"neurons": self.table(tracker, model)}


TOP_SINGULAR = 10   # the paper's figures show the top 10 singular values of each matrix


class LayerRank(Instrument):
    name = "layer_rank"
    description = "singular values of every weight matrix of a deeper net"
    columns = ("max_sv3_ratio", "max_numerical_rank")
    needs_homogeneous = False
    panels = (("max_sv3_ratio", "layer_rank: largest s3 / s1 over the weight matrices", "log"),)

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        ranks = [rank_measures(as_numpy(w)) for w in model.matrices().values()]
        return {"max_sv3_ratio": max(r["sv3_ratio"] for r in ranks),
                "max_numerical_rank": max(r["numerical_rank"] for r in ranks)}

    def final_tables(self, tracker, model):
        """Per weight matrix: its top singular values (s_k / s_1 beside them) and its rows projected on its
        top two right singular directions (with each row's norm and output weight, NaN when none)."""
        outs = model.row_weights() if hasattr(model, "row_weights") else {}
        svs, rows = [], []
        for name, w in model.matrices().items():
            w = as_numpy(w)
            _, s, vt = np.linalg.svd(w, full_matrices=False)
            k = min(TOP_SINGULAR, len(s))
            svs.append(pd.DataFrame({"matrix": name, "index": np.arange(1, k + 1), "singular_value": s[:k],
                                     "ratio": s[:k] / s[0] if s[0] > 0 else np.nan}))
            proj = w @ vt[:2].T if len(s) > 1 else np.hstack([w @ vt[:1].T, np.zeros((len(w), 1))])
            rows.append(pd.DataFrame({"matrix": name, "row": np.arange(len(w)), "p1": proj[:, 0], "p2": proj[:, 1],
                                      "norm": np.linalg.norm(w, axis=1),
                                      "out_weight": as_numpy(outs[name]) if name in outs else np.nan}))
        return {"singular_values": pd.concat(svs, ignore_index=True), "rows": pd.concat(rows, ignore_index=True)}


class ClosestAlignment(Alignment):
    name = "closest_alignment"
    description = "first-layer neurons against the closer of svm-pos / svm-neg"
    columns = ("closest_align_median", "closest_align_above_090", "closest_mean_align_median",
               "closest_mean_align_above_090")
    needs_homogeneous = False
    panels = (("closest_align_median", "median cosine of first-layer neurons with the closer of w+ / w-", "linear"),
              ("closest_mean_align_median", "median cosine of first-layer neurons with the closer class mean",
               "linear"))

    def table(self, tracker, model) -> pd.DataFrame:
        """Per first-layer neuron: cosine with the closer of w+ / w- (which one), and with the closer
        class mean (a residual net's first layer has no output weight whose sign would pick one)."""
        w1, refs = as_numpy(next(iter(model.matrices().values()))), tracker.references
        cp, cn = _cos(w1, refs["w_pos"]), _cos(w1, refs["w_neg"])
        return pd.DataFrame({"neuron": np.arange(len(w1)), "w_norm": np.linalg.norm(w1, axis=1),
                             "closest": np.where(cp >= cn, "w+", "w-"), "align": np.maximum(cp, cn),
                             "mean_align": np.maximum(_cos(w1, refs["mean_pos"]), _cos(w1, refs["mean_neg"]))})

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return {f"closest_{k}": v for k, v in super().measure(tracker, model, x, y, ctx, margins, val_out).items()}


FEATURE_SAMPLE = 300   # training points per class whose features are compared (all pairs)
PAIRS = ("across", "within+", "within-")
PAIR_LABELS = {"across": "across the classes", "within+": "within class +1", "within-": "within class -1"}


def pair_products(f: np.ndarray, pos: np.ndarray) -> dict[str, np.ndarray]:
    """Inner products f_i . f_j over the pairs across the classes and within each class (i < j)."""
    g = f @ f.T
    a, b = np.where(pos)[0], np.where(~pos)[0]
    iu = lambda idx: g[np.ix_(idx, idx)][np.triu_indices(len(idx), 1)]
    return {"across": g[np.ix_(a, b)].ravel(), "within+": iu(a), "within-": iu(b)}


class Features(Instrument):
    """Appendix D's Figure 3: are the learned features orthogonally separable? After the ReLU and, where
    the model offers them, before it (`_pre`): after a ReLU across-class products can only reach 0."""

    name = "features"
    description = "inner products of learned features within and across classes (after and before the ReLU)"
    columns = ("feat_within_pos", "feat_across_nonpos", "feat_within_pos_pre", "feat_across_nonpos_pre")
    needs_homogeneous = False
    panels = (("feat_across_nonpos", "features: fraction of cross-class pairs with f_i.f_j <= 0 (last hidden layer)",
               "linear"),
              ("feat_across_nonpos_pre", "pre-activations: fraction of cross-class pairs with f_i.f_j <= 0 "
                                         "(last hidden layer)", "linear"))

    def setup(self, tracker, context):
        ds = context.problem.dataset
        rng = np.random.default_rng(0)
        idx = np.concatenate([rng.permutation(np.where(ds.y_train == s)[0])[:FEATURE_SAMPLE] for s in (1.0, -1.0)])
        tracker.feature_points = (ds.x_train[idx], ds.y_train[idx] > 0)
        return {"feature_points": len(idx)}

    def _features(self, tracker, model, pre: bool = False) -> tuple[list[torch.Tensor], np.ndarray]:
        x, pos = tracker.feature_points
        p = next(model.parameters())
        with torch.no_grad():
            return model.features(torch.tensor(x, dtype=p.dtype, device=p.device), pre=pre), pos

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        row = {}   # the fractions of pairs on the orthogonally separable side: within-class > 0, across <= 0
        for pre, suffix in ((False, ""), (True, "_pre")):
            feats, pos = self._features(tracker, model, pre)
            prod = pair_products(as_numpy(feats[-1]), pos)
            row[f"feat_within_pos{suffix}"] = float(np.mean(np.concatenate([prod["within+"], prod["within-"]]) > 0))
            row[f"feat_across_nonpos{suffix}"] = float(np.mean(prod["across"] <= 0))
        return row

    def final_tables(self, tracker, model):
        """`features`: per layer (0: the input), activation (post / pre ReLU) and pair type, the inner
        products' quantiles and signs; `feature_hist`: their histograms on one grid per layer."""
        stats, hists = [], []
        for act in ("post", "pre"):
            feats, pos = self._features(tracker, model, act == "pre")
            for layer, f in enumerate(feats):
                if act == "pre" and layer == 0:
                    continue   # the input has no ReLU
                prod = pair_products(as_numpy(f), pos)
                lo, hi = min(v.min() for v in prod.values()), max(v.max() for v in prod.values())
                edges = np.linspace(lo, hi if hi > lo else lo + 1, 61)
                for pair, v in prod.items():
                    q = np.quantile(v, [0.05, 0.5, 0.95])
                    stats.append({"layer": layer, "activation": act, "pair": pair, "pairs": len(v), "mean": v.mean(),
                                  "q05": q[0], "median": q[1], "q95": q[2], "frac_pos": float((v > 0).mean()),
                                  "frac_nonpos": float((v <= 0).mean())})
                    counts, _ = np.histogram(v, edges)
                    hists.append(pd.DataFrame({"layer": layer, "activation": act, "pair": pair, "lo": edges[:-1],
                                               "hi": edges[1:], "count": counts}))
        return {"features": pd.DataFrame(stats), "feature_hist": pd.concat(hists, ignore_index=True)}


INSTRUMENTS = {i.name: i for i in (Rank(), Alignment(), LayerRank(), ClosestAlignment(), Features())}


def point_frames(out_dir: str | Path, name: str) -> dict[str, pd.DataFrame]:
    """Each point's table `gd/<name>`, by point id (in id order)."""
    return {p: read_csv_untrusted(f) for p, f in SweepDir(out_dir).gd_files(name).items()}


def stacked(out_dir: str | Path, name: str) -> pd.DataFrame | None:
    """Every point's `gd/<name>` in one table with a `point` column; None when no point has one."""
    frames = [t.assign(point=p) for p, t in point_frames(out_dir, name).items()]
    return pd.concat(frames, ignore_index=True) if frames else None


def write_table(out_dir: str | Path, name: str, table: pd.DataFrame) -> Path:
    path = Path(out_dir) / layout.TABLES / f"{name}.csv"
    write_csv(path, table)
    return path


def new_figure(figsize, rows: int = 1, cols: int = 1, **options):
    """A constrained-layout Figure and its `rows` x `cols` axes (`Figure.subplots` with `options`)."""
    from matplotlib.figure import Figure   # loaded when a report draws, not with every command

    fig = Figure(layout="constrained", figsize=figsize)
    return fig, fig.subplots(rows, cols, **options)


def save_figure(fig, out_dir: str | Path, name: str, **options) -> list[Path]:
    return [save_png(fig, Path(out_dir) / layout.FIGURES / f"{name}.png", **options)]


def in_sweep_order(points, names: dict[str, str]) -> list[str]:
    """The distinct point ids of `points` in the grid's order (`names`), the others after them."""
    order = {p: i for i, p in enumerate(names)}
    return sorted(dict.fromkeys(points), key=lambda p: order.get(p, len(order)))


def plot_sweep_neurons(out_dir: str | Path) -> list[Path]:
    """`tables/neurons.csv` (every point's final per-neuron cosines) and `figures/neurons.png` (their
    histograms per point) for a sweep tracking `alignment` or `closest_alignment`."""
    table = stacked(out_dir, "neurons.csv")
    if table is None:
        return []
    write_table(out_dir, "neurons", table)
    names = point_names(out_dir)
    points = in_sweep_order(table["point"], names)
    closest = "closest" in table and table["closest"].notna().any()
    ref = "the closer of w+ / w-" if closest else "w+ / w-"
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_figure((4.6 * len(points), 3.8), 1, len(points), squeeze=False)
    bins = np.linspace(min(0.8, float(table[["align", "mean_align"]].min().min())), 1.0, 41)
    for ax, p in zip(axes[0], points):
        t = table[table["point"] == p]
        ax.hist(t["align"], bins=bins, alpha=0.6, label=f"with {ref} (svm-pos / svm-neg), median {t['align'].median():.3f}")
        ax.hist(t["mean_align"], bins=bins, alpha=0.6,
                label=f"with the {'closer ' if closest else ''}class mean, median {t['mean_align'].median():.3f}")
        ax.axvline(0.9, color="k", ls="--", lw=0.8, label="cosine 0.9")
        ax.set_title(names.get(p, p), fontsize=8)
        ax.set_xlabel("cosine of neuron w_j with its reference")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))   # counts of neurons
        ax.legend(fontsize=7, loc="upper left")
    axes[0, 0].set_ylabel("neurons")
    what = ("the closer of w+ / w- and with the closer class mean" if closest else
            "w+ / w- (by the sign of the output weight a_j) and with that class's mean")
    fig.suptitle(f"first-layer neurons at the end of training: cosine with {what}", fontsize=9)
    return save_figure(fig, out_dir, "neurons")


def plot_sweep_layers(out_dir: str | Path) -> list[Path]:
    """`tables/singular_values.csv`, `tables/rows.csv` and `figures/layers.png` (the paper's Figures 1-2
    and 4: per point and matrix, s_k / s_1 and the rows projected on the top two singular directions)."""
    sv, rows = stacked(out_dir, "singular_values.csv"), stacked(out_dir, "rows.csv")
    if sv is None or rows is None:
        return []
    write_table(out_dir, "singular_values", sv)
    write_table(out_dir, "rows", rows)
    names = point_names(out_dir)
    points = in_sweep_order(sv["point"], names)
    mats = list(dict.fromkeys(sv["matrix"]))
    fig, axes = new_figure((3.4 * 2 * len(mats), 3.2 * len(points) + 0.4), len(points), 2 * len(mats), squeeze=False)
    for i, p in enumerate(points):
        for j, m in enumerate(mats):
            s = sv[(sv["point"] == p) & (sv["matrix"] == m)]
            ax = axes[i, 2 * j]
            ax.semilogy(s["index"], s["ratio"], "o")
            ax.set(title=f"{names.get(p, p)}\n{m}: top singular values", xlabel="k", ylabel="s_k / s_1")
            ax.title.set_fontsize(9)
            readable_log_ticks(ax.yaxis)
            r = rows[(rows["point"] == p) & (rows["matrix"] == m)]
            ax = axes[i, 2 * j + 1]
            if r["out_weight"].notna().any():
                for sign, c, lab in ((1, "C1", "row's output weight > 0"), (-1, "C0", "row's output weight < 0")):
                    q = r[np.sign(r["out_weight"]) == sign]
                    ax.scatter(q["p1"], q["p2"], s=8, color=c, label=lab)
            else:
                ax.scatter(r["p1"], r["p2"], s=8)
            ax.axhline(0, color="k", lw=0.5)
            ax.axvline(0, color="k", lw=0.5)
            ax.set(title=f"{names.get(p, p)}\n{m}: rows projected", xlabel="on singular direction 1", ylabel="on direction 2")
            ax.title.set_fontsize(9)
    fig.suptitle("weight matrices at the end of training:\ntop singular values s_k / s_1, and each row projected on "
                 "the top two right singular directions", fontsize=9)
    handles, labels = next((h for h in (ax.get_legend_handles_labels() for ax in axes.flat) if h[0]), ([], []))
    if handles:   # one legend for every panel of projected rows, below them: none covers a row
        fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8)
    return save_figure(fig, out_dir, "layers")


def plot_sweep_features(out_dir: str | Path) -> list[Path]:
    """`tables/features.csv` and `figures/features.png` (appendix D's Figure 3) for a sweep tracking `features`."""
    stats, hist = stacked(out_dir, "features.csv"), stacked(out_dir, "feature_hist.csv")
    if stats is None or hist is None:
        return []
    write_table(out_dir, "features", stats)
    names = point_names(out_dir)
    rows = [(p, act) for p in in_sweep_order(hist["point"], names) for act in ("post", "pre")
            if ((hist["point"] == p) & (hist["activation"] == act)).any()]
    layers = sorted(hist["layer"].unique())
    from matplotlib.ticker import MaxNLocator

    fig, axes = new_figure((3.0 * len(layers), 2.6 * len(rows) + 0.4), len(rows), len(layers), squeeze=False)
    for i, (p, act) in enumerate(rows):
        for j, layer in enumerate(layers):
            ax = axes[i, j]
            sel = (hist["point"] == p) & (hist["activation"] == act) & (hist["layer"] == layer)
            if not sel.any():
                ax.axis("off")
                continue
            for pair in PAIRS:
                h = hist[sel & (hist["pair"] == pair)]
                ax.stairs(h["count"] / max(h["count"].sum(), 1), np.append(h["lo"].to_numpy(), h["hi"].iloc[-1]),
                          label=PAIR_LABELS[pair])
            ax.axvline(0, color="k", lw=0.5)
            what = "input" if layer == 0 else f"layer {layer}, " + ("after ReLU" if act == "post" else "before ReLU")
            ax.set_title(f"{names.get(p, p)}: {what}", fontsize=8)
            ax.set_xlabel("f_i . f_j", fontsize=8)
            # inner products reach 10^5-10^6 in deep layers: a few ticks, scaled by a power of ten
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4), useMathText=True)
        next(ax for ax in axes[i] if ax.axison).set_ylabel("fraction of pairs", fontsize=8)
    handles, labels = next(ax for ax in axes.flat if ax.axison).get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8)   # below the panels: covers none
    fig.suptitle(f"inner products of the learned features of {FEATURE_SAMPLE} training points per class, across the "
                 "classes and within each (orthogonally separable: within > 0, across <= 0)", fontsize=9)
    return save_figure(fig, out_dir, "features")


RUN_REPORTS = ()
SWEEP_REPORTS = (plot_sweep_neurons, plot_sweep_layers, plot_sweep_features)
