"""Paper 002 (Sarussi, Brutzkus & Globerson), issue 12 and 14: the input-scaling key of the image
sets, the symmetric Gaussian classes, the perfect agreement regime (section 6.3 / appendix I) and
the ReLU counterexample (appendix D.1), each on a tiny instance (seconds)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gbcli.config import validate
from gbcli.errors import GbError
from gbcli.experiments.paper002 import par_measures
from gbcli.runs.stages import fit_svm, prepare, train_gd
from test_theory_papers import one_thread  # noqa: F401  (autouse: tiny nets run on one torch thread)

GAUSSIANS = {"name": "symmetric-gaussians", "n_samples": 400, "train_size": 60, "val_size": 300, "dim": 5,
             "mean_norm": 3.0, "max_norm": 1.0}
TEACHER_2D = {"name": "linear-teacher", "n_samples": 600, "train_size": 100, "val_size": 500, "dim": 2,
              "margin": 0.3, "max_norm": 1.0}


def leaky(dataset: dict, units: int, alpha: float, epochs: int):
    return validate({"dataset": dataset,
                     "model": {"kind": "leaky", "hidden_units": units, "leaky_alpha": alpha, "init_scale": 0.001},
                     "training": {"batch_size": None, "lr": 0.01, "step_rule": "loss-normalized", "epochs": epochs,
                                  "track": ["clusters", "margin", "agreement"], "log_points": 6, "log_spacing": "log"},
                     "svm": {"objectives": ["svm-par"]}})


def test_pixel_range_maps_the_pixels_and_keeps_the_constant_feature():
    raw = {"dataset": {"name": "digits", "classes": [3, 5], "positive_classes": [3], "train_size": 50,
                       "val_size": 100}, "model": {"kind": "leaky", "hidden_units": 4}}
    default = prepare(validate(raw)).dataset
    unit = prepare(validate({**raw, "dataset": {**raw["dataset"], "pixel_range": [0, 1]}})).dataset
    assert default.x_train[:, :-1].min() == -1 and unit.x_train[:, :-1].min() == 0
    np.testing.assert_allclose(unit.x_train[:, :-1], (default.x_train[:, :-1] + 1) / 2)
    assert (unit.x_train[:, -1] == 1).all() and (unit.y_train == default.y_train).all()
    for bad in ([1, 0], [0], [0, float("inf")]):
        with pytest.raises(GbError, match="dataset.pixel_range"):
            validate({**raw, "dataset": {**raw["dataset"], "pixel_range": bad}})


def test_symmetric_gaussians_are_mirrored_classes_separated_by_their_axis():
    ds = prepare(validate({"dataset": {**GAUSSIANS, "max_norm": None, "n_samples": 4000, "train_size": 3000,
                                       "val_size": 1000}, "model": {"kind": "leaky", "hidden_units": 4}})).dataset
    x, y = ds.x_pool, np.r_[ds.y_train, ds.y_val]
    pos, neg = ds.x_train[ds.y_train > 0], ds.x_train[ds.y_train < 0]
    e = pos.mean(0) - neg.mean(0)
    assert abs(len(pos) / len(ds.y_train) - 0.5) < 0.05
    np.testing.assert_allclose(pos.mean(0), -neg.mean(0), atol=0.15)     # mirror images in distribution
    assert np.linalg.norm(pos.mean(0)) == pytest.approx(3.0, abs=0.15)
    assert (ds.y_train * (ds.x_train @ e) > 0).mean() > 0.99 and len(x) == len(y)


def test_par_measures_on_hand_made_weights():
    x = np.array([[1.0, 0.2], [2.0, -0.5], [-1.0, 0.1], [-1.5, 0.4]])
    y = np.array([1.0, 1.0, -1.0, -1.0])
    w1 = np.array([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0], [0.0, 1.0]])   # w: both in; u: one in, one not
    m = par_measures(w1, x, y, np.array([[1.0, 0.0], [-1.0, 0.0]]))
    assert (m["par_fraction_w"], m["par_fraction_u"], m["par_fraction"]) == (1.0, 0.5, 0.75)
    assert m["par_max_angle"] == pytest.approx(90.0)


def test_symmetric_gaussians_enter_the_par_and_approach_svm_par(tmp_path):
    s = train_gd(leaky(GAUSSIANS, 10, 0.2, 3000), tmp_path, progress=False)
    t, m = s["track"], pd.read_csv(tmp_path / "gd" / "metrics.csv")
    assert m["par_fraction"].iloc[0] < 1 and t["par_fraction"] == 1
    assert t["par_max_angle"] < m["par_max_angle"].iloc[1] / 2 and t["par_max_angle"] < 10
    assert t["inconsistency"] == 0 and t["margin_ratio"] > 0.8 and t["par_consistent"] == 1


def test_relu_boundary_is_not_linear_where_leaky_is(tmp_path):
    out = {}
    for alpha in (0.2, 0.0):
        out[alpha] = train_gd(leaky(TEACHER_2D, 2, alpha, 1500), tmp_path / str(alpha), progress=False)["track"]
    assert out[0.2]["linear_sign_mismatch_iso"] == 0 and out[0.2]["zero_output_iso"] == 0
    assert out[0.0]["zero_output_iso"] > 0.005   # the cone where both units are off (1.5% here)
    assert out[0.0]["linear_sign_mismatch_iso"] == out[0.0]["zero_output_iso"]   # exactly the units-off region


@pytest.mark.parametrize("pair", [(3, 5), (4, 9)])
def test_digit_pairs_are_separable_then_enter_the_linear_regime(tmp_path, pair):
    """Appendix D.2 on scikit-learn's 8x8 digits: the pair is checked separable first (svm-shallow
    certified optimal, not infeasible), then every training point ends inside the linear regime."""
    cfg = validate({"dataset": {"name": "digits", "classes": list(pair), "positive_classes": [pair[0]],
                                "train_size": 100, "val_size": 200},
                    "model": {"kind": "leaky", "hidden_units": 10, "leaky_alpha": 0.2, "init_scale": 0.001},
                    "training": {"batch_size": 20, "lr": 0.002, "epochs": 300, "track": ["clusters"],
                                 "log_points": 6, "log_spacing": "log"},
                    "svm": {"objectives": ["svm-par", "svm-shallow"]}})
    (r,) = fit_svm(cfg, tmp_path / "svm-run", ["svm-shallow"], echo=lambda m: None)
    assert r["status"] == "optimal" and r["certified"] and r["train_error"] == 0
    s = train_gd(cfg, tmp_path / "gd-run", progress=False)
    t, m = s["track"], pd.read_csv(tmp_path / "gd-run" / "gd" / "metrics.csv")
    assert m["outside_linear"].iloc[0] == 1 and t["outside_linear"] <= 0.02 and t["max_group_angle"] < 3
    assert s["train_error"] == 0 and t["linear_sign_mismatch_val"] <= 0.01
