"""Theory instruments for a trained homogeneous model (protocol section 7) and the log-space loss
of loss-normalized steps (paper 004).

Enabled by `training.track` (any of margin, kkt, agreement), evaluated at the logged steps and
written as extra columns of `gd/metrics.csv`:

- margin: `margin_ratio` = normalized margin / the best one the matching convex program allows,
  and `margin_gap` = best - normalized margin. A degree-L model's normalized margin is
  min_n y_n f(x_n) / ||w||^L. For the deep GLN (L = 2), min ||w||^2 at margin 1 is 2 x the
  svm-gln optimum (||w1_h||^2 + w2_h^2 >= 2 ||zeta_h||, with equality for balanced layers), so
  the best normalized margin is 1 / (2 opt). For the shallow GLN and the linear model (L = 1) the
  program is svm-shallow, whose objective is ||w||^2 itself, so the best is 1 / sqrt(opt). A
  linear model trained by coordinate descent is compared in the l1 geometry: margin
  min y<w,x> / ||w||_1 against svm-l1 (min ||w||_1), best 1 / opt.
- kkt: `kkt_residual`, `kkt_complementarity` and `kkt_complementarity_rel`. w is rescaled to margin
  1 and lam >= 0 fitted by non-negative least squares to w = sum_n lam_n y_n grad_w f(x_n)
  (stationarity of min ||w||^2 / 2 s.t. y f >= 1), with one more row asking
  sum_n lam_n (margin_n - 1) = 0: when N exceeds the number of weights, many lam fit w equally
  well and plain NNLS may spread them over points far from the margin; the extra row picks the
  multipliers on the support, so an exact KKT point scores 0 on both. We report the relative
  residual ||w - sum ...|| / ||w||, the complementarity sum_n lam_n (margin_n - 1) (protocol
  section 7; it scales with ||w||^2) and its scale-free form divided by sum_n lam_n margin_n.
- agreement: `inconsistency`, the fraction of validation points on which the network and the
  matching convex predictor disagree in sign.

The instruments need an exactly homogeneous model: see `Config` (model.output_bias: false).

Instruments of papers 001 and 002 (`rank`, `alignment`, `clusters`; see `PAPER_COLUMNS`):

- rank: singular values s_1 >= s_2 >= ... of the first-layer matrix W; `sv1..sv3`, `sv3_ratio` =
  s_3 / s_1 and `numerical_rank` = #{i: s_i > RANK_TOL s_1} (paper 001: W ends rank 2).
- alignment (relu): each neuron's cosine with w+ (svm-pos) when its output weight a_j > 0, with w-
  (svm-neg) when a_j < 0: `align_median`, `align_above_090` (fraction of neurons above 0.9); the
  same against the class means mu+ / mu- (`mean_align_*`), which are close to w+- but not them.
  The final per-neuron values go to gd/neurons.csv.
- clusters (leaky, paper 002): with w_bar / u_bar the means of the +v / -v units, `cluster_radius`
  r = max distance of a unit to its group mean (and `cluster_radius_rel` = r / mean unit norm);
  `outside_linear` (train) and `outside_linear_val`: fraction of points with
  |<w_bar - u_bar, x>| <= 2 r ||x||, outside the linear regime where sign f(x) = sign <w_bar - u_bar, x>
  (protocol section 9; the strict Lipschitz bound has alpha |...| on the left, see results/theory);
  `max_group_angle` (degrees); `linear_sign_mismatch_val`, the fraction of validation points where
  sign f != sign <w_bar - u_bar, x>; `par_cosine`, cos(w_bar - u_bar, w* - u*) with (w*, u*) the
  svm-par solution.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.optimize import nnls
from torch import nn

TRACKABLE = ("margin", "kkt", "agreement")
TRACKED_COLUMNS = ("margin_ratio", "margin_gap", "kkt_residual", "kkt_complementarity", "kkt_complementarity_rel",
                   "inconsistency")
PAPER_COLUMNS = ("sv1", "sv2", "sv3", "sv3_ratio", "numerical_rank",
                 "align_median", "align_above_090", "mean_align_median", "mean_align_above_090",
                 "cluster_radius", "cluster_radius_rel", "outside_linear", "outside_linear_val", "max_group_angle",
                 "linear_sign_mismatch_val", "par_cosine")
TRACKED_COLUMNS = TRACKED_COLUMNS + PAPER_COLUMNS
RANK_TOL = 0.05   # numerical rank: singular values above 5% of the largest
# the convex program whose optimum is a model's max-margin limit (protocol section 5)
MATCHING_OBJECTIVE = {"gln": "svm-gln", "shallow": "svm-shallow", "linear": "svm-shallow", "leaky": "svm-par"}


def matching_objective(kind: str, descent: str = "gradient") -> str | None:
    """The program GD's limit direction solves; coordinate descent on a linear model solves svm-l1."""
    return "svm-l1" if descent == "coordinate" else MATCHING_OBJECTIVE.get(kind)


def log_softplus(z: torch.Tensor) -> torch.Tensor:
    """log(log(1 + e^z)) without underflow: below z = -20, softplus(z) = e^z (1 - e^z / 2 + ...), so
    the log is z to within 1e-9 (the other branch is fed a safe value so its gradient stays finite)."""
    small = z < -20
    return torch.where(small, z, torch.log(F.softplus(torch.where(small, torch.zeros_like(z), z))))


def log_mean_loss(margins: torch.Tensor, kind: str) -> torch.Tensor:
    """log R, R the mean exponential or logistic loss of the margins y f(x), via logsumexp.

    Loss-normalized steps minimize this: eta_0 grad R / R = eta_0 grad log R, which stays finite
    when R itself underflows (R reaches 1e-30 and below in long runs)."""
    per_point = -margins if kind == "exponential" else log_softplus(-margins)
    return torch.logsumexp(per_point, 0) - math.log(margins.numel())


def best_normalized_margin(norm: str, optimum: float) -> float:
    """The largest normalized margin a model can have, from its matching program's optimum."""
    if norm == "group":   # deep GLN: min ||w||^2 at margin 1 = 2 x GLN-norm optimum
        return 1.0 / (2.0 * optimum)
    if norm == "sq":      # shallow GLN, linear: the objective is ||w||^2
        return 1.0 / math.sqrt(optimum)
    if norm == "l1":      # linear, l1 geometry: the objective is ||w||_1
        return 1.0 / optimum
    raise ValueError(f"no normalized margin for norm {norm!r}")


def flat_weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([w.detach().double().reshape(-1) for w in model.weights()])


def kkt_residual(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: torch.Tensor | None,
                 degree: int) -> dict:
    """The KKT columns of the model's weights, rescaled to margin 1 (see the module docstring).

    Per-sample gradients come from torch.func.jacrev (float64). Weights that are not parameters
    (the shallow GLN's rows of contexts without training points) have zero gradient at every
    training point, so they enter the residual whole. NNLS is solved on the R factor of the
    (P + 1) x N system (same minimizer, an N-column problem). NaN while some margin is <= 0."""
    from torch.func import functional_call, jacrev

    net = copy.deepcopy(model).cpu().double()   # float64 on the CPU: scipy's NNLS takes it from here
    x, y, ctx = x.cpu().double(), y.cpu().double(), None if ctx is None else ctx.cpu()
    params = {k: p.detach() for k, p in net.named_parameters()}
    with torch.no_grad():
        q = y * net(x, ctx)
    if float(q.min()) <= 0:
        return dict.fromkeys(("kkt_residual", "kkt_complementarity", "kkt_complementarity_rel"), float("nan"))
    scale = float(q.min()) ** (-1.0 / degree)    # f is degree-homogeneous: margins scale by scale^degree
    params = {k: scale * p for k, p in params.items()}
    jac = jacrev(lambda p: functional_call(net, p, (x, ctx)))(params)
    n = len(y)
    g = torch.cat([jac[k].reshape(n, -1) for k in params], 1) * y[:, None]   # row n: y_n grad f(x_n)
    w = torch.cat([p.reshape(-1) for p in params.values()])
    is_param = {id(p) for p in net.parameters()}
    rest = sum(float((scale * v.detach().double()).pow(2).sum()) for v in net.weights() if id(v) not in is_param)
    total = float(w.pow(2).sum()) + rest
    excess = q / q.min() - 1                     # margin_n - 1 at margin 1
    # weight of the complementarity row: lam ~ ||w||^2 / L, so this balances the two relative errors
    a = torch.cat([g.T, (degree / math.sqrt(total)) * excess[None, :]])
    b = torch.cat([w, w.new_zeros(1)])
    qm, r = torch.linalg.qr(a)                   # a = Q R: min ||a lam - b|| = min ||R lam - Q'b||
    lam, _ = nnls(r.numpy(), (qm.T @ b).numpy(), maxiter=50 * n)
    lam = torch.as_tensor(lam)
    comp = float(lam @ excess)
    mass = float(lam @ (excess + 1))
    return {"kkt_residual": math.sqrt((float((g.T @ lam - w).pow(2).sum()) + rest) / total),
            "kkt_complementarity": comp, "kkt_complementarity_rel": comp / mass if mass > 0 else float("nan")}


def inconsistency(out_a: np.ndarray, out_b: np.ndarray) -> float:
    """Fraction of points on which sign(f_a) != sign(f_b) (ties are their own label, as in tables)."""
    return float(np.mean(np.sign(out_a) != np.sign(out_b)))


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row of a with b (0 for a zero row)."""
    na = np.linalg.norm(a, axis=-1) * np.linalg.norm(b)
    return np.divide(a @ b, na, out=np.zeros(a.shape[:-1]), where=na > 0)


def rank_measures(w1: np.ndarray) -> dict:
    """Singular values of the first layer and its numerical rank (paper 001)."""
    s = np.linalg.svd(w1, compute_uv=False)
    s3 = np.pad(s, (0, max(0, 3 - len(s))))[:3]
    return {"sv1": s3[0], "sv2": s3[1], "sv3": s3[2], "sv3_ratio": s3[2] / s[0] if s[0] > 0 else float("nan"),
            "numerical_rank": int((s > RANK_TOL * s[0]).sum())}


def neuron_table(w1: np.ndarray, a: np.ndarray, refs: dict) -> "pd.DataFrame":
    """Per neuron: output weight a_j, ||w_j||, cosine with w+ or w- by the sign of a_j, and with mu+ / mu-."""
    import pandas as pd

    pos = a > 0
    align = np.where(pos, _cos(w1, refs["w_pos"]), _cos(w1, refs["w_neg"]))
    mean = np.where(pos, _cos(w1, refs["mean_pos"]), _cos(w1, refs["mean_neg"]))
    return pd.DataFrame({"neuron": np.arange(len(a)), "a": a, "w_norm": np.linalg.norm(w1, axis=1),
                         "align": align, "mean_align": mean})


def alignment_measures(table) -> dict:
    return {"align_median": float(table["align"].median()), "align_above_090": float((table["align"] > 0.9).mean()),
            "mean_align_median": float(table["mean_align"].median()),
            "mean_align_above_090": float((table["mean_align"] > 0.9).mean())}


def cluster_measures(model: nn.Module, x: np.ndarray, x_val: np.ndarray, par_direction: np.ndarray | None) -> dict:
    """Paper 002's cluster radius, linear regime and group angles (see the module docstring)."""
    w1 = model.w1.detach().double().cpu().numpy()
    k = len(w1) // 2
    groups = (w1[:k], w1[k:])
    means = [g.mean(0) for g in groups]
    r = max(np.linalg.norm(g - m, axis=1).max() for g, m in zip(groups, means))
    direction = means[0] - means[1]
    outside = lambda z: float(np.mean(np.abs(z @ direction) <= 2 * r * np.linalg.norm(z, axis=1)))
    angle = 0.0
    for g in groups:
        u = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300)
        angle = max(angle, float(np.degrees(np.arccos(np.clip((u @ u.T).min(), -1, 1)))))
    with torch.no_grad():
        f = model(torch.as_tensor(x_val, dtype=model.w1.dtype, device=model.w1.device)).double().cpu().numpy()
    row = {"cluster_radius": float(r), "cluster_radius_rel": float(r / np.linalg.norm(w1, axis=1).mean()),
           "outside_linear": outside(x), "outside_linear_val": outside(x_val), "max_group_angle": angle,
           "linear_sign_mismatch_val": float(np.mean(np.sign(f) != np.sign(x_val @ direction)))}
    if par_direction is not None:
        row["par_cosine"] = float(_cos(direction, par_direction))
    return row


class Tracker:
    """The configured instruments, with the matching program solved once at the start of training.
    `references` (alignment: w_pos, w_neg, mean_pos, mean_neg) and `x_val` (clusters) serve the
    instruments of papers 001 and 002."""

    def __init__(self, track: list[str], degree: int, descent: str = "gradient", design=None, solution=None,
                 references: dict | None = None, x_val: np.ndarray | None = None):
        self.track, self.degree, self.descent = list(track), degree, descent
        self.best = self.svm_val = None
        self.info: dict = {}
        self.references, self.x_val = references, x_val
        self.par_direction = None
        if solution is not None and solution.zeta.shape[0] == 2 and design.e_val.shape[1] == 2:   # svm-par: (w, u)
            self.par_direction = solution.zeta[0] - solution.zeta[1]
        if solution is not None:
            from .programs import decision

            self.best = best_normalized_margin(design.norm, solution.value)
            self.svm_val = decision(solution.zeta, design.x_val, design.e_val)
            self.info = {"objective": solution.value, "status": solution.status,
                         "best_normalized_margin": self.best}

    def norm(self, model: nn.Module) -> float:
        """||w||^L in the model's geometry (l1 for coordinate descent, else l2)."""
        w = flat_weights(model)
        return float(w.abs().sum()) if self.descent == "coordinate" else float(w.pow(2).sum().sqrt()) ** self.degree

    def measure(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: torch.Tensor | None,
                margins: torch.Tensor, val_out: torch.Tensor) -> dict:
        """The tracked columns at the current weights."""
        row = {}
        if "margin" in self.track:
            norm = self.norm(model)
            gamma = float(margins.double().min()) / norm if norm > 0 else float("nan")
            row.update(margin_ratio=gamma / self.best, margin_gap=self.best - gamma)
        if "kkt" in self.track:
            row.update(kkt_residual(model, x, y, ctx, self.degree))
        if "agreement" in self.track:
            row["inconsistency"] = inconsistency(val_out.double().cpu().numpy(), self.svm_val)
        if "rank" in self.track:
            row.update(rank_measures(model.w1.detach().double().cpu().numpy()))
        if "alignment" in self.track:
            row.update(alignment_measures(self.neurons(model)))
        if "clusters" in self.track:
            row.update(cluster_measures(model, x.double().cpu().numpy(), self.x_val, self.par_direction))
        return row

    def neurons(self, model: nn.Module):
        """The per-neuron alignment table (alignment tracked), else None."""
        if "alignment" not in self.track:
            return None
        w1 = model.w1.detach().double().cpu().numpy()
        return neuron_table(w1, model.w2.detach().double().cpu().numpy()[0], self.references)
