"""Paper 004's instruments on tiny instances (each test a few seconds): gradient alignment for every
homogeneous model, deep linear layers aligning with the SVM and with rank one, the regularization
path of the linear model, and the agreement of GLNs trained from several inits."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.optimize import minimize

from gbcli.config import validate
from gbcli.errors import GbError
from gbcli.experiments.paper004 import (_Flat, constrained_minimizer, gradient_alignment, layer_measures,
                                         loss_weight_points, plot_init_agreement, reg_path_measures)
from gbcli.registry import MODELS, kinds_with_instrument
from gbcli.runs.stages import build_model, prepare, train_gd
from gbcli.training.loop import train

TEACHER = {"name": "linear-teacher", "n_samples": 300, "train_size": 30, "val_size": 200, "dim": 5,
           "margin": 0.3, "max_norm": 1.0}


def teacher_config(model: dict, **training):
    return validate({"dataset": TEACHER, "model": model,
                     "training": {"batch_size": None, "epochs": 300, "loss": "exponential", "lr": 1.0,
                                  "log_points": 6, **training}, "svm": {"objectives": ["svm-shallow"]}})


def tensors(problem):
    ds = problem.dataset
    return torch.tensor(ds.x_train), torch.tensor(ds.y_train)


def test_gradient_alignment_is_declared_once_for_every_model_kind():
    assert kinds_with_instrument("grad-alignment") == list(MODELS)
    # a kind that lists no paper-004 instrument takes it (relu: its own list is kkt only) ...
    cfg = validate({"model": {"kind": "relu", "hidden_units": 3}, "training": {"track": ["grad-alignment"]}})
    assert cfg.training.track == ["grad-alignment"]
    # ... but not on a model that is not exactly homogeneous
    with pytest.raises(GbError, match="homogeneous"):
        validate({"model": {"kind": "gln", "output_bias": True}, "training": {"track": ["grad-alignment"]}})
    # the model-specific instruments stay with their kinds
    assert kinds_with_instrument("layers") == ["deep-linear"] and kinds_with_instrument("reg-path") == ["linear"]


def test_gradient_alignment_of_a_linear_model_is_the_closed_form():
    cfg = teacher_config({"kind": "linear"})
    problem = prepare(cfg)
    x, y = tensors(problem)
    model = build_model(cfg, problem.dataset.dim)
    w = model.w.detach().double().numpy()[0]
    q = y.numpy() * (x.numpy() @ w)
    minus_grad = (np.exp(-q) * y.numpy()) @ x.numpy()          # -grad R, up to the factor 1/n
    expected = w @ minus_grad / (np.linalg.norm(w) * np.linalg.norm(minus_grad))
    assert gradient_alignment(model, x, y, None, "exponential") == pytest.approx(expected, rel=1e-10)
    _, points = gradient_alignment(model, x, y, None, "exponential", spread=True)
    share = np.exp(-q) / np.exp(-q).sum()
    assert points == pytest.approx(np.exp(-(share * np.log(share)).sum()), rel=1e-10)
    assert loss_weight_points(torch.tensor([0.0, 0.0, 50.0]), "logistic") == pytest.approx(2.0, rel=1e-9)


def test_gd_aligns_weights_with_the_negative_gradient():
    """<w/||w||, -grad R/||grad R||> -> 1 (paper 004), on a linear and a depth-3 linear network."""
    for model, rule, lr in (({"kind": "linear"}, "loss-normalized", 1.0),
                            ({"kind": "deep-linear", "depth": 3, "width": 4}, "homogeneous-normalized", 20.0)):
        cfg = teacher_config(model, step_rule=rule, lr=lr, epochs=1500, track=["grad-alignment"])
        problem = prepare(cfg)
        net = build_model(cfg, problem.dataset.dim)
        x, y = tensors(problem)
        before = gradient_alignment(net, x, y, None, "exponential")
        ds = problem.dataset
        train(net, cfg, ds.x_train, ds.y_train, None, ds.x_val, ds.y_val, None, progress=False)
        after = gradient_alignment(net, x, y, None, "exponential")
        assert after > 0.99 and after > before, (model, before, after)


def test_deep_linear_product_tends_to_the_svm_and_layers_to_rank_one(tmp_path):
    cfg = teacher_config({"kind": "deep-linear", "depth": 3, "width": 4}, step_rule="homogeneous-normalized",
                         lr=20.0, epochs=2000, track=["margin", "layers"])
    summary = train_gd(cfg, tmp_path, progress=False)
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    first, last = m.iloc[0], m.iloc[-1]
    assert last["product_svm_cosine"] > 0.999 and first["product_svm_cosine"] < 0.99
    assert last["layer_alignment_min"] > 0.95 > first["layer_alignment_min"]
    assert last["rank_one_min"] >= last["layer_alignment_min"] - 1e-12   # rank one with v_{j-1} implies rank one
    assert summary["track"]["margin_ratio"] > 0.9


def test_layer_measures_are_one_exactly_at_the_rank_one_factorization():
    rng = np.random.default_rng(0)
    u = rng.normal(size=6)
    v = [u / np.linalg.norm(u)] + [rng.normal(size=4) for _ in range(2)] + [np.ones(1)]
    v = [a / np.linalg.norm(a) for a in v]
    layers = [2.0 * np.outer(v[j + 1], v[j]) for j in range(3)]
    out = layer_measures(layers, u)
    assert out["product_svm_cosine"] == pytest.approx(1.0) and out["layer_alignment_min"] == pytest.approx(1.0)
    layers[1] = layers[1] + 0.3 * rng.normal(size=layers[1].shape)
    assert layer_measures(layers, u)["layer_alignment_min"] < 0.99


@pytest.mark.parametrize("loss", ["exponential", "logistic"])
def test_constrained_minimizer_agrees_with_an_independent_solve(loss):
    """The sphere-parametrized L-BFGS against SLSQP with the constraint ||u||^2 <= B^2 on R itself."""
    cfg = teacher_config({"kind": "linear"}, loss=loss)
    problem = prepare(cfg)
    x, y = tensors(problem)
    flat = _Flat(build_model(cfg, problem.dataset.dim), x, y, None, loss)
    radius = 3.0
    u, log_u = constrained_minimizer(flat, radius, [flat.vector()])
    xs, ys = x.numpy(), y.numpy()
    r = (lambda w: np.mean(np.exp(-ys * (xs @ w)))) if loss == "exponential" else \
        (lambda w: np.mean(np.logaddexp(0, -ys * (xs @ w))))
    ref = minimize(r, flat.vector(), method="SLSQP", constraints=[{"type": "ineq", "fun": lambda w: radius ** 2 - w @ w}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    assert np.linalg.norm(u) == pytest.approx(radius)
    assert log_u == pytest.approx(math.log(r(u)), abs=1e-12) and log_u <= math.log(ref.fun) + 1e-9
    np.testing.assert_allclose(u, ref.x, atol=1e-4)


def test_gd_approaches_the_regularization_path(tmp_path):
    cfg = teacher_config({"kind": "linear"}, step_rule="loss-normalized", epochs=1000, track=["reg-path"])
    train_gd(cfg, tmp_path, progress=False)
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    assert (m["reg_path_kkt"].abs() < 1e-8).all()          # every solve is at its optimum
    assert (m["reg_path_log_gap"] >= -1e-12).all()         # nothing beats the constrained minimizer
    assert m["reg_path_angle"].iloc[-1] < 0.2 * m["reg_path_angle"].iloc[0]
    # GD is nearer the path at its own norm than the path and GD are to their common limit, the SVM
    assert m["reg_path_angle"].iloc[-1] < 0.5 * min(m["svm_angle"].iloc[-1], m["reg_path_svm_angle"].iloc[-1])
    # a point on the path is its own constrained minimizer
    problem = prepare(cfg)
    x, y = tensors(problem)
    net = build_model(cfg, problem.dataset.dim).double()
    row, u = reg_path_measures(net, x, y, None, "exponential", None)
    with torch.no_grad():
        net.w.copy_(torch.as_tensor(u)[None])
    again, _ = reg_path_measures(net, x, y, None, "exponential", None)
    assert again["reg_path_angle"] < 1e-4 and abs(again["reg_path_log_gap"]) < 1e-10


def test_init_agreement_pairs_points_that_differ_only_in_the_init_seed(tmp_path):
    """Four trained points (two gatings x two inits) laid out as a sweep's points/ directory."""
    for ctx_seed in (1, 2):
        for init_seed in (1, 2):
            cfg = validate({"dataset": {"name": "digits", "train_size": 60, "val_size": 100},
                            "model": {"kind": "gln", "hidden_units": 2, "output_bias": False, "init_seed": init_seed},
                            "contexts": {"count": 2, "seed": ctx_seed},
                            "training": {"batch_size": None, "epochs": 30, "log_points": 2}})
            train_gd(cfg, tmp_path / "points" / f"c{ctx_seed}-i{init_seed}", progress=False)
    assert plot_init_agreement(tmp_path) == [tmp_path / "figures" / "init_agreement.png"]
    table = pd.read_csv(tmp_path / "tables" / "init_agreement.csv")
    # two pairs share their contexts and differ in the init; the pairs across gatings are left out
    assert sorted(zip(table["point_a"], table["point_b"])) == [("c1-i1", "c1-i2"), ("c2-i1", "c2-i2")]
    assert (table["init_seed_a"] == 1).all() and (table["init_seed_b"] == 2).all()
    assert ((table["inconsistency"] > 0) & (table["inconsistency"] < 1)).all()   # 30 steps: different nets
    a = np.load(tmp_path / "points" / "c1-i1" / "gd" / "predictions.npz")["val_out"]
    b = np.load(tmp_path / "points" / "c1-i2" / "gd" / "predictions.npz")["val_out"]
    assert table["inconsistency"].iloc[0] == pytest.approx(np.mean(np.sign(a) != np.sign(b)))
