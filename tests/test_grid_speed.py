"""What makes grids fast without changing a result: validation only at the last step, and
batched training of the networks that share data and batch order."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from gbcli.config import Config
from gbcli.fs.safe import read_json
from gbcli.runs.stages import train_gd, train_gd_group
from gbcli.store.identity import point_id
from gbcli.training.batched import batch_key

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
    assert {k: v for k, v in sa.items() if k not in ("seconds", "manifest", "provenance")} == \
        {k: v for k, v in sb.items() if k not in ("seconds", "manifest", "provenance")}


def test_validation_is_not_part_of_a_points_identity():
    # a grid that sets it (the paper grids) keeps the ids, and so the directories, it had
    assert point_id(config(validation="final")) == point_id(config())
    assert point_id(config(momentum=0.9)) != point_id(config())


def group(tmp_path, name, cfgs, batched):
    dirs = [tmp_path / f"{name}{k}" for k in range(len(cfgs))]
    if batched:
        summaries = train_gd_group(cfgs, dirs)
    else:
        summaries = [train_gd(c, d, progress=False) for c, d in zip(cfgs, dirs)]
    return dirs, summaries


def test_batched_training_follows_the_plain_loops_trajectories(tmp_path):
    # one group: two context seeds x two inits x both momenta (the shape of the Figure 2 grid)
    cfgs = [Config.model_validate({**BODY, "contexts": {"count": 2, "seed": s, "median_init": mi},
                                   "training": {**BODY["training"], "momentum": m}})
            for s in (1, 2) for mi in (True, False) for m in (0.0, 0.9)]
    assert len({batch_key(c) for c in cfgs}) == 1 and batch_key(cfgs[0]) is not None
    plain, ps = group(tmp_path, "plain", cfgs, batched=False)
    batched, bs = group(tmp_path, "batched", cfgs, batched=True)
    for a, b, sa, sb in zip(plain, batched, ps, bs):
        wa = torch.load(a / "gd/model.pt", weights_only=False)["state_dict"]
        wb = torch.load(b / "gd/model.pt", weights_only=False)["state_dict"]
        assert wa.keys() == wb.keys() and max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-6
        oa, ob = np.load(a / "gd/predictions.npz"), np.load(b / "gd/predictions.npz")
        assert oa.files == ob.files and all(np.allclose(oa[k], ob[k], rtol=0, atol=1e-6) for k in oa.files)
        pd.testing.assert_frame_equal(pd.read_csv(a / "gd/metrics.csv"), pd.read_csv(b / "gd/metrics.csv"),
                                      check_exact=False, atol=1e-6, rtol=0)
        assert sorted(p.name for p in (a / "gd").iterdir()) == sorted(p.name for p in (b / "gd").iterdir())
        assert sa.keys() == sb.keys()
        for k in sa.keys() - {"seconds", "provenance"}:   # provenance: times, and how it was trained
            assert sb[k] == (pytest.approx(sa[k], rel=1e-6, abs=1e-9) if isinstance(sa[k], float) else sa[k]), k


def test_a_group_that_diverges_is_trained_and_recorded_by_the_plain_loop(tmp_path):
    cfgs = [config(lr=1e4), config(lr=1e4, momentum=0.9)]
    _, plain = group(tmp_path, "plain", cfgs, batched=False)
    _, batched = group(tmp_path, "batched", cfgs, batched=True)
    assert [s["status"] for s in plain] == ["diverged", "diverged"]
    assert [{k: v for k, v in s.items() if k not in ("seconds", "provenance")} for s in batched] == \
        [{k: v for k, v in s.items() if k not in ("seconds", "provenance")} for s in plain]


def test_what_cannot_be_batched_has_no_batch_key():
    tracked = Config.model_validate({**BODY, "model": {"kind": "gln", "hidden_units": 3, "output_bias": False},
                                     "training": {**BODY["training"], "track": ["margin"]}})
    assert batch_key(tracked) is None
    assert batch_key(config(step_rule="loss-normalized")) is None
    assert batch_key(config(optimizer="adam", momentum=0.0)) is None   # the batched loop takes SGD steps
    shallow = Config.model_validate({**BODY, "model": {"kind": "relu", "hidden_units": 3}})
    assert batch_key(shallow) is None   # a kind without a stacked network
    assert batch_key(config(momentum=0.9)) == batch_key(config()) != batch_key(config(lr=0.01))


@pytest.mark.parametrize("units,count", [(3, 2), (10, 2), (20, 4), (100, 4)])
def test_stacked_gln_is_bit_for_bit_the_single_networks(units, count):
    """Batched training's outputs and gradients are the single networks' bit for bit, at every
    width (a wide first-layer product was equal at some widths only, and which ones depended on the
    CPU), so a batched grid gives the plain loop's tables."""
    from gbcli.models.networks.gln import DeepGLN, StackedGLN

    torch.manual_seed(0)
    nets = [DeepGLN(units, count, 785) for _ in range(4)]
    for m in nets:
        torch.nn.init.normal_(m.w1)
        torch.nn.init.normal_(m.w2)
    x = torch.randn(128, 785)
    ctx = torch.randint(0, count, (4, 128, units))
    stacked = StackedGLN(nets)
    out = stacked(x, ctx)
    out.sum().backward()
    for k, m in enumerate(nets):
        single = m(x, ctx[k])
        single.sum().backward()
        assert torch.equal(out[k], single)
        assert torch.equal(stacked.w1.grad[k], m.w1.grad) and torch.equal(stacked.w2.grad[k], m.w2.grad)
