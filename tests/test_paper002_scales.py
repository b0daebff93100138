"""Paper 002, Theorem 4.1 at two init scales and Figure 1's small-init / large-init contrast (issue 36;
the full sweep is configs/theory/leaky-init-scales.yaml, reported in results/theory/paper-002.md).
A tiny 2-D teacher, SGD with batch 1 over random permutations of the points (the theorem's SGD):
at init x 0.001 and x 10 every training point's loss falls below eps = 0.1 (the theorem holds for any
init bound R); only the small init clusters the units and gives the linear rule's boundary.
The sweep reports `risk_by_init` / `boundary_by_init` run on a real tiny sweep over the init scale, and
stay silent on a sweep that does not vary it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import yaml

from gbcli.config import validate
from gbcli.experiments.paper002 import RISK_EPS, _max_point_loss
from gbcli.experiments.paper002 import LINE_STEP_DEG, best_line_disagreement
from gbcli.experiments.paper002 import plot_sweep_boundary_by_init, plot_sweep_risk_by_init
from gbcli.runs.stages import train_gd
from gbcli.runs.sweep import run_sweep
from test_theory_papers import one_thread  # noqa: F401  (autouse: tiny nets run on one torch thread)

TEACHER_2D = {"name": "linear-teacher", "n_samples": 600, "train_size": 100, "val_size": 500, "dim": 2,
              "margin": 0.3, "max_norm": 1.0}


def sgd_batch1(init_scale: float):
    return validate({"dataset": TEACHER_2D,
                     "model": {"kind": "leaky", "hidden_units": 20, "leaky_alpha": 0.2, "init_scale": init_scale},
                     "training": {"batch_size": 1, "lr": 0.5, "epochs": 40, "track": ["clusters"],
                                  "log_points": 8, "log_spacing": "log"},
                     "svm": {"objectives": ["svm-par"]}})


def test_sgd_batch1_reaches_every_point_below_eps_at_small_and_large_init(tmp_path):
    out = {}
    for scale in (0.001, 10.0):
        s = train_gd(sgd_batch1(scale), tmp_path / str(scale), progress=False)
        m = pd.read_csv(tmp_path / str(scale) / "gd" / "metrics.csv")
        worst = _max_point_loss(m, "logistic")
        out[scale] = (s, m, worst)
        assert m["step"].iloc[-1] == 4000
        assert worst.iloc[0] > RISK_EPS                  # not below eps at the start
        assert s["train_error"] == 0 and worst.iloc[-1] < RISK_EPS   # Theorem 4.1's conclusion
    small, large = out[0.001][0]["track"], out[10.0][0]["track"]
    assert out[10.0][2].iloc[0] > 10 * out[0.001][2].iloc[0]       # the large init starts far worse
    # Figure 1: the small init clusters the units (5.6 deg here, SGD noise) and its boundary is the linear
    # rule's on every isotropic direction; the large one does not cluster (180 deg: the units stay spread
    # over the plane) and its boundary leaves the rule sign <w_bar - u_bar, x> (on 1.3% of the directions)
    assert small["max_group_angle"] < 10 and small["linear_sign_mismatch_iso"] == 0 and small["outside_linear"] == 0
    assert large["max_group_angle"] > 90 and large["outside_linear"] > 0.5
    assert large["linear_sign_mismatch_iso"] > 0.005


def tiny_init_sweep(tmp_path, name: str, axes: dict):
    """A real tiny sweep of 2-D leaky nets tracking output_linearity (the reports' input), run as `gb sweep` runs it."""
    body = {"name": name, "dataset": {**TEACHER_2D, "n_samples": 300, "train_size": 40, "val_size": 200},
            "model": {"kind": "leaky", "hidden_units": 4, "leaky_alpha": 0.2, "init_scale": 0.001},
            "training": {"batch_size": 1, "lr": 0.5, "epochs": 5, "track": ["output_linearity"],
                         "log_points": 5, "log_spacing": "log"},
            "svm": {"objectives": ["svm-par"]}, **axes}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    out = tmp_path / name
    _, _, failures = run_sweep(path, out, progress=False, echo=lambda *_: None, jobs=1)
    assert len(failures) == 0
    return out


def test_init_scale_reports_on_a_tiny_sweep_and_only_there(tmp_path):
    out = tiny_init_sweep(tmp_path, "scales", {"zip": {"model.init_scale": [0.001, 10.0, 10.0],
                                                       "dataset.bias": [False, False, True]}})
    points = pd.read_csv(out / "tables" / "points.csv", dtype={"point": str})
    risk = pd.read_csv(out / "tables" / "risk_by_init.csv", dtype={"point": str})
    boundary = pd.read_csv(out / "tables" / "boundary_by_init.csv", dtype={"point": str})
    for table in (risk, boundary):   # one row per point, by bias then init scale
        assert sorted(table["point"]) == sorted(points["point"])
        assert list(zip(table["bias"], table["init_scale"])) == [(False, 0.001), (False, 10.0), (True, 10.0)]
    assert (risk["steps"] == 200).all() and (risk["eps"] == RISK_EPS).all()
    assert (risk["max_point_loss"] >= risk["train_loss"]).all()
    assert (risk["initial_max_point_loss"] >= risk["initial_train_loss"]).all()
    big = risk.set_index(["bias", "init_scale"])["initial_max_point_loss"]
    assert big[(False, 10.0)] > 5 * big[(False, 0.001)]   # the large init starts far worse
    assert boundary["best_linear_disagreement_grid"].between(0, 0.5).all()
    assert (boundary["sign_changes_circle_R/2"] % 2 == 0).all()   # a closed curve changes sign an even number of times
    for fig in ("risk_by_init.png", "boundary_by_init.png"):
        assert (out / "figures" / fig).stat().st_size > 10_000
    # the sorted-projection search gives the brute force's fraction (every point, direction and offset)
    # on a real grid: the large init with the bias, a quarter of its points, 21 offsets
    pid = boundary.set_index(["bias", "init_scale"]).loc[(True, 10.0), "point"]
    g = pd.read_csv(out / "points" / pid / "gd" / "output_grid.csv").iloc[::4]
    x, s = g[["x1", "x2"]].to_numpy(), np.sign(g["f"].to_numpy())
    x, s = x[s != 0], s[s != 0]
    offsets = np.linspace(-1, 1, 21) * np.abs(x).max()
    th = np.deg2rad(np.arange(0, 360, LINE_STEP_DEG))
    proj = x @ np.stack([np.cos(th), np.sin(th)], 1).T
    brute = min(float(np.mean(np.sign(proj + c) != s[:, None], axis=0).min()) for c in offsets)
    assert best_line_disagreement(x, s, offsets) == brute
    assert best_line_disagreement(x, s, offsets[10:11]) == float(np.mean(np.sign(proj) != s[:, None], axis=0).min())
    # a sweep that does not vary the init scale: the reports write nothing (the others still run)
    other = tiny_init_sweep(tmp_path, "lr-only", {"grid": {"training.lr": [0.5, 0.25]}})
    assert (other / "tables" / "output_linearity.csv").is_file()
    assert plot_sweep_risk_by_init(other) == [] and plot_sweep_boundary_by_init(other) == []
    assert not any((other / d / f).exists() for d in ("tables", "figures")
                   for f in ("risk_by_init.csv", "boundary_by_init.csv", "risk_by_init.png", "boundary_by_init.png"))
