"""The `convergence` instrument (issue 37): inconsistency, margin ratio in each program's own norm
and angle against the certified svm-gln and svm-l2 solutions, at every logged step.

At a program's own optimum it must read ratio 1, angle 0, inconsistency 0 (whatever the scale); any
other predictor's ratio is below 1 (the optimum is the best margin there is); and gradient descent
on a separable problem moves towards the programs."""

from __future__ import annotations


import os

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config.loading import validate
from gbcli.runs.stages import build_model, make_tracker, prepare

import forked_gb

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


def test_the_angle_to_svm_l2_sees_the_predictor_not_the_coordinates_its_form_is_blind_to():
    """A vector added to every context row of one unit and subtracted from another's changes neither
    a GLN's predictor nor svm-l2's form (protocol section 5): svm-l2's optimum so shifted still reads
    angle 0 and ratio 1 (the raw-coordinate angle was tens of degrees)."""
    cfg = validate(CFG, "test")
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem)
    model = build_model(cfg, problem.dataset.dim)
    ref = tracker.against["svm-l2"]
    zeta = ref["zeta"].copy()
    units, count = cfg.model.hidden_units, cfg.contexts.count
    a = np.random.default_rng(0).normal(size=zeta.shape[1]) * np.abs(zeta).max()
    zeta[0:count] += a                    # unit 0's contexts
    zeta[count:2 * count] -= a            # unit 1's
    raw = np.degrees(np.arccos(np.dot(zeta.ravel(), ref["zeta"].ravel())
                               / (np.linalg.norm(zeta) * np.linalg.norm(ref["zeta"]))))
    assert raw > 10   # the coordinates moved a lot
    row = measure(tracker, at(model, zeta, 1.0), problem)
    assert row["angle_svm_l2"] < 0.05 and row["margin_ratio_svm_l2"] == pytest.approx(1.0, abs=2e-4)
    assert row["inconsistency_svm_l2"] == 0 and row["train_inconsistency_svm_l2"] == 0
    assert units >= 2


@pytest.mark.slow
def test_gradient_descent_is_tracked_against_both_programs(tmp_path):
    """A real `gb train-gd`: the columns in metrics.csv at every logged step, the ratio never above 1,
    the angle to svm-gln smaller at the end than at the start; the panels in training.png."""
    import yaml

    cfg = {**CFG, "training": {**CFG["training"], "epochs": 3000, "lr": 0.05, "log_points": 20, "log_spacing": "log"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    p = forked_gb.run(["train-gd", "c.yaml", "--out", "r", "-q"], tmp_path, timeout=600, argv0=forked_gb.CLI)
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
    p = forked_gb.run(["train-gd", "c.yaml", "--out", "r"], tmp_path, timeout=300, argv0=forked_gb.CLI)
    assert p.returncode == 2 and "training.track" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()


# A problem whose limit is known, small enough to train to it in seconds: two Gaussian classes in
# 6 dimensions (separable with margin), full-batch GD with the homogeneous-normalized step.
GAUSS = {"name": "limits", "dataset": {"name": "symmetric-gaussians", "n_samples": 400, "train_size": 60,
                                       "val_size": 300, "dim": 6, "mean_norm": 2.0, "margin": 0.3},
         "contexts": {"count": 2, "seed": 1},
         "training": {"batch_size": None, "lr": 0.5, "epochs": 1000, "lr_milestones": [],
                      "step_rule": "homogeneous-normalized", "track": ["convergence"], "log_points": 12,
                      "log_spacing": "log"},
         "svm": {"objectives": ["svm-gln"]}}


def tracked_training(units: int, dead: int = 0):
    """Train a GLN of `units` units, the last `dead` of them zero (w1 rows and w2) at the start."""
    from gbcli.training.loop import train

    cfg = validate({**GAUSS, "model": {"kind": "gln", "hidden_units": units, "output_bias": False}}, "test")
    problem = prepare(cfg)
    ds, c = problem.dataset, cfg.contexts.count
    tracker = make_tracker(cfg, problem)
    model = build_model(cfg, ds.dim)
    if dead:
        with torch.no_grad():
            model.w1[(units - dead) * c:].zero_()
            model.w2[0, units - dead:].zero_()
    res = train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val, problem.ctx_val,
                progress=False, tracker=tracker)
    return cfg, problem, tracker, model, res.metrics


def test_normalized_gd_reaches_the_known_limit_ratio_1_and_angle_0():
    """One unit: svm-gln is min ||zeta|| (one group), strictly convex, so its direction is the only
    KKT direction of the network; normalized GD must reach it: ratio >= 0.99, angle <= 3 degrees,
    the ratio rising once the data are separated, no training point and few validation points
    (those within the angle of the boundary) in disagreement."""
    _, _, _, _, m = tracked_training(1)
    last = m.iloc[-1]
    assert last["margin_ratio_svm_gln"] >= 0.99 and last["angle_svm_gln"] <= 3.0, last
    sep = m[m["train_error"] == 0]["margin_ratio_svm_gln"]
    assert len(sep) >= 4 and (sep.diff().dropna() >= -1e-6).all()
    assert last["train_inconsistency_svm_gln"] == 0 and last["inconsistency_svm_gln"] <= 0.01   # <= 3 of 300


def test_gd_stuck_at_a_non_optimal_kkt_point_is_reported_as_stuck():
    """Two units, the second zero at the start: its gradient is zero for ever (w2[h] and w1[h] feed
    each other's gradient), so GD is held at a KKT point of the unit-0 network, which is not svm-gln's
    optimum. The instrument must say so: the margin ratio converges to opt / opt(unit 0 alone) < 1,
    solved here independently, and the angle stalls far from 0."""
    import dataclasses

    from gbcli.programs.design import unit_groups
    from gbcli.programs.solvers import solve
    from gbcli.runs.stages import build_design

    cfg, problem, tracker, model, m = tracked_training(2, dead=1)
    assert float(model.w2[0, 1]) == 0 and float(model.w1[2:].abs().max()) == 0   # still dead
    d, c = build_design("svm-gln", cfg, problem), cfg.contexts.count
    alone = solve(dataclasses.replace(d, e_train=d.e_train[:, :c], e_val=d.e_val[:, :c],
                                      groups=unit_groups(1, c), units=1))
    limit = tracker.against["svm-gln"]["opt"] / alone.value
    assert limit < 0.95   # the second unit matters at the optimum: the case tests something
    last = m.iloc[-1]
    assert limit - 0.01 <= last["margin_ratio_svm_gln"] <= limit + 1e-6, (last["margin_ratio_svm_gln"], limit)
    assert last["angle_svm_gln"] > 30 and abs(last["angle_svm_gln"] - m.iloc[-3]["angle_svm_gln"]) < 1.0


@pytest.mark.slow
def test_a_sweep_solves_each_reference_once_and_fit_svm_takes_it(tmp_path):
    """In a sweep, the references of `convergence` are looked up in and kept in OUT/solves/ under
    fit-svm's key: two points with the same programs (they differ in lr only) solve svm-gln and
    svm-l2 once in all, and every fit-svm result says which point's solve it took."""
    import json

    import yaml

    cfg = {**CFG, "training": {**CFG["training"], "epochs": 5, "log_points": 3},
           "svm": {"objectives": ["svm-gln", "svm-l2"]}, "grid": {"training.lr": [0.01, 0.02]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
    p = forked_gb.run(["sweep", "s.yaml", "--out", "s", "-q"], tmp_path, timeout=600, argv0=forked_gb.CLI)
    assert p.returncode == 0, p.stdout + p.stderr
    entries = [f for f in (tmp_path / "s" / "solves").glob("*.npz") if not f.name.endswith(".rounds.npz")]
    assert len(entries) == 2
    origins = set()
    for point in (tmp_path / "s" / "points").iterdir():
        for prog in ("svm-gln", "svm-l2"):
            r = json.loads((point / "svm" / prog / "result.json").read_text())
            assert r["certified"] and r["status"] == "optimal"
            origins.add(r["cached_from"])   # every program came from the cache: none solved by fit-svm
        track = json.loads((point / "gd" / "summary.json").read_text())["track"]
        gln = json.loads((point / "svm" / "svm-gln" / "result.json").read_text())
        assert track["convergence_svm_gln"]["objective"] == gln["objective"]   # the very solution
    assert len({o.split("/")[0] for o in origins}) == 1   # one point solved both, for both


@pytest.mark.parametrize("name", ["conjecture-sgd", "conjecture-normalized"])
def test_the_long_runs_ask_for_a_gpu_in_one_line_where_there_is_none(tmp_path, name):
    """The long runs' GPU path (`--set training.device=cuda`): without a CUDA device the whole sweep
    is refused before anything is written, one line naming the key, exit 2; before any data is read,
    so with or without MNIST (it failed on a machine without the files: the missing data came first)."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: test_tracked_training_on_cuda_matches_the_cpu runs instead")
    from pathlib import Path

    cfg = Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml"
    (tmp_path / "no-data").mkdir()   # no MNIST: the device is refused before any data is looked for
    p = forked_gb.run(["sweep", cfg, "--out", "s", "--set", "training.device=cuda"], tmp_path,
                      {**os.environ, "GB_DATA_DIR": str(tmp_path / "no-data")}, timeout=300, argv0=forked_gb.CLI)
    assert p.returncode == 2 and "training.device" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_tracked_training_on_cuda_matches_the_cpu():
    """Where a GPU exists: the tracked training runs there, and its convergence columns agree with
    the CPU run's (float32 on two devices: to 1e-3)."""
    from gbcli.training.loop import train

    rows = {}
    for device in ("cpu", "cuda"):
        cfg = validate({**GAUSS, "model": {"kind": "gln", "hidden_units": 1, "output_bias": False},
                        "training": {**GAUSS["training"], "epochs": 200, "device": device}}, "test")
        problem = prepare(cfg)
        ds = problem.dataset
        model = build_model(cfg, ds.dim)
        rows[device] = train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val,
                             problem.ctx_val, progress=False, tracker=make_tracker(cfg, problem)).metrics
    for col in ("margin_ratio_svm_gln", "angle_svm_gln"):
        assert np.allclose(rows["cpu"][col], rows["cuda"][col], atol=1e-3, rtol=1e-3), col


def test_under_sign_descent_it_also_tracks_the_program_of_the_linf_geometry():
    """With an optimizer of the l-infinity geometry the instrument adds svm-gln-linf (the program
    l-infinity on the weights induces) beside svm-gln, its l2 contrast: ratio 1, angle 0 and no
    disagreement at its optimum, whatever the scale, and below 1 at svm-gln's; gradient descent
    does not solve it."""
    cfg = validate({**CFG, "training": {**CFG["training"], "optimizer": "sign"}}, "test")
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem)
    model = build_model(cfg, problem.dataset.dim)
    refs = tracker.against
    assert set(refs) == {"svm-gln", "svm-l2", "svm-gln-linf"} and refs["svm-gln-linf"]["degree"] == pytest.approx(1.0)
    for scale in (1.0, 7.0):
        row = measure(tracker, at(model, refs["svm-gln-linf"]["zeta"], scale), problem)
        assert row["margin_ratio_svm_gln_linf"] == pytest.approx(1.0, abs=2e-4)
        assert row["angle_svm_gln_linf"] < 0.05 and row["inconsistency_svm_gln_linf"] == 0
        assert row["margin_ratio_svm_gln"] < 0.999
    row = measure(tracker, at(model, refs["svm-gln"]["zeta"], 1.0), problem)
    assert row["margin_ratio_svm_gln_linf"] < 0.999
    assert "svm-gln-linf" not in make_tracker(validate(CFG, "test"), prepare(validate(CFG, "test"))).against
