"""What makes grids fast without changing a result: validation only at the last step."""

import json

import numpy as np
import pandas as pd

from gbcli.config import Config
from gbcli.io import read_json
from gbcli.runs.stages import train_gd
from gbcli.runs.sweep import point_id

BODY = {"name": "g", "dataset": {"name": "digits", "train_size": 120, "val_size": 200},
        "model": {"kind": "gln", "hidden_units": 3}, "contexts": {"count": 2, "seed": 1},
        "training": {"epochs": 8, "log_points": 6}}


def config(**training) -> Config:
    body = json.loads(json.dumps(BODY))
    body["training"].update(training)
    return Config.model_validate(body)


def test_validation_final_evaluates_the_validation_set_only_at_the_last_step(tmp_path):
    logged, final = config(), config(validation="final")
    assert logged.training.validation == "logged"   # the default: every logged step, as before
    train_gd(logged, tmp_path / "logged", progress=False)
    train_gd(final, tmp_path / "final", progress=False)
    a = pd.read_csv(tmp_path / "logged/gd/metrics.csv")
    b = pd.read_csv(tmp_path / "final/gd/metrics.csv")
    assert a.val_error.notna().all() and len(a) == 6
    assert b.val_error.iloc[:-1].isna().all() and b.val_error.iloc[-1] == a.val_error.iloc[-1]
    pd.testing.assert_frame_equal(a.drop(columns="val_error"), b.drop(columns="val_error"))
    # the training itself is untouched: the same network, outputs and summary (but its timing)
    for stem in ("predictions",):
        x, y = np.load(tmp_path / f"logged/gd/{stem}.npz"), np.load(tmp_path / f"final/gd/{stem}.npz")
        assert all(np.array_equal(x[k], y[k]) for k in x.files)
    sa, sb = read_json(tmp_path / "logged/gd/summary.json"), read_json(tmp_path / "final/gd/summary.json")
    assert {k: v for k, v in sa.items() if k not in ("seconds", "manifest")} == \
        {k: v for k, v in sb.items() if k not in ("seconds", "manifest")}


def test_validation_is_not_part_of_a_points_identity():
    # a grid that sets it (the paper grids) keeps the ids, and so the directories, it had
    assert point_id(config(validation="final")) == point_id(config())
    assert point_id(config(momentum=0.9)) != point_id(config())
