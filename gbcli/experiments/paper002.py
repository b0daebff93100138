"""Paper 002 (leaky nets in the perfect agreement regime): the `clusters` instrument.

With w_bar / u_bar the means of the +v / -v units: `cluster_radius` r = max distance of a unit to
its group mean (and `cluster_radius_rel` = r / mean unit norm); `outside_linear` (train) and
`outside_linear_val`: fraction of points with |<w_bar - u_bar, x>| <= 2 r ||x||, outside the linear
regime where sign f(x) = sign <w_bar - u_bar, x> (protocol section 9; the strict Lipschitz bound has
alpha |...| on the left, see results/theory); `max_group_angle` (degrees);
`linear_sign_mismatch_val`, the fraction of validation points where sign f != sign <w_bar - u_bar, x>;
`par_cosine`, cos(w_bar - u_bar, w* - u*) with (w*, u*) the svm-par solution (the matching program);
`zero_output_val`, the fraction of validation points where f(x) = 0 exactly (with alpha = 0, a ReLU
net, every unit is off there: appendix D.1's non-linear region). The data may leave the region near
the boundary empty (a teacher margin), so `zero_output_iso` and `linear_sign_mismatch_iso` measure
the same on ISO_POINTS isotropic inputs N(0, I) (fixed seed): the decision boundary over the whole
input space, as appendix D.1's Figure 5 draws it.
The perfect agreement regime (section 6.2, appendix I): a +v unit w_i is in the PAR when it classifies
every training point like the labels (y_n <w_i, x_n> > 0 for all n), a -v unit u_i when it classifies
every point the other way (y_n <u_i, x_n> < 0): `par_fraction` is the fraction of units in the PAR
(`par_fraction_w`, `par_fraction_u` per group), and `par_max_angle` the largest angle (degrees) of a
unit to its svm-par direction (w* for the +v units, u* for the -v units): 0 in the theorem's limit.
The leaky network and svm-par are the model `gbcli.models.leaky`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from gbcli.instruments.base import Instrument, first_layer


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / na) if na > 0 else 0.0


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """The largest angle (degrees) of a row of `a` to the direction b."""
    cos = a @ b / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b), 1e-300)
    return float(np.degrees(np.arccos(np.clip(cos.min(), -1, 1))))


def par_measures(w1: np.ndarray, x: np.ndarray, y: np.ndarray, par_rows: np.ndarray | None) -> dict:
    """The fraction of units in the PAR and their largest angle to svm-par's (w*, u*) (module docstring)."""
    k = len(w1) // 2
    yz = y[:, None] * (x @ w1.T)
    in_w, in_u = (yz[:, :k] > 0).all(0), (yz[:, k:] < 0).all(0)
    row = {"par_fraction": float((in_w.sum() + in_u.sum()) / len(w1)),
           "par_fraction_w": float(in_w.mean()), "par_fraction_u": float(in_u.mean())}
    if par_rows is not None:
        row["par_max_angle"] = max(_angle(w1[:k], par_rows[0]), _angle(w1[k:], par_rows[1]))
    return row


ISO_POINTS = 4000


def cluster_measures(model: nn.Module, x: np.ndarray, x_val: np.ndarray, par_direction: np.ndarray | None,
                     x_iso: np.ndarray | None = None) -> dict:
    """The cluster radius, linear regime and group angles (see the module docstring)."""
    w1 = first_layer(model)
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
    def out(z: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.tensor(z, dtype=model.w1.dtype, device=model.w1.device)).double().cpu().numpy()
    f = out(x_val)
    row = {"cluster_radius": float(r), "cluster_radius_rel": float(r / np.linalg.norm(w1, axis=1).mean()),
           "outside_linear": outside(x), "outside_linear_val": outside(x_val), "max_group_angle": angle,
           "linear_sign_mismatch_val": float(np.mean(np.sign(f) != np.sign(x_val @ direction))),
           "zero_output_val": float(np.mean(f == 0))}
    if x_iso is not None:
        f = out(x_iso)
        row.update({"zero_output_iso": float(np.mean(f == 0)),
                    "linear_sign_mismatch_iso": float(np.mean(np.sign(f) != np.sign(x_iso @ direction)))})
    if par_direction is not None:
        row["par_cosine"] = _cos(direction, par_direction)
    return row


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
        xn = x.double().cpu().numpy()
        row = cluster_measures(model, xn, tracker.problem.dataset.x_val, tracker.par_direction, tracker.x_iso)
        return {**row, **par_measures(first_layer(model), xn, y.double().cpu().numpy(), tracker.par_rows)}


INSTRUMENTS = {i.name: i for i in (Clusters(),)}
RUN_REPORTS = ()
SWEEP_REPORTS = ()
