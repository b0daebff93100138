"""Config values and records refused as the rules say: a reference nobody certified is refused, a
number a float32 network cannot hold is bad input (not a divergence), a float key takes numbers only
(an exponent without a dot is a number, text and bools are not), a sweep's explicit weights are checked
before any point runs, and one status for a paper-003 record whose point is not the one it claims."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gbcli.config import load_config, validate
from gbcli.config.loading import load_yaml_text
from gbcli.errors import GbError
from gbcli.runs.stages import make_tracker, prepare

DEEP_LINEAR = {"dataset": {"name": "linear-teacher", "n_samples": 300, "train_size": 60, "val_size": 200, "dim": 5},
               "model": {"kind": "deep-linear", "depth": 2, "width": 3},
               "training": {"batch_size": None, "epochs": 5, "track": ["margin"]}}


@pytest.mark.parametrize("svm", [{"eps": 0.5}, {"max_iters": 1}], ids=["loose-eps", "one-iteration"])
def test_a_tracked_reference_that_is_not_certified_is_refused(svm):
    """`training.track` measures against the matching program's solution: an uncertified one (a loose
    solver tolerance, an iteration limit) is refused in one line naming the program, never taken as
    the optimum (it read `status: optimal` in summary.json and a margin ratio above 1)."""
    cfg = validate({**DEEP_LINEAR, "svm": svm})
    with pytest.raises(GbError, match=r"training.track: the program svm-shallow (is not certified|has no solution)"):
        make_tracker(cfg, prepare(cfg)).ready(None)
    tracker = make_tracker(validate(DEEP_LINEAR), prepare(validate(DEEP_LINEAR)))   # the defaults certify
    assert tracker.solution is not None and tracker.info["status"] == "optimal"


@pytest.mark.parametrize("key, body", [
    ("model.output_weight", {"model": {"kind": "leaky", "output_weight": 1e300}}),
    ("model.init_scale", {"model": {"kind": "gln", "init_scale": 1e39}}),
    ("dataset.max_norm", {"dataset": {"name": "digits", "max_norm": 1e-300}}),
    ("dataset.max_norm", {"dataset": {"name": "digits", "max_norm": 1e300}}),
    ("dataset.x", {"dataset": {"name": "points", "x": [[1e39, 0.0]], "y": [1]}, "model": {"kind": "linear"}}),
    ("svm.radii", {"svm": {"radii": [1e200]}}),
])
def test_a_number_a_float32_network_cannot_hold_is_bad_input(key, body):
    with pytest.raises(GbError, match=key.replace(".", r"\.")):
        validate(body)


def test_float_keys_take_numbers_only(tmp_path):
    """YAML 1.1 reads `1e-3` as text: here it is the number it looks like. A quoted number and a
    bool are not numbers (`lr: true` trained at 1.0)."""
    assert load_yaml_text("lr: 1e-3\nb: -2E+2\nc: 1_0e1\n") == {"lr": 0.001, "b": -200.0, "c": 100.0}
    for text in ("training: {lr: 1e-3}", "training: {lr: 2}"):
        (tmp_path / "c.yaml").write_text(text)
        assert load_config(tmp_path / "c.yaml").training.lr in (0.001, 2.0)
    for body, key in (({"training": {"lr": True}}, "training.lr"), ({"training": {"lr": "0.1"}}, "training.lr"),
                      ({"model": {"kind": "leaky", "leaky_alpha": True}}, "model.leaky_alpha"),
                      ({"svm": {"radii": ["0.1"]}}, "svm.radii"),
                      ({"dataset": {"name": "points", "x": [[1.0, True]], "y": [1]}, "model": {"kind": "linear"}},
                       "dataset.x")):
        with pytest.raises(GbError, match=key.replace(".", r"\.") + ".*valid number"):
            validate(body)


def test_a_sweep_checks_every_points_explicit_weights_before_it_writes(tmp_path):
    from gbcli.runs.sweep import dry_run, run_sweep

    cfg = {"name": "w", "dataset": {"name": "points", "x": [[1.0, 0.25], [-1.0, 0.25]], "y": [1, 1]},
           "training": {"batch_size": None, "epochs": 2},
           "zip": {"model": [{"kind": "relu", "hidden_units": 2,
                              "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]}},
                             {"kind": "relu", "hidden_units": 2,
                              "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]], "w9": 1}}]}}
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(cfg))
    for call in (lambda: dry_run(path, tmp_path / "out"), lambda: run_sweep(path, tmp_path / "out", progress=False)):
        with pytest.raises(GbError, match=r"grid point \w+: model\.weights\.w9: not a parameter"):
            call()
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def kkt(tmp_path_factory) -> Path:
    from gbcli.runs.stages import fit_svm, train_gd

    tmp = tmp_path_factory.mktemp("kkt")
    (tmp / "k.yaml").write_text(yaml.safe_dump({
        "name": "kkt", "dataset": {"name": "points", "x": [[1.0, 0.25], [-1.0, 0.25]], "y": [1, 1]},
        "model": {"kind": "relu", "hidden_units": 2, "weights": {"w1": [[0.1, 1.0], [-0.2, -1.0]], "w2": [[0.5, 0.4]]}},
        "training": {"batch_size": None, "epochs": 200, "lr": 0.02, "step_rule": "loss-normalized", "loss": "exponential"},
        "svm": {"objectives": ["local-search"], "restarts": 3, "radii": [0.3, 0.01]}}))
    cfg = load_config(tmp / "k.yaml")
    train_gd(cfg, tmp / "run")
    fit_svm(cfg, tmp / "run", echo=lambda m: None)
    return tmp / "run"


@pytest.mark.parametrize("damage", ["none", "objective", "no theta", "no manifest"])
def test_a_paper_003_record_is_one_status_everywhere_and_stands_on_its_point(kkt, tmp_path, damage):
    """`gb compare`, `gb runs` and `gbcli.load_run` read a non-convex record's point: its objective
    must be the ||theta||^2 of the theta.npz beside it (else `unverified`); a record with no manifest
    is not a stage gb finished (`foreign` in `gb runs`, refused by compare)."""
    import shutil

    from gbcli.runs.compare import compare
    from gbcli.runs.index import read_run
    from gbcli.runs.load import load_run

    run = tmp_path / "run"
    shutil.copytree(kkt, run)
    stage = run / "svm" / "local-search"
    rec = json.loads((stage / "result.json").read_text())
    want = {"none": "optimal", "objective": "unverified", "no theta": "unverified", "no manifest": "foreign"}[damage]
    if damage == "objective":
        rec["objective"] = 1.0
    elif damage == "no theta":
        (stage / "theta.npz").unlink()
    elif damage == "no manifest":
        rec.pop("manifest")
    (stage / "result.json").write_text(json.dumps(rec))
    assert read_run(run).stages["local-search"] == want
    if damage == "no manifest":
        from gbcli.store.integrity import check_run

        with pytest.raises(GbError, match="no manifest"):   # what `gb compare` and `gb plot` check first
            check_run(run)
        return
    errors, _ = compare(run)
    assert errors.set_index("predictor").loc["local-search", "status"] == want
    assert load_run(run).results["local-search"]["status"] == want


@pytest.mark.parametrize("body, says", [
    ({"svm": {"objectives": ["svm-gln", "svm-gln"]}}, "svm.objectives: 'svm-gln' is listed twice"),
    ({"model": {"kind": "gln", "output_bias": False}, "training": {"track": ["margin", "margin"]}},
     "training.track: 'margin' is listed twice"),
    ({"svm": {"radii": [0.1, 0.01, 0.1]}}, "svm.radii: lists the distance 0.1 twice"),
])
def test_a_list_that_names_one_thing_twice_is_refused(body, says):
    with pytest.raises(GbError, match=says.replace(".", r"\.")):
        validate(body)
