"""Paper 001 (min-norm / rank-two bias of ReLU nets on orthogonally separable data).

- `balance`: the balanced init, |w2_j| = ||w1_j|| with random signs (`model.init: balanced`);
- the programs `svm-pos` / `svm-neg`: the one-class max-margin directions w+ and w-;
- the instruments `rank` (singular values of the first layer; also used for paper 002's nets) and
  `alignment` (each neuron's cosine with w+ or w-, by the sign of its output weight, and with the
  class means), with the final per-neuron table `gd/neurons.csv`;
- the sweep report `tables/neurons.csv` + `figures/neurons.png`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import nn

from gbcli.errors import GbError
from gbcli.instruments.base import Instrument, TrackContext, first_layer
from gbcli.io import write_csv
from gbcli.models.base import Problem, Program
from gbcli.programs.design import GatedDesign
from gbcli.reports.render import save_png

RANK_TOL = 0.05   # numerical rank: singular values above 5% of the largest


def balance(model: nn.Module, gen: torch.Generator) -> None:
    """The balanced init: |w2_j| = ||w1_j||, with random signs."""
    with torch.no_grad():
        sign = torch.where(torch.rand(model.w2.shape[1], generator=gen) < 0.5, -1.0, 1.0)
        model.w2.copy_((sign * model.w1.norm(dim=1))[None])


def one_class_design(sign: float):
    """svm-pos (sign +1): w+ = argmin ||w|| s.t. <w, x_n> >= 1 on the positives only. svm-neg: w- the
    same on the negatives, written with label -1 and gate -1 so that the design's decision
    -<w-, x> is a classifier of the task (positive on the positives), like svm-pos's <w+, x>."""
    name = "svm-pos" if sign > 0 else "svm-neg"

    def design(cfg, problem: Problem, trained=None) -> GatedDesign:
        ds = problem.dataset
        xs = ds.x_train[ds.y_train == sign]
        if not len(xs):
            raise GbError(f"svm.objectives: {name} needs training points with label {sign:+.0f}, there are none")
        return GatedDesign(xs, np.full(len(xs), sign), np.full((len(xs), 1), sign), ds.x_val,
                           np.full((len(ds.x_val), 1), sign), "sq")

    return design


PROGRAMS = {"svm-pos": Program("svm-pos", "sq", one_class_design(1.0), description="w+: max margin on the positives"),
            "svm-neg": Program("svm-neg", "sq", one_class_design(-1.0), description="w-: max margin on the negatives")}


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


def neuron_table(w1: np.ndarray, a: np.ndarray, refs: dict) -> pd.DataFrame:
    """Per neuron: output weight a_j, ||w_j||, cosine with w+ or w- by the sign of a_j, and with mu+ / mu-."""
    pos = a > 0
    align = np.where(pos, _cos(w1, refs["w_pos"]), _cos(w1, refs["w_neg"]))
    mean = np.where(pos, _cos(w1, refs["mean_pos"]), _cos(w1, refs["mean_neg"]))
    return pd.DataFrame({"neuron": np.arange(len(a)), "a": a, "w_norm": np.linalg.norm(w1, axis=1),
                         "align": align, "mean_align": mean})


def alignment_measures(table: pd.DataFrame) -> dict:
    return {"align_median": float(table["align"].median()), "align_above_090": float((table["align"] > 0.9).mean()),
            "mean_align_median": float(table["mean_align"].median()),
            "mean_align_above_090": float((table["mean_align"] > 0.9).mean())}


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
        """The reference directions: w+ (svm-pos), w- (svm-neg) and the class means mu+, mu-."""
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
        return neuron_table(first_layer(model), model.w2.detach().double().cpu().numpy()[0], tracker.references)

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return alignment_measures(self.table(tracker, model))

    def final_tables(self, tracker, model):
        return {"neurons": self.table(tracker, model)}


INSTRUMENTS = {i.name: i for i in (Rank(), Alignment())}


def plot_sweep_neurons(out_dir: str | Path) -> list[Path]:
    """For a sweep whose points track `alignment`: `tables/neurons.csv` (every point's final
    per-neuron cosines) and `figures/neurons.png`, one histogram per point of the cosines with w+- and,
    next to them, with the class means (close to w+- but not them)."""
    out_dir = Path(out_dir)
    frames = [pd.read_csv(f).assign(point=f.parent.parent.name) for f in sorted(out_dir.glob("points/*/gd/neurons.csv"))]
    if not frames:
        return []
    table = pd.concat(frames, ignore_index=True)
    write_csv(out_dir / "tables" / "neurons.csv", table)
    points = list(dict.fromkeys(table["point"]))
    fig = Figure(figsize=(4.6 * len(points), 3.6), layout="constrained")
    axes = fig.subplots(1, len(points), squeeze=False)[0]
    bins = np.linspace(min(0.8, float(table[["align", "mean_align"]].min().min())), 1.0, 41)
    for ax, p in zip(axes, points):
        t = table[table["point"] == p]
        ax.hist(t["align"], bins=bins, alpha=0.6, label=f"w+- (svm-pos/neg), median {t['align'].median():.3f}")
        ax.hist(t["mean_align"], bins=bins, alpha=0.6, label=f"class means, median {t['mean_align'].median():.3f}")
        ax.axvline(0.9, color="k", ls="--", lw=0.8)
        ax.set_title(p, fontsize=8)
        ax.set_xlabel("cosine of neuron w_j with its reference")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("neurons")
    return [save_png(fig, out_dir / "figures" / "neurons.png")]


RUN_REPORTS = ()
SWEEP_REPORTS = (plot_sweep_neurons,)
