"""Paper 001 (Phuong & Lampert) on tiny instances: the default init times 0.05 (section 5.1), the
residual net (section 5.2), the conv net trained with Adam (appendix D), and the config keys they
added (`model.init: torch-default`, `training.optimizer`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import validate
from gbcli.errors import GbError
from gbcli.registry import MODELS
from gbcli.runs.stages import train_gd
from gbcli.store.identity import point_id

ORTHOGONAL = {"name": "orthogonal", "n_samples": 200, "train_size": 100, "val_size": 100, "dim": 10}
SCHEDULE = {"batch_size": 50, "lr": 0.1, "epochs": 200, "log_points": 2}


def orthogonal_run(tmp_path, model: dict, track: list[str]) -> tuple[dict, pd.DataFrame]:
    cfg = validate({"name": "t", "dataset": ORTHOGONAL, "model": model, "training": {**SCHEDULE, "track": track}})
    summary = train_gd(cfg, tmp_path, progress=False)
    assert summary["status"] == "ok" and summary["train_error"] == 0
    return summary["track"], pd.read_csv(tmp_path / "gd" / "metrics.csv")


def test_torch_default_init_is_nn_linear_default():
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) times init_scale, for both layers, seeded."""
    cfg = validate({"model": {"kind": "relu", "hidden_units": 400, "init": "torch-default", "init_scale": 0.05},
                    "dataset": ORTHOGONAL})
    net = MODELS["relu"].build(cfg, 10)
    for w, fan_in in ((net.w1.detach(), 10), (net.w2.detach(), 400)):
        bound = 0.05 / math.sqrt(fan_in)
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.98 * bound
        assert float(w.std()) == pytest.approx(bound / math.sqrt(3), rel=0.05)   # uniform, not normal
    assert torch.equal(net.w1, MODELS["relu"].build(cfg, 10).w1)


def test_default_init_gives_rank_two_and_alignment(tmp_path):
    """Section 5.1's claim on a tiny orthogonally separable set: W ends numerically rank 2 and the
    neurons align with w+ / w- (by the sign of a_j); the default init times 0.05 leaves a smaller
    random remainder (s3 / s1) than the balanced N(0, 1/D) x 0.05 init."""
    base = {"kind": "relu", "hidden_units": 20, "init_scale": 0.05}
    default, m = orthogonal_run(tmp_path / "d", {**base, "init": "torch-default"}, ["rank", "alignment"])
    balanced, _ = orthogonal_run(tmp_path / "b", {**base, "init": "balanced"}, ["rank", "alignment"])
    assert m["numerical_rank"].iloc[0] > 2 and default["numerical_rank"] == 2
    assert default["sv3_ratio"] < 0.05 and default["sv3_ratio"] < balanced["sv3_ratio"]
    assert default["align_median"] > 0.9


def test_residual_net_is_low_rank_and_first_layer_aligns(tmp_path):
    """Section 5.2 on a tiny instance: every weight matrix of a residual net ends dominated by two
    singular values (s3 / s1 falls from ~1 at init), and its first-layer neurons align with the
    closer of w+ / w-."""
    track, m = orthogonal_run(tmp_path, {"kind": "residual", "depth": 3, "width": 20, "init_scale": 0.05},
                              ["layer_rank", "closest_alignment"])
    assert m["max_sv3_ratio"].iloc[0] > 0.5 and track["max_sv3_ratio"] < 0.1
    assert track["closest_align_median"] > 0.9
    sv = pd.read_csv(tmp_path / "gd" / "singular_values.csv")
    assert set(sv["matrix"]) == {"W1", "W2"}
    rows = pd.read_csv(tmp_path / "gd" / "rows.csv")
    w1 = torch.load(tmp_path / "gd" / "model.pt", weights_only=False)["state_dict"]["layers.0"].double().numpy()
    r = rows[rows["matrix"] == "W1"]   # projections on the top two directions keep the rows' energy
    assert np.sum(r["p1"] ** 2 + r["p2"] ** 2) == pytest.approx(np.sum(w1 ** 2), rel=0.02)


def test_optimizer_key_keeps_sgd_runs_and_refuses_sgd_keys_with_adam():
    raw = {"dataset": ORTHOGONAL, "model": {"kind": "relu"}, "training": {"momentum": 0.9}}
    explicit = {**raw, "training": {"momentum": 0.9, "optimizer": "sgd"}}
    assert point_id(validate(raw)) == point_id(validate(explicit))   # the default is not hashed
    with pytest.raises(GbError, match="training.momentum"):
        validate({**raw, "training": {"momentum": 0.9, "optimizer": "adam"}})
    with pytest.raises(GbError, match="training.step_rule"):
        validate({**raw, "training": {"optimizer": "adam", "step_rule": "homogeneous-normalized"}})
    assert validate({**raw, "training": {"optimizer": "adam", "step_rule": "loss-normalized"}})   # Adam on log R
    with pytest.raises(GbError, match="dataset.name"):   # the conv net takes 28 x 28 images
        validate({"dataset": ORTHOGONAL, "model": {"kind": "convnet"}})


def test_conv_net_fc_layer_ends_low_rank(tmp_path, shared_data_dir):
    """Appendix D on a tiny instance (two small convolutions, fc(392, 16), Adam, MNIST 0 vs 1, 200
    images): the first fc layer goes from full rank to a few significant singular values, and its
    features separate the classes more than the pixels do (within-class inner products larger
    relative to the cross-class ones)."""
    cfg = validate({"name": "t", "dataset": {"name": "mnist", "data_dir": str(shared_data_dir), "classes": [0, 1],
                                             "positive_classes": [0], "train_size": 200, "val_size": 100},
                    "model": {"kind": "convnet", "convs": [[4, 3, 2, 1], [8, 3, 2, 1]], "fc_units": 16,
                              "init_scale": 0.05},
                    "training": {"optimizer": "adam", "lr": 0.005, "batch_size": 50, "epochs": 10, "log_points": 2,
                                 "track": ["layer_rank", "features"]}})
    summary = train_gd(cfg, tmp_path, progress=False)
    assert summary["status"] == "ok" and summary["train_error"] <= 0.02
    m = pd.read_csv(tmp_path / "gd" / "metrics.csv")
    assert m["max_numerical_rank"].iloc[0] == 16 and m["max_sv3_ratio"].iloc[-1] < 0.3
    table = pd.read_csv(tmp_path / "gd" / "features.csv")
    f = table[table.activation == "post"].set_index(["layer", "pair"])["median"]
    separation = lambda layer: min(f[layer, "within+"], f[layer, "within-"]) / f[layer, "across"]
    assert separation(f.index.get_level_values(0).max()) > separation(0)
    # after a ReLU no inner product is negative; the pre-activation rows are the same layers, other values
    pre, post = (table[(table.activation == a) & (table.pair == "across")].set_index("layer") for a in ("pre", "post"))
    assert (post["q05"] >= 0).all()
    assert set(pre.index) == set(post.index) - {0} and (pre["median"] != post["median"].loc[pre.index]).all()
