"""`training.init_from`: a run that starts from another run's trained weights (issue 37's question of
where full-batch normalized GD goes once SGD has separated the data). The weights come in exactly;
the file's contents are part of the training's identity; a file that is not a network of this very
model (another size, other hyperplanes, a pickle payload, a link, missing) is refused in one line
naming the key, before anything is written."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pandas as pd
import pytest
import torch

from gbcli.config import load_config
from gbcli.errors import GbError
from gbcli.runs.stages import load_checkpoint, train_gd
from gbcli.store.identity import gd_manifest, point_id

import forked_gb

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
SHORT = ["training.epochs=6", "training.lr_milestones=[]", "training.checkpoint_seconds=0", "svm.objectives=[]"]


def config(*sets: str):
    return load_config(QUICKSTART, [*SHORT, *sets])


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A finished 6-epoch run of the quickstart GLN: its gd/model.pt is the warm start."""
    run = tmp_path_factory.mktemp("warm") / "source"
    train_gd(config(), run, progress=False)
    return run / "gd" / "model.pt"


def test_a_warm_start_begins_at_the_source_runs_weights_and_moves_on(tmp_path, source):
    cfg = config(f"training.init_from={source}", "training.batch_size=null", "training.step_rule=homogeneous-normalized",
                 "training.lr=0.5", "training.epochs=20", "training.log_points=20")
    train_gd(cfg, tmp_path / "warm", progress=False)
    before = pd.read_csv(source.parent / "metrics.csv").iloc[-1]
    after = pd.read_csv(tmp_path / "warm" / "gd" / "metrics.csv")
    # step 0 of the warm run is the source's last state (the same weights, the same data)
    assert after.iloc[0]["train_loss"] == pytest.approx(before["train_loss"], rel=1e-5)
    assert after.iloc[0]["weight_norm"] == pytest.approx(before["weight_norm"], rel=1e-6)
    cold = config("training.batch_size=null", "training.step_rule=homogeneous-normalized", "training.lr=0.5",
                  "training.epochs=1")
    train_gd(cold, tmp_path / "cold", progress=False)
    assert pd.read_csv(tmp_path / "cold" / "gd" / "metrics.csv").iloc[0]["train_loss"] > before["train_loss"] + 0.05
    assert after.iloc[-1]["train_loss"] < after.iloc[0]["train_loss"]          # and training goes on from there
    w = load_checkpoint(tmp_path / "warm" / "gd" / "model.pt")["state_dict"]
    w0 = load_checkpoint(source)["state_dict"]
    assert any(not torch.equal(w[k], w0[k]) for k in w)


def test_the_files_contents_are_the_identity_not_only_its_name(tmp_path, source):
    copy = tmp_path / "model.pt"
    copy.write_bytes(source.read_bytes())
    cfg = config(f"training.init_from={copy}")
    m1 = gd_manifest(cfg)
    assert m1["init"] and point_id(cfg) != point_id(config())
    state = load_checkpoint(copy)
    state["state_dict"] = {k: v * 2 for k, v in state["state_dict"].items()}
    torch.save(state, copy)
    assert gd_manifest(cfg)["init"] != m1["init"] and gd_manifest(cfg)["config"] == m1["config"]


def _bad(tmp_path: Path, source: Path, case: str) -> tuple[Path, list[str]]:
    bad, extra = tmp_path / "bad.pt", []
    if case == "missing":
        bad = tmp_path / "nowhere.pt"
    elif case == "symlink":
        os.symlink(source, bad)
    elif case == "pickle":
        bad.write_bytes(pickle.dumps({"state_dict": {"w": print}}))
    elif case == "truncated":
        bad.write_bytes(source.read_bytes()[:100])
    elif case == "other-size":
        bad.write_bytes(source.read_bytes())
        extra = ["model.hidden_units=7"]
    elif case == "other-hyperplanes":
        bad.write_bytes(source.read_bytes())
        extra = ["contexts.seed=5"]
    elif case == "non-finite":
        state = load_checkpoint(source)
        name = next(iter(state["state_dict"]))
        state["state_dict"][name] = state["state_dict"][name] * float("nan")
        torch.save(state, bad)
    return bad, extra


CASES = {"missing": "nowhere.pt", "symlink": "bad.pt", "pickle": "objects other than tensors", "truncated": "bad.pt",
         "other-size": "another model size", "other-hyperplanes": "other hyperplanes", "non-finite": "non-finite"}


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_is_not_this_models_network_is_refused_before_anything_is_written(tmp_path, source, case):
    bad, extra = _bad(tmp_path, source, case)
    cfg = config(f"training.init_from={bad}", *extra)
    with pytest.raises(GbError) as err:
        train_gd(cfg, tmp_path / "run", progress=False)
    msg = str(err.value)
    assert "\n" not in msg and CASES[case] in msg and (msg.startswith("training.init_from: ")), msg
    assert not (tmp_path / "run" / "gd").exists()


@pytest.mark.slow
def test_the_cli_refuses_a_foreign_init_in_one_line_with_exit_code_2(tmp_path, source):
    bad = tmp_path / "foreign.pt"
    bad.write_bytes(b"not a checkpoint at all")
    proc = forked_gb.run(["train-gd", QUICKSTART, "--out", tmp_path / "run", "--set", f"training.init_from={bad}"],
                         tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "foreign.pt" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_config_without_init_from_keeps_the_manifest_it_had_before_the_key_existed():
    """Adding `training.init_from` to the schema must not change the gd manifest of a config that
    does not use it: that manifest is a finished stage's and a training checkpoint's identity, and
    a changed one once restarted a 7-hour training from step 0. The value was computed by the
    code before the key existed (commit 8c8376a~1) on this very config."""
    from gbcli.config.loading import validate

    cfg = validate({"dataset": {"name": "digits", "train_size": 100, "val_size": 200},
                    "model": {"kind": "gln", "hidden_units": 2}, "training": {"epochs": 2}})
    assert gd_manifest(cfg) == {"problem": "ac0dad8252b95966", "config": "e3f0feb4954d125e"}
