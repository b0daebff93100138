"""The `convergence` instrument (issue 37): inconsistency, margin ratio in each program's own norm
and angle against the certified svm-gln and svm-l2 solutions, at every logged step.

At a program's own optimum it must read ratio 1, angle 0, inconsistency 0 (whatever the scale); any
other predictor's ratio is below 1 (the optimum is the best margin there is); and gradient descent
on a separable problem moves towards the programs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config.loading import validate
from gbcli.runs.stages import build_model, make_tracker, prepare

CFG = {"name": "conv", "dataset": {"name": "digits", "train_size": 120, "val_size": 300, "data_seed": 1},
       "model": {"kind": "gln", "hidden_units": 3, "output_bias": False}, "contexts": {"count": 2, "seed": 1},
       "training": {"batch_size": 120, "lr": 0.01, "epochs": 40, "track": ["convergence"]}}


def measure(tracker, model, problem):
    ds = problem.dataset
    t = lambda a, dtype=torch.float32: torch.tensor(np.array(a), dtype=dtype)   # a copy: the split is read-only
    x, y, ct = t(ds.x_train), t(ds.y_train), t(problem.ctx_train, torch.long)
    xv, cv = t(ds.x_val), t(problem.ctx_val, torch.long)
    with torch.no_grad():
        margins, val_out = y * model(x, ct), model(xv, cv)
    return tracker.measure(model, x, y, ct, margins, val_out)


def at(model, zeta: np.ndarray, scale: float):
    """The network whose predictor is `scale * zeta` (w2 = 1, w1 = zeta's rows)."""
    with torch.no_grad():
        model.w2.fill_(1.0)
        model.w1.copy_(torch.as_tensor(scale * zeta.reshape(model.w1.shape), dtype=torch.float32))
    return model


def test_the_instrument_reads_ratio_1_and_angle_0_at_each_programs_optimum_and_less_elsewhere():
    cfg = validate(CFG, "test")
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem)
    model = build_model(cfg, problem.dataset.dim)
    refs = tracker.against
    assert set(refs) == {"svm-gln", "svm-l2"} and refs["svm-l2"]["degree"] == pytest.approx(2.0)
    assert refs["svm-gln"]["degree"] == pytest.approx(1.0)
    for prog, other in (("svm-gln", "svm-l2"), ("svm-l2", "svm-gln")):
        s, o = prog.replace("-", "_"), other.replace("-", "_")
        for scale in (1.0, 7.0, 0.01):   # the direction is what is measured, never the scale
            row = measure(tracker, at(model, refs[prog]["zeta"], scale), problem)
            assert row[f"margin_ratio_{s}"] == pytest.approx(1.0, abs=2e-4), (prog, scale)
            assert row[f"angle_{s}"] < 0.05
            assert row[f"inconsistency_{s}"] == 0 and row[f"train_inconsistency_{s}"] == 0
            # the other program's optimum is another direction: below 1 in that program's norm
            assert row[f"margin_ratio_{o}"] < 1 - 1e-3 and row[f"angle_{o}"] > 0.5
    # a random network: a ratio below 1 (negative while it misclassifies), an angle well above 0
    torch.manual_seed(0)
    with torch.no_grad():
        model.w1.normal_()
    row = measure(tracker, model, problem)
    assert row["margin_ratio_svm_gln"] < 1 and row["angle_svm_gln"] > 10


@pytest.mark.slow
def test_gradient_descent_is_tracked_against_both_programs(tmp_path):
    """A real `gb train-gd`: the columns in metrics.csv at every logged step, the ratio never above 1,
    the angle to svm-gln smaller at the end than at the start; the panels in training.png."""
    import yaml

    cfg = {**CFG, "training": {**CFG["training"], "epochs": 3000, "lr": 0.05, "log_points": 20, "log_spacing": "log"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "gbcli.cli", "train-gd", "c.yaml", "--out", "r", "-q"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    m = pd.read_csv(tmp_path / "r" / "gd" / "metrics.csv")
    for prog in ("svm_gln", "svm_l2"):
        for col in ("inconsistency", "train_inconsistency", "margin_ratio", "angle"):
            assert m[f"{col}_{prog}"].notna().all(), (col, prog)
        assert (m[f"margin_ratio_{prog}"] <= 1 + 1e-6).all()
        assert ((m[f"inconsistency_{prog}"] >= 0) & (m[f"inconsistency_{prog}"] <= 1)).all()
    assert m["angle_svm_gln"].iloc[-1] < m["angle_svm_gln"].iloc[0] - 5
    assert m["margin_ratio_svm_gln"].iloc[-1] > m["margin_ratio_svm_gln"].iloc[0]
    from gbcli.runs.figures import training_figure

    fig = training_figure({"r": m})
    titles = {ax.get_title() for ax in fig.axes}
    assert {"angle to svm-gln's predictor (degrees)", "inconsistency with svm-l2 (validation)"} <= titles


@pytest.mark.slow
def test_a_model_without_the_programs_predictor_is_refused_in_one_line(tmp_path):
    """The ReLU net has no zeta in the GLN programs' coordinates: refused by the config, before training."""
    import yaml

    cfg = {"name": "r", "dataset": CFG["dataset"], "model": {"kind": "relu", "hidden_units": 3},
           "training": {"epochs": 2, "track": ["convergence"]}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, "-m", "gbcli.cli", "train-gd", "c.yaml", "--out", "r"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "training.track" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
