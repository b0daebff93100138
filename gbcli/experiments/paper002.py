"""Paper 002 (leaky nets in the perfect agreement regime): the `clusters` instrument.

With w_bar / u_bar the means of the +v / -v units: `cluster_radius` r = max distance of a unit to
its group mean (and `cluster_radius_rel` = r / mean unit norm); `outside_linear` (train) and
`outside_linear_val`: fraction of points with |<w_bar - u_bar, x>| <= 2 r ||x||, outside the linear
regime where sign f(x) = sign <w_bar - u_bar, x> (protocol section 9; the strict Lipschitz bound has
alpha |...| on the left, see results/theory); `max_group_angle` (degrees);
`linear_sign_mismatch_val`, the fraction of validation points where sign f != sign <w_bar - u_bar, x>;
`par_cosine`, cos(w_bar - u_bar, w* - u*) with (w*, u*) the svm-par solution (the matching program).
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


def cluster_measures(model: nn.Module, x: np.ndarray, x_val: np.ndarray, par_direction: np.ndarray | None) -> dict:
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
    with torch.no_grad():
        f = model(torch.as_tensor(x_val, dtype=model.w1.dtype, device=model.w1.device)).double().cpu().numpy()
    row = {"cluster_radius": float(r), "cluster_radius_rel": float(r / np.linalg.norm(w1, axis=1).mean()),
           "outside_linear": outside(x), "outside_linear_val": outside(x_val), "max_group_angle": angle,
           "linear_sign_mismatch_val": float(np.mean(np.sign(f) != np.sign(x_val @ direction)))}
    if par_direction is not None:
        row["par_cosine"] = _cos(direction, par_direction)
    return row


class Clusters(Instrument):
    name, needs_matching = "clusters", True
    description = "the two neuron groups of paper 002"
    columns = ("cluster_radius", "cluster_radius_rel", "outside_linear", "outside_linear_val", "max_group_angle",
               "linear_sign_mismatch_val", "par_cosine")
    panels = (("cluster_radius_rel", "cluster radius r / mean unit norm", "log"),
              ("outside_linear", "fraction of train points outside the linear regime", "linear"),
              ("max_group_angle", "max angle within a group (degrees)", "linear"),
              ("par_cosine", "cos(w_bar - u_bar, svm-par direction)", "linear"))

    def setup(self, tracker, context):
        z = tracker.solution.zeta   # svm-par: rows (w, u)
        tracker.par_direction = z[0] - z[1] if z.shape[0] == 2 and tracker.design.e_val.shape[1] == 2 else None
        return {}

    def measure(self, tracker, model, x, y, ctx, margins, val_out):
        return cluster_measures(model, x.double().cpu().numpy(), tracker.problem.dataset.x_val, tracker.par_direction)


INSTRUMENTS = {i.name: i for i in (Clusters(),)}
RUN_REPORTS = ()
SWEEP_REPORTS = ()
