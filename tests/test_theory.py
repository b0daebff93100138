"""Theory instruments (gbcli.theory), loss-normalized and coordinate steps, and svm-l1, on small
instances: synthetic linear-teacher sets and scikit-learn's digits, each test a few seconds."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import linprog

from gbcli.config import validate
from gbcli.programs import solve_dual
from gbcli.errors import GbError
from gbcli.runs.figures import gap_slope
from gbcli.runs.stages import build_model
from gbcli.runs.compare import compare_run
from gbcli.runs.stages import build_design, fit_svm, make_tracker, prepare, train_gd
from gbcli.programs import solve_primal
from gbcli.training.losses import log_mean_loss
from gbcli.training.loop import train
from gbcli.training.losses import loss_fn

TEACHER = {"name": "linear-teacher", "n_samples": 300, "train_size": 40, "val_size": 200, "dim": 60,
           "margin": 0.3, "max_norm": 1.0}


def config(**sections):
    raw = {"dataset": TEACHER, "model": {"kind": "linear"},
           "training": {"batch_size": None, "epochs": 50, "loss": "exponential", "lr": 1.0}}
    for k, v in sections.items():
        raw[k] = {**raw.get(k, {}), **v}
    return validate(raw)


def gln_config(**training):
    return validate({"dataset": {"name": "digits", "train_size": 60, "val_size": 200},
                     "model": {"kind": "gln", "hidden_units": 2, "output_bias": False},
                     "contexts": {"count": 2}, "training": {"epochs": 5, **training}})


def tensors(problem):
    ds = problem.dataset
    t = lambda a: torch.tensor(a, dtype=torch.float64)
    ctx = None if problem.ctx_train is None else torch.as_tensor(problem.ctx_train)
    return t(ds.x_train), t(ds.y_train), ctx


def measure(tracker, model, problem):
    x, y, ctx = tensors(problem)
    cv = None if problem.ctx_val is None else torch.as_tensor(problem.ctx_val)
    with torch.no_grad():
        margins = y * model(x, ctx)
        val = model(torch.tensor(problem.dataset.x_val, dtype=torch.float64), cv)
    return tracker.measure(model, x, y, ctx, margins, val)


def test_linear_svm_solution_has_margin_ratio_one_and_zero_kkt_residual():
    cfg = config(training={"track": ["margin", "kkt", "agreement"]})
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem)
    model = build_model(cfg, problem.dataset.dim).double()
    sol = solve_dual(build_design("svm-shallow", cfg, problem))
    with torch.no_grad():
        model.w.copy_(torch.as_tensor(sol.zeta))
    row = measure(tracker, model, problem)
    assert row["margin_ratio"] == pytest.approx(1.0, abs=1e-6)
    assert abs(row["margin_gap"]) < 1e-6
    assert row["kkt_residual"] < 1e-5 and row["kkt_complementarity_rel"] < 1e-5
    assert row["inconsistency"] == 0.0
    # a separating but not max-margin direction: clearly not a KKT point
    rng = np.random.default_rng(0)
    u = rng.standard_normal(sol.zeta.shape)
    with torch.no_grad():
        model.w.copy_(torch.as_tensor(sol.zeta + 0.3 * np.linalg.norm(sol.zeta) * u / np.linalg.norm(u)))
    x, y, _ = tensors(problem)
    assert float((y * model(x)).min().detach()) > 0  # still separating: the KKT fit is defined
    row = measure(tracker, model, problem)
    assert row["margin_ratio"] < 0.99
    assert row["kkt_residual"] > 0.05 or row["kkt_complementarity_rel"] > 0.05


def test_deep_gln_balanced_svm_gln_solution_is_max_margin_and_kkt():
    """min ||w||^2 at margin 1 = 2 x the GLN-norm optimum, attained by the balanced factorization
    w2_h = sqrt(||zeta_h||), w1_h = zeta_h / w2_h: margin ratio 1 and a KKT point."""
    cfg = gln_config(track=["margin", "kkt", "agreement"])
    problem = prepare(cfg)
    tracker = make_tracker(cfg, problem)
    sol = solve_dual(build_design("svm-gln", cfg, problem), 1e-9)
    model = build_model(cfg, problem.dataset.dim).double()
    zeta = sol.zeta.reshape(2, 2, -1)
    scale = np.sqrt(np.linalg.norm(zeta.reshape(2, -1), axis=1))
    with torch.no_grad():
        model.w2.copy_(torch.as_tensor(scale)[None, :])
        model.w1.copy_(torch.as_tensor((zeta / scale[:, None, None]).reshape(4, -1)))
    row = measure(tracker, model, problem)
    assert row["margin_ratio"] == pytest.approx(1.0, abs=1e-6)
    assert row["kkt_residual"] < 1e-4 and row["kkt_complementarity_rel"] < 1e-4
    assert row["inconsistency"] == 0.0
    # unbalanced layers give the same predictor (inconsistency 0) but a larger norm
    with torch.no_grad():
        model.w2.mul_(2.0)
        model.w1.mul_(0.5)
    row = measure(tracker, model, problem)
    assert row["inconsistency"] == 0.0 and row["margin_ratio"] < 0.7 and row["kkt_residual"] > 0.1


def test_log_space_loss_is_finite_and_keeps_its_gradient_at_huge_margins():
    for kind in ("exponential", "logistic"):
        m = torch.tensor([1e4, 1e4 + 1.0, 2e4], dtype=torch.float32, requires_grad=True)
        log_r = log_mean_loss(m, kind)
        log_r.backward()
        log_r = log_r.detach()
        expected = -1e4 + math.log1p(math.exp(-1)) - math.log(3)   # logsumexp(-m) - log n
        assert math.isfinite(float(log_r)) and float(log_r) == pytest.approx(expected, rel=1e-6)
        assert torch.isfinite(m.grad).all() and float(m.grad[0]) < -0.5   # the smallest margin still pulls
        plain = torch.tensor([1e4, 1e4 + 1.0, 2e4], requires_grad=True)
        loss_fn(plain, kind).backward()
        assert float(plain.grad.abs().max()) == 0.0      # the plain loss has underflowed: GD would stall
    z = torch.tensor([-30.0, -5.0, 0.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(log_mean_loss(-z, "logistic"), torch.log(torch.log1p(torch.exp(z)).mean()))


def test_loss_normalized_steps_close_the_linear_margin_gap_faster(tmp_path):
    gaps = {}
    for rule in ("constant", "loss-normalized"):
        cfg = config(training={"step_rule": rule, "epochs": 300, "track": ["margin"], "log_spacing": "log",
                               "log_points": 20})
        s = train_gd(cfg, tmp_path / rule, progress=False)
        gaps[rule] = s["track"]["margin_gap"]
        m = pd.read_csv(tmp_path / rule / "gd" / "metrics.csv")
        assert m["step"].iloc[-1] == 300 and m["step"].iloc[0] == 0 and m["step"].is_monotonic_increasing
        assert m["step"].iloc[1] == 1 and m["step"].iloc[3] < 10     # log-spaced
    assert 0 < gaps["loss-normalized"] < 0.5 * gaps["constant"]
    assert "log_train_loss" in pd.read_csv(tmp_path / "loss-normalized" / "gd" / "metrics.csv")


def test_constant_rule_is_plain_sgd_with_unchanged_columns():
    """The default step rule is the existing SGD: reproduce it with a hand-written loop."""
    cfg = validate({"dataset": {"name": "digits", "train_size": 100, "val_size": 100},
                    "model": {"kind": "linear"}, "training": {"epochs": 3, "batch_size": 32, "lr": 0.1}})
    problem = prepare(cfg)
    ds = problem.dataset
    model = build_model(cfg, ds.dim)
    ref = build_model(cfg, ds.dim)
    res = train(model, cfg, ds.x_train, ds.y_train, None, ds.x_val, ds.y_val, None, progress=False)
    assert list(res.metrics.columns) == ["step", "epoch", "lr", "train_loss", "train_error", "val_error",
                                         "weight_norm", "normalized_margin"]
    x, y = torch.tensor(ds.x_train, dtype=torch.float32), torch.tensor(ds.y_train, dtype=torch.float32)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(cfg.training.batch_seed)
    for _ in range(3):
        perm = torch.randperm(100, generator=gen)
        for i in range(4):
            idx = perm[i * 32:(i + 1) * 32]
            opt.zero_grad()
            loss_fn(y[idx] * ref(x[idx]), "logistic").backward()
            opt.step()
    assert torch.equal(model.w, ref.w)
    with torch.no_grad():
        assert res.metrics["train_loss"].iloc[-1] == float(loss_fn(y * ref(x), "logistic"))


def test_svm_l1_matches_linprog_and_coordinate_descent_approaches_it(tmp_path):
    cfg = config(dataset={"dim": 8, "train_size": 30, "margin": 0.5}, svm={"objectives": ["svm-l1"]},
                 training={"descent": "coordinate", "step_rule": "loss-normalized", "epochs": 3000,
                           "track": ["margin"], "log_spacing": "log", "log_points": 12})
    problem = prepare(cfg)
    design = build_design("svm-l1", cfg, problem)
    sol = solve_primal(design, "clarabel")
    a = design.y_train[:, None] * design.x_train      # min 1'(u + v) s.t. A(u - v) >= 1, u, v >= 0
    lp = linprog(np.ones(2 * a.shape[1]), A_ub=-np.hstack([a, -a]), b_ub=-np.ones(len(a)), method="highs")
    assert lp.status == 0 and sol.status == "optimal"
    assert sol.value == pytest.approx(lp.fun, rel=1e-6)
    (r,) = fit_svm(cfg, tmp_path, echo=lambda *_: None)
    assert r["certified"] and r["objective"] == pytest.approx(lp.fun, rel=1e-6)
    # AdaBoost-style training: greedy coordinate steps on log R reach the l1 max margin
    s = train_gd(cfg, tmp_path, progress=False)
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    assert s["track"]["margin_ratio"] > 0.9 and m["margin_ratio"].iloc[-1] > m["margin_ratio"].iloc[len(m) // 2]


def test_tracked_columns_reach_metrics_and_the_training_figure(tmp_path):
    cfg = gln_config(track=["margin", "kkt", "agreement"], log_points=6)
    train_gd(cfg, tmp_path, progress=False)
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    for col in ("margin_ratio", "margin_gap", "kkt_residual", "kkt_complementarity", "inconsistency"):
        assert col in m and len(m) == 6
    assert m["inconsistency"].between(0, 1).all() and (m["margin_ratio"] <= 1 + 1e-6).all()
    compare_run(tmp_path)       # what `gb compare` does
    assert (tmp_path / "figures" / "training.png").stat().st_size > 10_000


def test_gap_slope_recovers_a_power_law():
    steps = np.unique(np.geomspace(1, 1e5, 40).round())
    assert gap_slope(pd.DataFrame({"step": steps, "margin_gap": 3 / steps})) == pytest.approx(-1.0)
    assert gap_slope(pd.DataFrame({"step": steps, "margin_gap": 0.5 / np.log(steps + 2)})) > -0.2


@pytest.mark.parametrize("raw, key", [
    ({"model": {"kind": "gln"}, "training": {"track": ["kkt"]}}, "model.output_bias: false"),
    ({"model": {"kind": "relu"}, "training": {"track": ["agreement"]}}, "matching convex program"),
    ({"model": {"kind": "gln"}, "training": {"descent": "coordinate"}}, "training.descent"),
])
def test_config_refuses_instruments_without_their_theory(raw, key):
    with pytest.raises(GbError, match=key):
        validate(raw, "cfg.yaml")


def test_homogeneous_normalized_step_divides_by_the_loss_and_the_squared_norm():
    """One full-batch step of a deep GLN: w - lr grad log R / ||w||^2; for a linear model
    (degree 1) the rule is plain loss-normalized."""
    cfg = gln_config(step_rule="homogeneous-normalized", batch_size=None, epochs=1, lr=0.3, log_points=2)
    problem = prepare(cfg)
    ds = problem.dataset
    model, ref = build_model(cfg, ds.dim), build_model(cfg, ds.dim)
    train(model, cfg, ds.x_train, ds.y_train, problem.ctx_train, ds.x_val, ds.y_val, problem.ctx_val, progress=False)
    x, y = torch.tensor(ds.x_train, dtype=torch.float32), torch.tensor(ds.y_train, dtype=torch.float32)
    ctx = torch.as_tensor(problem.ctx_train)
    log_r = log_mean_loss(y * ref(x, ctx), "logistic")
    log_r.backward()
    sq = sum(float((p.detach().double() ** 2).sum()) for p in ref.parameters())
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach() - 0.3 / sq * q.grad)
    assert sq > 2      # orthonormal init rows: ||w||^2 = 5, so the step is not lr / R alone
    weights = {}
    for rule in ("loss-normalized", "homogeneous-normalized"):
        lin = config(training={"step_rule": rule, "epochs": 20})
        p = prepare(lin)
        m = build_model(lin, p.dataset.dim)
        d = p.dataset
        train(m, lin, d.x_train, d.y_train, None, d.x_val, d.y_val, None, progress=False)
        weights[rule] = m.w.detach()
    assert torch.equal(weights["loss-normalized"], weights["homogeneous-normalized"])
