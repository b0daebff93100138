"""Papers 001 (orthogonally separable data, 2-layer ReLU) and 002 (leaky-ReLU nets on a linear
teacher): the data, the programs svm-pos / svm-neg / svm-par against an independent cvxpy solve,
and the qualitative claims on small trained instances (a few seconds each)."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest

from gbcli.config import validate
from gbcli.errors import GbError
from gbcli.metrics import error
from gbcli.runs.stages import build_model
from gbcli.runs.stages import fit_svm, prepare, train_gd

ORTHOGONAL = {"name": "orthogonal", "n_samples": 400, "train_size": 200, "val_size": 200, "dim": 20}
TEACHER = {"name": "linear-teacher", "n_samples": 600, "train_size": 100, "val_size": 500, "dim": 10, "margin": 1.0}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny nets: torch's thread pool only costs time here, a lot of it on a busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def orthogonal_config(**training):
    return validate({"dataset": ORTHOGONAL,
                     "model": {"kind": "relu", "hidden_units": 30, "init": "balanced", "init_scale": 0.01},
                     "training": {"batch_size": 50, "lr": 0.1, "epochs": 200, "track": ["rank", "alignment"],
                                  "log_points": 5, **training},
                     "svm": {"objectives": ["svm-pos", "svm-neg"]}})


def leaky_config(**training):
    return validate({"dataset": TEACHER,
                     "model": {"kind": "leaky", "hidden_units": 10, "leaky_alpha": 0.2, "init_scale": 0.001},
                     "training": {"batch_size": 20, "lr": 0.05, "epochs": 300,
                                  "track": ["clusters", "agreement", "rank"], "log_points": 5, **training},
                     "svm": {"objectives": ["svm-par", "svm-shallow"]}})


def test_orthogonal_set_is_the_protocol_construction():
    ds = prepare(orthogonal_config()).dataset
    x, y = ds.x_pool, np.concatenate([ds.y_train, ds.y_val])
    x = np.concatenate([ds.x_train, ds.x_val])
    z = np.where(np.arange(20) % 2 == 0, 1.0, -1.0)
    assert np.all(x @ z >= 0)
    assert np.all(np.sign(x) == y[:, None])                    # x = s |g|, label s
    g = x @ x.T
    same = y[:, None] == y[None, :]
    assert np.all(g[same] > 0) and np.all(g[~same] <= 0)       # orthogonally separable


def test_balanced_init_has_output_weights_of_the_rows_norms():
    net = build_model(orthogonal_config(), 20)
    a, w = net.w2.detach()[0], net.w1.detach()
    assert np.allclose(a.abs().numpy(), w.norm(dim=1).numpy(), rtol=1e-6)
    assert (a > 0).any() and (a < 0).any()
    assert float(w.norm(dim=1).mean()) == pytest.approx(0.01, rel=0.3)


def test_svm_pos_neg_par_match_an_independent_cvxpy_solve(tmp_path):
    cfg = orthogonal_config()
    res = {r["predictor"]: r for r in fit_svm(cfg, tmp_path, ["svm-pos", "svm-neg"], echo=lambda m: None)}
    ds = prepare(cfg).dataset
    for obj, s in (("svm-pos", 1.0), ("svm-neg", -1.0)):
        assert res[obj]["certified"] and res[obj]["train_error"] == 0
        w = cp.Variable(20)
        p = cp.Problem(cp.Minimize(cp.sum_squares(w)), [ds.x_train[ds.y_train == s] @ w >= 1])
        p.solve(solver="CLARABEL")
        ours = np.load(tmp_path / "svm" / obj / "compact.npz")["zeta"][0]
        assert res[obj]["objective"] == pytest.approx(p.value, rel=1e-5)
        assert np.allclose(ours, w.value, atol=1e-4 * np.abs(w.value).max())

    # on data that is not orthogonally separable, w+ misclassifies negatives: its training error, like
    # its validation error, is the classifier's over every point, not over the class it constrains
    cfg = validate({"dataset": {"name": "digits", "train_size": 70, "val_size": 100, "data_seed": 4},
                    "model": {"kind": "relu", "hidden_units": 4}, "svm": {"objectives": ["svm-pos", "svm-neg"]}})
    ds = prepare(cfg).dataset
    for r in fit_svm(cfg, tmp_path / "digits", ["svm-pos", "svm-neg"], echo=lambda m: None):
        s = 1.0 if r["predictor"] == "svm-pos" else -1.0
        w = np.load(tmp_path / "digits" / "svm" / r["predictor"] / "compact.npz")["zeta"][0]
        out = s * (ds.x_train @ w)
        assert r["certified"] and r["train_error"] == error(out, ds.y_train) > 0.2, r
        assert np.allclose(np.load(tmp_path / "digits" / "svm" / r["predictor"] / "predictions.npz")["train_out"], out)

    cfg = leaky_config()   # another problem: another run directory (one directory holds one problem)
    tmp_path = tmp_path / "leaky"
    (r,) = fit_svm(cfg, tmp_path, ["svm-par"], echo=lambda m: None)
    ds, a = prepare(cfg).dataset, 0.2
    w, u = cp.Variable(10), cp.Variable(10)
    pos, neg = ds.x_train[ds.y_train > 0], ds.x_train[ds.y_train < 0]
    p = cp.Problem(cp.Minimize(cp.sum_squares(w) + cp.sum_squares(u)),
                   [pos @ w - a * (pos @ u) >= 1, a * (neg @ w) - neg @ u <= -1])
    p.solve(solver="CLARABEL")
    zeta = np.load(tmp_path / "svm" / "svm-par" / "compact.npz")["zeta"]
    assert r["certified"] and r["objective"] == pytest.approx(p.value, rel=1e-5)
    assert np.allclose(zeta, np.stack([w.value, u.value]), atol=1e-4 * np.abs(zeta).max())
    # validation predictions have the sign of the limit net sigma(<w,x>) - sigma(<u,x>)
    lrelu = lambda z: np.maximum(a * z, z)
    net = lrelu(ds.x_val @ w.value) - lrelu(ds.x_val @ u.value)
    val = np.load(tmp_path / "svm" / "svm-par" / "predictions.npz")["val_out"]
    assert np.mean(np.sign(val) == np.sign(net)) > 0.99


def test_orthogonal_relu_ends_rank_two_and_aligned_with_w_plus_minus(tmp_path):
    s = train_gd(orthogonal_config(), tmp_path, progress=False)
    t = s["track"]
    assert s["train_error"] == 0
    assert t["numerical_rank"] <= 3 and t["sv3_ratio"] < 0.05
    assert t["align_above_090"] >= 0.9 and t["align_median"] > 0.9
    neurons = pd.read_csv(tmp_path / "gd" / "neurons.csv")
    assert len(neurons) == 30 and (neurons["align"] > 0.8).all()
    # w+- and the class means are close, but distinct directions
    assert 0.85 < t["cos_w_pos_mean_pos"] < 0.999 and 0.85 < t["cos_w_neg_mean_neg"] < 0.999


def test_leaky_net_enters_the_linear_regime_and_agrees_with_svm_par(tmp_path):
    s = train_gd(leaky_config(), tmp_path, progress=False)
    t = s["track"]
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    assert m["outside_linear"].iloc[0] == 1.0 and t["outside_linear"] <= 0.05 and t["outside_linear_val"] <= 0.05
    assert t["cluster_radius_rel"] < m["cluster_radius_rel"].iloc[0] / 5
    assert t["inconsistency"] <= 0.05 and t["par_cosine"] > 0.95 and t["linear_sign_mismatch_val"] <= 0.01
    assert t["par_consistent"] > 0.9


def test_digit_pairs_keep_only_their_classes():
    raw = {"dataset": {"name": "digits", "classes": [3, 5], "positive_classes": [3], "train_size": 100,
                       "val_size": 200}, "model": {"kind": "leaky", "hidden_units": 4}}
    ds = prepare(validate(raw)).dataset
    assert len(ds.x_pool) == 365   # 183 threes and 182 fives in scikit-learn's digits
    with pytest.raises(GbError, match="dataset.classes"):
        validate({**raw, "dataset": {**raw["dataset"], "positive_classes": [0]}})
