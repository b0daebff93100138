"""Paper 004 (Telgarsky's implicit-bias survey): the instruments `grad-alignment` (<w / ||w||, -grad R /
||grad R||> over the homogeneous weights, -> 1 along GD), `layers` (deep linear nets against the SVM and
rank one) and `reg-path` (a linear predictor's iterate against the regularization path), and the sweep
report `init_agreement`. Each column's definition: results/theory/paper-004.md.
"""

from __future__ import annotations

import functools
import itertools
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.func import functional_call

from gbcli.experiments.paper001 import in_sweep_order, new_figure, save_figure, write_table
from gbcli.instruments.base import Instrument, as_numpy, float64_copy
from gbcli.fs.safe import flatten, load_npz_untrusted
from gbcli.store.views import SweepView, point_names
from gbcli.metrics import inconsistency
from gbcli.models.base import weight_norm
from gbcli.training.losses import log_mean_loss


def loss_weight_points(margins: torch.Tensor, loss: str) -> float:
    """exp(entropy) of the points' shares -l'(q_n) / sum_m -l'(q_m) in -grad R = mean_n -l'(q_n) y_n
    grad f(x_n): how many points the gradient is spread over (1 when one point dominates)."""
    log_w = -margins if loss == "exponential" else -torch.nn.functional.softplus(margins)
    p = torch.softmax(log_w.double(), 0)
    return float(torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum()))


def gradient_alignment(model: nn.Module, x, y, ctx, loss: str, spread: bool = False):
    """<w / ||w||, -grad R / ||grad R||> over the homogeneous weights (float64; untrained weights enter
    ||w|| only); with `spread`, also `loss_weight_points`."""
    net, x, y, ctx = float64_copy(model, x, y, ctx)
    ws = [w for w in net.weights() if w.requires_grad]
    with torch.enable_grad():
        margins = y * net(x, ctx)
        grads = torch.autograd.grad(log_mean_loss(margins, loss), ws)
    g = torch.cat([gi.reshape(-1) for gi in grads])
    w = torch.cat([wi.detach().reshape(-1) for wi in ws])
    denom = weight_norm(net) * float(g.norm())
    value = float(-(w @ g)) / denom if denom > 0 else float("nan")
    return (value, loss_weight_points(margins.detach(), loss)) if spread else value


class GradientAlignment(Instrument):
    name = "grad-alignment"
    description = "<w/||w||, -grad R/||grad R||> (paper 004: tends to 1)"
    columns = ("grad_alignment", "grad_misalignment", "loss_weight_points")
    panels = (("grad_misalignment", "1 - <w/|w|, -grad R/|grad R|>", "log"),
              ("loss_weight_points", "points carrying -grad R (exp entropy of -l'(q) shares)", "log"))

    def applies(self, spec) -> bool:
        return True   # every model the config lets track instruments: the exactly homogeneous ones

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        a, points = gradient_alignment(model, x, y, ctx, tracker.cfg.training.loss, spread=True)
        return {"grad_alignment": a, "grad_misalignment": 1.0 - a, "loss_weight_points": points}


def layer_measures(layers: list[np.ndarray], svm: np.ndarray) -> dict:
    """The `layers` columns (results/theory/paper-004.md); `layers`: W_1 (width x D) ... W_L (1 x width)."""
    w_end = functools.reduce(lambda prod, w: w @ prod, layers)[0]
    cos = float(w_end @ svm / (np.linalg.norm(w_end) * np.linalg.norm(svm)))
    v = svm / np.linalg.norm(svm)
    align, rank_one = [], []
    for w in layers:
        fro = np.linalg.norm(w)
        wv = w @ v
        align.append(float(np.linalg.norm(wv) / fro))
        rank_one.append(float(np.linalg.svd(w, compute_uv=False)[0] / fro))
        v = wv / np.linalg.norm(wv)
    return {"product_svm_cosine": cos, "layer_alignment_min": min(align),
            "layer_alignment_mean": float(np.mean(align)), "rank_one_min": min(rank_one)}


class LayerAlignment(Instrument):
    name, needs_matching = "layers", True
    description = "deep linear layers: end-to-end product vs the SVM, layers vs rank one v_j v_{j-1}'"
    columns = ("product_svm_cosine", "layer_alignment_min", "layer_alignment_mean", "rank_one_min")
    panels = (("product_svm_cosine", "cos(W_L...W_1, max-margin SVM)", "linear"),
              ("layer_alignment_min", "min_j |<W_j/|W_j|, v_j v_{j-1}'>|", "linear"))

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return layer_measures([as_numpy(w) for w in model.weights()], tracker.solution.zeta[0])


class _Flat:
    """A model's homogeneous weights as one float64 vector: log R and its gradient at any vector."""

    def __init__(self, model: nn.Module, x, y, ctx, loss: str):
        self.net, self.x, self.y, self.ctx = float64_copy(model, x, y, ctx)
        self.params = {n: p for n, p in self.net.named_parameters() if any(p is w for w in self.net.weights())}
        self.loss = loss

    def vector(self) -> np.ndarray:
        return np.concatenate([p.detach().reshape(-1).numpy() for p in self.params.values()])

    def log_loss(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        parts = torch.split(t, [p.numel() for p in self.params.values()])
        params = {n: part.reshape(p.shape) for (n, p), part in zip(self.params.items(), parts)}
        with torch.enable_grad():
            value = log_mean_loss(self.y * functional_call(self.net, params, (self.x, self.ctx)), self.loss)
            (g,) = torch.autograd.grad(value, t)
        return float(value.detach()), g.numpy()


def constrained_minimizer(flat: _Flat, radius: float, starts: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """argmin {R(u) : ||u|| <= radius} for a loss convex in u (a linear model), by L-BFGS on the sphere
    u = radius z / ||z||, which is exact (on separable data the minimizer lies on the sphere); returns
    (u, log R(u)). Not a conic solver: their ~1e-8 absolute accuracy is useless at R ~ e^-50."""
    def fun(z):
        nz = np.linalg.norm(z)
        u = radius * z / nz
        value, g = flat.log_loss(u)
        # chain rule through u = radius z / |z|: the tangential part of g, scaled by radius / |z|
        gz = (radius / nz) * (g - (g @ z) * z / nz ** 2)
        return value, gz

    from scipy.optimize import minimize

    best = min((minimize(fun, z0 / np.linalg.norm(z0), jac=True, method="L-BFGS-B",
                         options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-13}) for z0 in starts),
               key=lambda r: r.fun)
    u = radius * best.x / np.linalg.norm(best.x)
    return u, float(best.fun)


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    c = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    # arccos loses half the digits near 0: take the angle from the sine via the difference of unit vectors
    d = np.linalg.norm(a / np.linalg.norm(a) - b / np.linalg.norm(b))
    return math.degrees(2 * math.asin(min(1.0, d / 2))) if c > 0 else math.degrees(math.acos(max(-1.0, c)))


def reg_path_measures(model: nn.Module, x, y, ctx, loss: str, previous: np.ndarray | None,
                      svm: np.ndarray | None = None) -> tuple[dict, np.ndarray]:
    """The `reg-path` columns (results/theory/paper-004.md) and the minimizer (the next logged step's warm start)."""
    flat = _Flat(model, x, y, ctx, loss)
    w = flat.vector()
    radius = float(np.linalg.norm(w))
    starts = [w] + ([previous] if previous is not None else [])
    u, log_u = constrained_minimizer(flat, radius, starts)
    log_w, _ = flat.log_loss(w)
    _, gu = flat.log_loss(u)
    kkt = 1.0 - float(-(u @ gu) / (np.linalg.norm(u) * np.linalg.norm(gu)))
    row = {"reg_path_angle": _angle(w, u), "reg_path_log_gap": log_w - log_u, "reg_path_kkt": kkt}
    if svm is not None:
        row.update(svm_angle=_angle(w, svm), reg_path_svm_angle=_angle(u, svm))
    return row, u


class RegPath(Instrument):
    name, needs_matching = "reg-path", True
    description = "GD iterate vs argmin {R(u): ||u|| <= ||w_t||} (the regularization path)"
    columns = ("reg_path_angle", "reg_path_log_gap", "reg_path_kkt", "svm_angle", "reg_path_svm_angle")
    panels = (("reg_path_angle", "angle(w_t, reg. path at ||w_t||), degrees", "log"),
              ("reg_path_log_gap", "log R(w_t) - log R(reg. path at ||w_t||)", "log"),
              ("svm_angle", "angle(w_t, max-margin SVM), degrees", "log"))

    def setup(self, tracker, context):
        tracker.reg_path_previous = None
        return {}

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        row, tracker.reg_path_previous = reg_path_measures(model, x, y, ctx, tracker.cfg.training.loss,
                                                           tracker.reg_path_previous, tracker.solution.zeta[0])
        return row


INSTRUMENTS = {i.name: i for i in (GradientAlignment(), LayerAlignment(), RegPath())}


def init_agreement(out_dir: str | Path) -> pd.DataFrame | None:
    """Pairs of points whose configs differ only in `model.init_seed` (and the name): their validation
    inconsistency and final margins, with the `configuration` (the keys that tell the sweep's
    configurations apart). None without such pairs."""
    points, raw = {}, {}
    for pid, view in SweepView(out_dir).points().items():
        run = view.dir
        if not run.gd_predictions.is_file():
            continue
        flat = flatten(view.config(strict=True))
        seed = repr(flat["model.init_seed"])
        rest = {k: v for k, v in flat.items() if k not in ("model.init_seed", "name")}
        last = view.metrics().iloc[-1]
        key = tuple(sorted((k, repr(v)) for k, v in rest.items()))
        raw.setdefault(key, rest)
        points[pid] = (key, seed, load_npz_untrusted(run.gd_predictions)["val_out"], last)
    rows = []
    order = lambda item: (item[1][1].isdigit(), int(item[1][1]) if item[1][1].isdigit() else 0, item[0])
    for (pa, (ca, sa, va, la)), (pb, (cb, sb, vb, lb)) in itertools.combinations(sorted(points.items(), key=order), 2):
        if ca != cb or sa == sb:
            continue
        rows.append({"configuration": ca, "point_a": pa, "point_b": pb, "init_seed_a": sa, "init_seed_b": sb,
                     "inconsistency": inconsistency(va, vb),
                     "normalized_margin_a": la["normalized_margin"], "normalized_margin_b": lb["normalized_margin"],
                     "margin_ratio_a": la.get("margin_ratio", float("nan")),
                     "margin_ratio_b": lb.get("margin_ratio", float("nan")),
                     "val_error_a": la["val_error"], "val_error_b": lb["val_error"]})
    if not rows:
        return None
    paired = list(dict.fromkeys(r["configuration"] for r in rows))
    varied = [k for k in dict.fromkeys(k for c in paired for k in raw[c])
              if len({repr(raw[c].get(k)) for c in paired}) > 1]
    names = {c: ", ".join(f"{k.rsplit('.', 1)[-1]}={raw[c].get(k)}" for k in varied) for c in paired}
    return pd.DataFrame([{**r, "configuration": names[r["configuration"]]} for r in rows])


MAX_CELL_TEXT = 12   # seeds up to which each cell of the matrix is written out
MAX_COLUMNS = 6      # configurations (one matrix each) per row of the figure


def plot_init_agreement(out_dir: str | Path) -> list[Path]:
    """`tables/init_agreement.csv` and `figures/init_agreement.png` (an inconsistency matrix per configuration)."""
    table = init_agreement(out_dir)
    if table is None:
        return []
    write_table(out_dir, "init_agreement", table)
    points = in_sweep_order(table["point_a"], point_names(out_dir))   # configurations in the grid's order
    configs = list(dict.fromkeys(table.set_index("point_a").loc[points, "configuration"]))
    top = max(float(table["inconsistency"].max()), 1e-3)   # one colour scale for every panel
    n_max = max(len(set(g["init_seed_a"]) | set(g["init_seed_b"])) for _, g in table.groupby("configuration"))
    side = min(max(3.6, 0.4 * n_max + 1.6), 7.0)
    cols = min(len(configs), MAX_COLUMNS)
    rows = -(-len(configs) // cols)
    fig, axes = new_figure((side * cols + 1.0, (side + 0.3) * rows + 0.5), rows, cols, squeeze=False)
    for ax in axes.flat[len(configs):]:
        ax.set_axis_off()
    for ax, c in zip(axes.flat, configs):
        t = table[table["configuration"] == c]
        seeds = sorted(set(t["init_seed_a"]) | set(t["init_seed_b"]), key=lambda s: int(s) if s.isdigit() else s)
        mat = np.full((len(seeds), len(seeds)), np.nan)   # a pair the sweep lacks stays blank
        np.fill_diagonal(mat, 0.0)
        for _, r in t.iterrows():
            i, j = seeds.index(r["init_seed_a"]), seeds.index(r["init_seed_b"])
            mat[i, j] = mat[j, i] = r["inconsistency"]
        im = ax.imshow(mat, cmap="viridis", vmin=0.0, vmax=top)
        step = max(1, -(-len(seeds) // MAX_CELL_TEXT))   # at most ~12 labelled seeds an axis
        ax.set_xticks(range(0, len(seeds), step), seeds[::step])
        ax.set_yticks(range(0, len(seeds), step), seeds[::step])
        ax.set_xlabel("init seed")
        ax.set_ylabel("init seed")
        ax.set_title((textwrap.fill(c, 48) + "\n" if c else "") + f"{len(t)} pair{'s' * (len(t) > 1)}, mean {t['inconsistency'].mean():.3f}, "
                     f"max {t['inconsistency'].max():.3f}", fontsize=8)
        if len(seeds) <= MAX_CELL_TEXT:
            for i, j in np.ndindex(mat.shape):
                if np.isfinite(mat[i, j]):   # dark text on the bright end of the colour map
                    ax.text(j, i, f"{mat[i, j]:.3f}", ha="center", va="center", fontsize=7,
                            color="k" if mat[i, j] > 0.6 * top else "w")
    fig.colorbar(im, ax=axes, shrink=0.9 if rows == 1 else 0.5, label="inconsistency (fraction of validation points)")
    fig.suptitle("GD networks that differ only in the init seed:\npairwise inconsistency on the validation set",
                 fontsize=9)
    return save_figure(fig, out_dir, "init_agreement")


RUN_REPORTS = ()
SWEEP_REPORTS = (plot_init_agreement,)
