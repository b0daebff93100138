"""The theory instruments and sweep reports of gbcli.experiments, each on a tiny instance (seconds): paper 002's
SGD-against-GD risk table (Theorem 4.1) and Figure 3's output-linearity instrument, paper 003's
Theorem 3.2 activity pattern under random initializations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gbcli.config import validate
from gbcli.experiments.paper002 import linearity_inputs, output_linearity, plot_sweep_output_linearity, plot_sweep_risk
from gbcli.experiments.paper003 import (OUTCOMES, layer_table, outcome_of, relu_pattern, wilson, write_init_outcomes,
                                        write_layer_table)
from gbcli.runs.stages import train_gd
from test_theory_papers import one_thread  # noqa: F401  (autouse: tiny nets run on one torch thread)

TEACHER_2D = {"name": "linear-teacher", "n_samples": 400, "train_size": 60, "val_size": 200, "dim": 2,
              "margin": 0.3, "max_norm": 1.0}
X32 = np.array([[1.0, 0.25], [-1.0, 0.25]])   # paper 003's Theorem 3.2 data, y = +1


def leaky_net(w1: np.ndarray, alpha: float):
    """f(x) = sum_w sigma(<w, x>) - sum_u sigma(<u, x>) in numpy (first half w, second half u)."""
    k = len(w1) // 2

    def f(x: np.ndarray) -> np.ndarray:
        z = x @ w1.T
        a = np.where(z > 0, z, alpha * z)
        return a[:, :k].sum(1) - a[:, k:].sum(1)
    return f


def test_antipodal_units_give_a_linear_output_and_others_only_a_linear_boundary():
    x = np.random.default_rng(0).uniform(-1, 1, (50, 2))
    inputs = linearity_inputs(x, 0.0)
    w = np.array([[1.0, 0.5]])
    # u = -w: sigma(z) - sigma(-z) = (1 + alpha) z, exactly linear
    row, grid, line = output_linearity(leaky_net(np.r_[w, -w], 0.2), np.r_[w, -w], inputs, bias=False)
    assert row["output_linear_r2"] == pytest.approx(1.0) and row["output_slope_ratio"] == pytest.approx(1.0)
    assert row["output_sign_mismatch_grid"] == 0 and row["output_linear_dev"] < 1e-9
    # u = -3 w: still one boundary line (Theorem 5.1 with r = 0), but slopes 1 + 3 alpha and 3 + alpha
    w1 = np.r_[w, -3 * w]
    row, grid, line = output_linearity(leaky_net(w1, 0.2), w1, inputs, bias=False)
    assert row["output_sign_mismatch_grid"] == 0
    assert row["output_slope_ratio"] == pytest.approx(3.2 / 1.6) and row["output_linear_r2"] < 0.99
    assert len(grid) == 61 * 61 and {"f", "fit", "rule"} <= set(grid) and len(line) == 201


def test_output_linearity_is_tracked_on_a_2d_leaky_net_with_a_bias(tmp_path):
    cfg = validate({"dataset": {**TEACHER_2D, "bias": True},
                    "model": {"kind": "leaky", "hidden_units": 4, "leaky_alpha": 0.2, "init_scale": 0.001},
                    "training": {"batch_size": None, "lr": 0.01, "step_rule": "loss-normalized", "epochs": 300,
                                 "track": ["output_linearity"], "log_points": 4, "log_spacing": "log"}})
    out = tmp_path / "points" / "p1"
    s = train_gd(cfg, out, progress=False)
    t = s["track"]
    assert s["train_error"] == 0 and t["output_sign_mismatch_grid"] < 0.01 and 0.9 < t["output_linear_r2"] <= 1
    assert (out / "gd" / "output_grid.csv").is_file() and (out / "gd" / "output_line.csv").is_file()
    (fig,) = plot_sweep_output_linearity(tmp_path)
    assert fig.is_file() and len(pd.read_csv(tmp_path / "tables" / "output_linearity.csv")) == 1


def test_risk_report_compares_sgd_batch_one_with_full_batch(tmp_path):
    base = {"dataset": {**TEACHER_2D, "dim": 5, "margin": 0.5},
            "model": {"kind": "leaky", "hidden_units": 4, "leaky_alpha": 0.2, "init_scale": 0.001},
            "training": {"lr": 0.05, "track": ["clusters"], "log_points": 5, "log_spacing": "log"},
            "svm": {"objectives": ["svm-par"]}}
    for name, bs, epochs in (("sgd", 1, 10), ("gd", None, 600)):   # the same 600 steps
        cfg = validate({**base, "name": name, "training": {**base["training"], "batch_size": bs, "epochs": epochs}})
        assert train_gd(cfg, tmp_path / "points" / name, progress=False)["train_error"] == 0
    (fig,) = plot_sweep_risk(tmp_path)
    risk = pd.read_csv(tmp_path / "tables" / "risk.csv")
    assert fig.is_file() and sorted(risk["batch_size"].astype(str)) == ["1", "full"]
    assert (risk["steps"] == 600).all() and (risk["max_point_loss"] >= risk["train_loss"]).all()
    assert (risk["max_point_loss"] < 0.69).all()


def test_relu_pattern_of_theorem_32s_points():
    y = np.ones(2)
    # the paper's kind of init: unit 1 on both points (v > 0), unit 2 on neither
    init = relu_pattern(np.array([[0.1, 1.0], [-0.2, -1.0]]), np.array([0.5, 0.4]), X32, y)
    assert init["thm32_premise"] == 1 and init["units_active_all"] == 1 and init["units_dead"] == 1
    # its KKT point at margin 1: w = (0, 2), v = 2, ||theta||^2 = 8; the global optimum: each unit on one point
    kkt = relu_pattern(np.array([[0.0, 2.0], [0.0, 0.0]]), np.array([2.0, 0.0]), X32, y)
    assert kkt["norm_sq_margin1"] == pytest.approx(8.0) and kkt["top_unit_share"] == 1
    n = np.linalg.norm(X32[0])
    w = X32 / n * np.sqrt(1 / n)   # ||w_j|| = v_j, v_j ||w_j|| ||x_j|| = 1
    glob = relu_pattern(w, np.full(2, np.sqrt(1 / n)), X32, y)
    assert glob["norm_sq_margin1"] == pytest.approx(16 / np.sqrt(17)) and glob["top_unit_share"] == pytest.approx(0.5)
    assert outcome_of(pd.Series({"train_error": 0.0, **kkt})) == OUTCOMES[0]
    assert outcome_of(pd.Series({"train_error": 0.0, **glob})) == OUTCOMES[1]
    assert outcome_of(pd.Series({"train_error": 0.5, **glob})) == OUTCOMES[2]


def test_theorem_32_premise_has_the_wedge_probability_under_gaussian_inits():
    """Each unit's directions positive (negative) on both points form a wedge of 180 - 151.9 = 28.1
    degrees: P(premise) = 2 (28.1 / 360)^2 / 2 = 0.0061 for an isotropic first layer."""
    rng = np.random.default_rng(0)
    hits = sum(relu_pattern(rng.standard_normal((2, 2)), rng.standard_normal(2), X32, np.ones(2))["thm32_premise"]
               for _ in range(20000))
    wedge = (180 - np.degrees(np.arccos(X32[0] @ X32[1] / 17 * 16))) / 360
    assert wedge * 360 == pytest.approx(28.07, abs=0.01)
    lo, hi = wilson(int(hits), 20000)
    assert lo <= wedge ** 2 <= hi


def test_init_outcomes_of_random_inits(tmp_path):
    for seed in (0, 2):   # kaiming seed 0: the units split the points; seed 2: a point never fitted
        cfg = validate({"name": "t32", "dataset": {"name": "points", "x": X32.tolist(), "y": [1, 1]},
                        "model": {"kind": "relu", "hidden_units": 2, "init": "kaiming", "init_seed": seed},
                        "training": {"batch_size": None, "epochs": 400, "lr": 0.02, "step_rule": "loss-normalized",
                                     "loss": "exponential", "track": ["relu_pattern"], "log_points": 4}})
        train_gd(cfg, tmp_path / "points" / f"s{seed}", progress=False)
    (fig,) = write_init_outcomes(tmp_path)
    t = pd.read_csv(tmp_path / "tables" / "init_outcomes.csv").set_index("init_seed")
    assert fig.is_file() and t.loc[0, "outcome"] == OUTCOMES[1] and t.loc[2, "outcome"] == OUTCOMES[2]
    s = pd.read_csv(tmp_path / "tables" / "init_outcomes_summary.csv")
    assert s["runs"].tolist() == [2] and s[OUTCOMES[1]].iloc[0] == 0.5


def test_per_layer_problem_on_the_orthogonal_relu_construction(tmp_path):
    """Theorem 5.3's kind of point (our 2-neuron construction): each unit's input on the other point is
    exactly 0, GD keeps the pattern, and the first layer is not a local optimum of Problem 4 (its optimum
    w1 = w2 = (1/2, 1/2) has ||W||^2 = 1 against 2); the output layer is a global one."""
    cfg = validate({"name": "fc-relu-orthogonal",
                    "dataset": {"name": "points", "x": [[1.0, 0.0], [0.0, 1.0]], "y": [1, 1]},
                    "model": {"kind": "relu", "hidden_units": 2,
                              "weights": {"w1": [[1.0, 0.0], [0.0, 1.0]], "w2": [[1.0, 1.0]]}},
                    "training": {"batch_size": None, "epochs": 300, "lr": 0.1, "loss": "exponential",
                                 "track": ["kkt", "layer_optimality"], "log_points": 3}})
    s = train_gd(cfg, tmp_path / "points" / "p", progress=False)
    assert s["track"]["kkt_residual"] < 1e-6
    (fig,) = write_layer_table(tmp_path)
    t = pd.read_csv(tmp_path / "tables" / "layer_optimality.csv").set_index("layer")
    assert fig.is_file() and t.loc["w1", "layer_norm_sq"] == pytest.approx(2.0, rel=1e-6)
    assert t.loc["w1", "global_norm_sq"] == pytest.approx(1.0, rel=1e-6) and not t.loc["w1", "local_optimum"]
    assert t.loc["w1", "local_norm_sq_eps_0.001"] < 2.0 * (1 - 1e-4)
    assert t.loc["w2", "local_optimum"] and t.loc["w2", "global_optimum"]


def test_layers_of_a_linear_construction_are_global_optima_of_problem_4():
    """Theorem 5.2 on the depth-2 diagonal linear net's KKT point w1 = w2 = (1, 0) for x = (1, 2):
    with the other layer fixed, each layer is the min-norm solution of one linear constraint."""
    cfg = validate({"dataset": {"name": "points", "x": [[1.0, 2.0]], "y": [1]},
                    "model": {"kind": "diagonal", "depth": 2, "activation": "linear",
                              "weights": {"w": [[1.0, 0.0], [1.0, 0.0]]}}})
    from gbcli.registry import spec_of
    model = spec_of(cfg).build(cfg, 2)
    t = layer_table(cfg, model, np.array([[1.0, 2.0]]), np.array([1.0])).set_index("layer")
    assert list(t.index) == ["w[0]", "w[1]"] and t["global_optimum"].all() and t["local_optimum"].all()
    assert t["layer_norm_sq"].tolist() == pytest.approx([1.0, 1.0])


def test_the_new_instruments_stay_with_their_kinds():
    from gbcli.registry import kinds_with_instrument

    assert kinds_with_instrument("output_linearity") == ["leaky"]
    assert kinds_with_instrument("relu_pattern") == ["relu"]
    assert sorted(kinds_with_instrument("layer_optimality")) == ["conv", "diagonal", "relu"]
